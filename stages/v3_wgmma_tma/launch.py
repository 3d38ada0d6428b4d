"""v3_wgmma_tma: warpgroup MMA (wgmma) reading shared memory filled by TMA, completing on mbarriers.

Reads A row-major and B K-major (the (N, K) matrix b.T) through tensor maps; other layouts, and rows whose
byte stride is not a multiple of 16 (which a tensor map cannot describe), are copied first (k_major).
Needs sm_90a (Hopper): wgmma and TMA do not exist before it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deepgemm.config import GemmConfig, require_in, require_multiple, tile_smem_bytes
from deepgemm.dtypes import dtype_defines
from deepgemm.jit import get_kernel
from deepgemm.launch import KernelLaunch, ceil_div, require_smem
from deepgemm.operands import check_problem, k_major_operands, leading_dim, require_gpu
from deepgemm.tma import operand_maps

STAGE = "v3_wgmma_tma"
MIN_CC = (9, 0)
THREADS = 256  # two consumer warpgroups, 64 rows of wgmma m64 each
SWIZZLE_BYTES = 64  # 64-byte swizzle: 64-byte wide boxes in the layout wgmma reads without bank conflicts
ALIGN_SLACK_BYTES = 1024  # the kernel rounds its buffers up to a 1024-byte boundary
DEFAULTS = GemmConfig(block_m=128, block_n=128, block_k=64, num_stages=2, extra={"BOX_K": 32})


def plan(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> KernelLaunch:
    require_gpu(MIN_CC, STAGE)
    p = check_problem(a, b, out)
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    require_in(cfg, "BLOCK_M", (128,), "two consumer warpgroups x wgmma m64")
    require_in(cfg, "BLOCK_N", (128,), "the kernel issues wgmma m64n128k16")
    require_in(cfg, "BOX_K", (32,), "a box row is one 64-byte swizzle row")
    require_multiple(cfg, "BLOCK_K", 16, "wgmma consumes K in steps of 16")
    require_smem(tile_smem_bytes(cfg) + ALIGN_SLACK_BYTES)
    a_k, b_k, k = k_major_operands(p)
    tma_a, tma_b = operand_maps(a_k, b_k, cfg.value("BLOCK_M"), cfg.value("BLOCK_N"), cfg.value("BOX_K"), SWIZZLE_BYTES)
    kernel = get_kernel(STAGE, {**cfg.defines(), **dtype_defines(p.a.dtype)})
    args = (tma_a, tma_b, p.out, *(np.int32(v) for v in (p.m, p.n, k, leading_dim(p.out))))
    tiles = ceil_div(p.m, cfg.value("BLOCK_M")) * ceil_div(p.n, cfg.value("BLOCK_N"))
    return KernelLaunch(
        kernel, (tiles,), (THREADS,), args, p.out, tile_smem_bytes(cfg) + ALIGN_SLACK_BYTES, keep_alive=(a_k, b_k)
    )


def gemm(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> Any:
    """a @ b with wgmma and TMA."""
    return plan(a, b, out, config=config)()
