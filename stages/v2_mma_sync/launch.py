"""v2_mma_sync: warp-level tensor cores (mma.sync m16n8k16), ldmatrix, cp.async multi-buffering.

Reads A row-major and B K-major (the (N, K) matrix b.T), both as ldmatrix wants them without transposes;
other layouts are copied into it first (operands.k_major).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deepgemm.config import GemmConfig, require_in, require_multiple, tile_smem_bytes
from deepgemm.dtypes import dtype_defines
from deepgemm.model import ceil_div
from deepgemm.operands import leading_dim, require_gpu
from tutorial.launch import KernelLaunch, check_problem, k_major_operands, require_smem
from tutorial.stages import get_kernel

STAGE = "v2_mma_sync"
MIN_CC = (8, 0)
DEFAULTS = GemmConfig(
    block_m=128, block_n=256, block_k=32, num_stages=4, extra={"WARPS_M": 2, "WARPS_N": 4, "SMEM_SWIZZLE": 1}
)


def threads(cfg: GemmConfig) -> int:
    """Threads per block: a WARPS_M x WARPS_N grid of warps."""
    return 32 * cfg.value("WARPS_M") * cfg.value("WARPS_N")


def plan(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> KernelLaunch:
    require_gpu(MIN_CC, STAGE)
    p = check_problem(a, b, out)
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    require_in(cfg, "BLOCK_K", (32, 64), "the shared-memory swizzle is written for 64- and 128-byte rows")
    require_multiple(cfg, "BLOCK_M", 16 * cfg.value("WARPS_M"), "each warp owns whole m16 fragments")
    require_multiple(cfg, "BLOCK_N", 16 * cfg.value("WARPS_N"), "each warp owns whole pairs of n8 fragments")
    require_smem(tile_smem_bytes(cfg))
    a_k, b_k, k = k_major_operands(p)
    kernel = get_kernel(STAGE, {**cfg.defines(), **dtype_defines(p.a.dtype)})
    args = (a_k, b_k, p.out, *(np.int32(v) for v in (p.m, p.n, k, *map(leading_dim, (a_k, b_k, p.out)))))
    grid = (ceil_div(p.n, cfg.value("BLOCK_N")), ceil_div(p.m, cfg.value("BLOCK_M")))
    return KernelLaunch(
        kernel, grid, (threads(cfg),), args, p.out, shared_mem=tile_smem_bytes(cfg), keep_alive=(a_k, b_k)
    )


def gemm(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> Any:
    """a @ b on warp-level tensor cores."""
    return plan(a, b, out, config=config)()
