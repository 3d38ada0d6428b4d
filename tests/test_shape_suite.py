"""The shape table without a GPU: its problems, its rows assembled from fake measurements, the decoder
block's rotation, the summary by M band, records merged by key, the command line, and the record itself."""

from __future__ import annotations

import json
import re
import types
from dataclasses import replace

import numpy as np
import pytest

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from deepgemm.heuristic import TUNED_DTYPE, config_from_fields, config_name, problem_key, tabled_fields
from tests.fake_rows import shape_rows
from tutorial import bench, block_suite, cli, results, shape_suite, tables
from tutorial.call_suite import GEMM, TORCH
from tutorial.timing import graph_calls

DTYPES = ("fp16", "bf16")

# ---- the problems ---------------------------------------------------------------------------------------


def test_the_shape_table_is_the_issues():
    table = shape_suite.shape_table()
    assert len(table) == len(set(table)) == 102  # 42 + 9 layers x 8 Ms + 5 others, less what repeats
    ms = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096, 8192)
    assert {(m, n, 4096) for m in ms for n in (4096, 28672)} <= set(table)
    layers = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (2112, 7168), (24576, 1536),
              (7168, 16384), (4096, 7168), (7168, 2048))  # fmt: skip
    assert {(m, n, k) for n, k in layers for m in (1, 16, 64, 128, 256, 512, 2048, 4096)} <= set(table)
    assert {(4097, 4097, 4097), (3000, 5000, 700), (2048, 2048, 2048), (8192, 8192, 8192)} <= set(table)
    assert {m for m, n, k in table if (n, k) == (7168, 2048)} == {1, 16, 64, 128, 256, 512, 2048, 4096}
    assert shape_suite.SHAPE_TABLE.split(",")[:2] == ["1x4096x4096", "2x4096x4096"]


def test_a_problem_listed_twice_keeps_its_first_place():
    """Llama's 4096 x 4096 and 28672 x 4096 layers and 4096^3 are in the M sweep already: they stay there, once."""
    table = shape_suite.shape_table()
    assert table[:21] == [(m, 4096, 4096) for m in shape_suite.M_SWEEP]
    assert table[21:42] == [(m, 28672, 4096) for m in shape_suite.M_SWEEP]
    assert table[42] == (1, 6144, 4096) and table[50] == (1, 4096, 14336)  # the 4096 x 4096 layer left out
    assert table.index((4096, 4096, 4096)) == 19 and table[-4:] == [(4097,) * 3, (3000, 5000, 700), (2048,) * 3,
                                                                     (8192,) * 3]  # fmt: skip


@pytest.mark.parametrize(("call_ms", "sets", "calls"), [(0.01, 8, 56), (0.1, 3, 30), (1.0, 2, 4), (5.0, 2, 2)])
def test_a_graph_holds_about_3_ms_of_calls_in_whole_rotations_at_most_50_and_more(call_ms, sets, calls):
    assert graph_calls(call_ms, sets) == calls


def test_block_j_runs_each_gemm_in_order_on_its_own_set_j():
    per_gemm = [[lambda i=i: f"qkv{i}" for i in range(2)], [lambda i=i: f"o{i}" for i in range(3)]]
    launches = block_suite.block_launches(per_gemm)
    assert [launch() for launch in launches] == [("qkv0", "o0"), ("qkv1", "o1"), ("qkv0", "o2")]
    assert [name for name, _, _ in block_suite.LLAMA3_8B_BLOCK] == ["qkv", "o", "gate_up", "down"]


# ---- a row from fake measurements ------------------------------------------------------------------------


def _numpy_workload(m: int, n: int, k: int, dtype_name: str) -> bench.Workload:
    rng = np.random.default_rng(0)
    a, b = rng.random((3, 2)).astype(np.float16), rng.random((2, 4)).astype(np.float16)
    return replace(bench.Workload(3, 4, 2, "fp16", [(a, b)] * 2, None, {}, None), m=m, n=n, k=k, dtype_name=dtype_name)


TABLE_CONFIG = GemmConfig(block_n=128, num_stages=6, extra={"CLUSTER_M": 1, "SPLIT_K": 1})
OTHER_CONFIG = GemmConfig(block_n=64, num_stages=8, extra={"CLUSTER_M": 1, "SPLIT_K": 2})


@pytest.fixture
def fake_gpu(monkeypatch):
    """The row's GPU steps faked: per call ours 20 us, torch's 30, the heuristic's 25 (beside torch's 35); in
    graphs ours 10, torch's 12, the heuristic's 16; queue-held ours 11. `seen` records what was measured and
    captured."""
    seen = {"graphs": [], "measured": [], "configs": [], "graph_passed": True, "heuristic": OTHER_CONFIG}

    class FakeWorkload:
        make = staticmethod(_numpy_workload)

    def fake_time_call(work, framework, a_layout, b_layout, **kwargs):
        seen["timing"] = kwargs["timing"]
        return {**work.base_row(GEMM), "framework": framework, "call_us": 20.0, "torch_us": 30.0, "passed": True,
                "torch_passed": True, "device_us": 11.0, "x_torch": 1.5, "ms": 0.02}  # fmt: skip

    def fake_launches(work, framework, config=None):
        seen["configs"].append((config, table_on()))
        return {GEMM: [types.SimpleNamespace(args=("a", "b"), config=config)], TORCH: ["torch"]}

    tables_dir = heuristic.TABLES_DIR

    def table_on():
        return tables_dir == heuristic.TABLES_DIR

    def fake_config_of(a, b):  # the table's entry, or with the table switched off the heuristic's pick
        return (TABLE_CONFIG, "table") if table_on() else (seen["heuristic"], "heuristic")

    def fake_graph(graphs, work):
        seen["graphs"].append([(prefix, call_ms) for prefix, (_, call_ms) in graphs.items()])
        us = {"": 10.0, "torch_": 12.0, "heuristic_": 16.0}
        return {f: v for p in graphs for f, v in ((f"{p}graph_us", us[p]), (f"{p}graph_passed", seen["graph_passed"]))}

    def fake_measure(contenders, work, *, settle_s, **timing):  # the heuristic's pick beside torch.matmul's
        seen["measured"].append(list(contenders))
        return {name: {"ms": ms, "passed": True} for name, ms in zip(contenders, (0.025, 0.035), strict=True)}

    monkeypatch.setattr(shape_suite, "Workload", FakeWorkload)
    monkeypatch.setattr(shape_suite, "time_call", fake_time_call)
    monkeypatch.setattr(shape_suite, "call_launches", fake_launches)
    monkeypatch.setattr(shape_suite, "graph_fields", fake_graph)
    monkeypatch.setattr(shape_suite, "measure_alternated", fake_measure)
    monkeypatch.setattr(shape_suite, "config_of", fake_config_of)
    monkeypatch.setattr(shape_suite, "heuristic_config", lambda m, n, k: seen["heuristic"])
    return seen


def test_a_row_times_the_call_torch_and_the_heuristics_pick_in_graphs_and_per_call(fake_gpu):
    (row,) = shape_suite.bench_shape_row(96, 4096, 4096, "bf16", settle_s=0.0, log=lambda _: None)
    assert (row["dtype"], row["m"], row["n"], row["k"]) == ("bf16", 96, 4096, 4096)
    assert (row["config"], row["config_source"]) == ("n128 c1 s1 st6", "table")
    assert (row["heuristic_config"], row["heuristic_same"]) == ("n64 c1 s2 st8", False)
    # the heuristic per call as a caller without a table calls it (no config, the table off); in a graph by config
    assert fake_gpu["configs"] == [(None, True), (None, False), (OTHER_CONFIG, True)]
    assert fake_gpu["measured"] == [[shape_suite.HEURISTIC, shape_suite.TORCH]]  # alternated, per call
    # the three graphs timed together (alternated), each sized by that call's own time per call, in ms
    assert fake_gpu["graphs"] == [[("", 0.02), ("torch_", 0.03), ("heuristic_", 0.025)]]
    assert fake_gpu["timing"] == shape_suite.CALL_TIMING
    assert (row["graph_us"], row["torch_graph_us"], row["heuristic_graph_us"], row["heuristic_call_us"]) == (
        10.0, 12.0, 16.0, 25.0)  # fmt: skip
    assert row["x_torch_graph"] == pytest.approx(1.2) and row["x_torch_graph_heuristic"] == pytest.approx(0.75)
    # per call the heuristic's pick is set against the torch.matmul timed beside it (35 us), not the row's (30)
    assert row["x_torch"] == pytest.approx(1.5) and row["x_torch_heuristic"] == pytest.approx(1.4)
    assert row["passed"] and row["torch_passed"] and "graph_gbs" not in row


def test_where_the_call_ran_the_heuristics_pick_its_numbers_are_copied_not_timed_again(fake_gpu):
    fake_gpu["heuristic"] = GemmConfig(block_n=128, num_stages=6, extra={"SPLIT_K": 1, "CLUSTER_M": 1})
    (row,) = shape_suite.bench_shape_row(1, 4096, 4096, "fp16", settle_s=0.0, log=lambda _: None)
    assert row["heuristic_same"] and fake_gpu["measured"] == []
    assert fake_gpu["graphs"] == [[("", 0.02), ("torch_", 0.03)]]  # no third graph: the call's is the heuristic's
    assert (row["heuristic_call_us"], row["heuristic_graph_us"]) == (row["call_us"], row["graph_us"])
    assert row["x_torch_graph_heuristic"] == row["x_torch_graph"]
    moved = (4096 + 4096 * 4096 + 4096) * 2  # a, b and c at M = 1, two bytes each
    assert row["graph_gbs"] == pytest.approx(moved / 10e3) and row["gbs"] == pytest.approx(moved / 20e3)
    assert row["device_gbs"] == pytest.approx(moved / 11e3)


def test_a_row_whose_graph_fails_verification_fails(fake_gpu):
    fake_gpu["graph_passed"] = False
    lines = []
    (row,) = shape_suite.bench_shape_row(64, 4096, 4096, "fp16", settle_s=0.0, log=lines.append)
    assert not row["passed"] and not row["torch_passed"] and row["x_torch_graph"] == pytest.approx(1.2)
    assert len(lines) == 1 and lines[0].endswith("FAILED verification")


def test_a_row_that_raises_is_a_failed_row_naming_the_error_and_the_table_goes_on(fake_gpu, monkeypatch):
    def refuse(*args, **kwargs):
        raise ValueError("SPLIT_K = 20 exceeds the 16 k-tiles")

    monkeypatch.setattr(shape_suite, "time_call", refuse)
    lines = []
    (row,) = shape_suite.bench_shape_row(64, 4096, 1024, "fp16", settle_s=0.0, log=lines.append)
    assert row["passed"] is False and row["error"] == "ValueError: SPLIT_K = 20 exceeds the 16 k-tiles"
    assert lines == ["fp16 64x4096x1024  FAILED: ValueError: SPLIT_K = 20 exceeds the 16 k-tiles"]
    assert cli.row_label(row) == "deepgemm.gemm fp16 64x4096x1024"


# ---- the summary by M band -------------------------------------------------------------------------------


def test_the_summary_by_m_band_counts_wins_and_names_the_rows_below_1():
    rows = shape_rows({1: 1.05, 16: 0.9, 32: 1.0, 64: 0.8, 128: 1.2, 1024: 1.1, 4096: 0.95})
    rows.append({"dtype": "bf16", "m": 8, "n": 4096, "k": 4096, "error": "RuntimeError: ..."})  # no ratio: left out
    summary = {(line["ratio"], line["band"]): line for line in tables.band_summary(rows)}
    small = summary["graph, table", "1-32"]
    assert (small["rows"], small["at_least_1"], small["median"], small["worst"]) == (3, 2, 1.0, 0.9)
    assert small["below"] == ["fp16 16x4096x4096 (0.900)"]
    assert summary["graph, table", "33-500"]["below"] == ["fp16 64x4096x4096 (0.800)"]
    assert (summary["graph, table", "501-1500"]["rows"], summary["graph, table", ">1500"]["at_least_1"]) == (1, 0)
    every = summary["per call, table", "all"]
    assert (every["rows"], every["at_least_1"], every["median"], every["worst"]) == (7, 4, 1.0, 0.8)
    assert every["below"][0] == "fp16 64x4096x4096 (0.800)" and len(every["below"]) == 3  # worst first


def test_the_summary_shows_the_heuristic_alone_and_tolerates_a_record_without_it():
    rows = shape_rows({1: 1.1, 600: 1.1}, heuristic_scale=0.5)
    summary = {(line["ratio"], line["band"]): line for line in tables.band_summary(rows)}
    assert summary["graph, heuristic", "all"]["at_least_1"] == 0 and summary["graph, table", "all"]["at_least_1"] == 2
    assert summary["per call, heuristic", "501-1500"]["below"] == ["fp16 600x4096x4096 (0.550)"]
    old = [{k: v for k, v in row.items() if k in ("dtype", "m", "n", "k", "x_torch")} for row in rows]
    summary = {(line["ratio"], line["band"]): line for line in tables.band_summary(old)}
    assert summary["graph, table", "all"]["rows"] == 0 and summary["graph, table", "all"]["median"] is None
    assert summary["per call, table", "all"]["rows"] == 2
    lines = tables.below_lines(tables.band_summary(rows))
    assert "below 1.0x, graph, heuristic, M 1-32: fp16 1x4096x4096 (0.550)" in lines and len(lines) == 4


@pytest.mark.parametrize(("m", "band"), [(1, "1-32"), (32, "1-32"), (33, "33-500"), (500, "33-500"),
                                         (501, "501-1500"), (1500, "501-1500"), (1501, ">1500")])  # fmt: skip
def test_the_m_bands_are_the_issues(m, band):
    assert tables.band_of(m) == band


# ---- records merged by key -------------------------------------------------------------------------------


def _prov(date: str) -> dict:
    return {"gpu": "NVIDIA H200", "driver": "580", "cuda": "13.2", "date": date, "commit": "abc", "command": "x"}


def _row(dtype: str, m: int, us: float) -> dict:
    return {"stage": GEMM, "dtype": dtype, "m": m, "n": 4096, "k": 4096, "graph_us": us, "passed": True}


def test_runs_of_parts_merge_into_one_record_by_dtype_and_shape(tmp_path):
    old = {"provenance": _prov("old"), "rows": [_row("fp16", 1, 9.0), _row("bf16", 1, 9.0), _row("fp16", 2, 9.0)]}
    (tmp_path / "shapes.json").write_text(json.dumps(old))
    block = {"stage": block_suite.BLOCK_NAME, "dtype": "fp16", "m": 1, "graph_us": 100.0}
    results.save_merged("shapes", {"rows": [_row("fp16", 1, 5.0)], "block": [block]}, _prov("first"), tmp_path)
    record = results.load("shapes", tmp_path)
    assert [(r["dtype"], r["m"], r["graph_us"], r.get("run")) for r in record["rows"]] == [
        ("bf16", 1, 9.0, None), ("fp16", 2, 9.0, None), ("fp16", 1, 5.0, "first")]  # fmt: skip
    assert [run["date"] for run in record["runs"]] == ["old", "first"] and record["provenance"]["date"] == "first"
    blocks = [{**block, "dtype": "bf16"}, {**block, "graph_us": 90.0}]
    results.save_merged("shapes", {"rows": [_row("bf16", 1, 6.0)], "block": blocks}, _prov("second"), tmp_path)
    record = results.load("shapes", tmp_path)
    assert [(r["dtype"], r["m"], r["graph_us"]) for r in record["rows"]] == [("fp16", 2, 9.0), ("fp16", 1, 5.0),
                                                                              ("bf16", 1, 6.0)]  # fmt: skip
    assert [(b["dtype"], b["graph_us"], b["run"]) for b in record["block"]] == [("bf16", 100.0, "second"),
                                                                               ("fp16", 90.0, "second")]  # fmt: skip
    results.save_merged("shapes", {"rows": [], "block": []}, _prov("third"), tmp_path)  # a run of neither part
    record = results.load("shapes", tmp_path)
    assert len(record["rows"]) == 3 and len(record["block"]) == 2 and len(record["runs"]) == 4


# ---- the command line ------------------------------------------------------------------------------------


def _args(*argv: str):
    return cli.build_parser().parse_args(["bench", "--suite", "shapes", *argv])


def test_the_shapes_suite_runs_the_table_by_default_and_takes_a_dtype_shapes_and_a_part():
    default = cli.problems(_args(), cli.SUITE_SHAPES["shapes"])
    assert default == [(shape, dtype) for shape in shape_suite.shape_table() for dtype in DTYPES]
    args = _args("--dtype", "fp16", "--shapes", "1x4096x4096,96x28672x4096", "--part", "table", "--record")
    assert (args.part, args.record) == ("table", True)
    assert cli.problems(args, cli.SUITE_SHAPES["shapes"]) == [((1, 4096, 4096), "fp16"), ((96, 28672, 4096), "fp16")]
    assert _args().part == "both" and cli.settle_s(_args(), "shapes") == shape_suite.SETTLE_S
    with pytest.raises(SystemExit):
        _args("--part", "rows")


def test_the_rows_are_numbered_one_line_each_and_the_block_is_its_own_part(monkeypatch, capsys):
    def fake_row(m, n, k, dtype, *, settle_s, log):
        log(f"{dtype} {m}x{n}x{k}")
        return [{"dtype": dtype, "m": m}]

    monkeypatch.setattr(shape_suite, "bench_shape_row", fake_row)
    monkeypatch.setattr(block_suite, "bench_block", lambda m, dtype, log: {"dtype": dtype, "m": m})
    args = _args("--dtype", "bf16", "--shapes", "1x4096x4096,2048")
    assert cli.run_bench([], args, "shapes") == [{"dtype": "bf16", "m": 1}, {"dtype": "bf16", "m": 2048}]
    lines = [re.sub(r", +\d+ s\]", "]", line) for line in capsys.readouterr().out.splitlines()]  # the seconds vary
    assert lines == ["[1/2] bf16 1x4096x4096", "[2/2] bf16 2048x2048x2048"]
    assert cli.run_block(args) == {"block": [{"dtype": "bf16", "m": m} for m in block_suite.BLOCK_MS]}
    assert cli.run_bench([], _args("--part", "block"), "shapes") == []
    assert cli.run_block(_args("--part", "table")) == {}
    assert cli.run_block(cli.build_parser().parse_args(["bench", "--suite", "call"])) == {}


@pytest.mark.parametrize(("sm80", "name"), [(False, "shapes"), (True, "shapes_sm80")])
def test_a_recorded_run_merges_its_rows_and_block_and_prints_the_summary(monkeypatch, capsys, tmp_path, sm80, name):
    """Into shapes.json, or shapes_sm80.json where the call runs the sm_80 kernel (an H200 forced onto it)."""
    monkeypatch.setattr(cli, "gpu_available", lambda: True)
    monkeypatch.setattr(cli, "missing_here", lambda stages: [])
    monkeypatch.setattr(cli, "runs_here", lambda stage: stage == "library_sm80" or not sm80)
    monkeypatch.setattr(shape_suite, "runs_sm80", lambda: sm80)
    monkeypatch.setattr(results, "provenance", lambda: _prov("now"))
    monkeypatch.setattr(results, "gpu_directory", lambda gpu: tmp_path)
    monkeypatch.setattr(shape_suite, "bench_shape_row", lambda m, n, k, dtype, **kw: shape_rows({m: 0.9}, dtype))
    block = {"stage": block_suite.BLOCK_NAME, "graph_us": 9.0, "passed": True, "torch_passed": True}
    monkeypatch.setattr(block_suite, "bench_block", lambda m, dtype, log: {**block, "dtype": dtype, "m": m})
    assert cli.main(["bench", "--suite", "shapes", "--shapes", "16x4096x4096", "--dtype", "fp16", "--record"]) == 0
    out = capsys.readouterr().out
    assert "merged 1 rows and 3 block rows" in out and "fp16 16x4096x4096 (0.900)" in out
    record = results.load(name, tmp_path)
    assert [r["m"] for r in record["rows"]] == [16] and [b["m"] for b in record["block"]] == [1, 128, 2048]
    assert [path.name for path in tmp_path.iterdir()] == [f"{name}.json"]


def test_without_a_gpu_the_recorded_shape_table_prints_with_its_summary(monkeypatch, capsys):
    monkeypatch.setattr(cli, "gpu_available", lambda: False)
    assert cli.main(["bench", "--suite", "shapes"]) == 0
    out = capsys.readouterr().out
    assert "RECORDED" in out and "3000x5000x700" in out and "per call, table" in out
    assert cli.main(["table", "--name", "shapes", "--brief"]) == 0
    assert "| graph, table | 1-32 |" in capsys.readouterr().out


# ---- the record ------------------------------------------------------------------------------------------


def test_the_recorded_shape_table_verified_every_row_and_ran_the_tables_configs():
    record = results.load("shapes")
    rows = record["rows"]
    wanted = {(d, *s) for d in DTYPES for s in shape_suite.shape_table()}
    assert {problem_key(r) for r in rows} <= wanted
    entries = results.load("autotune")["rows"]  # each as the table serves it: PDL only under PDL_BELOW_US
    tuned = {problem_key(r): config_name(config_from_fields(tabled_fields(r))) for r in entries}
    for row in rows:
        assert row["passed"] and row["torch_passed"], row
        key = problem_key(row)
        entry = tuned.get(key, tuned.get((TUNED_DTYPE, *key[1:])))  # a BF16 problem takes FP16's entry
        if entry is not None:
            assert row["config"] == entry and row["config_source"] == "table"
        else:
            assert row["config_source"] == "heuristic"
        assert row["x_torch"] == pytest.approx(row["torch_us"] / row["call_us"])
        assert row["x_torch_device"] == pytest.approx(row["torch_device_us"] / row["device_us"])
        assert ("device_gbs" in row) == (row["m"] == 1)
    if "runs" not in record:  # the record before issue 25: 37 problems, per call and queue-held, no graphs
        assert len(rows) == 2 * 37 and not any("graph_us" in row for row in rows)
        return
    # Recorded by today's suite: every problem of the table in both dtypes, in graphs too, the heuristic's
    # pick beside; and the decoder block at each of its Ms.
    assert len(rows) == len(wanted)
    for row in rows:
        assert row["graph_passed"] and row["torch_graph_passed"] and row["heuristic_passed"], row
        assert row["x_torch_graph"] == pytest.approx(row["torch_graph_us"] / row["graph_us"])
        assert row["x_torch_graph_heuristic"] == pytest.approx(row["torch_graph_us"] / row["heuristic_graph_us"])
        if row["heuristic_same"]:  # the call ran the heuristic's pick: its numbers are the row's own
            assert row["heuristic_config"] == row["config"] and row["heuristic_graph_us"] == row["graph_us"]
    assert {(b["dtype"], b["m"]) for b in record["block"]} == {(d, m) for d in DTYPES for m in block_suite.BLOCK_MS}
    assert all(b["passed"] and b["torch_passed"] and len(b["max_abs_err"]) == 4 for b in record["block"])


@pytest.mark.parametrize("sm80", [False, True])
def test_the_heuristic_timed_is_the_one_of_the_kernel_the_call_runs(monkeypatch, sm80):
    """The sm_90a kernel's cost model on Hopper; the sm_80 kernel's rules where the call runs that kernel."""
    from deepgemm import heuristic, heuristic_sm80
    from deepgemm.driver import DeviceLimits

    limits = DeviceLimits(compute_capability=(9, 0), sm_count=132, smem_per_block_optin=232448)
    monkeypatch.setattr(shape_suite, "device_limits", lambda device: limits)
    monkeypatch.setattr(shape_suite.cupy.cuda, "Device", lambda: types.SimpleNamespace(id=0))
    monkeypatch.setattr(shape_suite, "runs_sm80", lambda: sm80)
    expected = (heuristic_sm80.choose(96, 4096, 4096, 132, 232448) if sm80
                else heuristic.choose(96, 4096, 4096, 132).config())  # fmt: skip
    assert shape_suite.heuristic_config(96, 4096, 4096) == expected
    assert shape_suite.record_name() == ("shapes_sm80" if sm80 else "shapes")


@pytest.mark.parametrize(("gpu", "sm80", "stages"), [(False, True, ("library",)), (True, False, ("library",)),
                                                     (True, True, ("library_sm80",))])  # fmt: skip
def test_the_shape_table_runs_the_library_kernel_the_call_runs_here(monkeypatch, gpu, sm80, stages):
    """On a GPU where deepgemm.gemm runs the sm_80 kernel the table runs live on it (into shapes_sm80.json);
    without a GPU the record of the sm_90a kernel is shown."""
    monkeypatch.setattr(cli, "gpu_available", lambda: gpu)
    monkeypatch.setattr(cli, "runs_here", lambda stage: stage == "library_sm80" or not sm80)
    assert cli.suite_stages("shapes") == stages and cli.suite_stages("pairs") == (cli.PAIRED_STAGE,)


def test_the_sm80_kernels_recorded_table_verified_every_row_on_its_heuristics_pick():
    """shapes_sm80.json: the H200 forced onto the sm_80 kernel, every row verified, every config that
    kernel's heuristic's (it has no autotune table), at the same problems as the sm_90a kernel's table."""
    from deepgemm import heuristic_sm80

    record = results.load("shapes_sm80")
    rows = record["rows"]
    assert {(r["m"], r["n"], r["k"]) for r in rows} == set(shape_suite.shape_table())
    limits = (record["provenance"]["sm_count"], 232448)  # the H200's SMs and shared memory per block
    for row in rows:
        assert row["passed"] and row["torch_passed"] and row["config_source"] == "heuristic", row
        picked = heuristic_sm80.choose(row["m"], row["n"], row["k"], *limits)
        assert row["config"] == config_name(picked) and row["heuristic_same"], row


def test_a_graph_is_checked_on_its_first_and_its_last_call_each_against_its_own_set(monkeypatch):
    """The graph's last call ran after all the others (PDL overlapping them) on the last input set: a graph
    whose later calls all read set 0 passes the first check and fails the last."""
    from tests.numpy_cupy import numpy_for_cupy, rotating_workload
    from tutorial import timing

    numpy_for_cupy(monkeypatch)
    monkeypatch.setattr(shape_suite, "as_device_array", lambda x, name: x)
    work, product = rotating_workload(seed=1)

    def fake_capture(sets_read: list[int]):
        first, last = np.empty((8, 16), np.float16), np.empty((8, 16), np.float16)

        def replay():
            first[:], last[:] = product(sets_read[0]), product(sets_read[-1])

        return lambda launches, calls: timing.CapturedGraph(types.SimpleNamespace(replay=replay), calls, first, last)

    for sets_read, passes in (([0, 1, 2], True), ([0, 0, 0], False)):
        monkeypatch.setattr(shape_suite, "capture_graph", fake_capture(sets_read))
        _, stats = shape_suite.captured_calls(["l0", "l1", "l2"], work, 0.01)
        assert stats.passed is passes, sets_read
