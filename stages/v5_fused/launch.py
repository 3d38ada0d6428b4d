"""v5_fused: persistent tiles and the epilogue fused in registers, out = act(alpha * a @ b + bias).

Reads A and B in place through tensor maps in either layout: a row-major (M, K) or the transposed view of a
row-major (K, M); b row-major (K, N) or the transposed view of a row-major (N, K). Only an operand TMA cannot
describe (a row stride that is not a multiple of 16 bytes) is copied first. The output is float16, bfloat16
or float32, written once. With SPLIT_K > 1 the kernel writes fp32 partial sums per slice of K into a
workspace and `splitk_reduce_kernel` adds them in a fixed order and applies the epilogue. Needs sm_90a.
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

from deepgemm.config import GemmConfig, require_in, require_wgmma_tile
from deepgemm.dtypes import FLOAT32, dtype_defines, dtype_name
from deepgemm.epilogue import ACTIVATIONS, activation_name
from deepgemm.jit import get_kernel
from deepgemm.launch import KernelLaunch, LaunchSequence, device_limits, tma_gemm_launch
from deepgemm.model import ceil_div, cluster_rows
from deepgemm.operands import Problem, bias_vector, check_problem, leading_dim, require_gpu

STAGE = "v5_fused"
MIN_CC = (9, 0)
SWIZZLE_BYTES = 128  # one 64-element row of K is exactly one 128-byte swizzle span
DEFAULTS = GemmConfig(
    block_m=128,
    block_n=256,
    block_k=64,
    num_stages=4,
    extra={"BOX_K": 64, "GROUP_M": 16, "CLUSTER_M": 2, "CLUSTER_N": 1, "SPLIT_K": 1},
)
OUT_DTYPE_CODES = {"fp16": 0, "bf16": 1, "fp32": 2}  # the OUT_DTYPE define
PARTIALS = {"HAS_BIAS": 0, "ACTIVATION": 0, "OUT_DTYPE": OUT_DTYPE_CODES["fp32"]}  # split-K's gemm_kernel
# What changes from call to call, by position and kind: gemm_kernel's maps of A, B and C (or the
# workspace), the bias pointer and alpha (M, N and K follow, fixed by the plan); splitk_reduce_kernel's
# workspace and output pointers, bias and alpha.
GEMM_SLOTS = {"a": (0, "map"), "b": (1, "map"), "out": (2, "map"), "bias": (3, "ptr"), "alpha": (4, "f32")}
PARTIAL_SLOTS = {"a": (0, "map"), "b": (1, "map"), "workspace": (2, "map")}
REDUCE_SLOTS = {"workspace": (0, "ptr"), "out": (1, "ptr"), "bias": (2, "ptr"), "alpha": (3, "f32")}
REDUCE_KERNEL = "splitk_reduce_kernel"
REDUCE_THREADS = 256  # the kernel's REDUCE_THREADS
REDUCE_BLOCKS_PER_SM = 8  # enough blocks in flight to keep HBM busy; each loops over the rest


def epilogue_defines(has_bias: bool, activation: str | None, out_dtype: np.dtype) -> dict[str, int]:
    return {
        "HAS_BIAS": int(has_bias),
        "ACTIVATION": ACTIVATIONS[activation_name(activation)],
        "OUT_DTYPE": OUT_DTYPE_CODES[dtype_name(out_dtype)],
    }


def check_config(cfg: GemmConfig) -> None:
    """The tile and cluster the kernel is written for: ValueError names the knob and why."""
    require_wgmma_tile(cfg, block_n=(64, 128, 192, 256))
    require_in(cfg, "CLUSTER_M", (1, 2), "CTAs per cluster sharing B through TMA multicast")
    require_in(cfg, "CLUSTER_N", (1, 2), "CTAs per cluster sharing A through TMA multicast")
    split = cfg.value("SPLIT_K")
    if not isinstance(split, int) or split < 1:
        raise ValueError(f"SPLIT_K = {split} must be a positive number of slices of K")


def check_split(split: int, k: int, block_k: int) -> None:
    """Every slice of K gets at least one k-tile: ValueError otherwise."""
    k_tiles = ceil_div(k, block_k)
    if split > k_tiles:
        raise ValueError(f"SPLIT_K = {split} exceeds the {k_tiles} k-tiles of K = {k} (BLOCK_K = {block_k})")


def plan(
    a: Any,
    b: Any,
    out: Any = None,
    *,
    out_dtype: Any = None,
    **options: Any,
) -> KernelLaunch | LaunchSequence:
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
) -> KernelLaunch | LaunchSequence:
    """The launch of a checked problem (`check_problem`): what the library call plans once per key."""
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    check_config(cfg)
    bias_f32 = bias_vector(bias, p.n) if bias is not None else None
    bias_arg = bias_f32 if bias_f32 is not None else np.uint64(0)  # a null pointer when there is no bias
    epilogue = epilogue_defines(bias is not None, activation, p.out.dtype)
    if cfg.value("SPLIT_K") > 1:
        return split_k_launch(p, cfg, epilogue, bias_arg, np.float32(alpha), keep_alive=(bias_f32,))
    launch = tma_gemm_launch(
        STAGE,
        p,
        cfg,
        swizzle_bytes=SWIZZLE_BYTES,
        persistent=True,
        mn_major_ok=True,
        epilogue_args=(bias_arg, np.float32(alpha)),
        epilogue_defines=epilogue,
        keep_alive=(bias_f32,),
    )
    launch.slots = GEMM_SLOTS
    return launch


def split_k_launch(
    p: Problem, cfg: GemmConfig, epilogue: dict[str, int], bias_arg: Any, alpha: np.float32, keep_alive: tuple
) -> LaunchSequence:
    """[6] gemm_kernel writes each slice's fp32 partial into a workspace of M rows, the slices side by side
    (each as wide as the cluster tiles' columns, so no tile spills into the next slice; rows past M are
    clipped), then splitk_reduce_kernel adds the slices in order."""
    split, block_n, cluster_n = cfg.value("SPLIT_K"), cfg.value("BLOCK_N"), cfg.value("CLUSTER_N")
    check_split(split, p.k, cfg.value("BLOCK_K"))
    slice_cols = cluster_rows(p.n, block_n, cluster_n) * cluster_n * block_n
    workspace = cupy.empty((p.m, split * slice_cols), dtype=FLOAT32)
    partials = tma_gemm_launch(
        STAGE,
        p,
        cfg,
        swizzle_bytes=SWIZZLE_BYTES,
        persistent=True,
        mn_major_ok=True,
        epilogue_args=(np.uint64(0), np.float32(1.0)),
        epilogue_defines=PARTIALS,
        store=workspace,
        units_per_tile=split,
    )
    partials.slots = PARTIAL_SLOTS
    reduce_defines = {**dtype_defines(p.a.dtype), **epilogue}
    quads = p.m * ceil_div(p.n, 4)
    sms = device_limits(p.out.device.id)["sm_count"]
    grid = min(ceil_div(quads, REDUCE_THREADS), REDUCE_BLOCKS_PER_SM * sms)
    sizes = (np.int32(v) for v in (p.m, p.n, split, slice_cols, split * slice_cols, leading_dim(p.out)))
    reduce = KernelLaunch(
        get_kernel(STAGE, reduce_defines, REDUCE_KERNEL),
        (grid,),
        (REDUCE_THREADS,),
        (workspace, p.out, bias_arg, alpha, *sizes),
        p.out,
        keep_alive=keep_alive,
        in_place=True,
        slots=REDUCE_SLOTS,
    )
    return LaunchSequence((partials, reduce), p.out, workspace)


def gemm(a: Any, b: Any, out: Any = None, **options: Any) -> Any:
    """act(alpha * a @ b + bias) with the epilogue fused into the GEMM; `options` as for `plan`."""
    return plan(a, b, out, **options)()
