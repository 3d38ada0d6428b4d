"""Stalls pinned to instructions and to kernel.cu lines: Nsight Compute's per-instruction warp-state samples,
matched with the lines NVRTC's line table gives each SASS instruction.

`python -m tutorial profile --source` runs one launch of a stage under ncu with the SourceCounters section
(the kernel compiled with `-lineinfo`, which leaves its SASS unchanged: a CPU test compares them), exports
the per-instruction table (`ncu --page source --csv --print-source sass`) and joins it, instruction by
instruction, with the same kernel compiled here and disassembled with its line table (`nvdisasm -gi`).
Each instruction gets its kernel.cu line and, through the inlining chain, the line of the kernel body it
was inlined into, which says its warp role where a stage specialises warps: the producer branch
(`if (warpgroup == 0)`) or the consumers' `else`.
"""

from __future__ import annotations

import csv
import io
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepgemm.jit import LINEINFO_ENV
from tutorial import stages
from tutorial.profile import ncu_binary, parse_number, run_ncu
from tutorial.sass import read_cubin
from tutorial.stages import compile_report, kernel_path
from tutorial.target import command as target_command

SAMPLES_ALL = "Warp Stall Sampling (All Samples)"
SAMPLES_NOT_ISSUED = "Warp Stall Sampling (Not-issued Samples)"
ROLE_BRANCH = "if (warpgroup == 0) {"  # v4 and v5: the producer's branch; its `else` is the consumers'
SUMMED = ("samples", "not_issued", "instructions")
TOP_INSTRUCTIONS = 40  # instructions kept per stage in a record, the most sampled

_LINE_MARK = re.compile(r'//## File "[^"]*", line (\d+)((?: inlined at "[^"]*", line \d+)*)')
_INLINED_AT = re.compile(r'inlined at "[^"]*", line (\d+)')
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


@dataclass(frozen=True)
class SassLine:
    """One SASS instruction of the compiled kernel: its offset, text, kernel.cu line and the kernel-body line
    it was inlined into (the same line where nothing was inlined)."""

    offset: int
    instruction: str
    line: int | None
    body_line: int | None


def function_lines(disassembly: str, function: str = "gemm_kernel") -> list[SassLine]:
    """The instructions of `function` in `nvdisasm -gi` output, each with the line marks before it."""
    lines = disassembly.splitlines()
    start = next((i for i, text in enumerate(lines) if text.strip() == f"{function}:"), None)
    if start is None:
        raise ValueError(f"no function {function} in the disassembly")
    found, line, body = [], None, None
    for text in lines[start + 1 :]:
        if text.startswith("//----") or text.lstrip().startswith(".section"):
            break  # the next function's section
        mark = _LINE_MARK.search(text)
        if mark:
            line = int(mark.group(1))
            chain = _INLINED_AT.findall(mark.group(2))
            body = int(chain[-1]) if chain else line
            continue
        instruction = _INSTRUCTION.search(text)
        if instruction:
            found.append(SassLine(int(instruction.group(1), 16), instruction.group(2), line, body))
    return found


def role_ranges(source: str) -> dict[str, tuple[int, int]]:
    """The kernel.cu line ranges (1-based, inclusive) of the producer and consumer branches, found from
    ROLE_BRANCH by matching braces; {} for a stage whose warps all do the same work."""
    lines = source.splitlines()
    first = next((i for i, text in enumerate(lines) if ROLE_BRANCH in text), None)
    if first is None:
        return {}
    depth, else_line = 0, None
    for i in range(first, len(lines)):
        code = lines[i].split("//", 1)[0]
        for char in code:
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
        if depth == 1 and else_line is None and i > first and "else" in code:
            else_line = i
        if depth == 0 and i > first and else_line is not None:
            return {"producer": (first + 1, else_line), "consumers": (else_line + 1, i + 1)}
    raise ValueError("the producer/consumer branch of the kernel does not close")


def role_of(body_line: int | None, ranges: dict[str, tuple[int, int]]) -> str:
    """Which warps run an instruction, from the kernel-body line it belongs to."""
    for role, (first, last) in ranges.items():
        if body_line is not None and first <= body_line <= last:
            return role
    return "all warps" if not ranges else "prologue / both"


def compiled_lines(stage: str, defines: dict[str, int]) -> list[SassLine]:
    """The stage's gemm_kernel compiled here with -lineinfo and disassembled with its line table."""
    cubin = compile_report(stage, defines, options=("-lineinfo",)).cubin
    return function_lines(read_cubin(cubin, "nvdisasm", "-gi", "-c"))


def parse_source_csv(text: str) -> list[dict[str, Any]]:
    """ncu's `--page source --csv --print-source sass` table: a row per SASS instruction, numbers as numbers.
    The first line names the kernel; the header follows."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if start is None:
        raise ValueError("no per-instruction table in ncu's output:\n" + text[-2000:])
    header, *rows = csv.reader(io.StringIO("\n".join(lines[start:])))
    return [{name: parse_number(value) for name, value in zip(header, row, strict=False)} for row in rows]


def joined(profiled: list[dict[str, Any]], compiled: list[SassLine]) -> list[dict[str, Any]]:
    """Each profiled instruction with its kernel.cu lines, matched by position; ValueError where the two
    are not the same instruction stream (the profiled kernel was not the one compiled here)."""
    if len(profiled) != len(compiled):
        raise ValueError(f"ncu shows {len(profiled)} instructions, the compiled kernel has {len(compiled)}")
    out = []
    for row, sass in zip(profiled, compiled, strict=True):
        shown = opcode(str(row.get("Source", "")))
        if shown and shown != opcode(sass.instruction):
            raise ValueError(f"at {sass.offset:#x} ncu shows {row.get('Source')!r}, here {sass.instruction!r}")
        out.append({**row, "line": sass.line, "body_line": sass.body_line, "offset": sass.offset})
    return out


def opcode(instruction: str) -> str:
    """The opcode of a SASS instruction, its predicate (@P0, @!UP1) skipped."""
    tokens = [token for token in instruction.split() if not token.startswith("@")]
    return tokens[0] if tokens else ""


def by_line(rows: Iterable[dict[str, Any]], source: str, ranges: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """Stall samples summed per kernel.cu line and warp role, largest first, with the line's text."""
    text = source.splitlines()
    sums: dict[tuple[str, int | None], dict[str, Any]] = defaultdict(lambda: dict.fromkeys(SUMMED, 0))
    for row in rows:
        key = (role_of(row["body_line"], ranges), row["line"])
        entry = sums[key]
        entry["samples"] += int(row.get(SAMPLES_ALL, 0) or 0)
        entry["not_issued"] += int(row.get(SAMPLES_NOT_ISSUED, 0) or 0)
        entry["instructions"] += 1
    total = sum(entry["samples"] for entry in sums.values()) or 1
    found = [
        {"role": role, "line": line, "source": text[line - 1].strip() if line else "",
         "pct_samples": 100 * entry["samples"] / total, **entry}
        for (role, line), entry in sums.items()
    ]  # fmt: skip
    return sorted(found, key=lambda r: -r["samples"])


def source_command(stage: str, m: int, n: int, k: int, dtype: str, report: Path) -> list[str]:
    """ncu collecting SourceCounters on the second launch of `gemm_kernel` into `report`."""
    return [
        ncu_binary(), "--clock-control", "none", "--section", "SourceCounters", "--import-source", "yes",
        "--kernel-name", "gemm_kernel", "--launch-skip", "1", "--launch-count", "1", "-f", "-o", str(report),
        *target_command(stage, m, n, k, dtype),
    ]  # fmt: skip


def profile_source(stage: str, m: int, n: int, k: int, dtype: str, timeout_s: float = 300) -> dict[str, Any]:
    """Run ncu on one launch of `stage` and return its stalls per kernel.cu line and role, and per instruction."""
    defines = stages.default_defines(stage, dtype)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "source"
        run_ncu(source_command(stage, m, n, k, dtype, report), timeout_s, env={LINEINFO_ENV: "1"})
        export = [ncu_binary(), "--import", f"{report}.ncu-rep", "--page", "source", "--csv", "--print-source", "sass"]
        table = parse_source_csv(run_ncu(export, timeout_s))
    source = kernel_path(stage).read_text()
    ranges = role_ranges(source)
    rows = joined(table, compiled_lines(stage, defines))
    top = sorted(rows, key=lambda r: -int(r.get(SAMPLES_ALL, 0) or 0))[:TOP_INSTRUCTIONS]
    return {"stage": stage, "dtype": dtype, "m": m, "n": n, "k": k, "roles": ranges,
            "lines": by_line(rows, source, ranges), "instructions": top}  # fmt: skip
