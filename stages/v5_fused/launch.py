"""v5_fused: persistent tiles and the epilogue fused in registers, out = act(alpha * a @ b + bias).

Reads A and B in place through tensor maps in either layout: a row-major (M, K) or the transposed view of a
row-major (K, M); b row-major (K, N) or the transposed view of a row-major (N, K). Only an operand TMA cannot
describe (a row stride that is not a multiple of 16 bytes) is copied first. The output is float16, bfloat16
or float32, written once. Needs sm_90a (Hopper).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deepgemm.config import GemmConfig, require_in, require_wgmma_tile
from deepgemm.dtypes import dtype_name
from deepgemm.epilogue import ACTIVATIONS, activation_name
from deepgemm.launch import KernelLaunch, tma_gemm_launch
from deepgemm.operands import Problem, bias_vector, check_problem, require_gpu

STAGE = "v5_fused"
MIN_CC = (9, 0)
SWIZZLE_BYTES = 128  # one 64-element row of K is exactly one 128-byte swizzle span
DEFAULTS = GemmConfig(
    block_m=128,
    block_n=256,
    block_k=64,
    num_stages=4,
    extra={"BOX_K": 64, "GROUP_M": 16, "CLUSTER_M": 2, "CLUSTER_N": 1},
)
OUT_DTYPE_CODES = {"fp16": 0, "bf16": 1, "fp32": 2}  # the OUT_DTYPE define
# gemm_kernel's parameters that change from call to call, by position: the maps of A, B and C, the bias
# pointer and alpha (M, N and K follow; they are fixed by the plan).
ARG_SLOTS = {"a": 0, "b": 1, "out": 2, "bias": 3, "alpha": 4}


def epilogue_defines(has_bias: bool, activation: str | None, out_dtype: np.dtype) -> dict[str, int]:
    return {
        "HAS_BIAS": int(has_bias),
        "ACTIVATION": ACTIVATIONS[activation_name(activation)],
        "OUT_DTYPE": OUT_DTYPE_CODES[dtype_name(out_dtype)],
    }


def check_config(cfg: GemmConfig) -> None:
    """The tile and cluster the kernel is written for: ValueError names the knob and why."""
    require_wgmma_tile(cfg, block_n=(128, 256))
    require_in(cfg, "CLUSTER_M", (1, 2), "CTAs per cluster sharing B through TMA multicast")
    require_in(cfg, "CLUSTER_N", (1, 2), "CTAs per cluster sharing A through TMA multicast")


def plan(
    a: Any,
    b: Any,
    out: Any = None,
    *,
    out_dtype: Any = None,
    **options: Any,
) -> KernelLaunch:
    """act(alpha * a @ b + bias): bias an optional vector of N, activation None / 'relu' / 'gelu' (erf) /
    'gelu_tanh' / 'gelu_erf' / 'silu', out_dtype float16, bfloat16 or float32 (default: the input's);
    `options` as for `plan_problem`."""
    require_gpu(MIN_CC, STAGE, exact=True)
    return plan_problem(check_problem(a, b, out, out_dtype=out_dtype), **options)


def plan_problem(
    p: Problem,
    *,
    bias: Any = None,
    alpha: float = 1.0,
    activation: str | None = None,
    config: GemmConfig | None = None,
) -> KernelLaunch:
    """The launch of a checked problem (`check_problem`): what the library call plans once per key."""
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    check_config(cfg)
    bias_f32 = bias_vector(bias, p.n) if bias is not None else None
    bias_arg = bias_f32 if bias_f32 is not None else np.uint64(0)  # a null pointer when there is no bias
    return tma_gemm_launch(
        STAGE,
        p,
        cfg,
        swizzle_bytes=SWIZZLE_BYTES,
        persistent=True,
        mn_major_ok=True,
        epilogue_args=(bias_arg, np.float32(alpha)),
        epilogue_defines=epilogue_defines(bias is not None, activation, p.out.dtype),
        keep_alive=(bias_f32,),
    )


def gemm(a: Any, b: Any, out: Any = None, **options: Any) -> Any:
    """act(alpha * a @ b + bias) with the epilogue fused into the GEMM; `options` as for `plan`."""
    return plan(a, b, out, **options)()
