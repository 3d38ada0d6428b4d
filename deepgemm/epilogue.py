"""The fused epilogue's activations: their names and the define each compiles to."""

from __future__ import annotations

# name -> the ACTIVATION define of the library kernel (v5 takes the first three)
ACTIVATIONS = {"none": 0, "relu": 1, "gelu_tanh": 2, "gelu_erf": 3, "silu": 4}
ALIASES = {None: "none", "gelu": "gelu_erf"}  # PyTorch's default GELU is the erf form


def activation_name(activation: str | None) -> str:
    """The canonical name of an activation; TypeError for what is not a name, ValueError lists the ones there
    are."""
    if activation is not None and not isinstance(activation, str):
        raise TypeError(f"activation must be a name or None, got {type(activation).__name__}")
    name = ALIASES.get(activation, activation)
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {[*ACTIVATIONS, 'gelu']}")
    return name
