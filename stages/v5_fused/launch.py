"""v5_fused: persistent tiles in clusters of two, and the epilogue fused in registers,
out = act(alpha * a @ b + bias), stored through TMA.

Reads A row-major and B K-major (the (N, K) matrix b.T) through tensor maps, as v4 does; other layouts are
copied first (k_major). The output has the input's dtype, written once; the activation is None, 'relu' or
'gelu_tanh'. Needs sm_90a. The library's kernel, grown from this one, reads every layout in place and takes
every activation and output type (`deepgemm.gemm`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deepgemm.config import GemmConfig, require_in, require_wgmma_tile
from deepgemm.epilogue import ACTIVATIONS, activation_name
from deepgemm.operands import bias_vector, require_gpu
from tutorial.launch import KernelLaunch, check_problem, tma_gemm_launch

STAGE = "v5_fused"
MIN_CC = (9, 0)
SWIZZLE_BYTES = 128  # one 64-element row of K is exactly one 128-byte swizzle span
DEFAULTS = GemmConfig(
    block_m=128,
    block_n=256,
    block_k=64,
    num_stages=4,
    extra={"BOX_K": 64, "GROUP_M": 16, "CLUSTER_M": 2, "WGMMA_IN_FLIGHT": 1, "TMA_STORE": 1, "TIMELINE": 0},
)
STAGE_ACTIVATIONS = ("none", "relu", "gelu_tanh")  # the kernel's ACTIVATION 0, 1, 2


def epilogue_defines(has_bias: bool, activation: str | None) -> dict[str, int]:
    name = activation_name(activation)
    if name not in STAGE_ACTIVATIONS:
        raise ValueError(f"v5_fused fuses {STAGE_ACTIVATIONS[1:]}, not {name!r}; deepgemm.gemm takes every activation")
    return {"HAS_BIAS": int(has_bias), "ACTIVATION": ACTIVATIONS[name]}


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
    """act(alpha * a @ b + bias): bias an optional vector of N; the output in the inputs' dtype."""
    require_gpu(MIN_CC, STAGE, exact=True)
    p = check_problem(a, b, out, out_dtype=out_dtype)
    if p.out_dtype != p.a.dtype:
        raise TypeError(f"v5_fused writes {p.a.dtype}, not {p.out_dtype}; deepgemm.gemm writes any")
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    require_wgmma_tile(cfg)
    require_in(cfg, "CLUSTER_M", (1, 2), "CTAs per cluster sharing B through TMA multicast")
    require_in(cfg, "TMA_STORE", (0, 1), "1 stores C through TMA, 0 from registers: store_from_registers.diff")
    bias_f32 = bias_vector(bias, p.n) if bias is not None else None
    return tma_gemm_launch(
        STAGE,
        p,
        cfg,
        swizzle_bytes=SWIZZLE_BYTES,
        persistent=True,
        epilogue_args=(bias_f32 if bias_f32 is not None else np.uint64(0), np.float32(alpha)),
        epilogue_defines=epilogue_defines(bias is not None, activation),
        keep_alive=(bias_f32,),
    )


def gemm(a: Any, b: Any, out: Any = None, **options: Any) -> Any:
    """act(alpha * a @ b + bias) with the epilogue fused into the GEMM; `options` as for `plan`."""
    return plan(a, b, out, **options)()
