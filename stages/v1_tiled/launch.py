"""v1_tiled: shared-memory tiles and 8x8 register tiles on CUDA cores.

Reads A row-major and B K-major (the (N, K) matrix b.T) with 16-byte loads; a row-major (K, N) b, a K
that is not a multiple of 8 or an unaligned row is first copied into that layout (operands.k_major).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deepgemm.config import GemmConfig, require_multiple
from deepgemm.dtypes import dtype_defines
from deepgemm.model import ceil_div
from deepgemm.operands import leading_dim, require_gpu
from tutorial.launch import KernelLaunch, check_problem, k_major_operands
from tutorial.stages import get_kernel

STAGE = "v1_tiled"
MIN_CC = (8, 0)
DEFAULTS = GemmConfig(block_m=128, block_n=128, block_k=32, extra={"THREAD_M": 8, "THREAD_N": 8, "SMEM_SWIZZLE": 1})


def threads(cfg: GemmConfig) -> int:
    """Threads per block: each owns a THREAD_M x THREAD_N register tile of the BLOCK_M x BLOCK_N tile."""
    return (cfg.value("BLOCK_M") // cfg.value("THREAD_M")) * (cfg.value("BLOCK_N") // cfg.value("THREAD_N"))


def plan(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> KernelLaunch:
    require_gpu(MIN_CC, STAGE)
    p = check_problem(a, b, out)
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    require_multiple(cfg, "BLOCK_K", 8, "one 16-byte load holds 8 elements of K")
    for tile, thread in (("BLOCK_M", "THREAD_M"), ("BLOCK_N", "THREAD_N")):
        require_multiple(cfg, tile, cfg.value(thread), f"each thread owns {thread} rows/columns")
    a_k, b_k, k = k_major_operands(p)
    kernel = get_kernel(STAGE, {**cfg.defines(), **dtype_defines(p.a.dtype)})
    args = (a_k, b_k, p.out, *(np.int32(v) for v in (p.m, p.n, k, *map(leading_dim, (a_k, b_k, p.out)))))
    grid = (ceil_div(p.n, cfg.value("BLOCK_N")), ceil_div(p.m, cfg.value("BLOCK_M")))
    return KernelLaunch(kernel, grid, (threads(cfg),), args, p.out, keep_alive=(a_k, b_k))


def gemm(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> Any:
    """a @ b on CUDA cores with shared-memory and register tiling."""
    return plan(a, b, out, config=config)()
