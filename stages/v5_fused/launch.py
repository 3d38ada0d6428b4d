"""v5_fused: persistent tiles and the epilogue fused in registers, out = act(alpha * a @ b + bias).

Reads A and B in place through tensor maps in either layout: a row-major (M, K) or the transposed view of a
row-major (K, M); b row-major (K, N) or the transposed view of a row-major (N, K). Only an operand TMA cannot
describe (a row stride that is not a multiple of 16 bytes) is copied first. The output is float16, bfloat16
or float32, written once. With SPLIT_K > 1 the kernel's warps write fp32 partial sums per slice of K into
scratch memory, and the last slice of each strip adds them in a fixed order and applies the epilogue, in the
same launch. Needs sm_90a.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import cupy
import numpy as np

from deepgemm.config import GemmConfig, require_in, require_wgmma_tile
from deepgemm.dtypes import FLOAT32, dtype_name
from deepgemm.epilogue import ACTIVATIONS, activation_name
from deepgemm.launch import KernelLaunch, tma_gemm_launch
from deepgemm.model import ceil_div, cluster_tiles
from deepgemm.operands import Problem, bias_vector, check_problem, require_gpu
from deepgemm.tma import read_mn_major

STAGE = "v5_fused"
MIN_CC = (9, 0)
SWIZZLE_BYTES = 128  # one 64-element row of K is exactly one 128-byte swizzle span
DEFAULTS = GemmConfig(
    block_m=128,
    block_n=256,
    block_k=64,
    num_stages=4,
    extra={
        "BOX_K": 64,
        "GROUP_M": 16,
        "CLUSTER_M": 2,
        "CLUSTER_N": 1,
        "SPLIT_K": 1,
        "SWAP_AB": 0,
        "WGMMA_IN_FLIGHT": 1,
        "TMA_STORE": 1,
        "TIMELINE": 0,
    },
)
OUT_DTYPE_CODES = {"fp16": 0, "bf16": 1, "fp32": 2}  # the OUT_DTYPE define
# What changes from call to call, by position and kind: the maps of A, B and C, the bias pointer and alpha
# (M, N and K follow, fixed by the plan), and split-K's partials and counters (`split_k_slots`).
GEMM_SLOTS = {"a": (0, "map"), "b": (1, "map"), "out": (2, "map"), "bias": (3, "ptr"), "alpha": (4, "f32")}
# [8] Swapped, the kernel's A is b (its map re-pointed at b) and its B is a; C is a pointer, and its row
# stride follows K.
SWAP_SLOTS = {"b": (0, "map"), "a": (1, "map"), "out": (2, "ptr"), "bias": (3, "ptr"), "alpha": (4, "f32")}
# [4] off (TMA_STORE 0, the ablation): C is a pointer and its row stride follows K, as when swapped.
POINTER_SLOTS = {**GEMM_SLOTS, "out": (2, "ptr")}
SWAP_BLOCK_N = (16, 32)  # [8] C's rows as wgmma's N
STRIP_ROWS = 16  # rows of C per consumer warp: one split-K counter each


def epilogue_defines(has_bias: bool, activation: str | None, out_dtype: np.dtype) -> dict[str, int]:
    return {
        "HAS_BIAS": int(has_bias),
        "ACTIVATION": ACTIVATIONS[activation_name(activation)],
        "OUT_DTYPE": OUT_DTYPE_CODES[dtype_name(out_dtype)],
    }


def check_config(cfg: GemmConfig) -> None:
    """The tile and cluster the kernel is written for: ValueError names the knob and why."""
    swap = cfg.value("SWAP_AB")
    require_in(cfg, "SWAP_AB", (0, 1), "1 computes C^T = b^T a^T, C's rows as wgmma's N")
    require_wgmma_tile(cfg, block_n=SWAP_BLOCK_N if swap else (64, 128, 192, 256), block_m=(64, 128))
    require_in(cfg, "CLUSTER_M", (1, 2), "CTAs per cluster sharing B through TMA multicast")
    require_in(cfg, "CLUSTER_N", (1, 2), "CTAs per cluster sharing A through TMA multicast")
    require_in(cfg, "TMA_STORE", (0, 1), "1 stores C through shared memory and TMA, 0 from registers")
    split = cfg.value("SPLIT_K")
    if not isinstance(split, int) or split < 1:
        raise ValueError(f"SPLIT_K = {split} must be a positive number of slices of K")


def check_split(split: int, k: int, block_k: int) -> None:
    """Every slice of K gets at least one k-tile: ValueError otherwise."""
    k_tiles = ceil_div(k, block_k)
    if split > k_tiles:
        raise ValueError(f"SPLIT_K = {split} exceeds the {k_tiles} k-tiles of K = {k} (BLOCK_K = {block_k})")


def split_k_scratch(p: Problem, cfg: GemmConfig) -> tuple[int, int]:
    """[6] The fp32 partials (a BLOCK_M x BLOCK_N block per CTA tile, the clusters' padding tiles included,
    per slice) and the counters (one per 16-row strip of every CTA tile) a split-K launch needs."""
    block_m, block_n = cfg.value("BLOCK_M"), cfg.value("BLOCK_N")
    cluster_m, cluster_n = cfg.value("CLUSTER_M"), cfg.value("CLUSTER_N")
    tiles = cluster_tiles(p.m, p.n, block_m, block_n, cluster_m, cluster_n) * cluster_m * cluster_n
    return cfg.value("SPLIT_K") * tiles * block_m * block_n, tiles * block_m // STRIP_ROWS


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
    """The launch of a checked problem (`check_problem`): what the library call plans once per key. With
    SPLIT_K > 1 the plan holds its own partials and counters (the library call passes its own per stream).
    [8] With SWAP_AB the kernel runs the swapped problem, b^T (N, K) times a^T, and writes C transposed."""
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    check_config(cfg)
    swap = cfg.value("SWAP_AB") == 1
    if swap and read_mn_major(p.a):
        raise ValueError("SWAP_AB = 1 reads a in boxes of BLOCK_N (16 or 32) rows, which must be K-major: pass a as a "
                         "row-major (M, K), not the transposed view of a (K, M)")  # fmt: skip
    bias_f32 = bias_vector(bias, p.n) if bias is not None else None  # C's columns, whichever way it runs
    run = replace(p, a=p.b.T, b=p.a.T, m=p.n, n=p.m) if swap else p
    split = cfg.value("SPLIT_K")
    if split > 1:
        check_split(split, p.k, cfg.value("BLOCK_K"))
    scratch = split_k_scratch(run, cfg) if split > 1 else (0, 0)
    partials = cupy.empty(scratch[0], dtype=FLOAT32) if split > 1 else None
    counters = cupy.zeros(scratch[1], dtype=np.uint32) if split > 1 else None  # the kernel leaves them zero
    bias_arg = bias_f32 if bias_f32 is not None else np.uint64(0)  # a null pointer when there is no bias
    launch = tma_gemm_launch(
        STAGE,
        run,
        cfg,
        swizzle_bytes=SWIZZLE_BYTES,
        persistent=True,
        mn_major_ok=True,
        epilogue_args=(bias_arg, np.float32(alpha)),
        epilogue_defines=epilogue_defines(bias is not None, activation, p.out.dtype),
        keep_alive=(bias_f32, partials, counters),
        tail_args=tuple(np.uint64(0) if x is None else x for x in (partials, counters)),
        units_per_tile=split,
    )
    launch.scratch = scratch
    by_pointer = swap or cfg.value("TMA_STORE") == 0
    slots = SWAP_SLOTS if swap else POINTER_SLOTS if by_pointer else GEMM_SLOTS
    launch.slots = {**slots, **split_k_slots(by_pointer)} if split > 1 else slots
    if swap:  # the call's a and b are the kernel's B and A: so are their copies
        launch.staged = {{"a": "b", "b": "a"}.get(name, name): shape for name, shape in launch.staged.items()}
    return launch


def split_k_slots(c_by_pointer: bool) -> dict[str, tuple[int, str]]:
    """[6] Where split-K's partials and counters sit: after M, N and K, and C's row stride where C is a pointer."""
    first = 9 if c_by_pointer else 8
    return {"partials": (first, "ptr"), "counters": (first + 1, "ptr")}


def gemm(a: Any, b: Any, out: Any = None, **options: Any) -> Any:
    """act(alpha * a @ b + bias) with the epilogue fused into the GEMM; `options` as for `plan`."""
    return plan(a, b, out, **options)()
