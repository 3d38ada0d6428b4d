"""The notebooks' figures: recorded rows in, a matplotlib Figure out.

Nothing else in the harness imports this module, so matplotlib (a dev dependency) is needed only where
figures are drawn. The rows are chosen by `tutorial.tables`, the arithmetic is `deepgemm.model`'s; each
Figure is made outside pyplot's global state: nothing to close, shown once when a notebook cell returns it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from deepgemm.model import (
    HBM_TBS,
    SWIZZLE_ROW_CHUNKS,
    arithmetic_intensity,
    column_conflict_ways,
    ridge_intensity,
    roof_tflops,
    stream_k_schedule,
    swizzled_chunk,
)
from tutorial import results, stages, timeline
from tutorial.profile import STALL_REASONS
from tutorial.stages import CUBLAS, STAGES
from tutorial.tables import (
    Row,
    Shape,
    base_stage,
    headline,
    number,
    rows_for,
    shape_of,
    stage_order,
    stall_breakdown,
    variant_key,
    variant_value,
    worker_runs,
)
from tutorial.timing import PEAK_CLOCK_MHZ, PEAK_TFLOPS


def stage_color(stage: str) -> str:
    base = base_stage(stage)
    return "black" if stage == CUBLAS else f"C{STAGES.index(base)}" if base else "grey"


def short_name(stage: str) -> str:
    """'v3_wgmma_tma' -> 'v3'; 'v4_pipeline_swizzle GROUP_M=1' -> 'v4 GROUP_M=1'; anything else as it is."""
    base = base_stage(stage)
    return base.split("_", 1)[0] + stage[len(base) :] if base else stage


def figure(width: float = 7.5, height: float = 4.0) -> tuple[Figure, Axes]:
    """A Figure outside pyplot's global state: nothing to close, shown once when a cell returns it."""
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def empty_figure(message: str) -> Figure:
    fig, ax = figure(6.0, 1.2)
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)
    return fig


def figure_source(provenance: dict) -> str:
    """What a saved figure's PNG metadata says it was drawn from."""
    return f"results/h200/progression.json, commit {provenance['commit']}, {provenance['date']}"


def progression_bars(
    rows: Sequence[Row], dtype: str = "fp16", shape: int | Shape | None = None, *, log: bool = True
) -> Figure:
    """TFLOP/s per stage at one shape (default: the first recorded): one bar per stage, cuBLAS as a line,
    the datasheet peak as a line and, on each bar, the peak at the SM clock measured while it ran."""
    chosen = headline(rows, dtype, shape)
    stage_rows = [row for row in chosen if row["stage"] != CUBLAS]
    if not stage_rows:
        return empty_figure(f"no recorded {dtype} rows")
    peak, peak_clock = PEAK_TFLOPS, PEAK_CLOCK_MHZ
    fig, ax = figure()
    x = list(range(len(stage_rows)))
    rates = [row["tflops"] for row in stage_rows]
    bars = ax.bar(x, rates, color=[stage_color(row["stage"]) for row in stage_rows], gid="stages")
    ax.bar_label(bars, labels=[f"{r:.1f}" for r in rates], padding=2, fontsize=8)
    clocked = [(i, peak * row["sm_clock_mhz"] / peak_clock) for i, row in zip(x, stage_rows) if row.get("sm_clock_mhz")]
    if clocked:
        ax.scatter(*zip(*clocked), marker="_", s=900, color="dimgrey", label="peak at the measured SM clock")
    for row in chosen:
        if row["stage"] == CUBLAS:
            ax.axhline(row["tflops"], color="black", lw=1.2, label=f"cuBLAS {row['tflops']:.1f}")
    ax.axhline(peak, color="black", ls="--", lw=0.8, label=f"datasheet peak {peak:g}")
    ax.set_xticks(x, [short_name(row["stage"]) for row in stage_rows])
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
    peak = PEAK_TFLOPS if peak_tflops is None else peak_tflops
    fig, ax = figure(7.5, 4.5)
    ridge = ridge_intensity(peak, bandwidth_tbs)
    xs = [0.1, ridge, 1e4]
    ax.plot(xs, [roof_tflops(x, peak, bandwidth_tbs) for x in xs], color="black", lw=1.5, gid="roof")
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak), textcoords="offset points", xytext=(-40, 6), fontsize=8)
    ax.text(0.12, bandwidth_tbs * 0.12 * 1.3, f"{bandwidth_tbs:g} TB/s", rotation=0, fontsize=8)
    ax.axvline(2 / (2 * bytes_per_element), color="grey", ls=":", lw=1)
    ax.text(2 / (2 * bytes_per_element) * 1.1, peak * 0.5, "no reuse:\nevery FMA loads\nits operands", fontsize=7)
    chosen = sorted(rows_for(rows, dtype=dtype), key=stage_order)
    for stage in dict.fromkeys(row["stage"] for row in chosen):
        mine = [row for row in chosen if row["stage"] == stage]
        ax.scatter(
            [arithmetic_intensity(*shape_of(row), bytes_per_element) for row in mine],
            [row["tflops"] for row in mine],
            color=stage_color(stage),
            marker="x" if stage == CUBLAS else "o",
            label=short_name(stage),
            zorder=3,
        )
    measured = [
        row for row in sorted(rows_for(profile_rows, dtype=dtype), key=stage_order)
        if number(row.get("dram_read_bytes")) and number(row.get("duration_ns"))
    ]  # fmt: skip
    if measured:
        flops = [2 * math.prod(shape_of(row)) for row in measured]
        ax.scatter(
            [f / row["dram_read_bytes"] for f, row in zip(flops, measured)],
            [f / row["duration_ns"] / 1e3 for f, row in zip(flops, measured)],
            facecolors="none",
            edgecolors=[stage_color(row["stage"]) for row in measured],
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
        return empty_figure("no recorded profile yet" if not profile_rows else "no profile rows for these stages")
    palette = colormaps["tab20"]  # one colour per reason, the same in every notebook
    fig, ax = figure(7.5, 0.9 + 0.45 * max(len(found), len(reasons) / 2))
    y = list(range(len(found)))
    left = [0.0] * len(found)
    for j, reason in enumerate(reasons):
        widths = [line[j] for line in table]
        colour = "lightgrey" if reason == "other" else palette(STALL_REASONS.index(reason) % 20)
        ax.barh(y, widths, left=left, color=colour, label=reason)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(y, [short_name(stage) for stage in found])
    ax.invert_yaxis()
    ax.set_xlabel("warps stalled per issued instruction")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return fig


def variant_plot(rows: Sequence[Row], dtype: str = "fp16", name: str = "GROUP_M") -> Figure:
    """Three panels against a setting carried in the stage name (see `variant_value`): TFLOP/s, the SM clock
    measured while it ran, and the % of the peak at that clock; one line per stage and shape."""
    chosen = [row for row in rows_for(rows, dtype=dtype) if variant_value(row["stage"], name) is not None]
    if not chosen:
        return empty_figure(f"no recorded {dtype} rows with a {name} setting")
    fig = Figure(figsize=(9.0, 3.2), layout="constrained")
    axes = fig.subplots(1, 3)
    values = sorted({variant_value(row["stage"], name) for row in chosen})
    x_of = {v: i for i, v in enumerate(values)}
    panels = (("tflops", "TFLOP/s"), ("sm_clock_mhz", "SM clock, MHz"), ("pct_peak_at_clock", "% of peak at clock"))
    lines = dict.fromkeys(variant_key(row, name) for row in chosen)
    for j, (stage, _, shape) in enumerate(lines):
        mine = sorted((row for row in chosen if variant_key(row, name)[::2] == (stage, shape)),
                      key=lambda row: variant_value(row["stage"], name))  # fmt: skip
        xs = [x_of[variant_value(row["stage"], name)] for row in mine]
        size = f"{shape[0]}^3" if len(set(shape)) == 1 else "x".join(map(str, shape))
        for ax, (key, _) in zip(axes, panels):
            ys = [number(row.get(key)) for row in mine]
            style = {"marker": "os^D"[j % 4], "ls": "-" if j % 2 == 0 else "--", "color": stage_color(stage)}
            ax.plot(xs, [float("nan") if y is None else y for y in ys], label=f"{short_name(stage)} {size}", **style)
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
        return empty_figure(f"no recorded pairs of {stage} and cuBLAS")
    fig = Figure(figsize=(9.0, 3.4), layout="constrained")
    ratio_ax, clock_ax = fig.subplots(1, 2)
    labels = []
    for i, group in enumerate(summary):
        key = (group["dtype"], group["m"], group["n"], group["k"])
        mine = [row for row in rows if (row["dtype"], row["m"], row["n"], row["k"]) == key and "pair" in row]
        ratios = [row["x_cublas"] for row in mine if row["stage"] == stage]
        ratio_ax.bar(i, group["x_cublas_median"] - 1.0, bottom=1.0, color=stage_color(stage), alpha=0.35, width=0.6)
        ratio_ax.plot([i] * len(ratios), ratios, "o", color=stage_color(stage), ms=4)
        for name, offset, marker in ((stage, -0.15, "o"), ("cublas", 0.15, "s")):
            clocks = [number(row.get("sm_clock_mhz")) or float("nan") for row in mine if row["stage"] == name]
            clock_ax.plot([i + offset] * len(clocks), clocks, marker, color=stage_color(name), ms=4,
                          label=short_name(name) if i == 0 else None)  # fmt: skip
        size = (
            f"{group['m']}^3" if group["m"] == group["n"] == group["k"] else f"{group['m']}x{group['n']}x{group['k']}"
        )
        labels.append(f"{group['dtype']}\n{size}")
    ratio_ax.axhline(1.0, color="black", lw=0.8)
    for ax in (ratio_ax, clock_ax):
        ax.set_xticks(range(len(labels)), labels)
    ratio_ax.set_title(f"{short_name(stage)} / cuBLAS per pair (bar: median)", fontsize=10)
    clock_ax.set_title("SM clock in each pair, MHz", fontsize=10)
    clock_ax.legend(fontsize=8)
    return fig


SHAPE_LINES = (  # the shape table's GPU times in CUDA graphs: record key, legend, line style
    ("graph_us", "deepgemm.gemm", "o-"),
    ("torch_graph_us", "torch.matmul", "s--"),
)
RATIO_TOP = 1.4  # the ratio axis ends here; a row above it is drawn on the edge with its value


def shapes_plot(rows: Sequence[Row], dtype: str = "fp16") -> Figure:
    """The shape table, GPU time in CUDA graphs (`graph_us`, `torch_graph_us`): left, µs against M at
    N = K = 4096 for the call and torch.matmul; right, torch's time over the call's for every row of the
    dtype against M, one line per weight (N, K): above 1, the call is faster."""
    mine = [r for r in rows if r["dtype"] == dtype]
    if not mine:
        return empty_figure(f"no recorded {dtype} shapes")
    fig = Figure(figsize=(10.0, 4.6), layout="constrained")
    time_ax, ratio_ax = fig.subplots(1, 2, width_ratios=(1, 1.4))
    sweep = sorted((r for r in mine if (r["n"], r["k"]) == (4096, 4096)), key=lambda r: r["m"])
    for key, label, style in SHAPE_LINES:
        color = stage_color(STAGES[-1]) if key == "graph_us" else stage_color(CUBLAS)
        time_ax.plot([r["m"] for r in sweep], [r[key] for r in sweep], style, color=color, label=label, ms=4)
    time_ax.set_xscale("log", base=2)
    time_ax.set_yscale("log")
    time_ax.set_xlabel("M (N = K = 4096)")
    time_ax.set_title(f"{dtype}: µs per GEMM in a CUDA graph", fontsize=10)
    time_ax.legend(fontsize=8)
    weights, above = dict.fromkeys((r["n"], r["k"]) for r in mine), 0
    for j, (n, k) in enumerate(weights):
        line = sorted((r for r in mine if (r["n"], r["k"]) == (n, k)), key=lambda r: r["m"])
        ratios = [r["torch_graph_us"] / r["graph_us"] for r in line]
        color = colormaps["tab20"](j % 20)
        ratio_ax.plot([r["m"] for r in line], [min(x, RATIO_TOP) for x in ratios], "osD^v<>"[j % 7] + "-",
                      color=color, ms=4, lw=0.8, label=f"{n} x {k}")  # fmt: skip
        for r, x in zip(line, ratios, strict=True):
            if x > RATIO_TOP:  # off the scale (a shape that takes the padded copy): its value written below
                above += 1
                ratio_ax.annotate(f"{x:.1f}", (r["m"], RATIO_TOP), xytext=(4, -10 * above),
                                  textcoords="offset points", fontsize=7, color=color)  # fmt: skip
    ratio_ax.axhline(1.0, color="black", lw=0.8)
    ratio_ax.set_xscale("log", base=2)
    ratio_ax.set_xlabel("M")
    ratio_ax.set_title("x torch.matmul in graphs (above the line: faster)", fontsize=10)
    ratio_ax.legend(title="N x K", loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7, title_fontsize=8)
    return fig


def stream_k_plot(tiles: int, slots: int, k_tiles: int, stream_k: int = 1, title: str = "") -> Figure:
    """The work each persistent worker does (`tables.worker_runs`), one lane per worker and k-tiles along the
    way: left, whole tiles (the grid trimmed to full rounds); right, stream-K. Whole tiles are grey, a shade
    per tile along the lane; the cut tiles' runs take a colour per tile; a dotted line marks the busiest
    worker's k-tiles."""
    fig = Figure(figsize=(10.0, 4.6), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True, sharey=True)
    palette = colormaps["tab20"]
    for ax, cut in zip(axes, (0, stream_k), strict=True):
        runs = worker_runs(tiles, slots, k_tiles, stream_k=cut)
        whole = tiles - (stream_k_schedule(tiles, slots, k_tiles, rounds=cut)[0] if cut else 0)
        for lane, segments in enumerate(runs):
            x = 0
            for i, (tile, begin, end) in enumerate(segments):
                color = ("0.55", "0.75")[i % 2] if tile < whole else palette((tile - whole) % 20)
                ax.broken_barh([(x, end - begin)], (lane - 0.5, 1.0), facecolors=color, edgecolor="none")
                x += end - begin
        busiest = max(sum(end - begin for _, begin, end in segments) for segments in runs)
        if len(runs) < slots:
            ax.text(busiest / 2, (len(runs) + slots) / 2, f"{slots - len(runs)} idle", ha="center", va="center")
        ax.axvline(busiest, color="black", ls=":", lw=1)
        name = f"stream-K over {cut} round{'s' if cut > 1 else ''}" if cut else "whole tiles"
        ax.set_title(f"{name}: {len(runs)} workers, the busiest {busiest} k-tiles", fontsize=9)
        ax.set_xlabel("k-tiles run, in order")
    axes[0].set_ylim(slots, -1)
    axes[0].set_ylabel("worker (SM, or cluster)")
    fig.suptitle(title or f"{tiles} tiles of {k_tiles} k-tiles on {slots} slots", fontsize=10)
    return fig


def swizzle_map(highlight_chunk: int = 0) -> Figure:
    """A 128-byte-wide tile's first 8 rows as shared memory holds them, without and with the 128-byte
    swizzle: each cell is a 16-byte chunk at its bank group (its column), labelled with the logical chunk
    it holds (`model.swizzled_chunk`). The chunk `highlight_chunk` of every row, what one 8x8 ldmatrix /
    stmatrix reads, is shaded: in one bank group without the swizzle, in eight with it."""
    fig = Figure(figsize=(9.0, 3.2), layout="constrained")
    for ax, swizzle in zip(fig.subplots(1, 2), (False, True), strict=True):
        for row in range(SWIZZLE_ROW_CHUNKS):
            for chunk in range(SWIZZLE_ROW_CHUNKS):
                group = swizzled_chunk(row, chunk, swizzle)
                shaded = chunk == highlight_chunk
                ax.add_patch(Rectangle((group, row), 1, 1, facecolor="tab:orange" if shaded else "white",
                                       edgecolor="0.6"))  # fmt: skip
                ax.text(group + 0.5, row + 0.5, str(chunk), ha="center", va="center", fontsize=8)
        ways = column_conflict_ways(highlight_chunk, swizzle)
        ax.set_xlim(0, SWIZZLE_ROW_CHUNKS)
        ax.set_ylim(SWIZZLE_ROW_CHUNKS, 0)
        ax.set_xticks([g + 0.5 for g in range(SWIZZLE_ROW_CHUNKS)], [str(g) for g in range(SWIZZLE_ROW_CHUNKS)])
        ax.set_yticks([r + 0.5 for r in range(SWIZZLE_ROW_CHUNKS)], [str(r) for r in range(SWIZZLE_ROW_CHUNKS)])
        ax.set_xlabel("bank group (4 banks, 16 bytes)")
        ax.set_ylabel("tile row")
        name = "128-byte swizzle: chunk c of row r at c ^ (r % 8)" if swizzle else "no swizzle"
        verdict = f"{ways}-way bank conflict" if ways > 1 else "no bank conflict"
        ax.set_title(f"{name}\nchunk {highlight_chunk} of 8 rows: {verdict}", fontsize=9)
    return fig


MMA_SYNC_TILE = (16, 8)  # rows x columns of C one mma.sync m16n8k16 computes (v2); wgmma's N is BLOCK_N


def stage_tiles(stage: str) -> list[tuple[str, int, int, int]]:
    """A stage's tile hierarchy from its launcher's defaults, outermost first: (level, rows, columns, how many
    of it the level above holds)."""
    cfg = stages.load(stage).DEFAULTS
    if stage == "v0_naive":
        threads = cfg.value("BLOCK_Y") * cfg.value("BLOCK_X")
        return [("CTA", cfg.value("BLOCK_Y"), cfg.value("BLOCK_X"), 1), ("thread", 1, 1, threads)]
    bm, bn = cfg.value("BLOCK_M"), cfg.value("BLOCK_N")
    levels = [("cluster", cfg.value("CLUSTER_M") * bm, bn, 1)] if stage == "v5_fused" else []
    levels.append(("CTA", bm, bn, levels[0][1] // bm if levels else 1))
    if stage == "v1_tiled":
        tm, tn = cfg.value("THREAD_M"), cfg.value("THREAD_N")
        return [*levels, ("thread", tm, tn, (bm // tm) * (bn // tn))]
    if stage == "v2_mma_sync":
        wm, wn = cfg.value("WARPS_M"), cfg.value("WARPS_N")
        im, inn = MMA_SYNC_TILE
        per_warp = (bm // wm // im) * (bn // wn // inn)
        return [*levels, ("warp", bm // wm, bn // wn, wm * wn), ("mma.sync m16n8k16", im, inn, per_warp)]
    return [*levels, ("consumer warpgroup", 64, bn, bm // 64), (f"wgmma m64n{bn}k16", 64, bn, 1)]


def tile_hierarchy(stage_list: Sequence[str] = STAGES) -> Figure:
    """Each stage's output tiles, all panels at one scale, one inside the other: cluster, CTA, warp or
    warpgroup, and the thread's or the instruction's tile (shaded), from the launchers' defaults
    (`stage_tiles`)."""
    every = {stage: stage_tiles(stage) for stage in stage_list}
    height = max(levels[0][1] for levels in every.values())
    width = max(levels[0][2] for levels in every.values())
    fig = Figure(figsize=(2.3 * len(stage_list), 3.4), layout="constrained")
    for ax, (stage, levels) in zip(fig.subplots(1, len(stage_list)), every.items(), strict=True):
        _, rows, cols, _ = levels[0]
        ax.add_patch(Rectangle((0, 0), cols, rows, facecolor="none", edgecolor="black", lw=1.5))
        for depth, (_, r, c, _) in enumerate(levels[1:], start=1):
            inner = depth == len(levels) - 1
            ax.add_patch(Rectangle((0, 0), c, r, facecolor=stage_color(stage) if inner else "none",
                                   alpha=0.6 if inner else 1.0, edgecolor=f"C{depth}", lw=1.2))  # fmt: skip
        ax.set_xlim(0, width)
        ax.set_ylim(height, 0)
        ax.set_aspect("equal")
        ax.set_xticks([0, width // 2, width])
        ax.set_yticks([0, height // 2, height])
        ax.tick_params(labelsize=7)
        caption = "\n".join(f"{name} {r}x{c}" + (f" (x{n})" if n > 1 else "") for name, r, c, n in levels)
        ax.set_title(f"{short_name(stage)}\n{caption}", fontsize=6.5, loc="left")
    return fig


SPAN_COLORS = {"waiting": "0.8", "working": "tab:blue", "between": "tab:cyan", "epilogue": "tab:red",
               "issued": "tab:orange", "in use": "tab:green"}  # fmt: skip


def pipeline_timeline(rows: Sequence[Row], cta: int = 0, cycles: tuple[int, int] | None = None) -> Figure:
    """One CTA's timeline (`tutorial.timeline` rows of one stage and run): a lane per role, its waits in grey
    and its work in colour, then a lane per stage of the mbarrier ring, issued (TMA issued, not yet taken
    by consumer 0) and in use (taken, not yet handed back by both consumers). `cycles`: the first and last
    clock cycle drawn."""
    mine = [row for row in rows if row["cta"] == cta]
    if not mine:
        return empty_figure(f"no timeline stamps for CTA {cta}")
    ring = timeline.ring_spans(mine, cta)
    stages_seen = sorted({span["stage"] for span in ring})
    lanes = [(row["role"], timeline.role_spans(row["events"])) for row in mine]
    lanes += [(f"stage {s}", [span for span in ring if span["stage"] == s]) for s in stages_seen]
    fig, ax = figure(9.0, 0.45 * len(lanes) + 1.2)
    for y, (_, spans) in enumerate(lanes):
        for kind in SPAN_COLORS:
            bars = [(s["start"], s["end"] - s["start"]) for s in spans if s["kind"] == kind]
            if bars:
                ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=SPAN_COLORS[kind], label=kind)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(unique),
              fontsize=8, frameon=False)  # fmt: skip
    ax.set_yticks(range(len(lanes)), [name for name, _ in lanes])
    ax.invert_yaxis()
    if cycles is not None:
        ax.set_xlim(*cycles)
    ax.set_xlabel(f"SM clock cycles since CTA {cta}'s first stamp")
    first = mine[0]
    ax.set_title(f"{first.get('stage', '')} {first.get('dtype', '')}, CTA {cta}: who waits, and the stages' ring",
                 fontsize=9)  # fmt: skip
    return fig
