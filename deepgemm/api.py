"""The library call: `deepgemm.gemm(a, b, ...)` runs the last stage, v5_fused (sm_90a, Hopper)."""

from __future__ import annotations

from typing import Any

import cupy

from deepgemm import stages
from deepgemm.config import GemmConfig

LIBRARY_STAGE = "v5_fused"  # the stage the library call runs: the last one


def gemm(
    a: Any,
    b: Any,
    *,
    bias: Any = None,
    alpha: float = 1.0,
    activation: str | None = None,
    out_dtype: Any = None,
    out: Any = None,
    config: GemmConfig | None = None,
) -> Any:
    """act(alpha * a @ b + bias) for FP16/BF16 a (M, K) and b (K, N), FP32 accumulation.

    b may be row-major (K, N) (copied once to K-major) or the transposed view of a contiguous (N, K)
    array (read as it is). bias is an optional vector of N; activation is None, 'relu', 'gelu' (erf),
    'gelu_tanh', 'gelu_erf' or 'silu'; out_dtype defaults to the input dtype and may be float32.

    The result comes back in the caller's framework, computed on its current stream: for CuPy arrays a
    CuPy array on CuPy's current stream; for PyTorch tensors a tensor (no copy) on torch's current stream,
    so that torch's stream-ordered allocator cannot hand inputs dropped after the call to other work
    before the kernel has read them. With `out`, the result is `out` itself.
    """
    launcher = stages.load(LIBRARY_STAGE)

    def run() -> Any:
        return launcher.gemm(
            a, b, out, bias=bias, alpha=alpha, activation=activation, out_dtype=out_dtype, config=config
        )

    if not _is_cuda_tensor(a):
        return run()
    import torch  # only a caller that passed a torch tensor gets here

    with cupy.cuda.ExternalStream(torch.cuda.current_stream(a.device).cuda_stream, a.device.index):
        result = run()
        return out if out is not None else torch.from_dlpack(result)


def _is_cuda_tensor(x: Any) -> bool:
    """A PyTorch tensor on a CUDA device, recognised without importing torch."""
    return type(x).__module__.startswith("torch") and getattr(getattr(x, "device", None), "type", None) == "cuda"
