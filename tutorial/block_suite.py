"""One decoder block of Llama-3-8B in a CUDA graph: its four GEMMs in order, through `deepgemm.gemm` and
through `torch.matmul` (the shape table's "block" rows, `bench --suite shapes`).

x (M, 4096) @ Wqkv (6144, 4096)^T, attn (M, 4096) @ Wo (4096, 4096)^T, x @ Wgate_up (28672, 4096)^T,
h (M, 14336) @ Wdown (4096, 14336)^T: weights stored (N, K) as torch.nn.functional.linear has them, inputs
random and each GEMM's own (the outputs need not feed each other: the time is the GEMMs'). A serving engine
replays such a graph per decode step; what a block costs there is what this measures. Each GEMM of the first
block in the graph is verified against its float64 reference on NaN-poisoned output, then the graph's
replays are timed, ours and torch's batches alternated (`timing.time_graphs`, µs per block).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from deepgemm.api import config_of
from deepgemm.heuristic import config_name
from deepgemm.operands import as_device_array
from tutorial.bench import Workload
from tutorial.call_suite import GEMM, TORCH, call_launches
from tutorial.check import ErrorStats, verify
from tutorial.shape_suite import SHAPE_LAYOUT
from tutorial.timing import (
    CapturedGraph,
    PowerSampler,
    alternated_graph_fields,
    capture_graph,
    gemm_flops,
    graph_calls,
    run_batch,
)

LLAMA3_8B_BLOCK = (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336))
BLOCK_MS = (1, 128, 2048)  # a decode step, a small batch, a prefill chunk
BLOCK_NAME = "llama3-8b block"
SEED_STRIDE = 16  # seeds apart from one GEMM's input sets to the next's (a workload has at most 8 sets)


def block_workloads(m: int, dtype_name: str) -> list[Workload]:
    """Each GEMM's rotating input sets and reference, in the block's order, fresh per block."""
    return [
        Workload.make(m, n, k, dtype_name, seed=SEED_STRIDE * i).in_layout(*SHAPE_LAYOUT)
        for i, (_, n, k) in enumerate(LLAMA3_8B_BLOCK)
    ]


def block_launches(per_gemm: Sequence[Sequence[Callable[[], Any]]]) -> list[Callable[[], tuple]]:
    """Launches of a whole block, each running the GEMMs in order and returning their outputs: block j runs
    each GEMM on that GEMM's input set j (rotating over its own sets), as many blocks as the GEMM with the
    most sets has."""

    def block(j: int) -> Callable[[], tuple]:
        return lambda: tuple(launches[j % len(launches)]() for launches in per_gemm)

    return [block(j) for j in range(max(len(launches) for launches in per_gemm))]


def captured_block(
    launches: Sequence[Callable[[], tuple]], works: Sequence[Workload]
) -> tuple[CapturedGraph, list[ErrorStats]]:
    """The block captured in a graph (about 3 ms of blocks, sized by one block's time on the stream), and each
    of the first block's outputs verified after a replay."""
    for launch in launches:  # each GEMM's plan and kernel built before anything is timed
        launch()
    block_ms = run_batch(launches, len(launches), PowerSampler())
    captured = capture_graph(launches, graph_calls(block_ms, len(launches)))
    checks = [verify(captured.replay, work.expected, as_device_array(out, "the graph's output"))
              for work, out in zip(works, captured.first, strict=True)]  # fmt: skip
    return captured, checks


def time_blocks(blocks: dict[str, Sequence[Callable[[], tuple]]], works: Sequence[Workload]) -> dict[str, Any]:
    """Each block (prefix: its launches) captured and verified (`captured_block`), then all timed with their
    batches alternated (`timing.time_graphs`): `<prefix>graph_us` per block, `<prefix>passed`,
    `<prefix>max_abs_err` per GEMM, `<prefix>graph_calls` (blocks per graph), `<prefix>graph_sm_clock_mhz`."""
    captured = {prefix: captured_block(launches, works) for prefix, launches in blocks.items()}
    fields = alternated_graph_fields({prefix: graph for prefix, (graph, _) in captured.items()})
    for prefix, (_, checks) in captured.items():
        fields.update({f"{prefix}passed": all(check.passed for check in checks),
                       f"{prefix}max_abs_err": [check.max_abs for check in checks]})  # fmt: skip
    return fields


def bench_block(m: int, dtype_name: str, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The block at M tokens: ours and torch's in graphs, verified per GEMM; the configs the call ran."""
    works = block_workloads(m, dtype_name)
    launches = [call_launches(work, "torch") for work in works]
    row: dict[str, Any] = {"stage": BLOCK_NAME, "dtype": dtype_name, "m": m,
                           "gemms": [f"{name} {m}x{n}x{k}" for name, n, k in LLAMA3_8B_BLOCK]}  # fmt: skip
    prefixes = {"": GEMM, "torch_": TORCH}
    blocks = {prefix: block_launches([each[name] for each in launches]) for prefix, name in prefixes.items()}
    row.update(time_blocks(blocks, works))
    chosen = [config_of(*work.problems[0]) for work in works]
    row.update(configs=[config_name(config) for config, _ in chosen], config_sources=[source for _, source in chosen])
    flops = sum(gemm_flops(m, n, k) for _, n, k in LLAMA3_8B_BLOCK)
    row.update(x_torch_graph=row["torch_graph_us"] / row["graph_us"], tflops=flops / (row["graph_us"] * 1e6))
    verdict = "ok" if row["passed"] and row["torch_passed"] else "FAILED verification"
    log(f"{BLOCK_NAME} {dtype_name} M = {m}: graph {row['graph_us']:8.1f} us (torch {row['torch_graph_us']:8.1f})"
        f" x {row['x_torch_graph']:4.2f}  {', '.join(row['configs'])}  {verdict}")  # fmt: skip
    return row
