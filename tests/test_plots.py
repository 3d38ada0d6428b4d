"""deepgemm.plots on a CPU: the pure helpers, and that each plot draws one mark per row it is given.

The rows below are SYNTHETIC, made up here to exercise the code; no number in them was measured.
"""

from __future__ import annotations

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from deepgemm import plots, results  # noqa: E402
from deepgemm.profile import METRICS  # noqa: E402
from deepgemm.stages import STAGES  # noqa: E402

FAKE_TFLOPS = dict(zip((*STAGES, "cublas"), (1.0, 10.0, 100.0, 200.0, 300.0, 400.0, 350.0)))


def fake_bench_rows() -> list[dict]:
    """SYNTHETIC bench rows: every stage and cuBLAS, two dtypes, two shapes (28 rows)."""
    rows = []
    for size in (256, 512):
        for dtype in ("fp16", "bf16"):
            for stage, rate in FAKE_TFLOPS.items():
                rows.append({"stage": stage, "dtype": dtype, "m": size, "n": size, "k": size, "tflops": rate,
                             "sm_clock_mhz": 1500.0, "pct_peak": None, "x_prev": None})  # fmt: skip
    return rows


def fake_profile_rows() -> list[dict]:
    """SYNTHETIC profile rows for three stages at one shape; every metric None unless set."""
    rows = []
    for i, stage in enumerate(("v0_naive", "v2_mma_sync", "v4_pipeline_swizzle")):
        row = {"stage": stage, "dtype": "fp16", "m": 256, "n": 256, "k": 256, **dict.fromkeys(METRICS)}
        row.update(stall_long_scoreboard=5.0 - i, stall_barrier=1.0 + i, stall_gmma=float(i), stall_wait=0.25)
        row.update(stall_selected=1.0, stall_misc=0.01)
        row.update(bank_conflicts_ld=float(10 * i), wavefronts_shared_ld=1000.0, bank_conflicts_gmma=None)
        row.update(dram_read_bytes=1e6, duration_ns=1e5)
        rows.append(row)
    return rows


def count_points(fig: Figure) -> int:
    return sum(len(c.get_offsets()) for ax in fig.axes for c in ax.collections if isinstance(c, PathCollection))


def count_bars(fig: Figure) -> int:
    return sum(isinstance(p, Rectangle) for ax in fig.axes for p in ax.patches)


def test_arithmetic_intensity_of_square_gemm_is_n_over_3_for_two_byte_operands():
    # 2 n^3 FLOP over 3 n^2 elements of 2 bytes (A, B read once, C written once)
    assert plots.arithmetic_intensity(4096, 4096, 4096) == pytest.approx(4096 / 3)
    # inputs only: the seed's 2048 FLOP/byte at 4096^3
    assert plots.arithmetic_intensity(4096, 4096, 4096, out_bytes_per_element=0) == pytest.approx(2048)
    # an FP32 C costs more bytes, so a lower intensity
    assert plots.arithmetic_intensity(64, 64, 64, 2, 4) < plots.arithmetic_intensity(64, 64, 64)


def test_naive_traffic_rereads_b_m_times_and_tiles_divide_it():
    m, n, k = 512, 256, 128
    assert plots.operand_traffic_bytes(m, n, k) == 2 * m * n * k * 2  # one A and one B element per FMA
    # B (k x n) is read once per row tile of C: m / block_m times; A once per column tile
    assert plots.operand_traffic_bytes(m, n, k, 128, 64) == (m * k * (n // 64) + k * n * (m // 128)) * 2
    # a tile that does not divide the matrix still reads its partial rows and columns
    assert plots.operand_traffic_bytes(100, 100, 8, 64, 64, 1) == (100 * 8 * 2 + 8 * 100 * 2)


def test_grouped_tile_order_walks_group_columns_and_covers_every_tile_once():
    tiles_m, tiles_n = 5, 3  # a last group shorter than GROUP_M
    order = [plots.grouped_tile(i, tiles_m, tiles_n, 2) for i in range(tiles_m * tiles_n)]
    assert order[:4] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert order[-3:] == [(4, 0), (4, 1), (4, 2)]
    assert sorted(order) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)]
    assert [plots.grouped_tile(i, 2, 3, 1) for i in range(4)] == [(0, 0), (0, 1), (0, 2), (1, 0)]


def test_grouped_order_reads_less_per_wave_than_row_major_on_wide_problems():
    # 8 tiles running together on a 16 x 32 grid of 1 x 1 tiles, k = 1, 1-byte elements:
    # row-major touches 1 row and 8 columns, groups of 4 rows touch 4 rows and 2 columns
    assert plots.wave_operand_bytes(16, 32, 1, 1, 1, 8, 1, 1) == 1 + 8
    assert plots.wave_operand_bytes(16, 32, 1, 1, 1, 8, 4, 1) == 4 + 2


def test_roof_is_memory_bound_below_the_ridge_and_flat_above():
    ridge = plots.ridge_intensity(989.4, 4.8)
    assert ridge == pytest.approx(989.4 / 4.8)
    assert plots.roof_tflops(ridge / 2, 989.4, 4.8) == pytest.approx(989.4 / 2)
    assert plots.roof_tflops(ridge * 10, 989.4, 4.8) == 989.4


def test_rows_for_filters_by_short_or_full_stage_dtype_and_shape():
    rows = fake_bench_rows()
    assert len(plots.rows_for(rows, dtype="bf16")) == 14
    assert [r["stage"] for r in plots.rows_for(rows, "v3", "fp16", 512)] == ["v3_wgmma_tma"]
    assert len(plots.rows_for(rows, ["v0_naive", "cublas"], shape=(256, 256, 256))) == 4
    assert plots.rows_for(rows, shape=1024) == []
    with pytest.raises(ValueError, match="unknown stage"):
        plots.rows_for(rows, "v9")


def test_pick_names_the_missing_row():
    rows = fake_bench_rows()
    assert plots.pick(rows, "v5", "fp16", 256)["tflops"] == FAKE_TFLOPS["v5_fused"]
    with pytest.raises(LookupError, match="v5"):
        plots.pick(rows, "v5", "fp32")


def test_shapes_keep_recorded_order():
    assert plots.shapes(reversed(fake_bench_rows())) == [(512, 512, 512), (256, 256, 256)]


def test_stall_breakdown_keeps_top_reasons_sums_the_rest_and_skips_selected():
    stages, reasons, table = plots.stall_breakdown(fake_profile_rows(), top=2)
    assert stages == ["v0_naive", "v2_mma_sync", "v4_pipeline_swizzle"]
    assert "selected" not in reasons and reasons[-1] == "other"
    assert reasons[:-1] == ["long_scoreboard", "barrier"]  # the union of each stage's top two, largest first
    # every stage's bar adds up to all its stall reasons but 'selected'
    assert [sum(line) for line in table] == pytest.approx([6.26, 7.26, 8.26])


def test_bank_conflict_table_gives_share_of_wavefronts_and_none_where_missing():
    table = plots.bank_conflict_table(fake_profile_rows(), ["v2", "v4"])
    assert [row["stage"] for row in table] == ["v2_mma_sync", "v4_pipeline_swizzle"]
    assert table[1]["ld"] == 20.0 and table[1]["ld_pct"] == pytest.approx(2.0)
    assert table[0]["gmma"] is None and table[0]["gmma_pct"] is None
    text = results.format_table(table, plots.BANK_CONFLICT_COLUMNS)
    assert len(text.splitlines()) == 2 + len(table)


def test_profile_summary_converts_units():
    summary = plots.profile_summary(fake_profile_rows(), ["v0"])
    assert summary[0]["duration_us"] == pytest.approx(100.0) and summary[0]["dram_read_mb"] == pytest.approx(1.0)
    assert summary[0]["smem_kb"] is None


def test_load_rows_says_when_nothing_is_recorded(tmp_path):
    rows, note = plots.load_rows("profile", tmp_path)
    assert rows == [] and note.startswith("no recorded profile yet")
    results.save("profile", fake_profile_rows(), {"gpu": "FAKE", "date": "d", "commit": "c" * 40, "command": "x"},
                 tmp_path)  # fmt: skip
    rows, note = plots.load_rows("profile", tmp_path)
    assert len(rows) == 3 and "FAKE" in note


def test_diff_excerpt_shows_only_lines_near_the_keyword():
    text = plots.diff_excerpt("v4", "setmaxnreg", context=0, limit=1000)
    changed = [line for line in text.splitlines() if line[:1] in "+-"]
    assert changed and all("setmaxnreg" in line.lower() for line in changed)


def test_progression_bars_draws_one_bar_per_stage_and_a_cublas_line():
    fig = plots.progression_bars(fake_bench_rows(), "bf16", 512)
    assert isinstance(fig, Figure)
    assert count_bars(fig) == len(STAGES)
    assert [b.get_height() for b in fig.axes[0].patches] == [FAKE_TFLOPS[s] for s in STAGES]
    assert any(line.get_ydata()[0] == FAKE_TFLOPS["cublas"] for line in fig.axes[0].lines)


def test_roofline_draws_one_point_per_row_and_per_profiled_launch():
    rows, profile = fake_bench_rows(), fake_profile_rows()
    fig = plots.roofline(rows, "fp16", profile_rows=profile, peak_tflops=989.4)
    assert count_points(fig) == len(plots.rows_for(rows, dtype="fp16")) + len(profile)
    hollow = next(c for c in fig.axes[0].collections if c.get_label().startswith("profiled"))
    x, y = hollow.get_offsets()[0]
    assert x == pytest.approx(2 * 256**3 / 1e6) and y == pytest.approx(2 * 256**3 / 1e5 / 1e3)


def test_stall_bars_stack_one_segment_per_reason_and_stage():
    fig = plots.stall_bars(fake_profile_rows(), ["v0", "v4"], top=1)
    _, reasons, _ = plots.stall_breakdown(fake_profile_rows(), ["v0", "v4"], top=1)
    assert count_bars(fig) == 2 * len(reasons)


def test_plots_of_no_rows_say_so_instead_of_failing():
    fig = plots.stall_bars([])
    assert count_bars(fig) == 0
    assert any("no recorded profile yet" in t.get_text() for t in fig.axes[0].texts)
    assert count_bars(plots.progression_bars([], "fp16")) == 0


def fake_variant_rows() -> list[dict]:
    """SYNTHETIC GROUP_M rows (the raster and v5_group_m suites' naming) and a cuBLAS row beside them."""
    rows = []
    for stage, group, rate, clock in (
        ("v5_fused", 8, 600.0, 1500.0),
        ("v5_fused", 1, 540.0, 1350.0),
        ("v5_fused", 16, 606.0, 1500.0),
        ("v4_pipeline_swizzle", 1, 500.0, None),
    ):
        rows.append(
            {
                "stage": f"{stage} GROUP_M={group}",
                "dtype": "fp16",
                "m": 256,
                "n": 256,
                "k": 256,
                "tflops": rate,
                "sm_clock_mhz": clock,
                "pct_peak_at_clock": 80.0,
            }
        )
    rows.append({"stage": "cublas", "dtype": "fp16", "m": 256, "n": 256, "k": 256, "tflops": 650.0})
    return rows


def test_variant_value_reads_the_setting_from_the_stage_name():
    assert plots.variant_value("v5_fused GROUP_M=16") == 16
    assert plots.variant_value("v4_pipeline_swizzle GROUP_M=1 extra") == 1
    assert plots.variant_value("v5_fused") is None and plots.variant_value("cublas") is None
    assert plots.variant_value("v5_fused XGROUP_M=3") is None


def test_variant_table_gives_ratios_to_the_baseline_of_the_same_stage():
    table = plots.variant_table(fake_variant_rows(), 8, dtype="fp16")
    assert [row["stage"] for row in table] == [r["stage"] for r in fake_variant_rows()[:4]]  # cuBLAS left out
    by_stage = {row["stage"]: row for row in table}
    assert by_stage["v5_fused GROUP_M=1"]["x_tflops"] == pytest.approx(0.9)
    assert by_stage["v5_fused GROUP_M=1"]["x_clock"] == pytest.approx(0.9)
    assert by_stage["v5_fused GROUP_M=1"]["x_at_clock"] == pytest.approx(1.0)
    assert by_stage["v5_fused GROUP_M=8"]["x_tflops"] == pytest.approx(1.0)
    assert by_stage["v4_pipeline_swizzle GROUP_M=1"]["x_tflops"] is None  # no v4 baseline recorded
    assert len(results.format_table(table, plots.VARIANT_COLUMNS).splitlines()) == 2 + len(table)


def test_epilogue_table_pairs_plain_fused_cublaslt_and_cublas():
    base = {"dtype": "bf16", "m": 128, "n": 128, "k": 128}
    rows = [
        {**base, "stage": s, "tflops": t}
        for s, t in (
            ("v5_fused", 500.0),
            ("v5_fused +bias +gelu_tanh", 450.0),
            ("cublaslt +bias +gelu", 480.0),
            ("cublas", 600.0),
        )
    ]
    (line,) = plots.epilogue_table(rows)
    assert (line["plain"], line["fused"], line["lt_fused"], line["cublas"]) == (500.0, 450.0, 480.0, 600.0)
    assert line["fused_x_plain"] == pytest.approx(0.9) and line["fused_x_lt"] == pytest.approx(450 / 480)
    assert line["lt_x_cublas"] == pytest.approx(0.8)
    (partial,) = plots.epilogue_table(rows[:1])
    assert partial["fused"] is None and partial["fused_x_plain"] is None


def test_variant_plot_draws_one_point_per_setting_in_each_panel():
    rows = fake_variant_rows()
    fig = plots.variant_plot(rows, "fp16")
    assert len(fig.axes) == 3
    for ax in fig.axes:
        assert sum(len(line.get_xdata()) for line in ax.lines) == 4  # the four GROUP_M rows, cuBLAS left out
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "8", "16"]
    assert count_points(plots.variant_plot(rows, "bf16")) == 0 and not plots.variant_plot(rows, "bf16").axes[0].lines


def test_shipped_rows_finds_v5_as_it_ships_in_every_suite():
    from deepgemm import stages

    defaults = stages.load("v5").DEFAULTS.extra
    names = ["v5_fused", f"v5_fused GROUP_M={defaults['GROUP_M']}", f"v5_fused CLUSTER_M={defaults['CLUSTER_M']}"]
    others = ["v5_fused GROUP_M=1", "v5_fused CLUSTER_M=1", "v4_pipeline_swizzle", "cublas"]
    rows = [{"stage": s} for s in names + others]
    assert [r["stage"] for r in plots.shipped_rows(rows)] == names


def _pairs_rows(ratios: list[float]) -> list[dict]:
    """SYNTHETIC pairs rows at 4096^3 fp16: cuBLAS at 1500 MHz, v5 at 1470, v5's ratio as given."""
    rows = []
    for pair, ratio in enumerate(ratios):
        base = {"dtype": "fp16", "m": 4096, "n": 4096, "k": 4096, "pair": pair}
        rows += [
            {**base, "stage": "cublas", "x_cublas": 1.0, "sm_clock_mhz": 1500.0},
            {**base, "stage": "v5_fused", "x_cublas": ratio, "sm_clock_mhz": 1470.0},
        ]
    return rows


def test_pairs_plot_shows_every_pair_its_median_and_both_clocks():
    ratios = [0.98, 0.99, 1.01]
    fig = plots.pairs_plot(_pairs_rows(ratios))
    ratio_ax, clock_ax = fig.axes
    assert sorted(y for line in ratio_ax.lines for y in line.get_ydata() if y != 1.0) == ratios
    bar = next(p for p in ratio_ax.patches if isinstance(p, Rectangle))
    assert bar.get_y() + bar.get_height() == pytest.approx(0.99)  # the median, drawn up from 1.0
    clocks = sorted(y for line in clock_ax.lines for y in line.get_ydata())
    assert clocks == [1470.0] * 3 + [1500.0] * 3


def test_pairs_plot_without_pairs_says_so():
    fig = plots.pairs_plot([{"stage": "v5_fused", "dtype": "fp16", "m": 1, "n": 1, "k": 1, "x_cublas": 1.0}])
    assert any("no recorded pairs" in t.get_text() for t in fig.axes[0].texts)


def _coalescer_rows() -> list[dict]:
    """As the probe plans them: every partner at delay 0, then a delay sweep for SM 1; in L2 and DRAM."""
    rows = []
    for data, late_share in (("L2", 0.0), ("DRAM", 0.8)):
        for sm, same in ((1, True), (2, False), (16, True)):
            rows.append({"sm_a": 0, "sm_b": sm, "delay": 0, "data": data, "same_gpc": same,
                         "second_reader_merged": (1.0 if same else 0.0) if data == "DRAM" else 0.5})  # fmt: skip
        rows.append({"sm_a": 0, "sm_b": 1, "delay": 200, "data": data, "same_gpc": True,
                     "second_reader_merged": late_share})  # fmt: skip
    return rows


def test_coalescer_plot_shows_every_partner_and_the_delay_sweeps():
    fig = plots.coalescer_plot(_coalescer_rows())
    partner_ax, delay_ax = fig.axes
    heights = sorted(p.get_height() for p in partner_ax.patches if isinstance(p, Rectangle))
    assert heights == [0.0, 1.0, 1.0]
    assert sorted(tuple(line.get_ydata()) for line in delay_ax.lines) == [(0.5, 0.0), (1.0, 0.8)]


def test_coalescer_plot_without_a_record_says_so():
    assert any("no recorded coalescer" in t.get_text() for t in plots.coalescer_plot([]).axes[0].texts)


def test_tile_rounds_say_how_v5_covers_skinny_and_square_outputs():
    one_row = plots.tile_rounds(1, 4096, 128, 256, 2, 132)
    assert (one_row["cluster_tiles"], one_row["ctas"], one_row["rounds"]) == (16, 32, 1)
    assert one_row["rows_of_c_pct"] == pytest.approx(100 / 256)  # 1 row of C in a 256-row cluster tile
    square = plots.tile_rounds(4096, 4096, 128, 256, 2, 132)
    assert (square["cluster_tiles"], square["ctas"], square["rounds"]) == (256, 128, 4)
    assert square["rows_of_c_pct"] == 100.0
