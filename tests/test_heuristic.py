"""The config a call gets: the cost model's pick, the autotune table, and the records they made (no GPU)."""

from __future__ import annotations

import json
import re

import pytest

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from deepgemm.heuristic import config_from_fields, config_name
from tutorial import autotune, call_suite, cli, results

H200 = ("NVIDIA H200", 132)
SHIPPED = heuristic.TABLES_DIR  # the package's tables, before any test points TABLES_DIR elsewhere


@pytest.mark.parametrize(("block_n", "stages"), [(256, 4), (192, 4), (128, 6), (64, 8)])
def test_as_many_stages_as_fit_beside_the_epilogue(block_n, stages):
    assert heuristic.max_stages(block_n) == stages
    stage_bytes, epilogue = (128 + block_n) * 64 * 2, heuristic.EPILOGUE_BYTES
    assert stages * stage_bytes + epilogue <= 227 * 1024 < (stages + 1) * stage_bytes + epilogue


def test_the_shipped_tile_wins_where_it_fills_every_round():
    """4096^3: 128 x 256 tiles in clusters of two, 256 cluster tiles in four full rounds of 64 clusters."""
    assert heuristic.choose(4096, 4096, 4096, 132).name() == "n256 c2 s1 st4"


def test_small_m_splits_k_and_never_clusters_a_single_tile_row():
    for m in (1, 16, 64, 128):
        pick = heuristic.choose(m, 4096, 4096, 132)
        assert pick.split_k > 1 and pick.cluster_m == 1, (m, pick)
    assert all(c.cluster_m == 1 for c in heuristic.candidates(128, 28672, 4096, 132))


def test_split_k_only_while_tiles_leave_sms_idle_and_slices_fill_the_pipeline():
    for c in heuristic.candidates(300, 4096, 1000, 132):
        if c.split_k > 1:
            tiles = 3 * -(-4096 // c.block_n)
            assert tiles * 2 <= 132 and c.split_k * heuristic.MIN_K_TILES_PER_UNIT <= -(-1000 // 64), c


def test_an_mn_major_b_is_never_given_partial_boxes():
    for c in heuristic.candidates(8192, 4096, 4096, 132, b_mn_major=True):
        assert (c.block_n // c.cluster_m) % 64 == 0, c


def test_the_model_ranks_and_prices_the_recorded_candidates():
    """Against the H200's autotune record: the model's first choice among the timed candidates is within 5%
    of the fastest on average and never more than 30% slower; its estimates are within 25% of the measured
    time for the middle 80% of the candidates."""
    regrets, ratios = heuristic.model_accuracy(results.load("autotune")["rows"], 132)
    assert sum(regrets) / len(regrets) < 1.05 and max(regrets) < 1.3
    ratios.sort()
    assert ratios[len(ratios) // 10] > 0.75 and ratios[9 * len(ratios) // 10] < 1.25


def test_the_accuracy_the_module_states_is_the_records():
    """The module docstring's numbers (mean regret per dtype, the middle 80% of estimate / measured) are
    what `model_accuracy` gives on the record: a refit that changes them must say so there."""
    text = " ".join(heuristic.__doc__.split())
    stated = re.search(r"on average ([\d.]+)% slower than the fastest in FP16 and ([\d.]+)% in BF16; .*? within "
                       r"([\d.]+) to ([\d.]+) times the measured time for 80%", text)  # fmt: skip
    assert stated, "the docstring no longer states the model's accuracy"
    rows = results.load("autotune")["rows"]
    for dtype, percent in (("fp16", stated[1]), ("bf16", stated[2])):
        regrets, _ = heuristic.model_accuracy([r for r in rows if r["dtype"] == dtype], 132)
        assert f"{100 * (sum(regrets) / len(regrets) - 1):.1f}" == percent, dtype
    _, ratios = heuristic.model_accuracy(rows, 132)
    ratios.sort()
    assert (f"{ratios[len(ratios) // 10]:.2f}", f"{ratios[9 * len(ratios) // 10]:.2f}") == (stated[3], stated[4])


def test_fields_round_trip_and_name_a_config():
    cfg = GemmConfig(block_m=128, block_n=192, num_stages=4, extra={"CLUSTER_M": 2, "CLUSTER_N": 1, "SPLIT_K": 3})
    assert config_from_fields(heuristic.config_fields(cfg)) == cfg
    assert config_name(cfg) == "n192 c2 s3 st4"
    narrow = GemmConfig(block_m=64, block_n=128, num_stages=8, extra={"CLUSTER_M": 1, "CLUSTER_N": 1, "SPLIT_K": 4})
    assert config_from_fields(heuristic.config_fields(narrow)) == narrow
    assert config_name(narrow) == "m64 n128 c1 s4 st8"


def test_64_row_tiles_only_where_they_hold_all_of_m():
    assert any(c.block_m == 64 for c in heuristic.candidates(64, 4096, 4096, 132))
    assert all(c.block_m == 128 for c in heuristic.candidates(65, 4096, 4096, 132))
    assert heuristic.max_stages(64, block_m=64) == 12


def test_the_table_comes_first_then_the_model():
    for row in results.load("autotune")["rows"][:6]:
        found, source = heuristic.pick_config(row["m"], row["n"], row["k"], row["dtype"], *H200, False)
        assert (config_name(found), source) == (row["name"], "table")
    found, source = heuristic.pick_config(3, 5, 7, "fp16", *H200, False)
    assert source == "heuristic" and found == heuristic.choose(3, 5, 7, 132).config()
    assert heuristic.pick_config(1, 4096, 4096, "fp16", "NVIDIA H100 PCIe", 114, False)[1] == "heuristic"


def _table(root, gpu_folder: str, rows: list[dict]) -> None:
    folder = root / gpu_folder
    folder.mkdir(parents=True)
    (folder / "autotune.json").write_text(json.dumps({"provenance": {}, "rows": rows}))


@pytest.fixture
def tables_dir(tmp_path, monkeypatch):
    """An empty folder of autotune tables in place of the package's (`heuristic.TABLES_DIR`)."""
    monkeypatch.setattr(heuristic, "TABLES_DIR", tmp_path / "tables")
    heuristic.table.cache_clear()
    yield tmp_path / "tables"
    heuristic.table.cache_clear()


def test_the_table_is_package_data_found_by_the_gpus_name(tables_dir):
    assert heuristic.table_path("NVIDIA H200") == tables_dir / "h200" / "autotune.json"
    assert heuristic.table_path("NVIDIA H100 80GB HBM3", tables_dir / "x").parent.name == "h100-80gb-hbm3"
    assert heuristic.gpu_slug("  ") == "unknown-gpu"
    assert heuristic.table_path("NVIDIA H200", SHIPPED).is_file()  # shipped with the library
    assert heuristic.Path(heuristic.__file__).resolve().parent / "kernels" / "tables" == SHIPPED


def test_the_shipped_table_is_the_records_best_of_every_shape():
    """deepgemm/kernels/tables/h200/autotune.json is results/h200/autotune.json's best per shape (what
    `tutorial.autotune.package_table` writes), so the library needs no repository to find it."""
    shipped = json.loads(heuristic.table_path("NVIDIA H200", SHIPPED).read_text())
    assert shipped == autotune.package_table(results.load("autotune"))
    heuristic.table.cache_clear()
    try:
        assert heuristic.table(heuristic.table_path("NVIDIA H200", SHIPPED)) == {
            heuristic.problem_key(r): config_from_fields(r["config"]) for r in shipped["rows"]
        }
    finally:
        heuristic.table.cache_clear()


def test_a_table_entry_the_layout_cannot_take_is_passed_over(tables_dir):
    fields = {"block_n": 64, "num_stages": 8, "CLUSTER_M": 2, "CLUSTER_N": 1, "SPLIT_K": 1}
    _table(tables_dir, "h200", [{"dtype": "fp16", "m": 512, "n": 512, "k": 512, "config": fields}])
    found, source = heuristic.pick_config(512, 512, 512, "fp16", *H200, False)
    assert source == "table" and found == config_from_fields(fields)
    assert heuristic.pick_config(512, 512, 512, "fp16", *H200, True)[1] == "heuristic"  # 64 / 2: half a box
    assert heuristic.pick_config(512, 512, 512, "bf16", *H200, False)[1] == "heuristic"  # another dtype
    assert heuristic.pick_config(512, 512, 512, "fp16", "NVIDIA H100", 132, False)[1] == "heuristic"  # no table


def test_without_a_table_every_problem_gets_the_models_pick(tables_dir):
    for m, n, k in ((1, 4096, 4096), (4096, 4096, 4096)):
        assert heuristic.pick_config(m, n, k, "fp16", *H200, False) == (heuristic.choose(m, n, k, 132).config(),
                                                                        "heuristic")  # fmt: skip


def test_recording_merges_by_shape_keeps_every_run_and_writes_the_package_table(tmp_path, monkeypatch, tables_dir):
    """`tutorial.autotune.record` writes the record under results/<gpu>/ and the table the package ships;
    here both go to tmp_path (results.REPO and heuristic.TABLES_DIR), never into the checkout."""
    monkeypatch.setattr(results, "REPO", tmp_path)
    monkeypatch.setattr(results, "gpu_directory", lambda gpu: tmp_path / "results" / heuristic.gpu_slug(gpu))
    fields = heuristic.config_fields(heuristic.choose(64, 64, 64, 132).config())
    rows = [{"dtype": d, "m": 64, "n": 64, "k": 64, "config": fields, "name": "x", "us": 1.0} for d in ("fp16", "bf16")]
    assert autotune.table_path("NVIDIA H200").is_relative_to(tables_dir)  # never the checkout's package table
    autotune.record(rows, {"gpu": "NVIDIA H200", "date": "first"})
    autotune.record([{**rows[0], "us": 2.0}], {"gpu": "NVIDIA H200", "date": "second"})
    record = json.loads((tmp_path / "results" / "h200" / "autotune.json").read_text())
    kept = sorted((r["dtype"], r["us"], r["run"]) for r in record["rows"])
    assert kept == [("bf16", 1.0, "first"), ("fp16", 2.0, "second")]
    assert [run["date"] for run in record["runs"]] == ["first", "second"] and record["provenance"]["date"] == "second"
    shipped = json.loads((tables_dir / "h200" / "autotune.json").read_text())
    assert shipped["record"] == "results/h200/autotune.json" and shipped["provenance"]["date"] == "second"
    assert [(r["dtype"], r["us"]) for r in shipped["rows"]] == [("bf16", 1.0), ("fp16", 2.0)]
    assert set(shipped["rows"][0]) == set(autotune.PACKAGE_FIELDS)
    assert heuristic.pick_config(64, 64, 64, "fp16", *H200, False) == (config_from_fields(fields), "table")


def test_the_recorded_table_holds_the_fastest_verified_candidate_of_every_shape():
    rows = results.load("autotune")["rows"]
    assert {heuristic.problem_key(r) for r in rows} == {
        (d, *s) for d in ("fp16", "bf16") for s in call_suite.shape_table()
    }
    for row in rows:
        timed = [c for c in row["candidates"] if c["passed"]]
        assert row["name"] == min(timed, key=lambda c: c["us"])["name"] and row["us"] == min(c["us"] for c in timed)
        assert config_name(config_from_fields(row["config"])) == row["name"]


def test_the_shape_table_is_the_issues():
    table = call_suite.shape_table()
    assert len(table) == len(set(table)) == 37
    assert {(m, 4096, 4096) for m in call_suite.M_SWEEP} <= set(table)
    assert {(m, 2112, 7168) for m in (1, 128, 4096)} <= set(table) and (4097, 4097, 4097) in table


def test_the_recorded_shape_table_ran_the_tables_configs_and_verified_every_row():
    record = results.load("shapes")
    rows = record["rows"]
    tuned = {heuristic.problem_key(r): r["name"] for r in results.load("autotune")["rows"]}
    assert len(rows) == 2 * len(call_suite.shape_table())
    for row in rows:
        assert row["passed"] and row["torch_passed"], row
        assert row["config"] == tuned[heuristic.problem_key(row)] and row["config_source"] == "table"
        assert row["x_torch"] == pytest.approx(row["torch_us"] / row["call_us"])
        assert row["x_torch_device"] == pytest.approx(row["torch_device_us"] / row["device_us"])
        assert ("device_gbs" in row) == (row["m"] == 1)


def test_autotune_without_a_gpu_prints_the_recorded_table(capsys, monkeypatch):
    monkeypatch.setattr(cli, "gpu_available", lambda: False)  # on a GPU machine too: no tuning run here
    assert cli.main(["autotune"]) == 0
    shown = capsys.readouterr().out
    assert "recorded" in shown.lower() and "n256 c2 s1 st4" in shown


def test_close_candidates_are_timed_again_in_turn_and_ranked_by_their_median(monkeypatch):
    """One timing each put a 2%-slower config first at times; the finalists (within 3% of the fastest) are
    timed three more times, alternating, and the median decides. One far behind is not timed again."""
    again = {"a": iter([10.5, 10.6, 10.7]), "b": iter([10.1, 10.1, 10.1])}
    order = []

    def fake_timing(plan):
        order.append(plan)
        return next(again[plan])

    monkeypatch.setattr(autotune, "device_us_per_call", fake_timing)
    passed = [{"name": "a", "us": 10.0}, {"name": "b", "us": 10.2}, {"name": "c", "us": 11.0}]
    autotune.time_finalists_again(passed, {"a": "a", "b": "b", "c": "c"})
    assert order == ["a", "b"] * 3
    assert [e["us"] for e in passed] == [10.55, 10.1, 11.0] and "timings" not in passed[2]
    assert min(passed, key=lambda e: e["us"])["name"] == "b"


def test_swap_ab_is_weighed_only_for_a_few_rows_and_a_k_major_a():
    """Swap AB puts M in wgmma's N (16 or 32): offered for M <= 32, never for an a that is MN-major (its
    16- or 32-row boxes would split TMA's 64-wide ones); its name and fields carry it."""
    assert any(c.swap_ab for c in heuristic.candidates(16, 4096, 4096, 132))
    assert not any(c.swap_ab for c in heuristic.candidates(33, 4096, 4096, 132))
    assert not any(c.swap_ab for c in heuristic.candidates(1, 4096, 4096, 132, a_mn_major=True))
    assert all(c.block_n >= 16 for c in heuristic.swapped_candidates(16, 4096, 4096, 132))
    swap = next(c for c in heuristic.candidates(1, 4096, 4096, 132) if c.swap_ab).config()
    assert config_name(swap).startswith("swap ") and config_from_fields(heuristic.config_fields(swap)) == swap
    assert heuristic.layout_fits(swap, b_mn_major=True, a_mn_major=False)
    assert not heuristic.layout_fits(swap, b_mn_major=False, a_mn_major=True)
    assert heuristic.max_stages(16, 64, swap_ab=True) == heuristic.MAX_STAGES
