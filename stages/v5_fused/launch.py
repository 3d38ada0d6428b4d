"""v5_fused: persistent tiles and the epilogue fused in registers, out = act(alpha * a @ b + bias).

Reads A row-major and B K-major (the (N, K) matrix b.T) through tensor maps; other layouts are copied
first (k_major). The output is float16, bfloat16 or float32, written once. Needs sm_90a (Hopper).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from deepgemm import gpc
from deepgemm.config import GemmConfig, require_in
from deepgemm.dtypes import dtype_name
from deepgemm.epilogue import ACTIVATIONS, activation_name
from deepgemm.launch import KernelLaunch, cluster_rows, tma_gemm_launch
from deepgemm.operands import bias_vector, check_problem, require_gpu
from stages.v4_pipeline_swizzle.launch import check_config

STAGE = "v5_fused"
MIN_CC = (9, 0)
THREADS = 384  # one producer warpgroup and two consumer warpgroups
SWIZZLE_BYTES = 128  # one 64-element row of K is exactly one 128-byte swizzle span
STORE_ROWS = 16  # each consumer warp stores its 16 rows of C ...
STORE_BYTES = 128  # ... in boxes of 128 bytes of columns, the 128B swizzle span (EPI_BOX_BYTES = 2 KB)
STORE_SMEM_BYTES = 2 * 4 * 2 * STORE_ROWS * STORE_BYTES  # 2 consumers x 4 warps x 2 boxes (EPI_BYTES)
DEFAULTS = GemmConfig(
    block_m=128,
    block_n=256,
    block_k=64,
    num_stages=4,
    extra={"BOX_K": 64, "GROUP_M": 16, "CLUSTER_M": 2, "BALANCED_ROUNDS": 1, "GPC_SLOTS": 1},
)
OUT_DTYPE_CODES = {"fp16": 0, "bf16": 1, "fp32": 2}  # the OUT_DTYPE define


def epilogue_defines(has_bias: bool, activation: str | None, out_dtype: np.dtype) -> dict[str, int]:
    return {
        "HAS_BIAS": int(has_bias),
        "ACTIVATION": ACTIVATIONS[activation_name(activation)],
        "OUT_DTYPE": OUT_DTYPE_CODES[dtype_name(out_dtype)],
    }


def slot_tables(cfg: GemmConfig, rows: int) -> Callable[[int], np.void]:
    """The slot table for a grid of n clusters, given the `rows` of cluster tiles: GPC-mates on neighbouring
    tiles (GPC_SLOTS 1) or the plain grouped order (0). A slot is a position in the band of GROUP_M tile rows
    the tile order walks."""
    band_rows = max(1, min(cfg.value("GROUP_M") // cfg.value("CLUSTER_M"), rows))
    if cfg.value("GPC_SLOTS"):
        return lambda clusters: gpc.cluster_slots(clusters, cfg.value("CLUSTER_M"), band_rows)
    return gpc.identity_slots


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
    """act(alpha * a @ b + bias): bias an optional vector of N, activation None / 'relu' / 'gelu' (erf) /
    'gelu_tanh' / 'gelu_erf' / 'silu', out_dtype float16, bfloat16 or float32 (default: the input's)."""
    require_gpu(MIN_CC, STAGE, exact=True)
    p = check_problem(a, b, out, out_dtype=out_dtype)
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    check_config(cfg)
    require_in(cfg, "CLUSTER_M", (1, 2), "CTAs per cluster sharing B through TMA multicast")
    require_in(cfg, "BALANCED_ROUNDS", (0, 1), "1: only as many CTAs as keep every round of tiles full")
    require_in(cfg, "GPC_SLOTS", (0, 1), "1: clusters in one GPC take neighbouring tiles")
    bias_f32 = bias_vector(bias, p.n) if bias is not None else None
    bias_arg = bias_f32 if bias_f32 is not None else np.uint64(0)  # a null pointer when there is no bias
    return tma_gemm_launch(
        STAGE,
        p,
        cfg,
        swizzle_bytes=SWIZZLE_BYTES,
        threads=THREADS,
        persistent=True,
        balance_rounds=bool(cfg.value("BALANCED_ROUNDS")),
        epilogue_args=(bias_arg, np.float32(alpha)),
        epilogue_defines=epilogue_defines(bias is not None, activation, p.out.dtype),
        store_box=(STORE_ROWS, STORE_BYTES // p.out.itemsize),
        store_smem_bytes=STORE_SMEM_BYTES,
        cluster_slots=slot_tables(cfg, cluster_rows(p.m, cfg.value("BLOCK_M"), cfg.value("CLUSTER_M"))),
        keep_alive=(bias_f32,),
    )


def gemm(a: Any, b: Any, out: Any = None, **options: Any) -> Any:
    """act(alpha * a @ b + bias) with the epilogue fused into the GEMM; `options` as for `plan`."""
    return plan(a, b, out, **options)()
