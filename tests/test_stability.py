"""The stability run: its summary, its recorded result, the stages it takes (the library call among them),
and on a GPU that its comparison catches one bit."""

from __future__ import annotations

import inspect

import pytest

from tutorial import cli, results, stability, stages


def _rows(mismatched: int = 0) -> list[dict]:
    base = {"stage": "v5_fused", "dtype": "fp16", "m": 4096, "n": 4096, "k": 4096, "input_sets": 4}
    windows = [
        {"t_s": 0.0, "checked_tflops": 700.0, "sm_clock_mhz": 1755.0},
        {"t_s": 55.0, "checked_tflops": 660.0, "sm_clock_mhz": 1515.0},
    ]
    return [
        {**base, "run": "long", "seconds": 60.2, "launches": 9000, "mismatched": mismatched, "windows": windows},
        {**base, "run": "streams", "streams": 4, "launches": 384, "mismatched": 0},
    ]


def test_summary_says_what_each_run_did_and_found():
    long, streams = stability.summary_lines(_rows(mismatched=3))
    assert "one stream for 60 s: 9000 launches, 3 not bit-identical" in long
    assert "700 TFLOP/s (checks included) at 1755 MHz in the first 5 s, 660 at 1515 MHz in the last" in long
    assert streams.endswith("4 streams interleaved: 384 launches, 0 not bit-identical to the verified output")


def test_recorded_stability_run_found_every_launch_identical():
    rows = results.load("stability")["rows"]
    runs = {row["run"]: row for row in rows if (row["stage"], row["dtype"], row["m"]) == ("v5_fused", "fp16", 4096)}
    assert set(runs) == {"long", "streams"}
    long, streams = runs["long"], runs["streams"]
    assert long["seconds"] >= 60 and long["launches"] >= 1000 and long["windows"]
    assert streams["streams"] >= 2 and streams["launches"] >= streams["streams"] * stability.BUFFERS
    for row in rows:
        assert row["passed"] and row["mismatched"] == 0, row


def _stability_stage(monkeypatch, *argv: str) -> list[str]:
    """The stage `python -m tutorial stability ...` hands the run, on a faked GPU."""
    seen = []

    def fake_rows(stage, m, n, k, dtype, *, seconds, streams, log):
        seen.append(stage)
        return [{**row, "stage": stage, "passed": True} for row in _rows()]

    monkeypatch.setattr(cli, "gpu_available", lambda: True)
    monkeypatch.setattr(stability, "stability_rows", fake_rows)
    assert cli.main(["stability", "--m", "256", *argv]) == 0
    return seen


def test_the_stability_command_runs_v5_by_default_and_the_library_call_on_request(monkeypatch, capsys):
    assert _stability_stage(monkeypatch) == ["v5_fused"]
    assert _stability_stage(monkeypatch, "--stage", "library") == ["library"]
    assert _stability_stage(monkeypatch, "--stage", "v4") == ["v4_pipeline_swizzle"]
    assert "library fp16 4096x4096x4096, one stream" in capsys.readouterr().out


@pytest.mark.parametrize("stage", ["v5_fused", "library"])
def test_every_stage_the_run_takes_plans_into_a_given_output(stage):
    """input_sets plans `plan(a, b, out)` per buffer: the stages' launchers and the library call alike."""
    launcher = stages.load(stage)
    assert list(inspect.signature(launcher.plan).parameters)[:3] == ["a", "b", "out"]
    if stage == "library":
        assert launcher.__name__ == "tutorial.library"


@pytest.mark.gpu
@pytest.mark.parametrize("stage", ["v5_fused", "library"])
def test_the_stability_run_of_v5_and_of_the_library_call_passes(stage):
    from gpu import stage_or_skip

    stage_or_skip(stage)
    long, streams = stability.stability_rows(stage, 512, 384, 320, "bf16", seconds=1.0, streams=2, log=print)
    assert long["stage"] == streams["stage"] == stage
    assert long["passed"] and streams["passed"] and long["mismatched"] == streams["mismatched"] == 0
    assert long["launches"] >= stability.BUFFERS and streams["launches"] == 2 * stability.BUFFERS


@pytest.mark.gpu
def test_stability_run_passes_and_its_comparison_sees_one_flipped_bit():
    from gpu import stage_or_skip

    stage_or_skip("v5_fused")
    long, streams = stability.stability_rows("v5_fused", 512, 512, 512, "fp16", seconds=1.0, streams=2, log=print)
    assert long["passed"] and streams["passed"]
    assert long["launches"] >= stability.BUFFERS and streams["launches"] == 2 * stability.BUFFERS

    import cupy

    from tutorial import bench

    input_set = stability.input_sets("v5_fused", bench.Workload.make(256, 256, 256, "fp16"), buffers=2)[0]
    for plan in input_set.plans:
        plan()
    assert input_set.passed and stability._mismatches(input_set) == 0
    input_set.outs[1].view(cupy.uint16)[7, 9] ^= 1  # the lowest mantissa bit of one element
    assert stability._mismatches(input_set) == 1
    per_row = stability._count_differing(
        stability._words(input_set.outs[1]), stability._words(input_set.golden), axis=1
    )
    assert int(per_row.sum()) == 1 and int(per_row[7]) == 1  # the GPU's count, in 8-byte words
