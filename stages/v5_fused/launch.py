"""v5_fused: persistent tiles and the epilogue fused in registers, out = act(alpha * a @ b + bias).

Reads A row-major and B K-major (the (N, K) matrix b.T) through tensor maps; other layouts are copied
first (k_major). The output is float16, bfloat16 or float32, written once. Needs sm_90a (Hopper).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deepgemm.config import GemmConfig, require_in, tile_smem_bytes
from deepgemm.dtypes import dtype_defines, dtype_name
from deepgemm.epilogue import ACTIVATIONS, activation_name
from deepgemm.jit import get_kernel
from deepgemm.launch import KernelLaunch, ceil_div, device_limits, require_smem
from deepgemm.operands import bias_vector, check_problem, k_major_operands, leading_dim, require_gpu
from deepgemm.tma import operand_maps

STAGE = "v5_fused"
MIN_CC = (9, 0)
THREADS = 384  # one producer warpgroup and two consumer warpgroups
SWIZZLE_BYTES = 128  # one 64-element row of K is exactly one 128-byte swizzle span
ALIGN_SLACK_BYTES = 1024  # the kernel rounds its buffers up to a 1024-byte boundary
EPILOGUE_SMEM_BYTES = 2 * 4 * 2304  # static: each consumer warp's 16-row staging buffer (EPI_BYTES)
DEFAULTS = GemmConfig(block_m=128, block_n=256, block_k=64, num_stages=4, extra={"BOX_K": 64, "GROUP_M": 8})
OUT_DTYPE_CODES = {"fp16": 0, "bf16": 1, "fp32": 2}  # the OUT_DTYPE define


def epilogue_defines(has_bias: bool, activation: str | None, out_dtype: np.dtype) -> dict[str, int]:
    return {
        "HAS_BIAS": int(has_bias),
        "ACTIVATION": ACTIVATIONS[activation_name(activation)],
        "OUT_DTYPE": OUT_DTYPE_CODES[dtype_name(out_dtype)],
    }


def plan(
    a: Any,
    b: Any,
    out: Any = None,
    *,
    bias: Any = None,
    alpha: float = 1.0,
    activation: str | None = None,
    out_dtype: Any = None,
    config: GemmConfig | None = None,
) -> KernelLaunch:
    require_gpu(MIN_CC, STAGE)
    p = check_problem(a, b, out, out_dtype=out_dtype)
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    require_in(cfg, "BLOCK_M", (128,), "two consumer warpgroups x wgmma m64")
    require_in(cfg, "BLOCK_N", (256,), "the kernel issues wgmma m64n256k16")
    require_in(cfg, "BLOCK_K", (64,), "one 128-byte swizzle row of 2-byte elements")
    require_in(cfg, "BOX_K", (64,), "one box spans the whole 128-byte swizzle row")
    require_smem(tile_smem_bytes(cfg) + ALIGN_SLACK_BYTES, EPILOGUE_SMEM_BYTES)
    bias_f32 = bias_vector(bias, p.n) if bias is not None else None
    a_k, b_k, k = k_major_operands(p)
    tma_a, tma_b = operand_maps(a_k, b_k, cfg.value("BLOCK_M"), cfg.value("BLOCK_N"), cfg.value("BOX_K"), SWIZZLE_BYTES)
    defines = {
        **cfg.defines(),
        **dtype_defines(p.a.dtype),
        **epilogue_defines(bias is not None, activation, p.out.dtype),
    }
    kernel = get_kernel(STAGE, defines)
    bias_arg = bias_f32 if bias_f32 is not None else np.uint64(0)  # a null pointer when there is no bias
    args = (tma_a, tma_b, p.out, bias_arg, np.float32(alpha), *(np.int32(v) for v in (p.m, p.n, k, leading_dim(p.out))))
    tiles = ceil_div(p.m, cfg.value("BLOCK_M")) * ceil_div(p.n, cfg.value("BLOCK_N"))
    grid = min(tiles, device_limits(p.out.device.id)["sm_count"])  # persistent: one CTA per SM at most
    return KernelLaunch(
        kernel,
        (grid,),
        (THREADS,),
        args,
        p.out,
        tile_smem_bytes(cfg) + ALIGN_SLACK_BYTES,
        keep_alive=(a_k, b_k, bias_f32),
    )


def gemm(
    a: Any,
    b: Any,
    out: Any = None,
    *,
    bias: Any = None,
    alpha: float = 1.0,
    activation: str | None = None,
    out_dtype: Any = None,
    config: GemmConfig | None = None,
) -> Any:
    """act(alpha * a @ b + bias) with the epilogue fused into the GEMM."""
    launch = plan(a, b, out, bias=bias, alpha=alpha, activation=activation, out_dtype=out_dtype, config=config)
    return launch()
