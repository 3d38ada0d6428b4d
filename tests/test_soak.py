"""The library soak: its cases from the autotune table, the time each gets, its record merged into the stability
run's, its summary, its command; and on a Hopper GPU a short soak of two table-like cases that finds no bit
differing."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest

from deepgemm import heuristic
from tutorial import cli, results, soak, stability
from tutorial.runner import show_recorded

FAKE_TABLE = [  # as autotune writes the package's table: fp16 rows only, in problem order
    {"dtype": "fp16", "m": 17, "n": 4096, "k": 4096, "name": "swap m64 n24 c1 s1 st16",
     "config": {"block_m": 64, "block_n": 24, "num_stages": 16, "CLUSTER_M": 1, "CLUSTER_N": 1, "SPLIT_K": 1,
                "SWAP_AB": 1}, "us": 12.0},
    {"dtype": "fp16", "m": 4096, "n": 4096, "k": 4096, "name": "n256 c2 sk1 st4",
     "config": {"block_m": 128, "block_n": 256, "num_stages": 4, "CLUSTER_M": 2, "CLUSTER_N": 1, "SPLIT_K": 1,
                "STREAM_K": 1}, "us": 184.0},
]  # fmt: skip


@pytest.fixture
def fake_table(tmp_path):
    path = tmp_path / "autotune.json"
    path.write_text(json.dumps({"rows": FAKE_TABLE}))
    return heuristic.table(path)


def test_cases_are_every_table_row_in_each_dtype_with_the_tables_config(fake_table):
    cases = soak.table_cases(fake_table)
    assert [(c.dtype, c.m) for c in cases] == [("fp16", 17), ("fp16", 4096), ("bf16", 17), ("bf16", 4096)]
    assert [heuristic.config_name(c.config) for c in cases[2:]] == [row["name"] for row in FAKE_TABLE]
    assert [c.dtype for c in soak.table_cases(fake_table, ["bf16"])] == ["bf16", "bf16"]


def test_a_dtype_with_its_own_entry_takes_it(fake_table):
    own = heuristic.config_from_name("n128 c1 s1 st6")
    cases = soak.table_cases({**fake_table, ("bf16", 4096, 4096, 4096): own})
    assert [c.config for c in cases if c.dtype == "bf16"] == [fake_table[("fp16", 17, 4096, 4096)], own]
    only_bf16 = soak.table_cases({("bf16", 8, 8, 8): own}, ["fp16", "bf16"])
    assert [(c.dtype, c.m) for c in only_bf16] == [("bf16", 8)]


def test_each_case_gets_its_share_of_the_time_and_at_least_the_minimum():
    assert soak.case_seconds(600, 204) == pytest.approx(600 / 204)
    assert soak.case_seconds(2, 4) == soak.MIN_CASE_S


def _soak_row(m: int, mismatched: int = 0, **fields) -> dict:
    row = {**soak.Case("fp16", m, 4096, 4096, heuristic.config_from_name("n256 c2 sk1 st4")).row(4, 2),
           "seconds": 2.9, "launches": 1000, "mismatched": mismatched, "verified": True, **fields}  # fmt: skip
    return {**row, "passed": row["verified"] and row["mismatched"] == 0}


def _v5_rows() -> list[dict]:
    base = {"stage": "v5_fused", "dtype": "fp16", "m": 4096, "n": 4096, "k": 4096, "input_sets": 4, "passed": True,
            "launches": 384, "mismatched": 0}  # fmt: skip
    windows = [{"t_s": 0.0, "checked_tflops": 458.0, "sm_clock_mhz": 1890.0}]
    return [{**base, "run": "long", "seconds": 60.0, "windows": windows}, {**base, "run": "streams", "streams": 4}]


def _prov(date: str) -> dict:
    return {"gpu": "NVIDIA H200", "driver": "580", "cuda": "13.2", "date": date, "commit": "abc", "command": "x"}


def test_the_record_keeps_the_stability_rows_replaces_an_earlier_soak_and_keeps_every_run(tmp_path, monkeypatch):
    monkeypatch.delenv("DEEPGEMM_CC", raising=False)
    (tmp_path / "stability.json").write_text(json.dumps({"provenance": _prov("v5 day"), "rows": _v5_rows()}))
    stability.record([_soak_row(1), _soak_row(2)], _prov("first soak"), tmp_path)
    stability.record([_soak_row(3)], _prov("second soak"), tmp_path)
    record = results.load("stability", tmp_path)
    assert [(r["run"], r.get("m")) for r in record["rows"]] == [("long", 4096), ("streams", 4096), ("soak", 3)]
    assert record["rows"][-1]["run_date"] == "second soak" and "run_date" not in record["rows"][0]
    assert [p["date"] for p in record["runs"]] == ["v5 day", "first soak", "second soak"]
    assert record["provenance"]["date"] == "second soak"


def test_the_summary_sums_up_the_soak_and_names_each_failed_case():
    rows = [*_v5_rows(), _soak_row(1), _soak_row(2, mismatched=3), _soak_row(3, error="CUDARuntimeError: boom")]
    rows[-1].update(launches=0, seconds=0.0, verified=False, passed=False)
    whole, *failed = soak.summary_lines(rows)
    assert "3 cases" in whole and "4 streams from 2 threads for 6 s: 2000 launches, 3 not bit-identical" in whole
    assert whole.endswith("2 cases failed")
    assert "fp16 2x4096x4096 n256 c2 sk1 st4" in failed[0] and "3 differing FAILED" in failed[0]
    assert "fp16 3x4096x4096" in failed[1] and "CUDARuntimeError: boom" in failed[1]
    assert "no library soak" in soak.summary_lines(_v5_rows())[0]


def test_the_stability_command_shows_a_record_that_holds_a_soak(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DEEPGEMM_CC", raising=False)
    (tmp_path / "stability.json").write_text(json.dumps({"provenance": _prov("v5 day"), "rows": _v5_rows()}))
    stability.record([_soak_row(1)], _prov("soak day"), tmp_path)
    show_recorded("stability", stability.summary_lines, directory=tmp_path)  # a soak's rows skipped
    print("\n".join(soak.record_lines(results.load("stability", tmp_path))))
    out = capsys.readouterr().out
    assert out.count("v5_fused fp16 4096x4096x4096, one stream for 60 s") == 2
    assert out.count("deepgemm.gemm soak: 1 cases") == 1
    stability.record(_v5_rows()[:1], _prov("v5 again"), tmp_path)  # a new long run replaces the old one only
    kept = results.load("stability", tmp_path)["rows"]
    assert [(r["run"], r.get("run_date")) for r in kept] == [
        ("streams", None),
        ("soak", "soak day"),
        ("long", "v5 again"),
    ]


def test_the_soak_command_takes_its_options_and_without_a_gpu_shows_the_record(monkeypatch, capsys):
    args = cli.build_parser().parse_args(
        ["soak", "--seconds", "600", "--streams", "4", "--threads", "2", "--dtype", "both", "--record"]
    )
    assert (args.seconds, args.streams, args.threads, args.dtype, args.record) == (600.0, 4, 2, "both", True)
    assert args.run is cli.cmd_soak
    monkeypatch.setattr(cli, "gpu_available", lambda: False)  # on a GPU machine too: no soak here
    monkeypatch.setattr(results, "gpu_available", lambda: False)  # and the banner says so
    assert cli.main(["soak"]) == 0
    assert capsys.readouterr().out.startswith("RECORDED results (no GPU here)")


class _FakeStream:
    """Stands in for a CuPy stream where no GPU is: its events are done at once."""

    current: _FakeStream | None = None  # as CuPy's current stream: the one a launch would be queued on

    def __init__(self, name: str) -> None:
        self.name, self.synchronized = name, False

    def __enter__(self) -> _FakeStream:
        _FakeStream.current = self
        return self

    def __exit__(self, *_: object) -> None:
        _FakeStream.current = None

    def record(self) -> SimpleNamespace:
        return SimpleNamespace(done=True)

    def synchronize(self) -> None:
        self.synchronized = True


def test_a_thread_alternates_its_streams_launch_by_launch_until_the_deadline(monkeypatch):
    launched = []
    monkeypatch.setattr(soak, "enqueue_checked", lambda plan, *_: launched.append((_FakeStream.current.name, plan)))
    lanes = [soak.Lane(_FakeStream(name), SimpleNamespace(plans=list(range(stability.BUFFERS)),
                                                          outs=[None] * stability.BUFFERS, golden=None), None)
             for name in "ab"]  # fmt: skip
    soak.drive(lanes, time.monotonic() + 0.05, threading.Event())
    assert launched[:4] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert len(launched) % (2 * stability.BUFFERS) == 0 and lanes[0].launches == lanes[1].launches > 0
    assert all(lane.stream.synchronized for lane in lanes)


def test_the_soak_refuses_more_threads_than_streams():
    with pytest.raises(ValueError, match="3 threads cannot each drive a stream of 2"):
        soak.soak([], 1.0, streams=2, threads=3)


@pytest.mark.gpu
def test_a_short_soak_of_swap_ab_at_odd_m_and_of_stream_k_finds_every_launch_identical():
    from gpu import sm90a_library_or_skip

    sm90a_library_or_skip()
    cases = [
        soak.Case("bf16", 17, 1032, 1000, heuristic.config_from_name("swap m64 n24 c1 s3 st8")),
        soak.Case("fp16", 1000, 4096, 4160, heuristic.config_from_name("n256 c2 sk1 st4")),
    ]
    rows = soak.soak(cases, 2.0, streams=4, threads=2)
    for row in rows:
        assert "error" not in row, row
        assert row["verified"] and row["mismatched"] == 0 and row["passed"], row
        assert row["launches"] >= 4 * stability.BUFFERS and row["streams"] == 4 and row["threads"] == 2
