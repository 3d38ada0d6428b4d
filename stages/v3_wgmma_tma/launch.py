"""v3_wgmma_tma: warpgroup MMA (wgmma) reading shared memory filled by TMA, completing on mbarriers.

Reads A row-major and B K-major (the (N, K) matrix b.T) through tensor maps; other layouts, and rows whose
byte stride is not a multiple of 16 (which a tensor map cannot describe), are copied first (k_major).
Needs sm_90a (Hopper): wgmma and TMA do not exist before it.
"""

from __future__ import annotations

from typing import Any

from deepgemm.config import GemmConfig, require_in, require_multiple
from deepgemm.operands import require_gpu
from tutorial.launch import KernelLaunch, check_problem, tma_gemm_launch

STAGE = "v3_wgmma_tma"
MIN_CC = (9, 0)
SWIZZLE_BYTES = 64  # 64-byte swizzle: 64-byte wide boxes in the layout wgmma reads without bank conflicts
DEFAULTS = GemmConfig(block_m=128, block_n=128, block_k=64, num_stages=2, extra={"BOX_K": 32})


def plan(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> KernelLaunch:
    require_gpu(MIN_CC, STAGE, exact=True)
    p = check_problem(a, b, out)
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    require_in(cfg, "BLOCK_M", (128,), "two consumer warpgroups x wgmma m64")
    require_in(cfg, "BLOCK_N", (128,), "the kernel issues wgmma m64n128k16")
    require_in(cfg, "BOX_K", (32,), "a box row is one 64-byte swizzle row")
    require_multiple(cfg, "BLOCK_K", 32, "whole boxes of 32 elements")
    return tma_gemm_launch(STAGE, p, cfg, swizzle_bytes=SWIZZLE_BYTES)


def gemm(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> Any:
    """a @ b with wgmma and TMA."""
    return plan(a, b, out, config=config)()
