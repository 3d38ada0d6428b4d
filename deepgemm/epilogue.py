"""The fused epilogue's activations: their names, the define each compiles to, and a float64 reference."""

from __future__ import annotations

import math

import cupy

# name -> ACTIVATION define of v5's kernel.cu
ACTIVATIONS = {"none": 0, "relu": 1, "gelu_tanh": 2, "gelu_erf": 3, "silu": 4}
ALIASES = {None: "none", "gelu": "gelu_erf"}  # PyTorch's default GELU is the erf form


def activation_name(activation: str | None) -> str:
    """The canonical name of an activation; ValueError lists the ones there are."""
    name = ALIASES.get(activation, activation)
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {[*ACTIVATIONS, 'gelu']}")
    return name


def apply_activation(x: cupy.ndarray, activation: str | None) -> cupy.ndarray:
    """The activation in the precision of `x` (the reference runs it in float64)."""
    name = activation_name(activation)
    if name == "none":
        return x
    if name == "relu":
        return cupy.maximum(x, 0)
    if name == "gelu_tanh":
        return 0.5 * x * (1 + cupy.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    if name == "gelu_erf":
        from cupyx.scipy.special import erf  # heavy (SciPy's special functions): only for the erf form

        return 0.5 * x * (1 + erf(x / math.sqrt(2)))
    return x / (1 + cupy.exp(-x))  # silu
