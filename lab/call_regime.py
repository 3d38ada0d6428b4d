"""python -m lab.call_regime: is the per-call ratio to torch.matmul at large M the kernels, or the clock's state?

In the shape table at c4ad4b8, 64 of the 78 rows above M = 500 were at or above torch in CUDA graphs and 19 per
call. Per call, torch ran a median 6% under its own graph time and ours 0.6%; with the queue held (50 calls run
back to back, about 5 ms at 2048 x 4096 x 4096, `device_us`) torch ran 15% under its graph time there, ours 4%.
The H200 is held at its power limit: its clock falls by hundreds of MHz within the first second of load, and
per call the table times after a 0.1 s settle, graphs once the GPU is hot. So each shape here is timed, ours
and torch alternated, in four states of the clock, in this order:

- settled: per call as the shape table times it (`call_suite.time_call`: each contender verified, a 0.1 s
  settle, 60 ms of warm-up, 20 ms batches);
- burst: the queue held while 50 calls are queued, then run back to back (the same call's `device_us`);
- hot: per call after a second of both running, in 60 ms batches;
- graphs: in CUDA graphs as the shape table times them (`shape_suite.graph_fields`).

If the hot ratio is the graphs' and the settled one is not, the kernels rank differently only while the clock
is high; if hot stays below graphs, the per-call path itself costs ours.

    python -m lab.call_regime [--shapes 512x4096x4096,...] [--dtype fp16] [--record]
"""

from __future__ import annotations

from typing import Any

from deepgemm.config import GemmConfig
from lab import shape_sweep
from tutorial.bench import Workload, measure_alternated
from tutorial.call_suite import GEMM, TORCH, call_launches, time_call
from tutorial.runner import Shape
from tutorial.shape_suite import CALL_TIMING, SETTLE_S, SHAPE_LAYOUT, graph_fields

HOT = {"settle_s": 0.0, "batch_ms": 60.0, "batches": 7, "warmup_ms": 1000.0}  # measure_alternated's, for "hot"
DEFAULT_SHAPES = "512x4096x4096,2048x4096x4096,512x28672x4096,2048x2112x7168,4096x7168x2048,512x24576x1536"


def configs_at(shape: Shape, _device: int) -> list[GemmConfig]:
    return [shape_sweep.entry_of(shape)]


def regime(name: str, ours: dict[str, Any], torch: dict[str, Any]) -> dict[str, Any]:
    """One state's entry: both times in µs, ours passed, torch's time over ours, the clock and power sampled."""
    return {"name": name, "passed": bool(ours.get("passed", True) and torch.get("passed", True)),
            "us": ours["us"], "torch_us": torch["us"], "x_torch": torch["us"] / ours["us"],
            "sm_clock_mhz": ours.get("sm_clock_mhz"), "power_w": ours.get("power_w")}  # fmt: skip


def row_at(shape: Shape, dtype: str, _device: int) -> dict[str, Any]:
    """Settled and burst from the shape table's own per-call timing (`call_suite.time_call` as `shape_row` calls
    it), then hot, then graphs (`shape_suite.graph_fields`)."""
    m, n, k = shape
    work = Workload.make(m, n, k, dtype).in_layout(*SHAPE_LAYOUT)
    table = time_call(work, "torch", *SHAPE_LAYOUT, settle_s=SETTLE_S, torch_first=False, device_time=True,
                      timing=CALL_TIMING)  # fmt: skip
    launches = call_launches(work, "torch")
    hot = measure_alternated({GEMM: launches[GEMM], TORCH: launches[TORCH]}, work, **HOT)
    graphs = graph_fields({"": (launches[GEMM], table["call_us"] / 1e3),
                           "torch_": (launches[TORCH], table["torch_us"] / 1e3)}, work)  # fmt: skip
    found = [
        regime("settled", {"us": table["call_us"], "passed": table["passed"], "sm_clock_mhz": table["sm_clock_mhz"],
                           "power_w": table["power_w"]}, {"us": table["torch_us"], "passed": table["torch_passed"]}),
        regime("burst", {"us": table["device_us"]}, {"us": table["torch_device_us"]}),
        regime("hot", {**hot[GEMM], "us": 1e3 * hot[GEMM]["ms"]}, {**hot[TORCH], "us": 1e3 * hot[TORCH]["ms"]}),
        regime("graphs", {"us": graphs["graph_us"], "passed": graphs["graph_passed"],
                          "sm_clock_mhz": graphs["graph_sm_clock_mhz"]},
               {"us": graphs["torch_graph_us"], "passed": graphs["torch_graph_passed"]}),
    ]  # fmt: skip
    row = {"dtype": dtype, "m": m, "n": n, "k": k, "candidates": found}
    print("\n".join(lines([row])), flush=True)
    return row


def lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for row in rows:
        out.append(f"{row['dtype']} {row['m']}x{row['n']}x{row['k']}")
        for e in row["candidates"]:
            clock = f"{e['sm_clock_mhz']:6.0f} MHz" if e.get("sm_clock_mhz") else " " * 10
            verdict = "" if e["passed"] else "  FAILED"
            out.append(f"  {e['name']:<8} ours {e['us']:8.2f} us  torch {e['torch_us']:8.2f} us  "
                       f"x {e['x_torch']:.3f}  {clock}{verdict}")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    return shape_sweep.run(argv, "lab.call_regime", __doc__, DEFAULT_SHAPES, configs_at, row_at, lines)


if __name__ == "__main__":
    raise SystemExit(main())
