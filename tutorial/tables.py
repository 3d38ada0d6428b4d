"""The notebooks' tables: recorded rows selected by stage, dtype and shape, and the tables built from them.

Rows are the dicts of results/h200/progression.json (bench rows) and results/h200/profile.json (profile
rows, keyed as tutorial.profile.METRICS); any value may be None. The epilogue suite, the lab's sweeps and
the raster record (a suite since folded into the ablation's GROUP_M 1 rows) hold bench rows too, with the
setting or the epilogue in the stage name ('v4_pipeline_swizzle GROUP_M=1', 'v5_fused +bias +gelu_tanh',
'cublaslt +bias +gelu'). Print a table with `results.format_table(table, <ITS>_COLUMNS)`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from statistics import fmean, median
from typing import Any

from deepgemm import heuristic
from deepgemm.model import (
    balanced_workers,
    ceil_div,
    split_k_schedule,
    stream_k_schedule,
    worker_of_k_tile,
)
from tutorial import results, stages
from tutorial.profile import STALL_REASONS, top_stalls
from tutorial.source_profile import role_of
from tutorial.stages import CUBLAS, STAGES, stage_name

Row = dict[str, Any]
Shape = tuple[int, int, int]

ORDER = (*STAGES, CUBLAS)


def shape_of(row: Row) -> Shape:
    return int(row["m"]), int(row["n"]), int(row["k"])


def shapes(rows: Iterable[Row]) -> list[Shape]:
    """The shapes in the rows, in the order they first appear (the order they were measured in)."""
    return list(dict.fromkeys(shape_of(row) for row in rows))


def stage_key(stage: str) -> str:
    """A stage's full name ('v3' -> 'v3_wgmma_tma'), or the baseline's."""
    return CUBLAS if stage == CUBLAS else stage_name(stage)


def stage_order(row: Row) -> int:
    """Sort key: the stages in order (variants of a stage with it), then cuBLAS, then anything else."""
    base = base_stage(row["stage"])
    return STAGES.index(base) if base else ORDER.index(CUBLAS) if row["stage"] == CUBLAS else len(ORDER)


def rows_for(
    rows: Iterable[Row],
    stage: str | Sequence[str] | None = None,
    dtype: str | None = None,
    shape: int | Shape | None = None,
) -> list[Row]:
    """The rows of one or more stages ('v3', 'v3_wgmma_tma', 'cublas'), one dtype, one shape (an int: square).

    Rows keep their recorded order.
    """
    wanted = None if stage is None else {stage_key(s) for s in ([stage] if isinstance(stage, str) else stage)}
    if isinstance(shape, int):
        shape = (shape, shape, shape)
    return [
        row
        for row in rows
        if (wanted is None or row["stage"] in wanted)
        and (dtype is None or row["dtype"] == dtype)
        and (shape is None or shape_of(row) == tuple(shape))
    ]


def pick(rows: Iterable[Row], stage: str, dtype: str | None = None, shape: int | Shape | None = None) -> Row:
    """The one row of a stage at a dtype and shape (the first, if several); LookupError names what is missing."""
    found = rows_for(rows, stage, dtype, shape)
    if not found:
        raise LookupError(f"no recorded row for stage {stage!r}, dtype {dtype!r}, shape {shape!r}")
    return found[0]


def headline(rows: Sequence[Row], dtype: str | None, shape: int | Shape | None) -> list[Row]:
    """Rows of one dtype and one shape: the first recorded shape unless one is given."""
    of_dtype = rows_for(rows, dtype=dtype)
    if shape is None and of_dtype:
        shape = shapes(of_dtype)[0]
    return sorted(rows_for(of_dtype, shape=shape), key=stage_order)


def number(value: Any) -> float | None:
    """A recorded value as a float; None where it is missing, not a number, or not finite."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def ratio_of(part: Any, whole: Any, scale: float = 100.0) -> float | None:
    """scale * part / whole (a percentage by default); None where either is missing or whole is 0."""
    p, w = number(part), number(whole)
    return scale * p / w if p is not None and w else None


def stall_breakdown(
    profile_rows: Iterable[Row],
    stages: Sequence[str] | None = None,
    *,
    dtype: str | None = None,
    shape: int | Shape | None = None,
    top: int = 4,
) -> tuple[list[str], list[str], list[list[float]]]:
    """(stages, reasons, values): warps stalled per issued instruction, by reason, one list per stage.

    The reasons are the union of each stage's `top` largest (ordered by their total), then 'other' for the
    rest when it is not zero; 'selected' (a warp issuing, not stalled) is left out. One row per stage: the
    first that matches dtype and shape. Missing values count as 0.
    """
    chosen: list[Row] = []
    for stage in stages or STAGES:
        found = rows_for(profile_rows, stage, dtype, shape)
        if found:
            chosen.append(found[0])
    stalled = [r for r in STALL_REASONS if r != "selected"]
    values = [{r: number(row.get(f"stall_{r}")) or 0.0 for r in stalled} for row in chosen]
    named = {reason for row in chosen for reason, _ in top_stalls(row, top)}
    reasons = sorted(named, key=lambda r: -sum(v[r] for v in values))
    table = [[v[r] for r in reasons] + [sum(v[r] for r in stalled if r not in named)] for v in values]
    if any(line[-1] > 0 for line in table):
        reasons.append("other")
    else:
        table = [line[:-1] for line in table]
    return [row["stage"] for row in chosen], reasons, table


BANK_CONFLICT_COLUMNS = (
    *results.ROW_ID_COLUMNS,
    ("ld", "ld", 0),
    ("ld_pct", "ld %", 1),
    ("st", "st", 0),
    ("st_pct", "st %", 1),
    ("ldsm", "ldsm", 0),
    ("ldgsts", "ldgsts", 0),
    ("gmma", "gmma", 0),
    ("gmma_pct", "gmma %", 1),
)


def bank_conflict_table(
    profile_rows: Iterable[Row],
    stages: Sequence[str] | None = None,
    *,
    dtype: str | None = None,
    shape: int | Shape | None = None,
) -> list[Row]:
    """Shared-memory bank conflicts per stage: counts per operation, and for ld, st and gmma the share of
    the shared-memory wavefronts they cost (a conflict replays the access as one more wavefront).

    Print it with `results.format_table(table, BANK_CONFLICT_COLUMNS)`: the columns are the conflict counts
    per operation and, after ld, st and gmma, that count as a % of the operation's wavefronts.
    """
    table = []
    for row in sorted(rows_for(profile_rows, stages, dtype, shape), key=stage_order):
        entry: Row = {key: row[key] for key in ("stage", "dtype", "m", "n", "k")}
        for op in ("ld", "st", "ldsm", "ldgsts", "gmma"):
            entry[op] = number(row.get(f"bank_conflicts_{op}"))
        for op in ("ld", "st", "gmma"):
            entry[f"{op}_pct"] = ratio_of(entry[op], row.get(f"wavefronts_shared_{op}"))
        table.append(entry)
    return table


PROFILE_COLUMNS = (
    *results.ROW_ID_COLUMNS,
    ("duration_us", "us", 0),
    ("tensor_pipe_active_pct", "tensor pipe %", 1),
    ("sm_throughput_pct", "SM %", 1),
    ("l2_hit_rate_pct", "L2 hit %", 1),
    ("dram_throughput_pct", "DRAM %", 1),
    ("dram_read_mb", "DRAM read MB", 0),
    ("registers_per_thread", "regs", 0),
    ("smem_kb", "smem KB", 0),
    ("sm_clock_mhz", "SM MHz", 0),
)


def profile_summary(
    profile_rows: Iterable[Row],
    stages: Sequence[str] | None = None,
    *,
    dtype: str | None = None,
    shape: int | Shape | None = None,
) -> list[Row]:
    """One line per profiled launch: time, tensor-pipe activity, L2 and DRAM, registers, shared memory.

    Print it with `results.format_table(summary, PROFILE_COLUMNS)`.
    """
    summary = []
    for row in sorted(rows_for(profile_rows, stages, dtype, shape), key=stage_order):
        entry = {key: row.get(key) for key, _, _ in PROFILE_COLUMNS if key in row}
        entry.update({key: row[key] for key in ("stage", "dtype", "m", "n", "k")})
        entry["duration_us"] = ratio_of(row.get("duration_ns"), 1000.0, 1.0)
        entry["dram_read_mb"] = ratio_of(row.get("dram_read_bytes"), 1e6, 1.0)
        entry["smem_kb"] = ratio_of(row.get("dynamic_smem_bytes"), 1024.0, 1.0)
        entry["sm_clock_mhz"] = ratio_of(row.get("sm_clock_hz"), 1e6, 1.0)
        summary.append(entry)
    return summary


NUMERICS_COLUMNS = (
    *results.ROW_ID_COLUMNS,
    ("max_abs", "max abs", 4),
    ("max_rel", "max rel", 4),
    ("rel_fro", "rel. Frobenius", 6),
    ("p50_abs", "p50 abs", 5),
    ("p99_abs", "p99 abs", 5),
    ("p999_abs", "p99.9 abs", 5),
    ("nonfinite", "non-finite", 0),
    ("passed", "passed", 0),
)


CLOCK_COLUMNS = (
    *results.ROW_ID_COLUMNS,
    ("tflops", "TFLOP/s", 1),
    ("sm_clock_mhz", "SM MHz", 0),
    ("power_w", "W", 0),
    ("pct_peak", "% peak", 1),
    ("pct_peak_at_clock", "% peak@clk", 1),
)


VARIANT_COLUMNS = (
    *results.ROW_ID_COLUMNS,
    ("tflops", "TFLOP/s", 1),
    ("x_tflops", "x TFLOP/s", 3),
    ("sm_clock_mhz", "SM MHz", 0),
    ("x_clock", "x SM MHz", 3),
    ("pct_peak_at_clock", "% peak@clk", 1),
    ("x_at_clock", "x % peak@clk", 3),
)


def shipped_rows(rows: Iterable[Row], stage: str = "v5") -> list[Row]:
    """The rows of `stage` as it ships, from any suite: plain ('v5_fused') or named by a setting that is its
    default ('v5_fused GROUP_M=16' in the tile-order suite, 'v5_fused CLUSTER_M=2' in the cluster suite)."""
    name = stage_name(stage)
    defaults = stages.load(name).DEFAULTS.extra
    names = {name} | {f"{name} {knob}={value}" for knob, value in defaults.items()}
    return [row for row in rows if row["stage"] in names]


def variant_value(stage: str, name: str = "GROUP_M") -> int | None:
    """The setting a row's stage name carries: 'v5_fused GROUP_M=16' -> 16; None when it carries none."""
    found = re.search(rf"(?:^|\s){re.escape(name)}=(-?\d+)(?:\s|$)", stage)
    return int(found.group(1)) if found else None


def variant_key(row: Row, name: str) -> tuple[str, str, Shape]:
    stage = row["stage"]
    return re.sub(rf"\s*{re.escape(name)}=-?\d+", "", stage), row["dtype"], shape_of(row)


def variant_table(rows: Iterable[Row], baseline: int, name: str = "GROUP_M", *, dtype: str | None = None) -> list[Row]:
    """The rows that carry a setting (see `variant_value`), each with its TFLOP/s, SM clock and % of the peak
    at that clock as ratios to the row of the same stage, dtype and shape at the `baseline` setting (None
    where that is missing). The first ratio is the product of the other two.

    Print it with `results.format_table(table, VARIANT_COLUMNS)`.
    """
    chosen = [row for row in rows_for(rows, dtype=dtype) if variant_value(row["stage"], name) is not None]
    base = {variant_key(row, name): row for row in chosen if variant_value(row["stage"], name) == baseline}
    table = []
    for row in chosen:
        ref = base.get(variant_key(row, name), {})
        keys = {"x_tflops": "tflops", "x_clock": "sm_clock_mhz", "x_at_clock": "pct_peak_at_clock"}
        ratios = {column: ratio_of(row.get(key), ref.get(key), 1.0) for column, key in keys.items()}
        table.append({**row, **ratios})
    return table


EPILOGUE_COLUMNS = (
    ("dtype", "dtype", 0),
    ("shape", "M x N x K", 0),
    ("plain", "v5", 1),
    ("fused", "v5 fused", 1),
    ("lt_fused", "cuBLASLt fused", 1),
    ("cublas", "cuBLAS", 1),
    ("fused_x_plain", "fused / v5", 3),
    ("fused_x_lt", "fused / Lt fused", 3),
    ("lt_x_cublas", "Lt fused / cuBLAS", 3),
)


def epilogue_table(rows: Iterable[Row], stage: str = "v5_fused") -> list[Row]:
    """One line per dtype and shape of the epilogue suite: TFLOP/s of plain `stage`, `stage` with its fused
    epilogue (the row named '<stage> +...'), cuBLASLt's fused epilogue ('cublaslt +...') and plain cuBLAS,
    and three ratios: fused / plain, fused / cuBLASLt fused, cuBLASLt fused / cuBLAS.

    Print it with `results.format_table(table, EPILOGUE_COLUMNS)`.
    """
    rows = list(rows)
    table = []
    for dtype in dict.fromkeys(row["dtype"] for row in rows):
        for shape in shapes(rows_for(rows, dtype=dtype)):
            here = rows_for(rows, dtype=dtype, shape=shape)

            def rate(match: Any, here: list[Row] = here) -> float | None:
                return next((number(row.get("tflops")) for row in here if match(row["stage"])), None)

            entry: Row = {"dtype": dtype, "m": shape[0], "n": shape[1], "k": shape[2]}
            entry["plain"] = rate(lambda s: s == stage)
            entry["fused"] = rate(lambda s: s.startswith(stage + " +"))
            entry["lt_fused"] = rate(lambda s: s.startswith("cublaslt +"))
            entry["cublas"] = rate(lambda s: s == CUBLAS)
            entry["fused_x_plain"] = ratio_of(entry["fused"], entry["plain"], 1.0)
            entry["fused_x_lt"] = ratio_of(entry["fused"], entry["lt_fused"], 1.0)
            entry["lt_x_cublas"] = ratio_of(entry["lt_fused"], entry["cublas"], 1.0)
            table.append(entry)
    return table


def load_rows(name: str, directory: Path | None = None) -> tuple[list[Row], str]:
    """The rows of a recorded run and one line saying where they come from, or [] and 'no recorded <name> yet'."""
    directory = results.RESULTS_DIR if directory is None else directory
    try:
        record = results.load(name, directory)
    except FileNotFoundError:
        return [], f"no recorded {name} yet ({directory / (name + '.json')} is written on a GPU with --record)"
    prov = record["provenance"]
    note = f"{name}: recorded on {prov['gpu']}, {prov['date']}, commit {prov['commit'][:12]} ({prov['command']})"
    return record["rows"], note


def base_stage(stage: str) -> str | None:
    """The stage a row measures: 'v4_pipeline_swizzle GROUP_M=1' -> 'v4_pipeline_swizzle'; None for others."""
    return next((s for s in STAGES if stage == s or stage.startswith(s + " ")), None)


TILE_ROUND_COLUMNS = (
    ("m", "M", 0), ("n", "N", 0), ("cluster_tiles", "cluster tiles", 0), ("ctas", "CTAs", 0), ("rounds", "rounds", 0),
    ("sms_busy_pct", "% SMs busy", 0), ("rows_of_c_pct", "% computed rows in C", 1),
)  # fmt: skip


CALL_SUMMARY_COLUMNS = (
    ("dtype", "dtype", 0), ("shape", "M x N x K", 0), ("host_us", "host µs (median)", 1),
    ("torch_host_us", "torch.matmul host µs", 1), ("call_us", "µs per call (median)", 1),
    ("torch_us", "torch µs (median)", 1), ("x_torch_min", "x torch, lowest", 3), ("x_torch", "median", 3),
    ("x_torch_max", "highest", 3),
)  # fmt: skip


def call_summary(rows: Iterable[Row]) -> list[Row]:
    """The call suite per dtype and shape over its 8 rows (2 frameworks x 4 layouts): medians of the host
    and GPU times, and the range of x torch, so that a layout or framework that lags shows in the range."""
    groups: dict[tuple, list[Row]] = {}
    for row in rows:
        groups.setdefault((row["dtype"], *shape_of(row)), []).append(row)
    summary = []
    for (dtype, m, n, k), group in groups.items():
        ratios = [r["x_torch"] for r in group]
        medians = {key: median(r[key] for r in group) for key in ("host_us", "torch_host_us", "call_us", "torch_us")}
        summary.append({"dtype": dtype, "m": m, "n": n, "k": k, **medians, "x_torch": median(ratios),
                        "x_torch_min": min(ratios), "x_torch_max": max(ratios)})  # fmt: skip
    return summary


SOURCE_INSTRUCTION_COLUMNS = (
    ("pct", "% samples", 1),
    ("reason", "main stall", 0),
    ("role", "warps", 0),
    ("sass", "SASS", 0),
    ("line", "line", 0),
    ("source", "kernel.cu", 0),
)
NOT_ISSUED = " (Not Issued)"


def source_instructions(rows: Iterable[Row], stage: str, top: int = 8, width: int = 56) -> list[Row]:
    """The `top` SASS instructions of a stage's `profile --source` record (profile_source.json) by stall
    samples: their share of all the kernel's samples, the stall reason that holds most of theirs, the warps
    that run them, and the kernel.cu line they come from (texts cut to `width`)."""
    row = next(r for r in rows if r["stage"] == stage_name(stage))
    total = sum(line["samples"] for line in row["lines"])
    sources = {line["line"]: line["source"] for line in row["lines"]}
    out = []
    for ins in row["instructions"][:top]:
        reasons = {k[len("stall_") :]: v for k, v in ins.items() if k.startswith("stall_") and NOT_ISSUED not in k}
        out.append({
            "pct": 100.0 * ins["# Samples"] / total,
            "reason": max(reasons, key=reasons.get),
            "role": role_of(ins.get("body_line"), row["roles"]),
            "sass": ins["Source"].strip()[:width],
            "line": ins["line"],
            "source": sources.get(ins["line"], "")[:width],
        })  # fmt: skip
    return out


# What a row shows of the recorded and the live run: field, label, digits.
ABLATION_SHOWN = (("us", "µs", 1), ("x_shipped", "x shipped", 2), ("bank_conflicts", "bank conflicts", 0),
                  ("tensor_pipe_active_pct", "tensor %", 0))  # fmt: skip
ABLATION_FIELDS = tuple(field for field, _, _ in ABLATION_SHOWN)


def ablation_table(recorded: Iterable[Row], stage: str, dtype: str, live: Iterable[Row] = ()) -> list[Row]:
    """A stage's ablation (`tutorial.ablation`), one row per variant and cuBLAS: the recorded time, ratio to
    the stage as shipped, bank conflicts and stalls, and where `live` rows are given (this GPU's run), the
    first four of them beside, as `live_<field>`; a variant only the live run has comes last."""

    def mine(rows: Iterable[Row]) -> dict[str, Row]:
        return {r["ablation"]: r for r in rows if r.get("ablated_stage") == stage and r["dtype"] == dtype}

    then, now = mine(recorded), mine(live)
    return [
        {
            "ablation": name,
            **{f: then.get(name, {}).get(f) for f in (*ABLATION_FIELDS, "top_stalls")},
            **{f"live_{f}": now.get(name, {}).get(f) for f in ABLATION_FIELDS},
        }
        for name in [*then, *(name for name in now if name not in then)]
    ]


ABLATION_COLUMNS = (
    ("ablation", "variant", 0),
    *((f, f"{label} (H200)" if f == "us" else label, digits) for f, label, digits in ABLATION_SHOWN),
    *((f"live_{f}", f"{label} (here)" if f == "us" else label, digits) for f, label, digits in ABLATION_SHOWN),
    ("top_stalls", "top stalls (H200)", 0),
)


# The shape table summed up by M band (`band_summary`): where the call wins and where it does not, for each
# way of timing it and each way of picking its config.
M_BANDS = (("1-32", 1, 32), ("33-500", 33, 500), ("501-1500", 501, 1500), (">1500", 1501, math.inf))
SHAPE_RATIOS = (  # what is summed up: a label and the row's field
    ("graph, table", "x_torch_graph"),
    ("per call, table", "x_torch"),
    ("graph, heuristic", "x_torch_graph_heuristic"),
    ("per call, heuristic", "x_torch_heuristic"),
)
BAND_COLUMNS = (
    ("ratio", "x torch", 0), ("band", "M", 0), ("rows", "rows", 0), ("at_least_1", ">= 1.0x", 0),
    ("median", "median", 3), ("worst", "worst", 3),
)  # fmt: skip


def band_of(m: int) -> str:
    """The M band a row falls in: '1-32', '33-500', '501-1500' or '>1500'."""
    return next(name for name, low, high in M_BANDS if low <= m <= high)


def row_name(row: Row) -> str:
    return f"{row['dtype']} {row['m']}x{row['n']}x{row['k']}"


def band_line(label: str, band: str, named: Sequence[tuple[str, float]]) -> Row:
    """One band's line: how many rows, how many at 1.0x or better, the median and the worst ratio, and the
    rows below 1.0x by name, worst first."""
    ratios = [ratio for _, ratio in named]
    below = sorted((ratio, name) for name, ratio in named if ratio < 1.0)
    return {
        "ratio": label,
        "band": band,
        "rows": len(ratios),
        "at_least_1": sum(ratio >= 1.0 for ratio in ratios),
        "median": median(ratios) if ratios else None,
        "worst": min(ratios) if ratios else None,
        "below": [f"{name} ({ratio:.3f})" for ratio, name in below],
    }


def band_summary(rows: Iterable[Row], ratios: Sequence[tuple[str, str]] = SHAPE_RATIOS) -> list[Row]:
    """The shape table by M band and over all rows, for each (label, field) of `ratios`: rows, rows at 1.0x
    or better, median, worst, and the rows below 1.0x named. Rows without the field (an older record, a row
    that failed) are left out. Print it with `results.format_table(summary, BAND_COLUMNS)` and
    `below_lines(summary)`."""
    rows = list(rows)
    summary = []
    for label, field in ratios:
        found = [(row_name(row), band_of(int(row["m"])), number(row.get(field))) for row in rows]
        found = [(name, band, ratio) for name, band, ratio in found if ratio is not None]
        for band, _, _ in M_BANDS:
            summary.append(band_line(label, band, [(name, ratio) for name, b, ratio in found if b == band]))
        summary.append(band_line(label, "all", [(name, ratio) for name, _, ratio in found]))
    return summary


def below_lines(summary: Iterable[Row]) -> list[str]:
    """A band summary's rows below 1.0x, a line per ratio and band that has any."""
    return [f"below 1.0x, {line['ratio']}, M {line['band']}: {', '.join(line['below'])}"
            for line in summary if line["below"] and line["band"] != "all"]  # fmt: skip


def pick_regret(rows: Iterable[Row]) -> list[Row]:
    """Per dtype, the heuristic's whole pick (tile, PDL, the shape compiled in) against the table's, autotune's
    best, timed in the same run in CUDA graphs: its time over the table's, mean and worst, how many rows over
    10%, and how many it ran faster (the noise between the two timings, or a tile autotune's own timing
    missed). A row where both pick one config counts, at about 1.0; a row without both times is left out."""
    rows, out = list(rows), []
    for dtype in sorted({row["dtype"] for row in rows}):
        timed = [row for row in rows if row["dtype"] == dtype and number(row.get("heuristic_graph_us"))
                 and number(row.get("graph_us"))]  # fmt: skip
        ratios = [(row["heuristic_graph_us"] / row["graph_us"], row_name(row)) for row in timed]
        if not ratios:
            continue
        worst = max(ratios)
        out.append({"dtype": dtype, "rows": len(ratios), "mean_pct": 100 * (fmean(r for r, _ in ratios) - 1),
                    "worst_pct": 100 * (worst[0] - 1), "worst_row": worst[1],
                    "over_10pct": sum(r > 1.10 for r, _ in ratios),
                    "faster": sum(r < 1.0 for r, _ in ratios)})  # fmt: skip
    return out


PICK_REGRET_COLUMNS = (
    ("dtype", "dtype", 0), ("rows", "rows", 0), ("mean_pct", "mean %", 2), ("worst_pct", "worst %", 1),
    ("worst_row", "at", 0), ("over_10pct", "> 10%", 0), ("faster", "faster", 0),
)  # fmt: skip


# ---- notebook 07: the library kernel's tiles, its schedules, its sweep, and the shape table at M = 1 ----------


def token_tiles(m: int) -> list[Row]:
    """Ways to tile M tokens, and the padding each computes: plain, the tokens on wgmma's M in tiles of 128 or
    64 rows (two or one consumer warpgroups); swapped (the library's [8]), on wgmma's N in the heuristic's
    tight widths, steps of 8 (`heuristic.block_ns`). Per way: the tiles along M, the rows they compute, and
    the share of those that are rows of C. 777 tokens: 7 x 128 = 896 rows (87% of them C), 4 x 200 = 800 (97%)."""
    ways = [("plain", width) for width in (heuristic.MAX_BLOCK_M, heuristic.BLOCK_M_STEP)]
    ways += [("swapped", width) for width in heuristic.block_ns(m, swap_ab=True)]
    out = []
    for orientation, width in ways:
        tiles = ceil_div(m, width)
        out.append({"m": m, "orientation": orientation, "width": width, "tiles": tiles, "rows": tiles * width,
                    "rows_of_c_pct": 100 * m / (tiles * width)})  # fmt: skip
    return out


TOKEN_TILE_COLUMNS = (
    ("m", "M", 0), ("orientation", "tokens on", 0), ("width", "tile", 0), ("tiles", "tiles", 0),
    ("rows", "rows computed", 0), ("rows_of_c_pct", "% rows of C", 1),
)  # fmt: skip

Segment = tuple[int, int, int]  # a piece of a worker's work: (cluster tile, first k-tile, end k-tile)


def worker_runs(tiles: int, slots: int, k_tiles: int, stream_k: int = 0, split_k: int = 1) -> list[list[Segment]]:
    """What each persistent worker (a CTA, or a cluster) of the library kernel runs, in order, as its tile
    scheduler ([6] `Schedule`, `SegmentWalk`) hands out `tiles` cluster tiles of `k_tiles` k-tiles on `slots`.
    Unit u goes to worker u % workers. Whole tiles (stream_k 0, split_k 1): `balanced_workers` workers, one
    unit a tile. Split-K: every tile cut into split_k runs, a unit each. Stream-K (`model.stream_k_schedule`,
    1 or 2 rounds cut): a worker on every slot; the first tiles whole, then the last sk_tiles tiles' k-tiles
    laid end to end and cut into sk_workers equal runs, run w a unit; a run that crosses from one tile into
    the next is two segments."""
    if stream_k:
        sk_tiles, sk_workers = stream_k_schedule(tiles, slots, k_tiles, rounds=stream_k)
        workers = slots if sk_tiles else balanced_workers(tiles, slots)
    else:
        sk_tiles, sk_workers = split_k_schedule(tiles, split_k)
        workers = balanced_workers(sk_workers or tiles, slots)
    whole, sk_iters = tiles - sk_tiles, sk_tiles * k_tiles
    runs: list[list[Segment]] = [[] for _ in range(workers)]
    for unit in range(whole + sk_workers):
        if unit < whole:
            runs[unit % workers].append((unit, 0, k_tiles))
            continue
        w = unit - whole
        i, end = (whole * k_tiles + x * sk_iters // sk_workers for x in (w, w + 1))
        while i < end:
            tile = i // k_tiles
            stop = min(end, (tile + 1) * k_tiles)
            runs[unit % workers].append((tile, i - tile * k_tiles, stop - tile * k_tiles))
            i = stop
    return runs


def cut_tiles(tiles: int, slots: int, k_tiles: int, stream_k: int = 1) -> list[Row]:
    """Stream-K's tiles cut between workers, and who adds them up: per cut tile, the workers whose runs cover
    it, first to last (`model.worker_of_k_tile`, as the kernel's `cut_parts`), and the k-tiles of it each ran.
    Each part writes its fp32 partial; the part that finishes last adds all of them in this worker order. A
    tile of the stream-K part that one worker's run holds whole is not cut (the kernel stores it as it is)."""
    sk_tiles, sk_workers = stream_k_schedule(tiles, slots, k_tiles, rounds=stream_k)
    whole, sk_iters = tiles - sk_tiles, sk_tiles * k_tiles
    out = []
    for cut in range(sk_tiles):
        begin, end = cut * k_tiles, (cut + 1) * k_tiles
        first, last = (worker_of_k_tile(i, sk_iters, sk_workers) for i in (begin, end - 1))
        if first == last:
            continue
        runs = [(w * sk_iters // sk_workers, (w + 1) * sk_iters // sk_workers) for w in range(first, last + 1)]
        out.append({"tile": whole + cut, "workers": list(range(first, last + 1)),
                    "k_tiles": [min(end, stop) - max(begin, start) for start, stop in runs]})  # fmt: skip
    return out


SPACE_COLUMNS = (
    ("shape", "M x N x K", 0), ("configs", "configs", 0), ("torch_us", "torch µs", 1), ("best", "fastest", 0),
    ("best_us", "µs", 1), ("x_torch", "x torch", 3), ("plain_us", "best plain µs", 1),
    ("swapped_us", "best swapped µs", 1), ("pdl_us", "fastest with PDL µs", 1),
)  # fmt: skip


def space_summary(rows: Iterable[Row]) -> list[Row]:
    """The lab's sweep of the library kernel's space (lab/results/<gpu>/library_space.json) per shape: the
    configurations timed and verified, torch.matmul's time, the fastest and its ratio to torch, the fastest
    of each orientation, and the fastest again with programmatic dependent launch. Print it with
    `results.format_table(summary, SPACE_COLUMNS)`."""
    out = []
    for row in rows:
        passed = [c for c in row["candidates"] if c["passed"]]
        best = min(passed, key=lambda c: c["us"])
        fastest = {swap: min((c["us"] for c in passed if bool(c["config"].get("SWAP_AB")) == swap), default=None)
                   for swap in (False, True)}  # fmt: skip
        out.append({"dtype": row["dtype"], "m": row["m"], "n": row["n"], "k": row["k"],
                    "configs": f"{len(passed)}/{len(row['candidates'])}", "torch_us": row["torch_us"],
                    "best": best["name"], "best_us": best["us"], "x_torch": row["torch_us"] / best["us"],
                    "plain_us": fastest[False], "swapped_us": fastest[True],
                    "pdl_us": number(row.get("pdl_us"))})  # fmt: skip
    return out


SCHEDULE_COLUMNS = (
    ("tile", "tile and cluster", 0), ("whole_us", "whole tiles µs", 1), ("sk1_us", "stream-K 1 µs", 1),
    ("sk2_us", "stream-K 2 µs", 1), ("x_sk", "whole / best stream-K", 3),
)  # fmt: skip


def schedule_pairs(candidates: Iterable[Row]) -> list[Row]:
    """One sweep row's candidates by tile and cluster (the config's name without its schedule and stages):
    the time with whole tiles and with stream-K over one and over two rounds, and whole over the faster
    stream-K (above 1: cutting the last round paid), fastest tile first; tiles timed only one way left out."""
    by_tile: dict[str, Row] = {}
    for c in candidates:
        if not c["passed"] or c["config"].get("SPLIT_K", 1) > 1:
            continue
        tile = re.sub(r" (?:s\d+|sk\d+) st\d+.*$", "", c["name"])
        schedule = {0: "whole_us", 1: "sk1_us", 2: "sk2_us"}[c["config"].get("STREAM_K", 0)]
        by_tile.setdefault(tile, {"tile": tile})[schedule] = c["us"]
    out = []
    for entry in by_tile.values():
        cut = [entry[key] for key in ("sk1_us", "sk2_us") if key in entry]
        if "whole_us" in entry and cut:
            out.append({"sk1_us": None, "sk2_us": None, **entry, "x_sk": entry["whole_us"] / min(cut)})
    return sorted(out, key=lambda e: min(e["whole_us"], e["sk1_us"] or math.inf, e["sk2_us"] or math.inf))


WEIGHT_STREAM_BYTES = 32 * 2**20  # the issue's aim holds where the weight is at least 32 MB
STREAM_AIM_GBS = 3500.0  # ... and asks for 3.5 TB/s there
BANDWIDTH_COLUMNS = (
    ("dtype", "dtype", 0), ("shape", "M x N x K", 0), ("weight_mb", "weight MB", 1), ("graph_gbs", "GB/s", 0),
    ("torch_graph_gbs", "torch GB/s", 0), ("aim", ">= 3.5 TB/s", 0),
)  # fmt: skip


def m1_bandwidth(rows: Iterable[Row]) -> list[Row]:
    """The shape table at M = 1, where the call streams the weight: its size in MB (2^20 bytes), the GB/s the
    call and torch.matmul moved in CUDA graphs (a, b and c once over `graph_us`, `torch_graph_us`), and where
    the weight is at least 32 MB, whether the call reached 3.5 TB/s ("yes"/"no"; "-" for a smaller weight)."""
    out = []
    for row in rows:
        if row["m"] != 1:
            continue
        item = 4 if row["dtype"] == "fp32" else 2
        moved = (row["m"] * row["k"] + row["n"] * row["k"] + row["m"] * row["n"]) * item
        weight = row["n"] * row["k"] * item
        gbs = moved / (row["graph_us"] * 1e3)
        aim = "-" if weight < WEIGHT_STREAM_BYTES else "yes" if gbs >= STREAM_AIM_GBS else "no"
        out.append({"dtype": row["dtype"], "m": row["m"], "n": row["n"], "k": row["k"],
                    "weight_mb": weight / 2**20, "graph_gbs": gbs,
                    "torch_graph_gbs": moved / (row["torch_graph_us"] * 1e3), "aim": aim})  # fmt: skip
    return out
