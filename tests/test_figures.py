"""tutorial.figures on a CPU: each figure draws one mark per row it is given (SYNTHETIC rows)."""

from __future__ import annotations

import itertools

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from fake_rows import FAKE_TFLOPS, fake_bench_rows, fake_profile_rows, fake_variant_rows, pairs_rows  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from tutorial import figures, tables  # noqa: E402
from tutorial.stages import STAGES  # noqa: E402


def count_points(fig: Figure) -> int:
    return sum(len(c.get_offsets()) for ax in fig.axes for c in ax.collections if isinstance(c, PathCollection))


def count_bars(fig: Figure) -> int:
    return sum(isinstance(p, Rectangle) for ax in fig.axes for p in ax.patches)


def test_progression_bars_draws_one_bar_per_stage_and_a_cublas_line():
    fig = figures.progression_bars(fake_bench_rows(), "bf16", 512)
    assert isinstance(fig, Figure)
    assert count_bars(fig) == len(STAGES)
    assert [b.get_height() for b in fig.axes[0].patches] == [FAKE_TFLOPS[s] for s in STAGES]
    assert any(line.get_ydata()[0] == FAKE_TFLOPS["cublas"] for line in fig.axes[0].lines)


def test_roofline_draws_one_point_per_row_and_per_profiled_launch():
    rows, profile = fake_bench_rows(), fake_profile_rows()
    fig = figures.roofline(rows, "fp16", profile_rows=profile, peak_tflops=989.4)
    assert count_points(fig) == len(tables.rows_for(rows, dtype="fp16")) + len(profile)
    hollow = next(c for c in fig.axes[0].collections if c.get_label().startswith("profiled"))
    x, y = hollow.get_offsets()[0]
    assert x == pytest.approx(2 * 256**3 / 1e6) and y == pytest.approx(2 * 256**3 / 1e5 / 1e3)


def test_stall_bars_stack_one_segment_per_reason_and_stage():
    fig = figures.stall_bars(fake_profile_rows(), ["v0", "v4"], top=1)
    _, reasons, _ = tables.stall_breakdown(fake_profile_rows(), ["v0", "v4"], top=1)
    assert count_bars(fig) == 2 * len(reasons)


def test_plots_of_no_rows_say_so_instead_of_failing():
    fig = figures.stall_bars([])
    assert count_bars(fig) == 0
    assert any("no recorded profile yet" in t.get_text() for t in fig.axes[0].texts)
    assert count_bars(figures.progression_bars([], "fp16")) == 0


def test_variant_plot_draws_one_point_per_setting_in_each_panel():
    rows = fake_variant_rows()
    fig = figures.variant_plot(rows, "fp16")
    assert len(fig.axes) == 3
    for ax in fig.axes:
        assert sum(len(line.get_xdata()) for line in ax.lines) == 4  # the four GROUP_M rows, cuBLAS left out
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "8", "16"]
    empty = figures.variant_plot(rows, "bf16")
    assert count_points(empty) == 0 and not empty.axes[0].lines


def test_pairs_plot_shows_every_pair_its_median_and_both_clocks():
    ratios = [0.98, 0.99, 1.01]
    fig = figures.pairs_plot(pairs_rows(ratios))
    ratio_ax, clock_ax = fig.axes
    assert sorted(y for line in ratio_ax.lines for y in line.get_ydata() if y != 1.0) == ratios
    bar = next(p for p in ratio_ax.patches if isinstance(p, Rectangle))
    assert bar.get_y() + bar.get_height() == pytest.approx(0.99)  # the median, drawn up from 1.0
    clocks = sorted(y for line in clock_ax.lines for y in line.get_ydata())
    assert clocks == [1470.0] * 3 + [1500.0] * 3


def test_pairs_plot_without_pairs_says_so():
    fig = figures.pairs_plot([{"stage": "v5_fused", "dtype": "fp16", "m": 1, "n": 1, "k": 1, "x_cublas": 1.0}])
    assert any("no recorded pairs" in t.get_text() for t in fig.axes[0].texts)


def test_swizzle_map_shades_one_column_without_the_swizzle_and_a_diagonal_with_it():
    fig = figures.swizzle_map(highlight_chunk=0)
    plain, swizzled = fig.axes
    expected = ((plain, [0] * 8, "8-way bank conflict"), (swizzled, list(range(8)), "no bank conflict"))
    for ax, expected_groups, ways in expected:
        cells = [p for p in ax.patches if isinstance(p, Rectangle)]
        assert len(cells) == 64
        shaded = sorted((p.get_y(), p.get_x()) for p in cells if p.get_facecolor()[:3] != (1.0, 1.0, 1.0))
        assert [int(x) for _, x in shaded] == expected_groups
        assert ways in ax.get_title()


def test_each_stage_s_tiles_fill_the_tile_above_them_exactly():
    """The hierarchy drawn from the launchers' defaults is consistent: each level's tiles, as many as it
    says, cover the level above (a warp grid the CTA, mma tiles the warp, the CTAs a v5 cluster)."""
    for stage in STAGES:
        levels = figures.stage_tiles(stage)
        for (_, rows, cols, _), (name, r, c, count) in itertools.pairwise(levels):
            assert count * r * c == rows * cols, (stage, name)
    assert figures.stage_tiles("v2_mma_sync")[-1][:3] == ("mma.sync m16n8k16", 16, 8)
    assert figures.stage_tiles("v5_fused")[0][:3] == ("cluster", 256, 256)
    assert len(figures.tile_hierarchy().axes) == len(STAGES)


def test_stream_k_plot_draws_every_segment_of_every_worker_in_both_panels():
    fig = figures.stream_k_plot(19, 8, 5)
    whole, cut = fig.axes
    for ax, runs in ((whole, tables.worker_runs(19, 8, 5)), (cut, tables.worker_runs(19, 8, 5, stream_k=1))):
        assert len(ax.collections) == sum(len(segments) for segments in runs)
        busiest = max(sum(end - begin for _, begin, end in segments) for segments in runs)
        assert f"the busiest {busiest} k-tiles" in ax.get_title()
    assert any(t.get_text() == "1 idle" for t in whole.texts)  # 19 tiles take 3 rounds on 8 slots or on 7


def test_shapes_plot_reads_only_the_graph_times():
    """SYNTHETIC rows with nothing but the shape and the two graph times: one point per row of the dtype on
    the right, one per M of the N = K = 4096 sweep on the left, and a ratio off the scale written beside."""
    rows = [{"dtype": "fp16", "m": m, "n": n, "k": 4096, "graph_us": 10.0, "torch_graph_us": t}
            for m, n, t in ((1, 4096, 11.0), (64, 4096, 9.0), (1, 2048, 10.0), (4096, 2048, 30.0))]  # fmt: skip
    fig = figures.shapes_plot([*rows, {**rows[0], "dtype": "bf16"}], "fp16")
    time_ax, ratio_ax = fig.axes
    assert [list(line.get_xdata()) for line in time_ax.lines] == [[1, 64], [1, 64]]
    plotted = sorted(y for line in ratio_ax.lines if not line.get_label().startswith("_") for y in line.get_ydata())
    assert plotted == pytest.approx([0.9, 1.0, 1.1, figures.RATIO_TOP])
    assert [t.get_text() for t in ratio_ax.texts] == ["3.0"]
    assert count_bars(figures.shapes_plot(rows, "bf16")) == 0
