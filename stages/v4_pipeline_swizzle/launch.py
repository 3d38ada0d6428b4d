"""v4_pipeline_swizzle: a producer warpgroup feeding two consumers through a 4-stage mbarrier pipeline,
128-byte TMA swizzle, a grouped tile order for L2 reuse, and setmaxnreg.

Reads A row-major and B K-major (the (N, K) matrix b.T) through tensor maps; other layouts are copied
first (k_major). GROUP_M <= 1 turns the grouped tile order off (plain row-major order), so its effect
can be measured. Needs sm_90a (Hopper).
"""

from __future__ import annotations

from typing import Any

from deepgemm.config import GemmConfig, require_in
from deepgemm.launch import KernelLaunch, tma_gemm_launch
from deepgemm.operands import check_problem, require_gpu

STAGE = "v4_pipeline_swizzle"
MIN_CC = (9, 0)
THREADS = 384  # one producer warpgroup and two consumer warpgroups
SWIZZLE_BYTES = 128  # one 64-element row of K is exactly one 128-byte swizzle span
DEFAULTS = GemmConfig(block_m=128, block_n=256, block_k=64, num_stages=4, extra={"BOX_K": 64, "GROUP_M": 8})


def check_config(cfg: GemmConfig) -> None:
    """The tile the kernel is written for: ValueError names the knob and why."""
    require_in(cfg, "BLOCK_M", (128,), "two consumer warpgroups x wgmma m64")
    require_in(cfg, "BLOCK_N", (256,), "the kernel issues wgmma m64n256k16")
    require_in(cfg, "BLOCK_K", (64,), "one 128-byte swizzle row of 2-byte elements")
    require_in(cfg, "BOX_K", (64,), "one box spans the whole 128-byte swizzle row")


def plan(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> KernelLaunch:
    require_gpu(MIN_CC, STAGE, exact=True)
    p = check_problem(a, b, out)
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    check_config(cfg)
    return tma_gemm_launch(STAGE, p, cfg, swizzle_bytes=SWIZZLE_BYTES, threads=THREADS)


def gemm(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> Any:
    """a @ b through a warp-specialised TMA/wgmma pipeline."""
    return plan(a, b, out, config=config)()
