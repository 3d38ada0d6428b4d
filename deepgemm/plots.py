"""What the notebooks draw: recorded rows in, a matplotlib Figure or a small table out.

matplotlib is imported inside the plotting functions, so `import deepgemm` stays light. The helpers above
the plots (arithmetic intensity, operand traffic, row selection, the profile tables) are plain Python and
are what the tests check; the plots only arrange their results.

Rows are the dicts of results/h200/progression.json (bench rows) and results/h200/profile.json (profile
rows, keyed as deepgemm.profile.METRICS); any value may be None. The raster, v5_group_m and epilogue
suites write bench rows too, with the setting or the epilogue in the stage name
('v5_fused GROUP_M=1', 'v5_fused +bias +gelu_tanh', 'cublaslt +bias +gelu').
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deepgemm import results
from deepgemm.model import (  # noqa: F401  (the notebooks' names until the split)
    HBM_TBS,
    arithmetic_intensity,
    grouped_tile,
    operand_traffic_bytes,
    ridge_intensity,
    roof_tflops,
    tile_rounds,
    wave_operand_bytes,
)
from deepgemm.profile import STALL_REASONS, top_stalls
from deepgemm.stages import STAGES, stage_name

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Row = dict[str, Any]
Shape = tuple[int, int, int]

CUBLAS = "cublas"
ORDER = (*STAGES, CUBLAS)


# ---------------------------------------------------------------------------------------------------------
# Pure helpers


def shape_of(row: Row) -> Shape:
    return int(row["m"]), int(row["n"]), int(row["k"])


def shapes(rows: Iterable[Row]) -> list[Shape]:
    """The shapes in the rows, in the order they first appear (the order they were measured in)."""
    return list(dict.fromkeys(shape_of(row) for row in rows))


def _stage_key(stage: str) -> str:
    return CUBLAS if stage == CUBLAS else stage_name(stage)


def _order(row: Row) -> int:
    """Sort key: the stages in order (variants of a stage with it), then cuBLAS, then anything else."""
    base = _base_stage(row["stage"])
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
    wanted = None if stage is None else {_stage_key(s) for s in ([stage] if isinstance(stage, str) else stage)}
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


def _headline(rows: Sequence[Row], dtype: str | None, shape: int | Shape | None) -> list[Row]:
    """Rows of one dtype and one shape: the first recorded shape unless one is given."""
    of_dtype = rows_for(rows, dtype=dtype)
    if shape is None and of_dtype:
        shape = shapes(of_dtype)[0]
    return sorted(rows_for(of_dtype, shape=shape), key=_order)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _ratio(part: Any, whole: Any, scale: float = 100.0) -> float | None:
    p, w = _number(part), _number(whole)
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
    values = [{r: _number(row.get(f"stall_{r}")) or 0.0 for r in stalled} for row in chosen]
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
    for row in sorted(rows_for(profile_rows, stages, dtype, shape), key=_order):
        entry: Row = {key: row[key] for key in ("stage", "dtype", "m", "n", "k")}
        for op in ("ld", "st", "ldsm", "ldgsts", "gmma"):
            entry[op] = _number(row.get(f"bank_conflicts_{op}"))
        for op in ("ld", "st", "gmma"):
            entry[f"{op}_pct"] = _ratio(entry[op], row.get(f"wavefronts_shared_{op}"))
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
    for row in sorted(rows_for(profile_rows, stages, dtype, shape), key=_order):
        entry = {key: row.get(key) for key, _, _ in PROFILE_COLUMNS if key in row}
        entry.update({key: row[key] for key in ("stage", "dtype", "m", "n", "k")})
        entry["duration_us"] = _ratio(row.get("duration_ns"), 1000.0, 1.0)
        entry["dram_read_mb"] = _ratio(row.get("dram_read_bytes"), 1e6, 1.0)
        entry["smem_kb"] = _ratio(row.get("dynamic_smem_bytes"), 1024.0, 1.0)
        entry["sm_clock_mhz"] = _ratio(row.get("sm_clock_hz"), 1e6, 1.0)
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
    from deepgemm import stages

    name = stage_name(stage)
    defaults = stages.load(name).DEFAULTS.extra
    names = {name} | {f"{name} {knob}={value}" for knob, value in defaults.items()}
    return [row for row in rows if row["stage"] in names]


def variant_value(stage: str, name: str = "GROUP_M") -> int | None:
    """The setting a row's stage name carries: 'v5_fused GROUP_M=16' -> 16; None when it carries none."""
    found = re.search(rf"(?:^|\s){re.escape(name)}=(-?\d+)(?:\s|$)", stage)
    return int(found.group(1)) if found else None


def _variant_key(row: Row, name: str) -> tuple[str, str, Shape]:
    stage = row["stage"]
    return re.sub(rf"\s*{re.escape(name)}=-?\d+", "", stage), row["dtype"], shape_of(row)


def variant_table(rows: Iterable[Row], baseline: int, name: str = "GROUP_M", *, dtype: str | None = None) -> list[Row]:
    """The rows that carry a setting (see `variant_value`), each with its TFLOP/s, SM clock and % of the peak
    at that clock as ratios to the row of the same stage, dtype and shape at the `baseline` setting (None
    where that is missing). The first ratio is the product of the other two.

    Print it with `results.format_table(table, VARIANT_COLUMNS)`.
    """
    chosen = [row for row in rows_for(rows, dtype=dtype) if variant_value(row["stage"], name) is not None]
    base = {_variant_key(row, name): row for row in chosen if variant_value(row["stage"], name) == baseline}
    table = []
    for row in chosen:
        ref = base.get(_variant_key(row, name), {})
        keys = {"x_tflops": "tflops", "x_clock": "sm_clock_mhz", "x_at_clock": "pct_peak_at_clock"}
        ratios = {ratio: _ratio(row.get(key), ref.get(key), 1.0) for ratio, key in keys.items()}
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
                return next((_number(row.get("tflops")) for row in here if match(row["stage"])), None)

            entry: Row = {"dtype": dtype, "m": shape[0], "n": shape[1], "k": shape[2]}
            entry["plain"] = rate(lambda s: s == stage)
            entry["fused"] = rate(lambda s: s.startswith(stage + " +"))
            entry["lt_fused"] = rate(lambda s: s.startswith("cublaslt +"))
            entry["cublas"] = rate(lambda s: s == CUBLAS)
            entry["fused_x_plain"] = _ratio(entry["fused"], entry["plain"], 1.0)
            entry["fused_x_lt"] = _ratio(entry["fused"], entry["lt_fused"], 1.0)
            entry["lt_x_cublas"] = _ratio(entry["lt_fused"], entry["cublas"], 1.0)
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


def diff_excerpt(stage: str, *keywords: str, context: int = 2, limit: int = 60) -> str:
    """The lines of `python -m deepgemm diff <stage>` that add or remove one of `keywords` (any case), with
    `context` lines around each; at most `limit` lines, then a note on how to see the rest."""
    from deepgemm.cli import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        status = main(["diff", stage])
    if status != 0:
        raise ValueError(f"`python -m deepgemm diff {stage}` failed with status {status}")
    lines = buffer.getvalue().splitlines()
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
    out.append(f"(the whole diff: python -m deepgemm diff {stage_name(stage).split('_')[0]})")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------------
# Plots


def _base_stage(stage: str) -> str | None:
    """The stage a row measures: 'v4_pipeline_swizzle GROUP_M=1' -> 'v4_pipeline_swizzle'; None for others."""
    return next((s for s in STAGES if stage == s or stage.startswith(s + " ")), None)


def _color(stage: str) -> str:
    base = _base_stage(stage)
    return "black" if stage == CUBLAS else f"C{STAGES.index(base)}" if base else "grey"


def _short(stage: str) -> str:
    """'v3_wgmma_tma' -> 'v3'; 'v4_pipeline_swizzle GROUP_M=1' -> 'v4 GROUP_M=1'; anything else as it is."""
    base = _base_stage(stage)
    return base.split("_", 1)[0] + stage[len(base) :] if base else stage


def _figure(width: float = 7.5, height: float = 4.0) -> tuple[Figure, Axes]:
    """A Figure outside pyplot's global state: nothing to close, shown once when a cell returns it."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _empty(message: str) -> Figure:
    fig, ax = _figure(6.0, 1.2)
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)
    return fig


def _peaks() -> tuple[float, float]:
    from deepgemm.timing import PEAK_CLOCK_MHZ, PEAK_TFLOPS

    return PEAK_TFLOPS, PEAK_CLOCK_MHZ


def progression_bars(
    rows: Sequence[Row], dtype: str = "fp16", shape: int | Shape | None = None, *, log: bool = True
) -> Figure:
    """TFLOP/s per stage at one shape (default: the first recorded): one bar per stage, cuBLAS as a line,
    the datasheet peak as a line and, on each bar, the peak at the SM clock measured while it ran."""
    chosen = _headline(rows, dtype, shape)
    stage_rows = [row for row in chosen if row["stage"] != CUBLAS]
    if not stage_rows:
        return _empty(f"no recorded {dtype} rows")
    peak, peak_clock = _peaks()
    fig, ax = _figure()
    x = list(range(len(stage_rows)))
    rates = [row["tflops"] for row in stage_rows]
    bars = ax.bar(x, rates, color=[_color(row["stage"]) for row in stage_rows], gid="stages")
    ax.bar_label(bars, labels=[f"{r:.1f}" for r in rates], padding=2, fontsize=8)
    clocked = [(i, peak * row["sm_clock_mhz"] / peak_clock) for i, row in zip(x, stage_rows) if row.get("sm_clock_mhz")]
    if clocked:
        ax.scatter(*zip(*clocked), marker="_", s=900, color="dimgrey", label="peak at the measured SM clock")
    for row in chosen:
        if row["stage"] == CUBLAS:
            ax.axhline(row["tflops"], color="black", lw=1.2, label=f"cuBLAS {row['tflops']:.1f}")
    ax.axhline(peak, color="black", ls="--", lw=0.8, label=f"datasheet peak {peak:g}")
    ax.set_xticks(x, [_short(row["stage"]) for row in stage_rows])
    ax.set_ylabel("TFLOP/s")
    if log:
        ax.set_yscale("log")
    m, n, k = shape_of(stage_rows[0])
    ax.set_ylim(top=peak * (3 if log else 1.15))
    ax.set_title(f"{dtype} {m} x {n} x {k}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return fig


def roofline(
    rows: Sequence[Row],
    dtype: str = "fp16",
    *,
    profile_rows: Sequence[Row] = (),
    peak_tflops: float | None = None,
    bandwidth_tbs: float = HBM_TBS,
    bytes_per_element: int = 2,
) -> Figure:
    """Arithmetic intensity against TFLOP/s, log-log: the compute and memory roofs, one filled point per
    measured row (stage or cuBLAS) at the shape's best-case intensity, and, where profile rows are given,
    one hollow point per profiled launch at the intensity of the DRAM bytes it actually read."""
    peak = _peaks()[0] if peak_tflops is None else peak_tflops
    fig, ax = _figure(7.5, 4.5)
    ridge = ridge_intensity(peak, bandwidth_tbs)
    xs = [0.1, ridge, 1e4]
    ax.plot(xs, [roof_tflops(x, peak, bandwidth_tbs) for x in xs], color="black", lw=1.5, gid="roof")
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak), textcoords="offset points", xytext=(-40, 6), fontsize=8)
    ax.text(0.12, bandwidth_tbs * 0.12 * 1.3, f"{bandwidth_tbs:g} TB/s", rotation=0, fontsize=8)
    ax.axvline(2 / (2 * bytes_per_element), color="grey", ls=":", lw=1)
    ax.text(2 / (2 * bytes_per_element) * 1.1, peak * 0.5, "no reuse:\nevery FMA loads\nits operands", fontsize=7)
    chosen = sorted(rows_for(rows, dtype=dtype), key=_order)
    for stage in dict.fromkeys(row["stage"] for row in chosen):
        mine = [row for row in chosen if row["stage"] == stage]
        ax.scatter(
            [arithmetic_intensity(*shape_of(row), bytes_per_element) for row in mine],
            [row["tflops"] for row in mine],
            color=_color(stage),
            marker="x" if stage == CUBLAS else "o",
            label=_short(stage),
            zorder=3,
        )
    measured = [
        row for row in sorted(rows_for(profile_rows, dtype=dtype), key=_order)
        if _number(row.get("dram_read_bytes")) and _number(row.get("duration_ns"))
    ]  # fmt: skip
    if measured:
        flops = [2 * math.prod(shape_of(row)) for row in measured]
        ax.scatter(
            [f / row["dram_read_bytes"] for f, row in zip(flops, measured)],
            [f / row["duration_ns"] / 1e3 for f, row in zip(flops, measured)],
            facecolors="none",
            edgecolors=[_color(row["stage"]) for row in measured],
            label="profiled: DRAM bytes read",
            zorder=3,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.1, 1e4)
    ax.set_ylim(0.1, peak * 3)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of DRAM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{dtype}: roofline, {peak:g} TFLOP/s and {bandwidth_tbs:g} TB/s")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)  # outside: it hides no point
    return fig


def stall_bars(
    profile_rows: Sequence[Row],
    stages: Sequence[str] | None = None,
    *,
    dtype: str | None = "fp16",
    shape: int | Shape | None = None,
    top: int = 4,
) -> Figure:
    """Stall reasons per stage as stacked horizontal bars (warps stalled per issued instruction, by reason);
    see `stall_breakdown` for which reasons are shown."""
    found, reasons, table = stall_breakdown(profile_rows, stages, dtype=dtype, shape=shape, top=top)
    if not found:
        return _empty("no recorded profile yet" if not profile_rows else "no profile rows for these stages")
    from matplotlib import colormaps

    palette = colormaps["tab20"]  # one colour per reason, the same in every notebook
    fig, ax = _figure(7.5, 0.9 + 0.45 * max(len(found), len(reasons) / 2))
    y = list(range(len(found)))
    left = [0.0] * len(found)
    for j, reason in enumerate(reasons):
        widths = [line[j] for line in table]
        colour = "lightgrey" if reason == "other" else palette(STALL_REASONS.index(reason) % 20)
        ax.barh(y, widths, left=left, color=colour, label=reason)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(y, [_short(stage) for stage in found])
    ax.invert_yaxis()
    ax.set_xlabel("warps stalled per issued instruction")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return fig


def variant_plot(rows: Sequence[Row], dtype: str = "fp16", name: str = "GROUP_M") -> Figure:
    """Three panels against a setting carried in the stage name (see `variant_value`): TFLOP/s, the SM clock
    measured while it ran, and the % of the peak at that clock; one line per stage and shape."""
    chosen = [row for row in rows_for(rows, dtype=dtype) if variant_value(row["stage"], name) is not None]
    if not chosen:
        return _empty(f"no recorded {dtype} rows with a {name} setting")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 3.2), layout="constrained")
    axes = fig.subplots(1, 3)
    values = sorted({variant_value(row["stage"], name) for row in chosen})
    x_of = {v: i for i, v in enumerate(values)}
    panels = (("tflops", "TFLOP/s"), ("sm_clock_mhz", "SM clock, MHz"), ("pct_peak_at_clock", "% of peak at clock"))
    lines = dict.fromkeys(_variant_key(row, name) for row in chosen)
    for j, (stage, _, shape) in enumerate(lines):
        mine = sorted((row for row in chosen if _variant_key(row, name)[::2] == (stage, shape)),
                      key=lambda row: variant_value(row["stage"], name))  # fmt: skip
        xs = [x_of[variant_value(row["stage"], name)] for row in mine]
        size = f"{shape[0]}^3" if len(set(shape)) == 1 else "x".join(map(str, shape))
        for ax, (key, _) in zip(axes, panels):
            ys = [_number(row.get(key)) for row in mine]
            ax.plot(xs, [float("nan") if y is None else y for y in ys], marker="os^D"[j % 4],
                    color=_color(stage), ls="-" if j % 2 == 0 else "--", label=f"{_short(stage)} {size}")  # fmt: skip
    for ax, (_, label) in zip(axes, panels):
        ax.set_xticks(range(len(values)), [str(v) for v in values])
        ax.set_xlabel(name)
        ax.set_title(label, fontsize=10)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{dtype}: tile order")
    return fig


def pairs_plot(rows: Sequence[Row], stage: str = "v5_fused") -> Figure:
    """The `pairs` suite: each pair's x cuBLAS (dots) and their median (bar) per shape and dtype, and beside it
    the SM clock each kernel ran at in every pair, so a reader sees whether a gap is cycles or clock."""
    summary = [row for row in results.pair_summary(rows) if row["stage"] == stage]
    if not summary:
        return _empty(f"no recorded pairs of {stage} and cuBLAS")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 3.4), layout="constrained")
    ratio_ax, clock_ax = fig.subplots(1, 2)
    labels = []
    for i, group in enumerate(summary):
        key = (group["dtype"], group["m"], group["n"], group["k"])
        mine = [row for row in rows if (row["dtype"], row["m"], row["n"], row["k"]) == key and "pair" in row]
        ratios = [row["x_cublas"] for row in mine if row["stage"] == stage]
        ratio_ax.bar(i, group["x_cublas_median"] - 1.0, bottom=1.0, color=_color(stage), alpha=0.35, width=0.6)
        ratio_ax.plot([i] * len(ratios), ratios, "o", color=_color(stage), ms=4)
        for name, offset, marker in ((stage, -0.15, "o"), ("cublas", 0.15, "s")):
            clocks = [_number(row.get("sm_clock_mhz")) or float("nan") for row in mine if row["stage"] == name]
            clock_ax.plot([i + offset] * len(clocks), clocks, marker, color=_color(name), ms=4,
                          label=_short(name) if i == 0 else None)  # fmt: skip
        size = (
            f"{group['m']}^3" if group["m"] == group["n"] == group["k"] else f"{group['m']}x{group['n']}x{group['k']}"
        )
        labels.append(f"{group['dtype']}\n{size}")
    ratio_ax.axhline(1.0, color="black", lw=0.8)
    for ax in (ratio_ax, clock_ax):
        ax.set_xticks(range(len(labels)), labels)
    ratio_ax.set_title(f"{_short(stage)} / cuBLAS per pair (bar: median)", fontsize=10)
    clock_ax.set_title("SM clock in each pair, MHz", fontsize=10)
    clock_ax.legend(fontsize=8)
    return fig


def coalescer_plot(rows: Sequence[Row]) -> Figure:
    """The `coalescer` probe: left, how much of the second reader's traffic merged for every partner SM
    when both start together on data from DRAM, coloured by whether a cluster ever placed the partner with
    the anchor; right, how that share falls as the second reader starts later, data in L2 and in DRAM."""
    if not rows:
        return _empty("no recorded coalescer probe")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 3.4), layout="constrained")
    partner_ax, delay_ax = fig.subplots(1, 2)
    anchor = rows[0]["sm_a"]
    together = [row for row in rows if row["delay"] == 0 and row["data"] == "DRAM"]
    for same, color, label in ((True, "tab:green", f"placed with SM {anchor} by a cluster"),
                               (False, "tab:gray", "never placed with it")):  # fmt: skip
        picked = [row for row in together if row["same_gpc"] is same]
        partner_ax.bar([row["sm_b"] for row in picked], [row["second_reader_merged"] for row in picked],
                       color=color, width=0.9, label=label)  # fmt: skip
    partner_ax.set_xlabel(f"partner SM (the other reader is on SM {anchor})")
    partner_ax.set_title("share of the 2nd reader merged, data from DRAM", fontsize=10)
    partner_ax.set_ylim(0, 1.05)
    partner_ax.legend(fontsize=8, loc="center")
    swept = sorted({row["sm_b"] for row in rows if row["delay"] > 0})
    for partner in swept:
        same = next(row["same_gpc"] for row in rows if row["sm_b"] == partner)
        where = "placed with" if same else "apart from"
        for data, style in (("L2", "o-"), ("DRAM", "s--")):
            line = sorted((row["delay"], row["second_reader_merged"]) for row in rows
                          if row["sm_b"] == partner and row["data"] == data)  # fmt: skip
            label = f"SM {partner} ({where} SM {anchor}), {data}"
            color = "tab:green" if same else "tab:gray"
            delay_ax.plot([max(d, 50) for d, _ in line], [s for _, s in line], style, color=color, label=label)
    delay_ax.set_xscale("log")
    delay_ax.set_xlabel("second reader starts late by, cycles (0 drawn at 50)")
    delay_ax.set_ylim(0, 1.05)
    delay_ax.set_title("share merged against start delay", fontsize=10)
    delay_ax.legend(fontsize=7)
    return fig


TILE_ROUND_COLUMNS = (
    ("m", "M", 0), ("n", "N", 0), ("cluster_tiles", "cluster tiles", 0), ("ctas", "CTAs", 0), ("rounds", "rounds", 0),
    ("sms_busy_pct", "% SMs busy", 0), ("rows_of_c_pct", "% computed rows in C", 1),
)  # fmt: skip


def shapes_plot(rows: Sequence[Row], stage: str = "v5_fused", dtype: str = "fp16") -> Figure:
    """The `shapes` suite: TFLOP/s of a stage and cuBLAS against M (log scale), and their ratio."""
    mine = sorted((r for r in rows if r["dtype"] == dtype), key=lambda r: r["m"])
    if not mine:
        return _empty(f"no recorded {dtype} shapes")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 3.4), layout="constrained")
    rate_ax, ratio_ax = fig.subplots(1, 2)
    for name in (stage, CUBLAS):
        picked = [r for r in mine if r["stage"] == name]
        rate_ax.plot(
            [r["m"] for r in picked], [r["tflops"] for r in picked], "o-", color=_color(name), label=_short(name)
        )
    ours = [r for r in mine if r["stage"] == stage]
    ratio_ax.plot([r["m"] for r in ours], [r["x_cublas"] for r in ours], "o-", color=_color(stage))
    ratio_ax.axhline(1.0, color="black", lw=0.8)
    n, k = mine[0]["n"], mine[0]["k"]
    for ax in (rate_ax, ratio_ax):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"M (N = {n}, K = {k})")
    rate_ax.set_title(f"TFLOP/s, {dtype}", fontsize=10)
    rate_ax.legend(fontsize=8)
    ratio_ax.set_title(f"{_short(stage)} / cuBLAS", fontsize=10)
    return fig
