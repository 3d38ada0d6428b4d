"""v4_pipeline_swizzle: a producer warpgroup feeding two consumers through a 4-stage mbarrier pipeline,
128-byte TMA swizzle, a grouped tile order for L2 reuse, and setmaxnreg.

Reads A row-major and B K-major (the (N, K) matrix b.T) through tensor maps; other layouts are copied
first (k_major). GROUP_M <= 1 turns the grouped tile order off (plain row-major order), so its effect
can be measured. Needs sm_90a (Hopper).
"""

from __future__ import annotations

from typing import Any

from deepgemm.config import GemmConfig, require_wgmma_tile
from deepgemm.operands import require_gpu
from tutorial.launch import KernelLaunch, check_problem, tma_gemm_launch

STAGE = "v4_pipeline_swizzle"
MIN_CC = (9, 0)
DEFAULTS = GemmConfig(
    block_m=128, block_n=256, block_k=64, num_stages=4, extra={"BOX_K": 64, "GROUP_M": 8, "TIMELINE": 0}
)


def plan(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> KernelLaunch:
    require_gpu(MIN_CC, STAGE, exact=True)
    p = check_problem(a, b, out)
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    require_wgmma_tile(cfg, box_k=(64, 32, 8))
    # A box row is one swizzle row: 64 elements, 128 bytes, as shipped. The swizzle's ablation: BOX_K 32,
    # 64 bytes with the 64-byte swizzle; BOX_K 8, 16-byte rows with none.
    box_bytes = cfg.value("BOX_K") * p.a.itemsize
    return tma_gemm_launch(STAGE, p, cfg, swizzle_bytes=box_bytes if box_bytes >= 32 else 0)


def gemm(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> Any:
    """a @ b through a warp-specialised TMA/wgmma pipeline."""
    return plan(a, b, out, config=config)()
