"""Compiling many configurations of the library kernel at once, before they are timed.

Autotune and the lab's sweeps time dozens of configurations per shape, and a fresh machine has compiled
none of them: one NVRTC compile takes about a second on one core, so compiling them one by one inside the
timing loop costs more than the timing. `warm` compiles them in a pool of processes, each planning a small
call with the configuration (the defines a kernel is compiled with do not depend on M, N or K, except
where SHAPE_JIT compiles N and K in: then it plans a call of that N and K); CuPy
keeps every compiled module in its disk cache, where the timing process then finds it (a spawned worker
imports this module, and so the library, afresh).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Sequence

import deepgemm
from deepgemm.config import GemmConfig
from deepgemm.dtypes import input_dtype
from tutorial.bench import arrange
from tutorial.check import random_problem

COMPILE_SHAPE = (256, 256, 1024)  # 16 k-tiles: enough for every split the heuristic offers
MAX_PROCESSES = 16


def _compile_one(job: tuple[GemmConfig, str, tuple[str, str], tuple[int, int, int]]) -> str | None:
    """Plan one small call with the config (compiling its kernel into CuPy's disk cache); the error's text
    where the config cannot run, else None."""
    config, dtype_name, layout, shape = job
    a, b = random_problem(*shape, input_dtype(dtype_name), seed=0)
    a, b = arrange(a, layout[0]), arrange(b, layout[1])
    try:
        deepgemm.gemm(a, b, config=config)
    except ValueError as error:
        return str(error)
    return None


def warm(
    configs: Sequence[GemmConfig],
    dtype_name: str,
    layout: tuple[str, str],
    processes: int = 0,
    shapes: Sequence[tuple[int, int, int]] | None = None,
) -> float:
    """Compile every config's kernel for `dtype_name` and the operands' `layout` in parallel; the seconds it
    took. `shapes`, one per config, are the problems a SHAPE_JIT config is compiled for (their N and K; M
    is not compiled in). Configs the kernel cannot take are left to the caller, which meets the same error
    when it plans."""
    jobs = {}
    for i, config in enumerate(configs):
        jit = shapes is not None and config.extra.get("SHAPE_JIT")
        shape = (COMPILE_SHAPE[0], *shapes[i][1:]) if jit else COMPILE_SHAPE
        jobs[(config.key(), shape)] = (config, dtype_name, layout, shape)
    if not jobs:
        return 0.0
    workers = min(len(jobs), processes or min(MAX_PROCESSES, os.cpu_count() or 1))
    began = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_compile_one, list(jobs.values()), chunksize=1)
    return time.perf_counter() - began
