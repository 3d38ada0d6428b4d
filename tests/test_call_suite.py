"""The call suite without a GPU: operand layouts on NumPy stand-ins, its rows assembled from fake
measurements, its shapes and settle time on the command line, and its tables."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pytest

from tutorial import bench, call_suite, cli, first_call, results

M, N, K = 6, 10, 4  # all different, so that a transposed view cannot pass for the row-major array


def _matrix(rows: int, cols: int) -> np.ndarray:
    return np.random.default_rng(rows * cols).random((rows, cols)).astype(np.float16) + np.float16(1)


@pytest.mark.parametrize(("layout", "rows", "cols"), [("km", M, K), ("nk", K, N)])
def test_a_transposed_layout_is_the_transposed_view_of_a_row_major_array(layout, rows, cols):
    x = _matrix(rows, cols)
    arranged = bench.arrange(x, layout)
    assert arranged.shape == (rows, cols) and np.array_equal(arranged, x)
    assert arranged.strides == (2, 2 * rows)  # unit stride down a column: the view of (cols, rows) row-major
    assert arranged.base.shape == (cols, rows) and arranged.base.flags.c_contiguous


@pytest.mark.parametrize(("layout", "rows", "cols"), [("mk", M, K), ("kn", K, N)])
def test_a_row_major_layout_is_row_major_and_not_copied_twice(layout, rows, cols):
    x = _matrix(cols, rows).T  # a transposed view in, a row-major array out
    arranged = bench.arrange(x, layout)
    assert arranged.flags.c_contiguous and arranged.strides == (2 * cols, 2) and np.array_equal(arranged, x)
    assert bench.arrange(arranged, layout) is arranged


def test_arrange_rejects_an_unknown_layout():
    with pytest.raises(ValueError, match="layout 'mn' is none of"):
        bench.arrange(_matrix(2, 2), "mn")


def _numpy_workload(sets: int = 2) -> bench.Workload:
    problems = [(_matrix(M, K), _matrix(N, K).T) for _ in range(sets)]
    return bench.Workload(M, N, K, "fp16", problems, None, {}, expected=None)


def test_a_workload_in_a_layout_keeps_its_values_and_reference():
    work = _numpy_workload()
    moved = work.in_layout("km", "kn")
    assert moved.expected is work.expected and len(moved.problems) == len(work.problems)
    for (a, b), (a2, b2) in zip(work.problems, moved.problems):
        assert np.array_equal(a, a2) and np.array_equal(b, b2)
        assert a2.strides == (2, 2 * M) and b2.flags.c_contiguous
    with pytest.raises(ValueError, match="a's layout is one of"):
        work.in_layout("kn", "mk")


class FakeTorch:
    """from_dlpack tags what it wraps; matmul is never run (the launches are only built)."""

    @staticmethod
    def from_dlpack(x):
        return ("torch", x)

    @staticmethod
    def matmul(a, b):
        raise AssertionError("the fake measurement runs no launch")


def test_torch_inputs_go_to_both_calls_and_cupy_inputs_to_deepgemm_only():
    work = _numpy_workload()
    gemm_sets, torch_sets = call_suite.operand_sets(work, "torch", FakeTorch)
    assert gemm_sets == torch_sets and torch_sets[0][0] == ("torch", work.problems[0][0])
    gemm_sets, torch_sets = call_suite.operand_sets(work, "cupy", FakeTorch)
    assert gemm_sets[1][1] is work.problems[1][1] and torch_sets[1][1] == ("torch", work.problems[1][1])
    with pytest.raises(ValueError, match="framework 'jax'"):
        call_suite.operand_sets(work, "jax", FakeTorch)


@pytest.fixture
def fake_measurements(monkeypatch):
    """The suite with every GPU step faked: each workload's seed and layouts, each measurement's name and
    order are recorded; deepgemm takes 2 ms, torch 3 ms, a call's host time is 10 us and torch's 12."""
    seen = {"seeds": [], "layouts": [], "measured": []}

    class FakeWorkload:
        @classmethod
        def make(cls, m, n, k, dtype_name, *, seed=0):
            seen["seeds"].append(seed)
            return replace(_numpy_workload(), m=m, n=n, k=k, dtype_name=dtype_name)

    def fake_measure(contenders, work, *, settle_s):
        rows = {}
        for name, launches in contenders.items():  # in the order of each round
            seen["measured"].append(name)
            if name == call_suite.TORCH:  # what torch.matmul is handed: a torch view of the first set's a
                seen["layouts"].append(launches[0].args[0][1].strides)
            ms = 2.0 if name == call_suite.GEMM else 3.0
            rows[name] = {**work.base_row(name), "ms": ms, "tflops": 1.0, "passed": True, "max_abs": 0.0,
                          "sm_clock_mhz": 1500}  # fmt: skip
        return rows

    monkeypatch.setattr(call_suite, "Workload", FakeWorkload)
    monkeypatch.setattr(call_suite, "measure_alternated", fake_measure)
    monkeypatch.setattr(call_suite, "require_torch", lambda: FakeTorch)
    monkeypatch.setattr(call_suite, "host_us_per_call", lambda ls: 12.0 if ls[0].func is FakeTorch.matmul else 10.0)
    return seen


def test_a_call_row_per_layout_pair_and_framework_with_torch_beside_it(fake_measurements):
    rows = call_suite.bench_call(4096, 2048, 1024, "bf16", settle_s=0.0, log=lambda _: None)
    assert [(r["a_layout"], r["b_layout"], r["framework"]) for r in rows] == [
        (a, b, f) for a in ("mk", "km") for b in ("kn", "nk") for f in ("torch", "cupy")
    ]
    for row in rows:
        assert (row["dtype"], row["m"], row["n"], row["k"], row["stage"]) == ("bf16", 4096, 2048, 1024, "deepgemm.gemm")
        assert (row["call_us"], row["torch_us"], row["host_us"], row["torch_host_us"]) == (2000.0, 3000.0, 10.0, 12.0)
        assert row["x_torch"] == pytest.approx(1.5)
        assert row["torch_sm_clock_mhz"] == 1500 and row["torch_passed"] is True
        assert {"sm_clock_mhz", "passed", "input_sets"} <= row.keys()
    # Every row has input sets of its own, and the order of the two timings swaps from one row to the next.
    assert len(set(fake_measurements["seeds"])) == len(rows)
    assert [r["timed_first"] for r in rows[:3]] == ["deepgemm.gemm", "torch.matmul", "deepgemm.gemm"]
    assert fake_measurements["measured"][:4] == ["deepgemm.gemm", "torch.matmul", "torch.matmul", "deepgemm.gemm"]
    # torch.matmul gets the layout the row names: a (M, K) as "km" has unit stride down its columns.
    assert fake_measurements["layouts"] == [(2 * K, 2)] * 4 + [(2, 2 * M)] * 4


def test_the_call_suite_needs_torch_and_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(RuntimeError, match="install PyTorch"):
        call_suite.require_torch()


def _bench_args(*argv: str):
    return cli.build_parser().parse_args(["bench", "--suite", "call", *argv])


def test_the_call_suite_runs_its_own_shapes_and_settle_time_unless_given():
    args = _bench_args()
    shapes = [shape for shape, dtype in cli.problems(args, cli.SUITE_SHAPES["call"]) if dtype == "fp16"]
    assert shapes == [(4096,) * 3, (8192,) * 3, (1, 4096, 4096), (128, 4096, 4096), (2048,) * 3]
    assert cli.settle_s(args, "call") == call_suite.SETTLE_S and cli.settle_s(args, "progression") == 1.0
    assert cli.problems(_bench_args("--m", "512", "--dtype", "fp16"), "4096") == [((512, 512, 512), "fp16")]
    assert cli.settle_s(_bench_args("--settle", "2"), "call") == 2.0


def test_only_the_call_suite_measures_the_first_call(monkeypatch):
    monkeypatch.setattr(first_call, "first_call_rows", lambda log: [{"mode": "cold"}, {"mode": "warm"}])
    assert cli.run_first_call(_bench_args()) == {"first_call": [{"mode": "cold"}, {"mode": "warm"}]}
    assert cli.run_first_call(_bench_args("--no-first-call")) == {}
    assert cli.run_first_call(cli.build_parser().parse_args(["bench", "--suite", "epilogue"])) == {}


def _call_record() -> dict:
    row = {"stage": "deepgemm.gemm", "framework": "cupy", "a_layout": "km", "b_layout": "kn", "dtype": "fp16",
           "m": 128, "n": 4096, "k": 4096, "host_us": 9.5, "torch_host_us": 12.25, "call_us": 40.0,
           "torch_us": 30.0, "x_torch": 0.75, "passed": True}  # fmt: skip
    first = {"mode": "warm", "framework": "torch", "dtype": "fp16", "m": 4096, "n": 4096, "k": 4096,
             "import_s": 0.0625, "first_call_s": 0.25, "nvrtc_compiles": 0}  # fmt: skip
    prov = {"gpu": "NVIDIA H200", "driver": "580", "cuda": "13.2", "date": "2026-12-01", "commit": "abc",
            "command": "x"}  # fmt: skip
    return {"provenance": prov, "rows": [row], "first_call": [first]}


def test_the_call_table_shows_layouts_times_and_the_first_call(monkeypatch, capsys):
    monkeypatch.setattr(results, "load", lambda name, *_, **__: _call_record())
    assert cli.main(["table", "--name", "call"]) == 0
    out = capsys.readouterr().out
    assert "| cupy | km | kn | fp16 | 128x4096x4096 | 9.5 | 12.2 | 40.0 | 30.0 | 0.75 |" in out
    assert "| warm | torch | fp16 | 4096x4096x4096 | 0.062 | 0.250 | 0 |" in out
    cli.show_recorded_suite("call")
    out = capsys.readouterr().out
    assert "RECORDED" in out and "128x4096x4096" in out and "0.250" in out
    failed = {**_call_record()["rows"][0], "passed": False}
    assert cli.row_label(failed) == "deepgemm.gemm cupy km x kn fp16 128x4096x4096"
