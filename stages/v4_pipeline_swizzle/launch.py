"""v4_pipeline_swizzle: a producer warpgroup feeding two consumers through a 4-stage mbarrier pipeline,
128-byte TMA swizzle, a grouped tile order for L2 reuse, and setmaxnreg.

Reads A row-major and B K-major (the (N, K) matrix b.T) through tensor maps; other layouts are copied
first (k_major). GROUP_M <= 1 turns the grouped tile order off (plain row-major order), so its effect
can be measured. Needs sm_90a (Hopper).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deepgemm.config import GemmConfig, require_in, tile_smem_bytes
from deepgemm.dtypes import dtype_defines
from deepgemm.jit import get_kernel
from deepgemm.launch import KernelLaunch, ceil_div, require_smem
from deepgemm.operands import check_problem, k_major_operands, leading_dim, require_gpu
from deepgemm.tma import operand_maps

STAGE = "v4_pipeline_swizzle"
MIN_CC = (9, 0)
THREADS = 384  # one producer warpgroup and two consumer warpgroups
SWIZZLE_BYTES = 128  # one 64-element row of K is exactly one 128-byte swizzle span
ALIGN_SLACK_BYTES = 1024  # the kernel rounds its buffers up to a 1024-byte boundary
DEFAULTS = GemmConfig(block_m=128, block_n=256, block_k=64, num_stages=4, extra={"BOX_K": 64, "GROUP_M": 8})


def plan(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> KernelLaunch:
    require_gpu(MIN_CC, STAGE)
    p = check_problem(a, b, out)
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    require_in(cfg, "BLOCK_M", (128,), "two consumer warpgroups x wgmma m64")
    require_in(cfg, "BLOCK_N", (256,), "the kernel issues wgmma m64n256k16")
    require_in(cfg, "BLOCK_K", (64,), "one 128-byte swizzle row of 2-byte elements")
    require_in(cfg, "BOX_K", (64,), "one box spans the whole 128-byte swizzle row")
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
    """a @ b through a warp-specialised TMA/wgmma pipeline."""
    return plan(a, b, out, config=config)()
