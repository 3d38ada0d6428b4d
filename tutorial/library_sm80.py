"""The library's kernel for GPUs without wgmma as the harness runs a stage: `deepgemm.plan_sm80`'s plan of
act(alpha * a @ b + bias) into a given output, on any GPU of compute capability 8.0 or newer, the H200
included (where `deepgemm.gemm` runs the sm_90a kernel unless DEEPGEMM_FORCE_SM80=1).

`plan(a, b, out, config=..., **epilogue)` returns a launch the harness verifies, times and profiles like a
stage's `KernelLaunch`: it writes `out` (allocated here where the caller gave none, so that verification can
poison it) through one plan of the library's sm_80 path, on CuPy's current stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cupy

from deepgemm import plan_sm80
from deepgemm.config import GemmConfig
from deepgemm.frameworks import Cupy
from deepgemm.operands import check_operands
from deepgemm.plan import Plan

STAGE = "library_sm80"
MIN_CC = plan_sm80.MIN_CC
DEFAULTS = plan_sm80.DEFAULTS
__all__ = ["DEFAULTS", "MIN_CC", "STAGE", "Sm80Call", "gemm", "plan"]


@dataclass(frozen=True)
class Sm80Call:
    """One planned sm_80 call into `out`, callable with no arguments, returning `out`."""

    plan: Plan
    a: Any
    b: Any
    out: cupy.ndarray
    bias: Any
    alpha: float

    def __call__(self) -> cupy.ndarray:
        return self.plan(self.a, self.b, self.bias, self.alpha, self.out)


def plan(
    a: Any,
    b: Any,
    out: Any = None,
    *,
    config: GemmConfig | None = None,
    bias: Any = None,
    alpha: float = 1.0,
    activation: str | None = None,
    out_dtype: Any = None,
) -> Sm80Call:
    """The sm_80 kernel's call of act(alpha * a @ b + bias) into `out` (a fresh CuPy array where None)."""
    if out is None:
        p = check_operands(a, b, None, out_dtype)
        out = cupy.empty((p.m, p.n), dtype=p.out_dtype)
    built = plan_sm80.build(Cupy, a, b, bias, out, activation=activation, out_dtype=out_dtype, config=config)
    call = Sm80Call(built, a, b, out, bias, alpha)
    call()  # its first launch now, not in the first timed one
    return call


def gemm(a: Any, b: Any, out: Any = None, **options: Any) -> Any:
    """The sm_80 kernel with the harness's signature."""
    return plan(a, b, out, **options).out
