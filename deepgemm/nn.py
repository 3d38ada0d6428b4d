"""The layer a model swaps in: `linear`, torch.nn.functional.linear on the library kernel, and `Linear`, an
nn.Linear whose forward is `linear` (with an optional fused activation). Importing this imports torch."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from deepgemm import torch_ops
from deepgemm.epilogue import activation_name


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None
) -> torch.Tensor:
    """activation(x @ weight^T + bias) with F.linear's semantics: x (..., K) with any leading dimensions (1-D
    too), weight (N, K), bias (N,) or None, the result (..., N); activation as `deepgemm.gemm` takes it.

    x's leading dimensions become the GEMM's M through `reshape`, a view wherever torch can make one (a
    contiguous x always); weight is read in place as the transposed view of its rows. FP16/BF16 x and weight.
    Gradients, torch.compile and CUDA graphs work as for `deepgemm.gemm`.
    """
    shape, (n, k) = x.shape, weight.shape if weight.dim() == 2 else (None, None)
    if not shape or k != shape[-1]:
        raise ValueError(f"x has shape {tuple(shape)} and weight {tuple(weight.shape)}: x must be (..., K) and weight "
                         "(N, K)")  # fmt: skip
    if 0 in shape or n == 0:  # nothing for the kernel to do: torch's empty product
        return torch_ops.ACTIVATION_FUNCTIONS[activation_name(activation)](nn.functional.linear(x, weight, bias))
    if len(shape) == 2:
        return torch_ops.gemm(x, weight.T, bias, 1.0, activation, None, None, None)
    out = torch_ops.gemm(x.reshape(-1, k), weight.T, bias, 1.0, activation, None, None, None)
    return out.reshape(*shape[:-1], n)


class Linear(nn.Linear):
    """nn.Linear on the library kernel, optionally followed by a fused activation ('relu', 'gelu', 'gelu_tanh',
    'silu'): the same parameters (weight (out_features, in_features), bias), the same initialisation from the
    same seed, the same state_dict. Its parameters must be FP16 or BF16 (`.half()`, `.bfloat16()`)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
        *,
        activation: str | None = None,
    ) -> None:
        activation_name(activation)  # a ValueError now rather than at the first forward
        super().__init__(in_features, out_features, bias, device, dtype)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.activation)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", activation={self.activation!r}" if self.activation else "")

    @classmethod
    def from_linear(cls, module: nn.Linear, *, activation: str | None = None, copy: bool = False) -> Linear:
        """A Linear computing what `module` computes (then `activation`), on its parameters: shared (training
        either trains both), or with copy=True its own copies. Nothing is initialised or allocated anew."""
        if not isinstance(module, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(module).__name__}")
        new = cls(module.in_features, module.out_features, module.bias is not None, device="meta",
                  dtype=module.weight.dtype, activation=activation)  # fmt: skip
        new.weight = _parameter(module.weight, copy)
        if module.bias is not None:
            new.bias = _parameter(module.bias, copy)
        return new.train(module.training)


def _parameter(p: nn.Parameter, copy: bool) -> nn.Parameter:
    return nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad) if copy else p
