"""The timing harness's own logic: NVML sampling, the alternating v5 / cuBLAS pairs, host time per call."""

from __future__ import annotations

import argparse
import types

import pytest

from tutorial import bench, cli, results, timing
from tutorial.stages import STAGES


class FakeNvml:
    """Stands in for pynvml (its camelCase names): a clock, instantaneous and averaged power, event reasons."""

    NVML_CLOCK_SM = 0
    NVML_FI_DEV_POWER_INSTANT = 186

    def __init__(self, *, instant_mw: int | None, average_mw: int, reasons: list[int]) -> None:
        self.instant_mw, self.average_mw, self.reasons = instant_mw, average_mw, list(reasons)

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return 1500

    def nvmlDeviceGetFieldValues(self, handle, fields):
        assert fields == [self.NVML_FI_DEV_POWER_INSTANT]
        ok = self.instant_mw is not None
        value = types.SimpleNamespace(uiVal=self.instant_mw or 0)
        return [types.SimpleNamespace(nvmlReturn=0 if ok else 3, value=value)]

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.average_mw

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.reasons.pop(0)


def test_sampler_reads_instantaneous_power_and_the_power_cap_flag():
    nvml = FakeNvml(instant_mw=698_000, average_mw=231_000, reasons=[0x4, 0x4, 0x4 | 0x1, 0x0])
    sampler = timing.PowerSampler(nvml, handle="gpu0")
    for _ in range(4):
        sampler.sample()
    assert sampler.median_power() == pytest.approx(698.0)  # not the one-second average
    assert sampler.median_clock() == 1500
    assert sampler.capped_pct() == pytest.approx(75.0)  # bit 0x4 set in three of four samples
    sampler.reset()
    assert sampler.capped_pct() is None and sampler.median_power() is None


def test_sampler_falls_back_to_the_average_where_the_field_is_missing():
    nvml = FakeNvml(instant_mw=None, average_mw=231_000, reasons=[0x0])
    sampler = timing.PowerSampler(nvml, handle="gpu0")
    sampler.sample()
    assert sampler.median_power() == pytest.approx(231.0)
    assert sampler.capped_pct() == 0.0


def test_sampler_leaves_the_flag_out_where_the_driver_does_not_report_it():
    class NoReasons(FakeNvml):
        def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    sampler = timing.PowerSampler(NoReasons(instant_mw=650_000, average_mw=0, reasons=[]), handle="gpu0")
    sampler.sample()
    assert sampler.median_power() == pytest.approx(650.0)
    assert sampler.capped_pct() is None


def _pair_rows(ratios: list[float]) -> list[dict]:
    rows = []
    for pair, ratio in enumerate(ratios):
        base = {"dtype": "fp16", "m": 4096, "n": 4096, "k": 4096, "pair": pair}
        rows += [{**base, "stage": "cublas", "x_cublas": 1.0}, {**base, "stage": "v5_fused", "x_cublas": ratio}]
    return rows


def test_pair_summary_gives_median_and_spread_per_stage_and_shape():
    rows = _pair_rows([0.98, 1.01, 0.99, 0.97])
    rows += [{**r, "m": 8192, "n": 8192, "k": 8192} for r in _pair_rows([1.02, 1.03])]
    summary = results.pair_summary(rows)
    assert [(s["m"], s["pairs"]) for s in summary] == [(4096, 4), (8192, 2)]
    assert summary[0]["x_cublas_median"] == pytest.approx(0.985)
    assert (summary[0]["x_cublas_min"], summary[0]["x_cublas_max"]) == (0.97, 1.01)
    assert "0.985" in results.format_table(summary, results.PAIR_COLUMNS)


def test_pair_summary_ignores_records_without_pairs():
    assert results.pair_summary([{"stage": "v5_fused", "dtype": "fp16", "m": 1, "n": 1, "k": 1, "x_cublas": 1.0}]) == []


@pytest.mark.gpu
def test_pairs_alternate_and_compare_within_each_pair():
    from gpu import stage_or_skip

    stage_or_skip("v5_fused")
    rows = bench.bench_pairs("v5_fused", 512, 512, 512, "fp16", pairs=2, settle_s=0.0, log=lambda _: None)
    assert [r["stage"] for r in rows] == ["cublas", "v5_fused", "v5_fused", "cublas"]
    assert all(r["passed"] for r in rows)
    for pair in (0, 1):
        cublas, v5 = (next(r for r in rows if r["pair"] == pair and r["stage"] == s) for s in ("cublas", "v5_fused"))
        assert cublas["x_cublas"] == 1.0
        assert v5["x_cublas"] == pytest.approx(v5["tflops"] / cublas["tflops"])


def test_rounds_rotate_the_order_and_compare_within_each_round(monkeypatch):
    """The timing order without a GPU: each round starts one place further along, and each row's ratio is
    to the cuBLAS row of its own round (the pairs are the two-setting case: cuBLAS first, then the stage)."""
    speeds = iter(range(100, 200))

    def fake_measure(name, work, launches, *, settle_s):
        return {"stage": name, "tflops": float(next(speeds))}

    one_set = types.SimpleNamespace(problems=[(0, 0)])
    monkeypatch.setattr(bench.Workload, "make", classmethod(lambda cls, *a, **k: one_set))
    monkeypatch.setattr(bench, "cublas_launches", lambda work: [])
    monkeypatch.setattr(bench, "measure", fake_measure)
    plans = {"a": lambda a, b: None, "b": lambda a, b: None}
    rows = bench.bench_rounds(plans, 64, 64, 64, "fp16", rounds=3, log=lambda _: None)
    assert [r["stage"] for r in rows] == ["cublas", "a", "b", "a", "b", "cublas", "b", "cublas", "a"]
    assert [r["pair"] for r in rows] == [0] * 3 + [1] * 3 + [2] * 3
    for row in rows:
        cublas = next(r for r in rows if r["pair"] == row["pair"] and r["stage"] == "cublas")
        assert row["x_cublas"] == row["tflops"] / cublas["tflops"]


def _bench_args(**overrides: object) -> argparse.Namespace:
    args = cli.build_parser().parse_args(["bench", "--shapes", "4096,8192", "--dtype", "both"])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_a_progression_run_ends_with_v5_and_cublas_alternated(monkeypatch):
    calls = []

    def fake_pairs(stage, m, n, k, dtype, *, pairs, settle_s, log):
        calls.append((stage, m, dtype, pairs))
        return _pair_rows([1.0] * pairs)

    monkeypatch.setattr(bench, "bench_pairs", fake_pairs)
    rows = cli.run_pairs(STAGES, _bench_args())
    assert calls == [("v5_fused", m, d, 6) for m in (4096, 8192) for d in ("fp16", "bf16")]
    assert len(rows) == 4 * 6 * 2
    # Other suites, --pairs 0, or a run without v5 alternate nothing.
    assert cli.run_pairs(STAGES, _bench_args(suite="epilogue")) == []
    assert cli.run_pairs(STAGES, _bench_args(pairs=0)) == []
    assert cli.run_pairs(("v0_naive", "v4_pipeline_swizzle"), _bench_args()) == []
    assert len(calls) == 4


def test_bench_help_lists_each_suite_on_its_own_line(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.split("suites:\n", 1)[1].splitlines() if line.startswith("  ") and
              not line.startswith("   ")]  # fmt: skip
    assert listed == list(cli.SUITES)
    assert "{'progression'" not in out  # not the raw dict
    assert "raster" not in cli.SUITES  # folded into the ablation suite's v4 GROUP_M 1 row


def test_a_recorded_command_of_the_old_cli_is_shown_with_today_s():
    from tutorial.runner import command_lines

    old = "python -m deepgemm bench --suite ablation --dtype fp16 --record"
    assert command_lines(old, results.recording_command("ablation")) == [
        f"(command: {old})",
        "(today: python -m tutorial bench --suite ablation --record)",
    ]
    same = "python -m tutorial stability --m 4096 --record"
    assert command_lines(same, results.recording_command("stability")) == [f"(command: {same})"]
    gone = f"python -m lab.v5_hiding --record at commit c44a640; {results.COMMAND_GONE}"
    assert command_lines("python -m lab.v5_hiding --record", gone)[1] == f"(note: {gone})"


def test_without_a_gpu_the_progression_shows_the_pairs_of_its_own_run_only(monkeypatch, capsys):
    prov = {"gpu": "H200", "driver": "580", "cuda": "13.2", "date": "2026-11-30", "commit": "abc", "command": "bench"}
    progression = {"provenance": prov, "rows": [{**r, "tflops": 1.0} for r in _pair_rows([1.0])]}
    records = {"progression": progression, "pairs": {"provenance": prov, "rows": _pair_rows([1.01, 0.99, 1.03])}}
    monkeypatch.setattr(results, "load", lambda name, *_, **__: records[name])
    cli.show_recorded_suite("progression")
    assert "alternated in the same run" in capsys.readouterr().out
    records["pairs"] = {"provenance": {**prov, "date": "2026-11-29"}, "rows": records["pairs"]["rows"]}
    cli.show_recorded_suite("progression")
    assert "alternated" not in capsys.readouterr().out


def test_host_time_is_the_least_repeat_of_unsynchronised_calls_per_call():
    """Each launch runs once before the clock; then `repeats` times `calls` calls between two clock reads,
    with the GPU waited for only after the second read; the least repeat, per call, in µs."""
    events: list[str] = []
    ticks = iter([0.0, 0.003, 1.0, 1.002, 2.0, 2.004])  # repeats of 3, 2 and 4 ms

    def clock() -> float:
        events.append("clock")
        return next(ticks)

    launches = [lambda i=i: events.append(f"call{i}") for i in range(2)]
    us = timing.host_us_per_call(launches, calls=4, repeats=3, clock=clock, sync=lambda: events.append("sync"))
    assert us == pytest.approx(1e6 * 0.002 / 4)
    one_repeat = ["clock", "call0", "call1", "call0", "call1", "clock", "sync"]
    assert events == ["call0", "call1", "sync", *one_repeat * 3]


class FakeClockGpu:
    """A GPU whose SM clock falls as it works: each replay of graph g costs `cost_us[g]` scaled by how much work
    ran before (the H200 slowing under its power limit); CUDA events read the time the queue reached them."""

    def __init__(self, cost_us: dict[str, float]) -> None:
        self.cost_us, self.now_us, self.replayed = cost_us, 0.0, []
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at_us = None

            def record(self) -> None:
                self.at_us = gpu.now_us

            def query(self) -> bool:
                return True

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, end: Event) -> float:
                return (end.at_us - self.at_us) / 1e3

        self.torch = types.SimpleNamespace(cuda=types.SimpleNamespace(Event=Event))

    def graph(self, name: str, calls: int) -> timing.CapturedGraph:
        def replay() -> None:
            self.replayed.append(name)
            self.now_us += calls * self.cost_us[name] * (1 + self.now_us / 1e6)  # 0.1% slower per ms of work

        return timing.CapturedGraph(types.SimpleNamespace(replay=replay), calls, None)


def test_graphs_are_timed_in_alternating_batches_so_a_falling_clock_slows_each_alike(monkeypatch):
    """Each round runs one batch of every graph in turn, each batch about batch_ms long; each graph's median is
    of its own batches, per call. On a GPU that slows as it works, ours and torch's keep the ratio of their
    costs (2.0), where timed one after the other the second would read slower than it is."""
    gpu = FakeClockGpu({"ours": 10.0, "torch": 20.0})
    monkeypatch.setattr(timing, "require_torch", lambda: gpu.torch)
    monkeypatch.setattr(timing, "synchronize", lambda: None)
    graphs = [gpu.graph("ours", 5), gpu.graph("torch", 5)]  # 50 and 100 us a replay
    ours, torch = timing.time_graphs(graphs, batch_ms=1.0, batches=4, sampler=timing.PowerSampler(nvml=None))
    timed = gpu.replayed[-(4 * (20 + 10)) :]  # 20 replays of ours make a 1 ms batch, 10 of torch's
    assert timed == (["ours"] * 20 + ["torch"] * 10) * 4
    assert (ours.launches_per_batch, torch.launches_per_batch, len(ours.batch_ms)) == (100, 50, 4)
    assert ours.ms == pytest.approx(0.010, rel=0.02) and torch.ms == pytest.approx(0.020, rel=0.02)
    assert torch.ms / ours.ms == pytest.approx(2.0, rel=2e-3)


class FixedSampler:
    """A PowerSampler that saw one clock and power throughout."""

    def reset(self) -> None: ...

    def median_clock(self) -> float:
        return 1500.0

    def median_power(self) -> float:
        return 690.0

    def capped_pct(self) -> float:
        return 50.0


def test_contenders_compared_per_call_have_their_batches_alternated(monkeypatch):
    """Timed one after the other, the first contender meets the clock the power limit left it and the second
    the clock it recovered to: each round runs one batch of each, every batch sized to its own launches."""
    ran = []

    def fake_run_batch(launches, count, sampler):
        ran.append((launches[0], count))
        return {"ours": 0.010, "torch": 0.030}[launches[0]]  # ms per launch

    monkeypatch.setattr(timing, "run_batch", fake_run_batch)
    ours, torch = timing.time_launches_alternated([["ours"], ["torch"]], batch_ms=3.0, batches=3, warmup_ms=6.0,
                                                  sampler=FixedSampler())  # fmt: skip
    assert ran[:4] == [("ours", 1), ("torch", 1), ("ours", 600), ("torch", 200)]  # probes, then the warm-ups
    assert ran[4:] == [("ours", 300), ("torch", 100)] * 3
    assert (ours.ms, ours.launches_per_batch, torch.ms, torch.launches_per_batch) == (0.010, 300, 0.030, 100)
    assert ours.sm_clock_mhz == torch.sm_clock_mhz == 1500.0


def test_contenders_are_each_verified_before_any_is_timed(monkeypatch):
    events = []
    work = types.SimpleNamespace(m=64, n=128, k=256, base_row=lambda name: {"stage": name},
                                 checked_sets=lambda launches: [(0, "ref")])  # fmt: skip
    stats = types.SimpleNamespace(as_dict=lambda: {"passed": True}, rel_fro=0.0, max_abs=0.0, passed=True)
    monkeypatch.setattr(bench, "verify", lambda launch, expected, out: events.append(("verify", launch)) or stats)
    monkeypatch.setattr(bench, "settle", lambda s: events.append(("settle", s)))

    def fake_alternated(contenders, **kw):
        events.append(("time", [c[0] for c in contenders]))
        return [timing.Timing(ms=ms, batch_ms=(ms,), launches_per_batch=1, sm_clock_mhz=1500.0, power_w=690.0)
                for ms in (0.02, 0.03)]  # fmt: skip

    monkeypatch.setattr(bench, "time_launches_alternated", fake_alternated)
    rows = bench.measure_alternated({"ours": ["a0"], "torch": ["t0"]}, work, settle_s=0.1)
    assert events == [("verify", "a0"), ("verify", "t0"), ("settle", 0.1), ("time", ["a0", "t0"])]  # one set each
    assert list(rows) == ["ours", "torch"] and (rows["ours"]["ms"], rows["torch"]["ms"]) == (0.02, 0.03)
    assert rows["torch"]["stage"] == "torch" and rows["ours"]["passed"]


def test_a_launch_that_reads_another_input_set_fails_where_the_first_one_passes(monkeypatch):
    """The first launch checked alone passes a rotation whose later launches all read set 0's operands; the
    last launch checked against its own set's reference fails it."""
    import numpy as np

    from tests.numpy_cupy import numpy_for_cupy, rotating_workload

    numpy_for_cupy(monkeypatch)
    work, product = rotating_workload()

    def launch(i: int):
        return lambda: product(i)

    right = bench.verified_row("right", work, [launch(i) for i in range(3)])
    stuck = bench.verified_row("stuck", work, [launch(0)] * 3)
    assert right["passed"] and right["sets_verified"] == 2
    assert not stuck["passed"] and stuck["sets_verified"] == 2
    assert bench.verified_row("one", work, [launch(0)])["sets_verified"] == 1  # not one launch per set

    class PaddedLaunch:  # a kernel that writes a padded buffer, copied into out; this one leaves it unwritten
        def __init__(self, i: int) -> None:
            self.written = np.zeros((8, 24), np.float16)
            self.written[:, :16] = launch(i)()  # a right answer left there by an earlier run
            self.out = np.empty((8, 16), np.float16)

        def __call__(self):
            self.out[...] = self.written[:, :16]
            return self.out

    assert not bench.verified_row("padded", work, [PaddedLaunch(i) for i in range(3)])["passed"]


def test_batches_are_sized_by_the_warm_launches_not_the_first(monkeypatch):
    """The first launch also compiles and loads: sized by it, a batch of a 10 us kernel would hold a handful,
    and the warm-up would last a fraction of a millisecond."""
    counts = []

    def fake_run_batch(launches, count, sampler):
        counts.append(count)
        return 5.0 if len(counts) == 1 else 0.010  # ms per launch: the first cold, then warm

    monkeypatch.setattr(timing, "run_batch", fake_run_batch)
    measured = timing.time_launches(["ours"], batch_ms=3.0, batches=2, warmup_ms=60.0, sampler=FixedSampler())
    assert counts == [1, 12, 5988, 300, 300] and measured.launches_per_batch == 300  # warmed up for 60 ms
