"""tutorial.tables and tutorial.diff on a CPU: rows selected and tables built from SYNTHETIC rows."""

from __future__ import annotations

import math

import pytest
from fake_rows import FAKE_TFLOPS, fake_bench_rows, fake_profile_rows, fake_variant_rows

from tutorial import diff, results, tables


def test_rows_for_filters_by_short_or_full_stage_dtype_and_shape():
    rows = fake_bench_rows()
    assert len(tables.rows_for(rows, dtype="bf16")) == 14
    assert [r["stage"] for r in tables.rows_for(rows, "v3", "fp16", 512)] == ["v3_wgmma_tma"]
    assert len(tables.rows_for(rows, ["v0_naive", "cublas"], shape=(256, 256, 256))) == 4
    assert tables.rows_for(rows, shape=1024) == []
    with pytest.raises(ValueError, match="unknown stage"):
        tables.rows_for(rows, "v9")


def test_pick_names_the_missing_row():
    rows = fake_bench_rows()
    assert tables.pick(rows, "v5", "fp16", 256)["tflops"] == FAKE_TFLOPS["v5_fused"]
    with pytest.raises(LookupError, match="v5"):
        tables.pick(rows, "v5", "fp32")


def test_shapes_keep_recorded_order():
    assert tables.shapes(reversed(fake_bench_rows())) == [(512, 512, 512), (256, 256, 256)]


def test_stall_breakdown_keeps_top_reasons_sums_the_rest_and_skips_selected():
    stages, reasons, table = tables.stall_breakdown(fake_profile_rows(), top=2)
    assert stages == ["v0_naive", "v2_mma_sync", "v4_pipeline_swizzle"]
    assert "selected" not in reasons and reasons[-1] == "other"
    assert reasons[:-1] == ["long_scoreboard", "barrier"]  # the union of each stage's top two, largest first
    # every stage's bar adds up to all its stall reasons but 'selected'
    assert [sum(line) for line in table] == pytest.approx([6.26, 7.26, 8.26])


def test_bank_conflict_table_gives_share_of_wavefronts_and_none_where_missing():
    table = tables.bank_conflict_table(fake_profile_rows(), ["v2", "v4"])
    assert [row["stage"] for row in table] == ["v2_mma_sync", "v4_pipeline_swizzle"]
    assert table[1]["ld"] == 20.0 and table[1]["ld_pct"] == pytest.approx(2.0)
    assert table[0]["gmma"] is None and table[0]["gmma_pct"] is None
    text = results.format_table(table, tables.BANK_CONFLICT_COLUMNS)
    assert len(text.splitlines()) == 2 + len(table)


def test_profile_summary_converts_units():
    summary = tables.profile_summary(fake_profile_rows(), ["v0"])
    assert summary[0]["duration_us"] == pytest.approx(100.0) and summary[0]["dram_read_mb"] == pytest.approx(1.0)
    assert summary[0]["smem_kb"] is None


def test_load_rows_says_when_nothing_is_recorded(tmp_path):
    rows, note = tables.load_rows("profile", tmp_path)
    assert rows == [] and note.startswith("no recorded profile yet")
    results.save("profile", fake_profile_rows(), {"gpu": "FAKE", "date": "d", "commit": "c" * 40, "command": "x"},
                 tmp_path)  # fmt: skip
    rows, note = tables.load_rows("profile", tmp_path)
    assert len(rows) == 3 and "FAKE" in note


def test_diff_excerpt_shows_only_lines_near_the_keyword():
    text = diff.diff_excerpt("v4", "setmaxnreg", context=0, limit=1000)
    changed = [line for line in text.splitlines() if line[:1] in "+-"]
    assert changed and all("setmaxnreg" in line.lower() for line in changed)


def test_variant_value_reads_the_setting_from_the_stage_name():
    assert tables.variant_value("v5_fused GROUP_M=16") == 16
    assert tables.variant_value("v4_pipeline_swizzle GROUP_M=1 extra") == 1
    assert tables.variant_value("v5_fused") is None and tables.variant_value("cublas") is None
    assert tables.variant_value("v5_fused XGROUP_M=3") is None


def test_variant_table_gives_ratios_to_the_baseline_of_the_same_stage():
    table = tables.variant_table(fake_variant_rows(), 8, dtype="fp16")
    assert [row["stage"] for row in table] == [r["stage"] for r in fake_variant_rows()[:4]]  # cuBLAS left out
    by_stage = {row["stage"]: row for row in table}
    assert by_stage["v5_fused GROUP_M=1"]["x_tflops"] == pytest.approx(0.9)
    assert by_stage["v5_fused GROUP_M=1"]["x_clock"] == pytest.approx(0.9)
    assert by_stage["v5_fused GROUP_M=1"]["x_at_clock"] == pytest.approx(1.0)
    assert by_stage["v5_fused GROUP_M=8"]["x_tflops"] == pytest.approx(1.0)
    assert by_stage["v4_pipeline_swizzle GROUP_M=1"]["x_tflops"] is None  # no v4 baseline recorded
    assert len(results.format_table(table, tables.VARIANT_COLUMNS).splitlines()) == 2 + len(table)


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
    (line,) = tables.epilogue_table(rows)
    assert (line["plain"], line["fused"], line["lt_fused"], line["cublas"]) == (500.0, 450.0, 480.0, 600.0)
    assert line["fused_x_plain"] == pytest.approx(0.9) and line["fused_x_lt"] == pytest.approx(450 / 480)
    assert line["lt_x_cublas"] == pytest.approx(0.8)
    (partial,) = tables.epilogue_table(rows[:1])
    assert partial["fused"] is None and partial["fused_x_plain"] is None


def test_shipped_rows_finds_v5_as_it_ships_in_every_suite():
    from tutorial import stages

    defaults = stages.load("v5").DEFAULTS.extra
    names = ["v5_fused", f"v5_fused GROUP_M={defaults['GROUP_M']}", f"v5_fused CLUSTER_M={defaults['CLUSTER_M']}"]
    others = ["v5_fused GROUP_M=1", "v5_fused CLUSTER_M=1", "v4_pipeline_swizzle", "cublas"]
    rows = [{"stage": s} for s in names + others]
    assert [r["stage"] for r in tables.shipped_rows(rows)] == names


def test_the_call_summary_takes_medians_per_shape_and_the_range_of_x_torch():
    from tutorial.tables import call_summary

    def row(m: int, x: float, host: float) -> dict:
        return {"dtype": "fp16", "m": m, "n": 64, "k": 64, "x_torch": x, "host_us": host, "torch_host_us": 12.0,
                "call_us": 10.0, "torch_us": 10.0 * x}  # fmt: skip

    summary = call_summary([row(1, 0.9, 14.0), row(1, 1.1, 30.0), row(1, 1.0, 15.0), row(2, 1.2, 13.0)])
    assert [(s["m"], s["x_torch_min"], s["x_torch"], s["x_torch_max"], s["host_us"]) for s in summary] == [
        (1, 0.9, 1.0, 1.1, 15.0),
        (2, 1.2, 1.2, 1.2, 13.0),
    ]


# ---- notebook 07's tables: the library kernel's tiles and schedules (pure arithmetic), SYNTHETIC sweep rows ----


def test_token_tiles_count_the_rows_each_way_computes_for_777_tokens():
    ways = {(w["orientation"], w["width"]): w for w in tables.token_tiles(777)}
    assert (ways["plain", 128]["tiles"], ways["plain", 128]["rows"]) == (7, 896)
    assert (ways["swapped", 200]["tiles"], ways["swapped", 200]["rows"]) == (4, 800)
    for way in ways.values():  # every way covers the tokens, and its last tile is not empty
        assert way["rows"] >= 777 > way["rows"] - way["width"]
        assert way["rows_of_c_pct"] == pytest.approx(100 * 777 / way["rows"])
    assert all(width % 8 == 0 for orientation, width in ways if orientation == "swapped")


@pytest.mark.parametrize("schedule", [{}, {"stream_k": 1}, {"stream_k": 2}, {"split_k": 3}])
@pytest.mark.parametrize("tiles, slots, k_tiles", [(288, 132, 112), (19, 8, 5), (7, 16, 64), (16, 8, 10)])
def test_worker_runs_run_every_k_tile_of_every_tile_once(tiles, slots, k_tiles, schedule):
    runs = tables.worker_runs(tiles, slots, k_tiles, **schedule)
    assert len(runs) <= slots
    done = sorted((tile, k) for segments in runs for tile, begin, end in segments for k in range(begin, end))
    assert done == [(tile, k) for tile in range(tiles) for k in range(k_tiles)]


def test_stream_k_evens_out_the_last_round_that_whole_tiles_leave_to_a_few():
    """288 tiles of 112 k-tiles on 132 slots: whole, 96 workers take three tiles each (336 k-tiles); stream-K,
    every slot takes two whole tiles and a run of 20 or 21 k-tiles of the last 24 tiles."""
    whole, cut = tables.worker_runs(288, 132, 112), tables.worker_runs(288, 132, 112, stream_k=1)
    work = [[sum(end - begin for _, begin, end in segments) for segments in runs] for runs in (whole, cut)]
    assert (len(whole), max(work[0])) == (96, 336)
    assert len(cut) == 132 and set(work[1]) == {224 + 20, 224 + 21}
    assert all([tile for tile, begin, end in segments if end - begin == 112] == [w, w + 132]
               for w, segments in enumerate(cut))  # fmt: skip


def test_cut_tiles_name_the_workers_whose_runs_cover_each_tile_in_order():
    tiles, slots, k_tiles = 288, 132, 112
    runs = tables.worker_runs(tiles, slots, k_tiles, stream_k=1)
    cuts = tables.cut_tiles(tiles, slots, k_tiles)
    assert [c["tile"] for c in cuts] == list(range(264, 288))
    for c in cuts:
        covering = [w for w, segments in enumerate(runs) for tile, _, _ in segments if tile == c["tile"]]
        assert c["workers"] == covering and sum(c["k_tiles"]) == k_tiles
    assert cuts[0] == {"tile": 264, "workers": [0, 1, 2, 3, 4, 5], "k_tiles": [20, 20, 21, 20, 20, 11]}
    # Over two rounds the runs (132 or 133 k-tiles) are longer than a tile: 36 of the 156 tiles of the stream-K
    # part lie inside one run, which stores them whole, as the kernel's cut_parts finds
    two = tables.cut_tiles(tiles, slots, k_tiles, stream_k=2)
    runs = tables.worker_runs(tiles, slots, k_tiles, stream_k=2)
    held = {tile for segments in runs for tile, begin, end in segments if (begin, end) == (0, k_tiles)}
    assert len(two) == 120 and not held & {c["tile"] for c in two} and len(held - set(range(132))) == 36
    assert all(len(c["workers"]) > 1 and sum(c["k_tiles"]) == k_tiles for c in two)


def _candidate(name: str, us: float, passed: bool = True) -> dict:
    """A SYNTHETIC sweep candidate: its config read back from the name."""
    from deepgemm.heuristic import config_fields, config_from_name

    return {"name": name, "config": config_fields(config_from_name(name)), "passed": passed, "us": us}


def test_space_summary_and_schedule_pairs_read_a_sweep_row():
    row = {"dtype": "fp16", "m": 4096, "n": 2112, "k": 7168, "torch_us": 100.0, "pdl_us": 95.0, "candidates": [
        _candidate("n256 c1 s1 st4", 120.0), _candidate("n256 c1 sk1 st4", 100.0), _candidate("n256 c1 sk2 st4", 110.0),
        _candidate("n192 c2 s1 st4", 99.0), _candidate("n192 c2 s2 st4", 90.0, passed=False),
        _candidate("swap n256 c1 s1 st4", 130.0), _candidate("n240 c1 sk1 st4", 105.0)]}  # fmt: skip
    (line,) = tables.space_summary([row])
    assert (line["configs"], line["best"], line["best_us"]) == ("6/7", "n192 c2 s1 st4", 99.0)
    assert line["x_torch"] == 100 / 99
    assert (line["plain_us"], line["swapped_us"], line["pdl_us"]) == (99.0, 130.0, 95.0)
    pairs = tables.schedule_pairs(row["candidates"])
    assert [p["tile"] for p in pairs] == ["n256 c1"]  # n192 c2 and n240 c1 were timed one way only
    assert [pairs[0][key] for key in ("whole_us", "sk1_us", "sk2_us", "x_sk")] == [120.0, 100.0, 110.0, 1.2]


def test_m1_bandwidth_counts_the_bytes_moved_and_judges_only_large_weights():
    rows = [{"dtype": "fp16", "m": 1, "n": n, "k": 4096, "graph_us": us, "torch_graph_us": 2 * us}
            for n, us in ((4096, 8.0), (4096, 12.0), (2048, 5.0))]  # fmt: skip
    rows.append({"dtype": "fp16", "m": 16, "n": 4096, "k": 4096, "graph_us": 9.0, "torch_graph_us": 9.0})
    found = tables.m1_bandwidth(rows)
    assert len(found) == 3
    moved = (4096 + 4096 * 4096 + 4096) * 2
    assert found[0]["graph_gbs"] == pytest.approx(moved / 8e3)
    assert found[0]["torch_graph_gbs"] == pytest.approx(moved / 16e3)
    assert [f["aim"] for f in found] == ["yes", "no", "-"]  # 4.2 and 2.8 TB/s at 32 MB; a 16 MB weight is not judged
    assert found[0]["weight_mb"] == 32.0


def test_pick_regret_compares_the_heuristics_pick_with_the_tables_in_the_same_run():
    def row(dtype: str, m: int, table_us: float, heuristic_us: float | None) -> dict:
        return {"dtype": dtype, "m": m, "n": 64, "k": 64, "graph_us": table_us, "heuristic_graph_us": heuristic_us}

    rows = [row("fp16", 1, 10.0, 10.0), row("fp16", 2, 10.0, 12.0), row("fp16", 3, 10.0, 9.0),
            row("fp16", 4, 10.0, None), row("bf16", 1, 20.0, 21.0)]  # fmt: skip
    fp16, = (line for line in tables.pick_regret(rows) if line["dtype"] == "fp16")
    assert fp16["rows"] == 3  # the row without the heuristic's time is left out
    assert math.isclose(fp16["mean_pct"], 100 * ((1.0 + 1.2 + 0.9) / 3 - 1))
    assert math.isclose(fp16["worst_pct"], 20.0) and fp16["worst_row"] == "fp16 2x64x64"
    assert (fp16["over_10pct"], fp16["faster"]) == (1, 1)
    bf16, = (line for line in tables.pick_regret(rows) if line["dtype"] == "bf16")
    assert math.isclose(bf16["worst_pct"], 5.0) and bf16["over_10pct"] == 0
