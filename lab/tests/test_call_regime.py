"""lab.call_regime without a GPU: the four states of the clock it compares, the ratio each entry carries, its
lines, and its record (made on an H100 only) printed."""

from __future__ import annotations

from lab import call_regime, recorded_dir, shape_sweep
from tutorial import results
from tutorial.shape_suite import CALL_TIMING


def test_hot_runs_a_second_first_in_batches_longer_than_the_shape_tables():
    hot = call_regime.HOT
    assert hot["settle_s"] == 0.0 and hot["warmup_ms"] >= 1000.0 and hot["batch_ms"] > CALL_TIMING["batch_ms"]


def test_an_entry_is_torchs_time_over_ours_and_fails_where_either_check_did():
    entry = call_regime.regime("hot", {"us": 100.0, "passed": True, "sm_clock_mhz": 1500.0}, {"us": 90.0})
    assert entry["x_torch"] == 0.9 and entry["passed"] and entry["sm_clock_mhz"] == 1500.0
    assert not call_regime.regime("graphs", {"us": 1.0}, {"us": 1.0, "passed": False})["passed"]


def test_lines_show_each_state_with_its_ratio_and_clock():
    row = {"dtype": "fp16", "m": 512, "n": 4096, "k": 4096, "candidates": [
        call_regime.regime("settled", {"us": 25.0, "passed": True, "sm_clock_mhz": 1965.0}, {"us": 24.0}),
        call_regime.regime("burst", {"us": 24.0}, {"us": 22.0, "passed": False}),
    ]}  # fmt: skip
    assert call_regime.lines([row]) == [
        "fp16 512x4096x4096",
        "  settled  ours    25.00 us  torch    24.00 us  x 0.960    1965 MHz",
        "  burst    ours    24.00 us  torch    22.00 us  x 0.917              FAILED",
    ]


def test_without_a_gpu_its_record_from_the_only_gpu_that_ran_it_prints(capsys, monkeypatch):
    """The sweeps read the H200's folder where it holds the record, else another GPU's (this one: H100 only)."""
    monkeypatch.setattr(shape_sweep, "gpu_available", lambda: False)  # on a GPU too: the record, not a sweep
    assert call_regime.main([]) == 0
    record = results.load("call_regime", recorded_dir("call_regime"))
    shown = capsys.readouterr().out
    assert record["provenance"]["gpu"] in shown and "\n".join(call_regime.lines(record["rows"])) in shown

