"""What GPU tests share: skip a stage this GPU cannot run (imported only inside a test, so collection needs no GPU)."""

from __future__ import annotations

from types import ModuleType

import pytest

from tutorial.stages import load


def stage_or_skip(stage: str) -> ModuleType:
    """The stage's launcher, or a skip where this GPU is below its compute capability or, for the sm_90a
    stages (wgmma, setmaxnreg), is not exactly 9.0."""
    from deepgemm.operands import compute_capability

    launcher, cc = load(stage), compute_capability()
    if cc < launcher.MIN_CC or (launcher.MIN_CC == (9, 0) and cc != (9, 0)):
        pytest.skip(f"{stage} needs compute capability {launcher.MIN_CC}")
    return launcher
