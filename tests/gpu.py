"""What GPU tests share: skip what this GPU cannot run, by the tutorial's one rule (`tutorial.stages.runs_here`,
which goes by DEEPGEMM_CC where it is set); imported only inside a test, so collection needs no GPU."""

from __future__ import annotations

from types import ModuleType

import pytest

from tutorial.stages import LIBRARY, LIBRARY_SM80, load, requirement, runs_here


def stage_or_skip(stage: str) -> ModuleType:
    """The stage's launcher, or a skip where this GPU cannot run it: below its compute capability, or, for the
    sm_90a stages (wgmma, setmaxnreg) and the library's sm_90a kernel, not Hopper."""
    if not runs_here(stage):
        pytest.skip(f"{stage} needs {requirement(stage)}")
    return load(stage)


def sm90a_library_or_skip() -> None:
    """A skip unless `deepgemm.gemm` runs the sm_90a kernel here: for tests of what only that kernel has
    (clusters, swap AB, stream-K, PDL, the autotune table). Tests of the call itself run on either kernel."""
    stage_or_skip(LIBRARY)


def library_call_or_skip() -> None:
    """A skip unless `deepgemm.gemm` has a kernel for this GPU: compute capability 8.0 or newer, the sm_80
    kernel's (every such GPU but Hopper runs it, and Hopper its own)."""
    stage_or_skip(LIBRARY_SM80)
