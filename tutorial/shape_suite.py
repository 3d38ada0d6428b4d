"""The shape table (`bench --suite shapes`, results/<gpu>/shapes.json): `deepgemm.gemm` beside `torch.matmul`
at the shapes models run, laid out as a model calls them (x (M, K) row-major, the weight stored (N, K) as
torch.nn.functional.linear has it: autotune's layout).

One row per problem and dtype. Both calls are verified against the float64 reference, then timed two ways:
per call as a caller sees it (`call_us`: `call_suite.time_call`, ours and torch's batches alternated, with the
host time and the queue-held GPU time beside it), and on the GPU inside a CUDA graph (`graph_us`: calls
captured back to back and replayed, the replayed graph's output is verified too), the primary GPU number: our
graph, torch's and the heuristic's timed with their batches alternated (`timing.time_graphs`), so that all
meet the same clocks. The row names
the config the call ran and where it came from (the autotune table or the heuristic), and times the
heuristic's own pick the same two ways (`heuristic_*`), since a user's shapes are mostly in no table.
`tables.band_summary` sums the table up by M band. Where the call runs the sm_80 kernel (a GPU without
sm_90a, or an H200 with DEEPGEMM_FORCE_SM80=1) the heuristic is that kernel's and the record is
shapes_sm80.json (`record_name`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cupy

from deepgemm import heuristic, heuristic_sm80, plan_sm80
from deepgemm.api import config_of, forget_plans, plan_family
from deepgemm.config import GemmConfig
from deepgemm.driver import device_limits
from deepgemm.heuristic import choose, config_fields, config_name
from deepgemm.model import HBM_TBS
from deepgemm.operands import as_device_array
from tutorial.bench import Workload, measure_alternated
from tutorial.call_suite import GEMM, TORCH, call_launches, time_call
from tutorial.check import ErrorStats, first_failing, verify
from tutorial.timing import CapturedGraph, alternated_graph_fields, capture_graph, graph_calls

Shape = tuple[int, int, int]

# The table: M from 1 to 8192 at two layers of Llama-3-8B; the layers of Llama-3-8B and of
# DeepSeek-V3 as (N, K), each at the Ms of decode and prefill; squares and awkward shapes (K = 4097 and
# K = 700 are rows TMA cannot read in place: the copy path).
M_SWEEP = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096, 8192)
SWEEP_LAYERS = ((4096, 4096), (28672, 4096))
MODEL_LAYERS = {
    "llama3-8b": ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)),
    "deepseek-v3": ((2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048)),
}
LAYER_MS = (1, 16, 64, 128, 256, 512, 2048, 4096)
OTHERS = ((4097, 4097, 4097), (3000, 5000, 700), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192))

SHAPE_LAYOUT = ("mk", "nk")  # as a model calls a linear layer: x (M, K), the weight stored (N, K)
SETTLE_S = 0.1  # before each per-call timing, three a row: 0.3 s a row, half a minute of a dtype's ~100 rows
# Per call in shorter batches than the stages' (60 ms x 7), so that ~100 rows x 3 calls of a dtype fit one
# device call; the warm-up as long as theirs: after a settle the clock needs it to climb back.
CALL_TIMING = {"batch_ms": 20.0, "batches": 7, "warmup_ms": 60.0}
HEURISTIC = "deepgemm.gemm heuristic"  # the call with the autotune table switched off (`table_switched_off`)


def shape_table() -> list[Shape]:
    """The shape table's problems, each once, in the order above."""
    found = [(m, n, k) for n, k in SWEEP_LAYERS for m in M_SWEEP]
    found += [(m, n, k) for layers in MODEL_LAYERS.values() for n, k in layers for m in LAYER_MS]
    found += list(OTHERS)
    return list(dict.fromkeys(found))


SHAPE_TABLE = ",".join("x".join(map(str, shape)) for shape in shape_table())


def runs_sm80() -> bool:
    """Whether deepgemm.gemm runs the sm_80 kernel on the current GPU (`api.plan_family`)."""
    return plan_family(cupy.cuda.Device().id) is plan_sm80


def record_name() -> str:
    """The record a run of the table goes into: shapes, or shapes_sm80 where the call runs the sm_80 kernel,
    so that an H200 forced onto that kernel keeps its table beside the sm_90a kernel's, not over it."""
    return "shapes_sm80" if runs_sm80() else "shapes"


def heuristic_config(m: int, n: int, k: int) -> GemmConfig:
    """What the heuristic alone picks on this GPU (the table switched off), for autotune's layout: the sm_90a
    kernel's cost model, or the sm_80 kernel's rules where the call runs that kernel."""
    limits = device_limits(cupy.cuda.Device().id)
    if runs_sm80():
        return heuristic_sm80.choose(m, n, k, limits.sm_count, limits.smem_per_block_optin)
    return choose(m, n, k, limits.sm_count).config()


def captured_calls(
    launches: Sequence[Callable[[], Any]], work: Workload, call_ms: float
) -> tuple[CapturedGraph, ErrorStats]:
    """`launches` captured in one CUDA graph (about 3 ms of calls, `timing.graph_calls`, sized from `call_ms`:
    whole rotations, so the last call is on the last input set), and the replayed graph's first and last outputs
    verified on NaN poison (`Workload.checked_sets`): the last ran after every call before it in the graph, with
    PDL overlapping them. The stats are the first failing check's."""
    captured = capture_graph(launches, graph_calls(call_ms, len(launches)))
    outputs = {0: captured.first, len(launches) - 1: captured.last}
    stats = [verify(captured.replay, expected, as_device_array(outputs[i], "the graph's output"))
             for i, expected in work.checked_sets(len(launches))]  # fmt: skip
    return captured, first_failing(stats)


def graph_fields(graphs: dict[str, tuple[Sequence[Callable[[], Any]], float]], work: Workload) -> dict[str, Any]:
    """Each of `graphs` (prefix: its launches and its time per call in ms) captured and verified
    (`captured_calls`), then all of them timed with their batches alternated (`timing.time_graphs`), so that
    each meets the clocks the others meet: the fields `<prefix>graph_us` (per call), `_passed`, `_max_abs`,
    `_calls`, `_sm_clock_mhz`."""
    captured = {prefix: captured_calls(launches, work, call_ms) for prefix, (launches, call_ms) in graphs.items()}
    fields = alternated_graph_fields({prefix: graph for prefix, (graph, _) in captured.items()})
    for prefix, (_, stats) in captured.items():
        fields.update({f"{prefix}graph_passed": stats.passed, f"{prefix}graph_max_abs": stats.max_abs})
    return fields


@contextmanager
def table_switched_off() -> Iterator[None]:
    """The library as a caller whose shapes no autotune table holds: the table looked up in an empty folder,
    and the plans built so far dropped going in and coming out (`api.forget_plans`), so that calls inside
    plan with the heuristic, and calls after it with the table again."""
    saved = heuristic.TABLES_DIR
    with tempfile.TemporaryDirectory() as empty:
        heuristic.TABLES_DIR = Path(empty)
        forget_plans()
        try:
            yield
        finally:
            heuristic.TABLES_DIR = saved
            forget_plans()


def heuristic_fields(work: Workload, chosen: GemmConfig, row: dict[str, Any], settle_s: float) -> dict[str, Any]:
    """The heuristic's pick timed per call like the row's call (beside torch.matmul, their batches alternated),
    and its launches for the row's graphs (the
    key "launches", popped by `shape_row`); where the call ran that very config (`heuristic_same`), the row's
    own numbers, not timed again. Per call it is the call without a config, the table switched off: a config
    passed in keeps a call off the C++ path (`deepgemm.fast`), whose host cost is what small M waits on. A
    graph launches kernels, not the host: its launches pass the pick as their config."""
    picked = heuristic_config(work.m, work.n, work.k)
    same = config_fields(picked) == config_fields(chosen)  # as the table stores a config: equal knobs, one kernel
    fields: dict[str, Any] = {"heuristic_config": config_name(picked), "heuristic_same": same}
    if fields["heuristic_same"]:
        return {**fields, "heuristic_call_us": row["call_us"], "heuristic_torch_us": row["torch_us"],
                "heuristic_passed": row["passed"]}  # fmt: skip
    with table_switched_off():
        launches = call_launches(work, "torch")
        ran = config_of(*launches[GEMM][0].args)
        if ran != (picked, "heuristic"):
            raise RuntimeError(f"with the table switched off the call ran {ran}, not the heuristic's {picked}")
        measured = measure_alternated({HEURISTIC: launches[GEMM], TORCH: launches[TORCH]}, work, settle_s=settle_s,
                                      **CALL_TIMING)  # fmt: skip
    return {**fields, "heuristic_call_us": 1e3 * measured[HEURISTIC]["ms"],
            "heuristic_torch_us": 1e3 * measured[TORCH]["ms"], "heuristic_passed": measured[HEURISTIC]["passed"],
            "launches": call_launches(work, "torch", picked)[GEMM]}  # fmt: skip


def ratio_fields(row: dict[str, Any]) -> dict[str, float]:
    """torch's time over ours: per call and in graphs, for the call's pick and for the heuristic's, each against
    the torch.matmul timed beside it."""
    return {
        "x_torch": row["torch_us"] / row["call_us"],
        "x_torch_graph": row["torch_graph_us"] / row["graph_us"],
        "x_torch_heuristic": row["heuristic_torch_us"] / row["heuristic_call_us"],
        "x_torch_graph_heuristic": row["torch_graph_us"] / row["heuristic_graph_us"],
    }


def bandwidth_fields(row: dict[str, Any], itemsize: int) -> dict[str, float]:
    """At M = 1 the call streams the weight: GB/s moved (a, b and c once) per call, queue-held, in a graph."""
    m, n, k = row["m"], row["n"], row["k"]
    moved = (m * k + n * k + m * n) * itemsize
    graph_gbs = moved / (row["graph_us"] * 1e3)
    return {"gbs": moved / (row["call_us"] * 1e3), "device_gbs": moved / (row["device_us"] * 1e3),
            "graph_gbs": graph_gbs, "pct_hbm_graph": 100 * graph_gbs / (HBM_TBS * 1e3)}  # fmt: skip


def shape_row(m: int, n: int, k: int, dtype_name: str, *, settle_s: float) -> dict[str, Any]:
    """One problem of the table: the call and torch.matmul per call, then with the heuristic's pick (where it
    differs) in graphs timed alternately; the call's config and where from; `passed` only where every check
    of ours passed (per call, in the graph, the heuristic's both), `torch_passed` where both of torch's did."""
    work = Workload.make(m, n, k, dtype_name).in_layout(*SHAPE_LAYOUT)
    row = time_call(work, "torch", *SHAPE_LAYOUT, settle_s=settle_s, torch_first=False, device_time=True,
                    timing=CALL_TIMING)  # fmt: skip
    launches = call_launches(work, "torch")
    config, source = config_of(*work.problems[0])
    row.update(config=config_name(config), config_source=source)
    row.update(heuristic_fields(work, config, row, settle_s))
    graphs = {"": (launches[GEMM], row["call_us"] / 1e3), "torch_": (launches[TORCH], row["torch_us"] / 1e3)}
    if not row["heuristic_same"]:
        graphs["heuristic_"] = (row.pop("launches"), row["heuristic_call_us"] / 1e3)
    row.update(graph_fields(graphs, work))
    if row["heuristic_same"]:
        row.update(heuristic_graph_us=row["graph_us"], heuristic_graph_passed=row["graph_passed"])
    row.update(ratio_fields(row))
    if m == 1:
        row.update(bandwidth_fields(row, work.problems[0][0].itemsize))
    checks = ("passed", "graph_passed", "heuristic_passed", "heuristic_graph_passed")
    row.update(passed=all(row[c] for c in checks), torch_passed=row["torch_passed"] and row["torch_graph_passed"])
    return row


def row_line(row: dict[str, Any]) -> str:
    """A row as one line of progress: the pick, the graph and per-call ratios, the heuristic's beside."""
    mine = f"{row['dtype']} {row['m']}x{row['n']}x{row['k']}"
    if "error" in row:
        return f"{mine}  FAILED: {row['error']}"
    heuristic = "same" if row["heuristic_same"] else row["heuristic_config"]
    verdict = "ok" if row["passed"] and row["torch_passed"] else "FAILED verification"
    return (
        f"{mine:<22} {row['config']} ({row['config_source']})  graph {row['graph_us']:8.1f} us"
        f" (torch {row['torch_graph_us']:8.1f}) x {row['x_torch_graph']:4.2f}  call {row['call_us']:8.1f} us"
        f" x {row['x_torch']:4.2f}  heuristic {heuristic}: x {row['x_torch_graph_heuristic']:4.2f} graph,"
        f" x {row['x_torch_heuristic']:4.2f} call  {verdict}"
    )


def bench_shape_row(
    m: int, n: int, k: int, dtype_name: str, *, settle_s: float = SETTLE_S, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """The shape table's row at one problem and dtype (`shape_row`), logged as one line. A problem that raises
    (a config it cannot take, a failed launch) gives a failed row naming the error, and the table goes on:
    one bad row should not cost the device time of the rows before it."""
    try:
        row = shape_row(m, n, k, dtype_name, settle_s=settle_s)
    except (ValueError, RuntimeError) as err:
        row = {"stage": GEMM, "dtype": dtype_name, "m": m, "n": n, "k": k, "passed": False,
               "error": f"{type(err).__name__}: {err}"}  # fmt: skip
    log(row_line(row))
    return [row]
