"""A planned call of the library kernel for GPUs without wgmma (kernels/gemm_sm80.cu): Ampere, Ada, consumer
Blackwell, and any GPU where DEEPGEMM_FORCE_SM80=1 (an H200 testing this path). Built once per key, frozen.

The same contract as `deepgemm.plan.build`, and the same frozen `deepgemm.plan.Plan` comes back, so that a call
runs the same hot path: read the pointers off the caller's arrays, allocate the output in the caller's
framework, write the pointers into the parameter buffer, launch on the caller's current stream. What differs
is decided here, once per key:

- the configuration: the caller's, else `heuristic_sm80.choose` (a tile by M, split-K where the grid is short);
- how the kernel reads each operand: cp.async copies 16-byte chunks from 16-byte aligned addresses, so an
  operand is read in place, K-major or MN-major, where its base is 16-byte aligned, one dimension is
  contiguous and the other's stride is whole 16 bytes (`read_in_place`); any other is copied by every call
  into zero-padded K-major rows (`Operand.staged`), as the sm_90a plan copies what TMA cannot read;
- C is written by pointer with its row stride, so no output is ever staged;
- the grid: one block per tile and slice of K; the kernel's parameters are pointers and scalars, laid out
  once (`PARAMETERS`); split-K's scratch is the sm_90a plan's, one pair per stream.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import cupy
import numpy as np

from deepgemm.config import GemmConfig, require_at_most, require_in, require_multiple, tile_smem_bytes
from deepgemm.driver import RawLaunch, allow_dynamic_smem, device_limits
from deepgemm.dtypes import dtype_defines
from deepgemm.epilogue import activation_name
from deepgemm.frameworks import Cupy, Torch
from deepgemm.heuristic_sm80 import choose
from deepgemm.jit import get_kernel, launch_facts
from deepgemm.model import ceil_div, output_tiles
from deepgemm.operands import (
    INT32_MAX,
    VECTOR_BYTES,
    Problem,
    check_compute_capability,
    check_operands,
    device_name,
    leading_dim,
    padded_k,
)
from deepgemm.plan import (
    CALL_PARAMETERS,
    KernelBias,
    Operand,
    Plan,
    check_int_index,
    check_split,
    epilogue_defines,
    kernel_bias,
)

KERNEL = Path(__file__).resolve().parent / "kernels" / "gemm_sm80.cu"
MIN_CC = (8, 0)  # mma.sync m16n8k16 in bf16, ldmatrix, cp.async: Ampere and newer
HOPPER = (9, 0)  # the one GPU family that runs the sm_90a kernel (deepgemm.plan) instead
FORCE_ENV = "DEEPGEMM_FORCE_SM80"  # "1": this kernel on any GPU of MIN_CC or newer, Hopper included
DEFAULTS = GemmConfig(
    block_m=128,
    block_n=256,
    block_k=32,
    num_stages=4,
    extra={"WARPS_M": 2, "WARPS_N": 4, "GROUP_M": 8, "SPLIT_K": 1},
)
TILE_SIDES = (16, 32, 64, 128, 256)  # [3] BLOCK_M and BLOCK_N: powers of two (an MN-major line's swizzle)
BLOCK_KS = (32, 64)  # 64- or 128-byte K-major lines: the swizzle is written for these
WARPS = (1, 2, 4, 8)  # per side; a block has at most 1024 threads (32 warps)
MAX_THREADS = 1024
HOST_ONLY_KNOBS = ("SPLIT_K",)  # the plan's grid: the kernel reads the slices from its `splits` parameter
# The kernel's parameters in its signature's order, by name and kind ("ptr" a pointer, "f32" / "i32" a scalar).
PARAMETERS = (
    ("a", "ptr"), ("b", "ptr"), ("out", "ptr"), ("bias", "ptr"), ("alpha", "f32"), ("m", "i32"), ("n", "i32"),
    ("k", "i32"), ("lda", "i32"), ("ldb", "i32"), ("ldc", "i32"), ("partials", "ptr"), ("counters", "ptr"),
    ("splits", "i32"),
)  # fmt: skip


def runs_on(device: int) -> bool:
    """Whether deepgemm.gemm on `device` runs this kernel: on any GPU but Hopper (sm_90a has its own kernel),
    and on Hopper too where FORCE_ENV is "1". A GPU older than MIN_CC is refused by `build`, by name."""
    return os.environ.get(FORCE_ENV) == "1" or device_limits(device).compute_capability != HOPPER


def require_sm80(device: int) -> None:
    """RuntimeError naming the GPU unless it has compute capability 8.0 or newer."""
    cc = device_limits(device).compute_capability
    if cc < MIN_CC:
        check_compute_capability(cc, device_name(device), MIN_CC, "deepgemm.gemm")


def call_slots(split_k: bool) -> dict[str, tuple[int, str]]:
    """The parameters each call writes, by name: (position in the signature, kind). Split-K's scratch only
    with split-K; otherwise the buffer keeps its null pointers."""
    written = CALL_PARAMETERS if split_k else CALL_PARAMETERS[:-2]
    return {name: (i, kind) for i, (name, kind) in enumerate(PARAMETERS) if name in written}


def check_config(cfg: GemmConfig) -> None:
    """The tiles the kernel is written for: ValueError names the knob and why."""
    require_in(cfg, "BLOCK_M", TILE_SIDES, "a power of two from 16 to 256: whole m16 tiles, a swizzled line")
    require_in(cfg, "BLOCK_N", TILE_SIDES, "a power of two from 16 to 256: whole n16 pairs, a swizzled line")
    require_in(cfg, "BLOCK_K", BLOCK_KS, "64- or 128-byte K-major lines, the swizzle's two forms")
    require_in(cfg, "WARPS_M", WARPS, "warps along M")
    require_in(cfg, "WARPS_N", WARPS, "warps along N")
    require_multiple(cfg, "BLOCK_M", 16 * cfg.value("WARPS_M"), "each warp owns whole m16 tiles")
    require_multiple(cfg, "BLOCK_N", 16 * cfg.value("WARPS_N"), "each warp owns whole pairs of n8 tiles")
    threads = 32 * cfg.value("WARPS_M") * cfg.value("WARPS_N")
    if threads > MAX_THREADS:
        raise ValueError(f"WARPS_M x WARPS_N = {threads // 32} warps: a block has at most {MAX_THREADS // 32}")
    stages = cfg.value("NUM_STAGES")
    if not isinstance(stages, int) or stages < 2:
        raise ValueError(f"NUM_STAGES = {stages} must be at least 2 (double buffering)")
    group = cfg.value("GROUP_M")
    if not isinstance(group, int) or group < 1:
        raise ValueError(f"GROUP_M = {group} must be a positive number of tile rows")
    split = cfg.value("SPLIT_K")
    if not isinstance(split, int) or split < 1:
        raise ValueError(f"SPLIT_K = {split} must be a positive number of slices of K")


def kernel_defines(cfg: GemmConfig) -> dict[str, int]:
    """The config's defines as the kernel takes them: SPLIT_K is the plan's grid (host only), so every split
    compiles to one kernel, PARTIAL_TILES 1."""
    defines = {name: value for name, value in cfg.defines().items() if name not in HOST_ONLY_KNOBS}
    return {**defines, "PARTIAL_TILES": int(cfg.extra.get("SPLIT_K", 1) > 1)}


def read_in_place(x: Any) -> tuple[bool, int] | None:
    """How the kernel reads an operand as it lies, `x` its (rows, K) view (a, or b transposed): (MN-major,
    row stride in elements), or None where it cannot and every call copies it. cp.async reads 16-byte
    chunks from 16-byte aligned addresses: the base 16-byte aligned, K (K-major) or the rows (MN-major)
    contiguous, and the other dimension's stride whole 16 bytes, unless that dimension has one element
    (whose stride is never used)."""
    rows, k = x.shape
    row_stride, k_stride = x.strides
    if x.data.ptr % VECTOR_BYTES:
        return None
    if max(row_stride, k_stride) // x.itemsize > INT32_MAX:  # lda and ldb are ints: copied instead
        return None
    if k_stride == x.itemsize and (rows == 1 or (row_stride > 0 and row_stride % VECTOR_BYTES == 0)):
        return False, row_stride // x.itemsize if rows > 1 else padded_k(k)
    if row_stride == x.itemsize and (k == 1 or (k_stride > 0 and k_stride % VECTOR_BYTES == 0)):
        return True, k_stride // x.itemsize if k > 1 else padded_k(rows)
    return None


def kernel_operands(p: Problem) -> tuple[tuple[Operand, int], tuple[Operand, int]]:
    """The kernel's A (a) and B (b's (N, K)), each as an Operand and its row stride in elements: in place,
    or staged into (rows, K padded to 16 bytes) K-major rows by every call."""
    found = []
    for name, x in (("a", p.a), ("b", p.b.T)):
        layout = read_in_place(x)
        if layout is None:
            staged = (x.shape[0], padded_k(x.shape[1]))
            found.append((Operand(name, False, staged), staged[1]))
        else:
            found.append((Operand(name, layout[0], None), layout[1]))
    return found[0], found[1]


def grid(m: int, n: int, cfg: GemmConfig) -> int:
    """Blocks of the 1-D grid: one per tile and slice of K."""
    return output_tiles(m, n, cfg.value("BLOCK_M"), cfg.value("BLOCK_N")) * cfg.value("SPLIT_K")


def split_scratch(m: int, n: int, cfg: GemmConfig) -> tuple[int, int]:
    """[4] Split-K's fp32 partials (a BLOCK_M x BLOCK_N slot per tile and slice) and counters (one per tile),
    or (0, 0) without split-K."""
    split = cfg.value("SPLIT_K")
    if split == 1:
        return 0, 0
    tiles = output_tiles(m, n, cfg.value("BLOCK_M"), cfg.value("BLOCK_N"))
    return tiles * split * cfg.value("BLOCK_M") * cfg.value("BLOCK_N"), tiles


def chosen_config(problem: Problem, device: int, config: GemmConfig | None = None) -> tuple[GemmConfig, str]:
    """The config a call runs and where it came from: the caller's ("caller"), else the heuristic's
    ("heuristic", `heuristic_sm80.choose`; this kernel has no autotune table yet)."""
    if config is not None:
        return config, "caller"
    limits = device_limits(device)
    return choose(problem.m, problem.n, problem.k, limits.sm_count, limits.smem_per_block_optin), "heuristic"


def build(
    framework: Cupy | Torch,
    a: Any,
    b: Any,
    bias: Any,
    out: Any,
    *,
    activation: str | None,
    out_dtype: Any,
    config: GemmConfig | None,
) -> Plan:
    """The plan of a call, from its arguments (their shapes, strides, dtypes and alignment; no pointer is
    kept): checks that name what is wrong, the config, the layouts, the compiled kernel and its grid."""
    device = framework.meta(a)[3]
    with cupy.cuda.Device(device):
        require_sm80(device)
        problem = check_operands(a, b, out, out_dtype)
        cfg, source = chosen_config(problem, device, config)
        cfg = cfg.merged_over(DEFAULTS)
        check_config(cfg)
        check_split(cfg.value("SPLIT_K"), problem.k, cfg.value("BLOCK_K"))
        check_indices(problem, cfg)
        act = activation_name(activation)
        return _build(framework, device, problem, cfg, source, act, kernel_bias(bias, problem))


def check_indices(p: Problem, cfg: GemmConfig) -> None:
    """ValueError where a count the kernel keeps in an int would overflow: the tile order's GROUP_M x tile
    columns, a slice's k-tile bounds (SPLIT_K x k-tiles) and the 1-D grid."""
    check_int_index("GROUP_M x tile columns", cfg.value("GROUP_M") * ceil_div(p.n, cfg.value("BLOCK_N")))
    check_int_index("SPLIT_K x k-tiles", cfg.value("SPLIT_K") * ceil_div(p.k, cfg.value("BLOCK_K")))
    check_int_index("blocks in the grid", grid(p.m, p.n, cfg))


def _build(
    framework: Cupy | Torch, device: int, p: Problem, cfg: GemmConfig, source: str, act: str, bias: KernelBias | None
) -> Plan:
    (kernel_a, lda), (kernel_b, ldb) = kernel_operands(p)
    defines = {
        **kernel_defines(cfg), **dtype_defines(p.a.dtype), "A_MN_MAJOR": int(kernel_a.mn_major),
        "B_MN_MAJOR": int(kernel_b.mn_major), **epilogue_defines(bias, act, p.out_dtype),
    }  # fmt: skip
    limit = device_limits(device).smem_per_block_optin
    require_at_most("dynamic shared memory", tile_smem_bytes(cfg), limit, "shared memory per block")
    kernel, facts = get_kernel(KERNEL, defines), launch_facts(KERNEL, defines)
    require_at_most("shared memory (dynamic + static)", facts.smem_bytes + kernel.shared_size_bytes, limit,
                    "shared memory per block")  # fmt: skip
    function = kernel.kernel.ptr
    allow_dynamic_smem(function, facts.smem_bytes)
    split = cfg.value("SPLIT_K")
    values = launch_values(p, lda, ldb, split)
    raw = RawLaunch(function, grid(p.m, p.n, cfg), facts.threads, facts.smem_bytes,
                    [values[name] for name, _ in PARAMETERS])  # fmt: skip
    return Plan(
        framework=framework,
        device=device,
        config=cfg,
        config_source=source,
        kernel_a=kernel_a,
        kernel_b=kernel_b,
        out_shape=(p.m, p.n),
        out_dtype=framework.framework_dtype(p.out_dtype),
        out_staged=None,  # C by pointer, any row stride and alignment
        bias_in_place=bias is not None and bias.in_place,
        scratch=split_scratch(p.m, p.n, cfg),
        kernel_name=kernel.name,
        launch=raw,
        setters=tuple(raw.setters(call_slots(split > 1))),
    )


def launch_values(p: Problem, lda: int, ldb: int, split: int) -> dict[str, np.generic]:
    """Every parameter's value as the plan lays out the buffer: what a call writes (pointers, alpha) as
    placeholders, what the key fixes (the shape, strides, slices) for good."""
    ldc = leading_dim(p.out) if p.out is not None else p.n
    null, i32 = np.uint64(0), np.int32
    return {"a": null, "b": null, "out": null, "bias": null, "alpha": np.float32(1.0), "m": i32(p.m),
            "n": i32(p.n), "k": i32(p.k), "lda": i32(lda), "ldb": i32(ldb), "ldc": i32(ldc), "partials": null,
            "counters": null, "splits": i32(split)}  # fmt: skip
