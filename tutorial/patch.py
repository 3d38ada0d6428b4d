"""A unified diff applied to a kernel's source exactly, no fuzz: how an ablation that changes a stage's code
rather than a define is built (v5's stores from registers, stages/v5_fused/store_from_registers.diff).
Text before the diff's `---` line is its description; every hunk must find its lines where it says."""

from __future__ import annotations

import re
from collections.abc import Iterator

HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def hunks(diff: str) -> Iterator[tuple[str, int, list[str], list[str]]]:
    """Each hunk as (its header, the 0-based line it starts at, the lines it removes or keeps, those it leaves)."""
    lines = diff.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("--- ")]
    if not starts or not "".join(lines[starts[0] + 1 : starts[0] + 2]).startswith("+++ "):
        raise ValueError("not a unified diff: no '--- ' and '+++ ' lines")
    body = lines[starts[0] + 2 :]
    heads = [i for i, line in enumerate(body) if line.startswith("@@")]
    for head, end in zip(heads, [*heads[1:], len(body)], strict=True):
        match = HUNK.match(body[head])
        if match is None:
            raise ValueError(f"a malformed hunk header: {body[head].strip()!r}")
        old: list[str] = []
        new: list[str] = []
        for line in body[head + 1 : end]:
            mark, text = (" ", line) if line in ("\n", "\r\n") else (line[0], line[1:])
            if mark not in " -+":
                raise ValueError(f"hunk {match.group(0)}: a line that is neither context, '-' nor '+': {line!r}")
            if mark != "+":
                old.append(text)
            if mark != "-":
                new.append(text)
        count = int(match.group(2) or 1)
        if len(old) != count:
            raise ValueError(f"hunk {match.group(0)} holds {len(old)} old lines, not {count}")
        yield match.group(0), int(match.group(1)) - (1 if count else 0), old, new


def apply_diff(source: str, diff: str) -> str:
    """`source` with the diff applied; ValueError naming the first hunk whose lines are not where it says."""
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    done = 0  # lines of `source` copied or replaced so far
    for header, start, old, new in hunks(diff):
        if start < done or lines[start : start + len(old)] != old:
            raise ValueError(f"hunk {header} does not apply: the source has changed there")
        out += lines[done:start] + new
        done = start + len(old)
    return "".join(out + lines[done:])
