"""Ablations that change a stage's code: tutorial.patch applies a unified diff exactly or refuses it, and
tutorial.stages compiles v5's TMA_STORE=0 from kernel.cu with store_from_registers.diff applied."""

from __future__ import annotations

import difflib
import random

import pytest

from tutorial import stages
from tutorial.patch import apply_diff

V5 = "v5_fused"
DIFF = stages.STAGES_DIR / V5 / "store_from_registers.diff"


def _diff(old: str, new: str) -> str:
    return "a description\n\n" + "".join(
        difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), "a/f", "b/f", n=2)
    )


@pytest.mark.parametrize("seed", range(20))
def test_apply_diff_rebuilds_the_edited_text(seed):
    """Random edits (lines removed, added and changed, at the ends too): the diff of old -> new applied to
    old gives new."""
    rng = random.Random(seed)
    old = [f"line {i}\n" for i in range(60)] + ["\n", "last\n"]
    new = list(old)
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(new) + 1)
        edit = rng.choice(("add", "remove", "change"))
        if edit == "add":
            new[at:at] = [f"new {rng.random()}\n"] * rng.randint(1, 3)
        elif new and at < len(new):
            new[at : at + rng.randint(1, 3)] = [] if edit == "remove" else [f"changed {rng.random()}\n"]
    assert apply_diff("".join(old), _diff("".join(old), "".join(new))) == "".join(new)


def test_apply_diff_refuses_a_source_that_changed_under_a_hunk():
    old = "".join(f"line {i}\n" for i in range(20))
    diff = _diff(old, old.replace("line 10\n", "ten\n"))
    with pytest.raises(ValueError, match=r"hunk @@ -9,5 \+9,5 @@ does not apply"):
        apply_diff(old.replace("line 9\n", "nine\n"), diff)
    with pytest.raises(ValueError, match="does not apply"):
        apply_diff("line 0\n" + old, diff)  # the same lines, one further down: no fuzz


def test_apply_diff_refuses_what_is_not_a_diff():
    for text in ("text\n", "--- a/f\n"):
        with pytest.raises(ValueError, match="not a unified diff"):
            apply_diff("text\n", text)
    with pytest.raises(ValueError, match="holds 1 old lines, not 2"):
        apply_diff("a\nb\n", "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+c\n")
    with pytest.raises(ValueError, match="neither context"):
        apply_diff("a\n", "--- a/f\n+++ b/f\n@@ -1 +1 @@\n*a\n")


def test_v5_tma_store_0_compiles_kernel_cu_with_the_diff_applied():
    """The knob picks the source and is not passed on: the compiler sees only the defines the file reads."""
    shipped = stages.kernel_path(V5)
    patched, defines = stages.compiled_source(V5, {"TMA_STORE": 0, "BLOCK_M": 128})
    assert patched != shipped and defines == {"BLOCK_M": 128}
    assert patched.read_text() == apply_diff(shipped.read_text(), DIFF.read_text())
    assert stages.compiled_source(V5, {"TMA_STORE": 1}) == (shipped, {})
    assert "tma_store_2d(&tma_c" in shipped.read_text() and "tma_store_2d(&tma_c" not in patched.read_text()
    assert "TMA_STORE" not in shipped.read_text(), "v5 reads no TMA_STORE: the diff is the ablation"
    assert stages.source_knobs(V5) == {"TMA_STORE"} and stages.source_knobs("v4_pipeline_swizzle") == frozenset()
