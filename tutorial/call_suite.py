"""The call suite: `deepgemm.gemm` as a caller makes it, beside `torch.matmul` on the same operands.

Per shape and dtype, one row per framework ("torch", "cupy") and layout pair (a "mk"/"km", b "kn"/"nk").
Each row has its own fresh input sets (so a result buffer left by the row before holds other values, and
an element the call never writes fails verification), rotated as every suite rotates them. The call is
verified against the float64 reference, then timed per call (CUDA events around batches of back-to-back
calls, the median: `call_us`); `torch.matmul` on the same memory (torch views through DLPack for CuPy
inputs) is verified and timed alike in the same row, their batches alternated (`bench.measure_alternated`)
so that both meet the same clocks, the one first in each round swapped from one row to the next. Then
each one's host time per cached call (`timing.host_us_per_call`). The first call in a fresh process is
`tutorial.first_call`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from itertools import product
from typing import Any

import deepgemm
from deepgemm.config import GemmConfig
from tutorial.bench import A_LAYOUTS, B_LAYOUTS, Workload, measure_alternated
from tutorial.timing import device_us_per_call, host_us_per_call, require_torch

FRAMEWORKS = ("torch", "cupy")
LAYOUT_PAIRS = tuple(product(A_LAYOUTS, B_LAYOUTS))
DEFAULT_SHAPES = "4096,8192,1x4096x4096,128x4096x4096,2048"
SETTLE_S = 0.25  # 80 rows at the default shapes, two timings each: 0.25 s of idle before each keeps it to minutes
SEED_STRIDE = 16  # seeds apart from one row's input sets to the next (a workload has at most 8 sets)
GEMM, TORCH = "deepgemm.gemm", "torch.matmul"
TORCH_FIELDS = ("tflops", "passed", "max_abs_err", "sm_clock_mhz", "power_w", "power_capped_pct", "launches_per_batch")


def operand_sets(work: Workload, framework: str, torch: Any) -> tuple[list[tuple], list[tuple]]:
    """What `deepgemm.gemm` is handed (CuPy arrays or torch tensors) and what `torch.matmul` is (torch
    tensors on the same memory, strides kept), per input set."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework {framework!r} is none of {FRAMEWORKS}")
    views = [(torch.from_dlpack(a), torch.from_dlpack(b)) for a, b in work.problems]
    return (views if framework == "torch" else list(work.problems)), views


def call_launches(work: Workload, framework: str, config: GemmConfig | None = None) -> dict[str, list[partial]]:
    """A ready launch per input set of `deepgemm.gemm` (with `config`, else its own pick) and of
    `torch.matmul`, by name (GEMM, TORCH)."""
    torch = require_torch()
    gemm_sets, torch_sets = operand_sets(work, framework, torch)
    options = {} if config is None else {"config": config}  # no keyword where none is chosen: as a caller calls
    return {
        GEMM: [partial(deepgemm.gemm, a, b, **options) for a, b in gemm_sets],
        TORCH: [partial(torch.matmul, a, b) for a, b in torch_sets],
    }


def call_row(
    gemm_row: dict[str, Any],
    torch_row: dict[str, Any],
    *,
    framework: str,
    a_layout: str,
    b_layout: str,
    host_us: float,
    torch_host_us: float,
) -> dict[str, Any]:
    """One row of the suite: the call's measured row, what it was handed, its times in µs beside torch's."""
    call_us, torch_us = 1e3 * gemm_row["ms"], 1e3 * torch_row["ms"]
    return {
        **gemm_row,
        "framework": framework,
        "a_layout": a_layout,
        "b_layout": b_layout,
        "host_us": host_us,
        "call_us": call_us,
        "torch_us": torch_us,
        "x_torch": torch_us / call_us,
        "torch_host_us": torch_host_us,
        **{f"torch_{key}": torch_row.get(key) for key in TORCH_FIELDS},
    }


def time_call(
    work: Workload,
    framework: str,
    a_layout: str,
    b_layout: str,
    *,
    settle_s: float,
    torch_first: bool,
    device_time: bool = False,
    timing: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Verify and time `deepgemm.gemm` and `torch.matmul` on the workload's sets (already in the layouts;
    `timing`: `time_launches`' batch lengths where not its defaults), their batches alternated, the first of
    each round `torch_first` says; then the host time per call of each; with `device_time`, also each one's GPU
    time alone (`timing.device_us_per_call`)."""
    launches = call_launches(work, framework)
    order = (TORCH, GEMM) if torch_first else (GEMM, TORCH)
    measured = measure_alternated({name: launches[name] for name in order}, work, settle_s=settle_s, **(timing or {}))
    host = {name: host_us_per_call(launches[name]) for name in order}
    row = call_row(
        measured[GEMM],
        measured[TORCH],
        framework=framework,
        a_layout=a_layout,
        b_layout=b_layout,
        host_us=host[GEMM],
        torch_host_us=host[TORCH],
    )
    if device_time:
        device = {name: device_us_per_call(launches[name]) for name in order}
        row.update(device_us=device[GEMM], torch_device_us=device[TORCH], x_torch_device=device[TORCH] / device[GEMM])
    return {**row, "timed_first": order[0]}


def _log_call_row(row: dict[str, Any], log: Callable[[str], None]) -> None:
    verdict = "ok" if row["passed"] else f"FAILED (max abs {row['max_abs']:.3g})"
    if not row["torch_passed"]:
        verdict += ", torch.matmul FAILED"
    log(
        f"  {row['framework']:<5} {row['a_layout']} x {row['b_layout']}  host {row['host_us']:6.1f} us"
        f" (torch {row['torch_host_us']:5.1f})  call {row['call_us']:9.1f} us (torch {row['torch_us']:9.1f})"
        f"  x torch {row['x_torch']:5.2f}  {verdict}"
    )


def bench_call(
    m: int,
    n: int,
    k: int,
    dtype_name: str,
    *,
    settle_s: float = SETTLE_S,
    frameworks: Sequence[str] = FRAMEWORKS,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """The call beside torch.matmul at one shape and dtype: a row per layout pair and framework."""
    require_torch()
    rows = []
    for i, ((a_layout, b_layout), framework) in enumerate(product(LAYOUT_PAIRS, frameworks)):
        work = Workload.make(m, n, k, dtype_name, seed=SEED_STRIDE * i).in_layout(a_layout, b_layout)
        rows.append(time_call(work, framework, a_layout, b_layout, settle_s=settle_s, torch_first=i % 2 == 1))
        _log_call_row(rows[-1], log)
    return rows
