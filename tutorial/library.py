"""The library call as the harness runs a stage: `deepgemm.gemm` into a given output, planned once, on a GPU where
it runs the sm_90a kernel (Hopper; elsewhere the sm_80 kernel is the stage `library_sm80`).

`plan(a, b, out, config=..., **epilogue)` returns a launch the harness verifies, times and profiles like a
stage's `KernelLaunch`: it writes `out` (allocated here where the caller gave none, so that verification
can poison it) through the library's own cached plan, on CuPy's current stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cupy

import deepgemm
from deepgemm.config import GemmConfig
from deepgemm.operands import check_operands
from deepgemm.plan import DEFAULTS, MIN_CC
from tutorial.stages import LIBRARY, runs_here, unavailable_line

STAGE = LIBRARY
__all__ = ["DEFAULTS", "MIN_CC", "STAGE", "LibraryCall", "gemm", "plan"]


@dataclass(frozen=True)
class LibraryCall:
    """`deepgemm.gemm(a, b, out=out, ...)`, callable with no arguments, returning `out`."""

    a: Any
    b: Any
    out: cupy.ndarray
    options: dict[str, Any]

    def __call__(self) -> cupy.ndarray:
        return deepgemm.gemm(self.a, self.b, out=self.out, **self.options)


def plan(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None, **epilogue: Any) -> LibraryCall:
    """The library call of act(alpha * a @ b + bias) into `out` (a fresh CuPy array where None); `epilogue`
    is gemm's bias, alpha, activation and out_dtype."""
    require_sm90a_kernel()
    if out is None:
        p = check_operands(a, b, None, epilogue.get("out_dtype"))
        out = cupy.empty((p.m, p.n), dtype=p.out_dtype)
    call = LibraryCall(a, b, out, {**epilogue, "config": config})
    call()  # planned now: its checks and compile happen here, not in the first timed launch
    return call


def require_sm90a_kernel() -> None:
    """RuntimeError where `deepgemm.gemm` runs the sm_80 kernel on the current GPU (`runs_here`): timed under
    this stage's name, that kernel would pass for the sm_90a one."""
    if not runs_here(STAGE):
        raise RuntimeError(unavailable_line([STAGE], "deepgemm.gemm runs the sm_80 kernel here (stage library_sm80)"))


def gemm(a: Any, b: Any, out: Any = None, **options: Any) -> Any:
    """deepgemm.gemm with the harness's signature."""
    return plan(a, b, out, **options).out
