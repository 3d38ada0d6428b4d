"""What a stage changes: its kernel.cu against the previous stage's, whole or as an excerpt."""

from __future__ import annotations

import difflib

from tutorial.results import REPO
from tutorial.stages import LIBRARIES, PARENT, STAGES, kernel_path, stage_name


def kernel_diff(stage: str, against: str | None = None) -> list[str]:
    """`diff -u` of the previous stage's kernel.cu (or `against`'s) and this stage's, as lines; a library
    kernel diffs against the stage it is grown from (`PARENT`: v5 for sm_90a, v2 for sm_80)."""
    new = stage_name(stage)
    previous = PARENT[new] if new in LIBRARIES else STAGES[STAGES.index(new) - 1]
    old = previous if against is None else stage_name(against)
    old_path, new_path = kernel_path(old), kernel_path(new)
    old_text, new_text = (path.read_text().splitlines() for path in (old_path, new_path))
    labels = (str(path.relative_to(REPO)) for path in (old_path, new_path))
    return list(difflib.unified_diff(old_text, new_text, *labels, lineterm=""))


def diff_excerpt(stage: str, *keywords: str, context: int = 2, limit: int = 60) -> str:
    """The lines of the stage's diff (`kernel_diff`) that add or remove one of `keywords` (any case), with
    `context` lines around each; at most `limit` lines, then a note on how to see the rest."""
    lines = kernel_diff(stage)
    words = [w.lower() for w in keywords]
    hits = [
        i
        for i, line in enumerate(lines)
        if line[:1] in "+-"
        and not line.startswith(("+++", "---"))
        and (not words or any(w in line.lower() for w in words))
    ]
    keep = sorted({j for i in hits for j in range(max(0, i - context), min(len(lines), i + context + 1))})
    out: list[str] = []
    for previous, index in zip([-2, *keep], keep):
        if index != previous + 1:
            out.append("...")
        out.append(lines[index])
    if len(out) > limit:
        out = [*out[:limit], f"... ({len(out) - limit} more lines)"]
    name = stage_name(stage)
    out.append(f"(the whole diff: python -m tutorial diff {name if name in LIBRARIES else name.split('_')[0]})")
    return "\n".join(out)
