"""A planned call of the library kernel (kernels/gemm_sm90.cu): built once per key, in one pass, then frozen.

What a call's key fixes is decided here once: the configuration (the caller's, this GPU's autotune table's,
or the heuristic's), which of the caller's operands the kernel reads as its A and which as its B (swap AB),
how it reads each (in place K-major or MN-major, or copied by every call into a row-padded buffer where TMA
cannot read it as it lies), where C goes (a tensor map; swapped, a pointer where the kernel stores C^T value
by value, as for rows TMA cannot write; plain, a padded buffer copied back there), the compiled kernel and
its grid, split-K's scratch sizes, and the kernel's parameter buffer, laid out from the parameters' names.
The tensor maps are encoded before any call's address is known (`PLACEHOLDER_ADDRESS`); every launch
points them at its own arrays.

A call then reads the pointers off the caller's arrays, allocates the output in the caller's framework,
writes the pointers into the parameter buffer and launches on the caller's current stream.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cupy
import numpy as np

from deepgemm.config import GemmConfig, require_at_most, require_in, require_wgmma_tile, tile_smem_bytes
from deepgemm.driver import (
    CUDA_ERROR_INVALID_CONTEXT,
    RawLaunch,
    StreamMemory,
    allow_dynamic_smem,
    check,
    device_limits,
    max_active_clusters,
)
from deepgemm.dtypes import FLOAT32, OUTPUT_DTYPES, dtype_defines, dtype_name
from deepgemm.epilogue import ACTIVATIONS, activation_name
from deepgemm.frameworks import Cupy, Torch
from deepgemm.heuristic import (
    MAX_BLOCK_M,
    PINGPONG_MAX_BLOCK_N,
    STRIP_ROWS,
    WIDE_BLOCK_M,
    WIDE_MAX_BLOCK_N,
    pick_config,
)
from deepgemm.jit import LIBRARY_KERNEL, get_kernel, launch_facts
from deepgemm.model import (
    balanced_workers,
    ceil_div,
    cluster_tiles,
    round_up,
    split_k_schedule,
    stream_k_schedule,
)
from deepgemm.operands import (
    INT32_MAX,
    Problem,
    check_bias,
    check_compute_capability,
    check_operands,
    device_name,
    leading_dim,
    padded_k,
    require_apart,
)
from deepgemm.tma import encode_spec, operand_box, read_in_place, read_mn_major, rows_writable, tile_map_spec

MIN_CC = (9, 0)  # wgmma and setmaxnreg: sm_90a, Hopper only
SWIZZLE_BYTES = 128  # one 64-element row of K is exactly one 128-byte swizzle span
PLACEHOLDER_ADDRESS = 1 << 20  # 16-byte aligned; the driver reads nothing there, and every launch re-points
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
        "CLUSTER_K": 1,
        "PINGPONG": 0,
        "SPLIT_K": 1,
        "STREAM_K": 0,
        "SWAP_AB": 0,
        "PDL": 0,
        "SHAPE_JIT": 0,
    },
)
BLOCK_MS = (64, 128, 256)  # [7] consumer warpgroups x wgmma m64: one, two, or two of two m64 each
BLOCK_NS = tuple(range(16, 257, 16))  # [7] wgmma's N, 16 columns per stmatrix of the epilogue
SWAP_BLOCK_NS = tuple(range(8, 257, 8))  # [8] C's rows as wgmma's N: any multiple of 8
CLUSTER_SIDES = (1, 2, 4)  # [9] CTAs along either side of a cluster ([12] or along K) ...
MAX_CLUSTER = 8  # ... and in all: the portable cluster size
BOX_ROW_MULTIPLE = 8  # a CTA's part of a tile is whole 8-row groups of the 128B swizzle (1024 bytes)
MAX_CLUSTER_K_BLOCK_M = 128  # [12] a split in the cluster: one wgmma m64 per consumer warpgroup
STREAM_K_ROUNDS = (0, 1, 2)  # [6] 0 off; else the rounds the cut part spans (model.stream_k_schedule)
# The plan's schedule (the kernel only needs PARTIAL_TILES), how it launches, and [11] whether it compiles the
# weight's dimensions in (FIXED_M or FIXED_N, and FIXED_K, `shape_defines`): never compiled in as they are.
HOST_ONLY_KNOBS = ("SPLIT_K", "STREAM_K", "PDL", "SHAPE_JIT")
DTYPE_CODES = {"fp16": 0, "bf16": 1, "fp32": 2}  # the OUT_DTYPE and BIAS_DTYPE defines


def kernel_parameters(c_by_pointer: bool) -> tuple[tuple[str, str], ...]:
    """The kernel's parameters in its signature's order, by name and kind: "map" a tensor map, "ptr" a
    pointer, "f32" / "i32" a scalar. [8] Swapped, C comes as a pointer and its row stride."""
    c_params = (("out", "ptr"),) if c_by_pointer else (("out", "map"),)
    shape = (("m", "i32"), ("n", "i32"), ("k", "i32"), *((("ldc", "i32"),) if c_by_pointer else ()))
    return (("a", "map"), ("b", "map"), *c_params, ("bias", "ptr"), ("alpha", "f32"), *shape,
            ("partials", "ptr"), ("counters", "ptr"), ("sk_tiles", "i32"), ("sk_workers", "i32"))  # fmt: skip


CALL_PARAMETERS = ("a", "b", "out", "bias", "alpha", "partials", "counters")  # what a call writes; last two: split-K


def call_slots(c_by_pointer: bool, split_k: bool) -> dict[str, tuple[int, str]]:
    """The parameters each call writes, by name: (position in the signature, kind). Split-K's scratch only
    with split-K; otherwise the buffer keeps its null pointers."""
    written = CALL_PARAMETERS if split_k else CALL_PARAMETERS[:-2]
    return {name: (i, kind) for i, (name, kind) in enumerate(kernel_parameters(c_by_pointer)) if name in written}


def check_config(cfg: GemmConfig) -> None:
    """The tile and cluster the kernel is written for: ValueError names the knob and why."""
    swap = cfg.value("SWAP_AB")
    require_in(cfg, "SWAP_AB", (0, 1), "1 computes C^T = b^T a^T, C's rows as wgmma's N")
    require_wgmma_tile(cfg, block_n=SWAP_BLOCK_NS if swap else BLOCK_NS, block_m=BLOCK_MS)
    block_n = cfg.value("BLOCK_N")
    if cfg.value("BLOCK_M") == WIDE_BLOCK_M and block_n > WIDE_MAX_BLOCK_N:
        raise ValueError(f"BLOCK_M = {WIDE_BLOCK_M} takes BLOCK_N up to {WIDE_MAX_BLOCK_N}, not {block_n}: each "
                         "consumer thread holds two wgmma m64 fragments of BLOCK_N / 2 fp32 accumulators")  # fmt: skip
    require_in(cfg, "CLUSTER_M", CLUSTER_SIDES, "CTAs per cluster sharing B through TMA multicast")
    require_in(cfg, "CLUSTER_N", CLUSTER_SIDES, "CTAs per cluster sharing A through TMA multicast")
    cluster_m, cluster_n = cfg.value("CLUSTER_M"), cfg.value("CLUSTER_N")
    if cluster_m * cluster_n > MAX_CLUSTER:
        size = cluster_m * cluster_n
        raise ValueError(f"CLUSTER_M x CLUSTER_N = {size} exceeds the portable cluster of {MAX_CLUSTER}")
    for part, whole, side in (("B", "BLOCK_N", "CLUSTER_M"), ("A", "BLOCK_M", "CLUSTER_N")):
        if (cfg.value(whole) // cfg.value(side)) % BOX_ROW_MULTIPLE:
            raise ValueError(
                f"{whole} / {side} = {cfg.value(whole)} / {cfg.value(side)}: each CTA loads its "
                f"part of {part} in whole groups of {BOX_ROW_MULTIPLE} rows (the swizzle's 1024 bytes)"
            )
    group = cfg.value("GROUP_M")
    if not isinstance(group, int) or group < 1:
        raise ValueError(f"GROUP_M = {group} must be a positive number of tile rows")
    stages = cfg.value("NUM_STAGES")
    if not isinstance(stages, int) or stages < 2:  # one k-tile's stage is released after the next one's wgmma
        raise ValueError(f"NUM_STAGES = {stages} must be at least 2: a stage is freed one k-tile late")
    split = cfg.value("SPLIT_K")
    if not isinstance(split, int) or split < 1:
        raise ValueError(f"SPLIT_K = {split} must be a positive number of slices of K")
    require_in(cfg, "STREAM_K", STREAM_K_ROUNDS, "0 off, else the rounds of tiles stream-K cuts along K")
    require_in(cfg, "PDL", (0, 1), "1 launches with programmatic dependent launch")
    require_in(cfg, "SHAPE_JIT", (0, 1), "1 compiles the weight's N and K into the kernel")
    if split > 1 and cfg.value("STREAM_K"):
        raise ValueError(f"SPLIT_K = {split} and STREAM_K = {cfg.value('STREAM_K')}: the tiles are cut one way or "
                         "the other, not both")  # fmt: skip
    require_in(cfg, "CLUSTER_K", CLUSTER_SIDES, "CTAs of a cluster on one tile, each a slice of K")
    check_cluster_k(cfg)
    require_in(cfg, "PINGPONG", (0, 1), "1: the two consumer warpgroups take alternate tiles")
    check_pingpong(cfg)


def check_cluster_k(cfg: GemmConfig) -> None:
    """[12] A split in the cluster: no multicast cluster, no other cut, BLOCK_M up to MAX_CLUSTER_K_BLOCK_M."""
    cluster_k = cfg.value("CLUSTER_K")
    if cluster_k == 1:
        return
    others = {name: cfg.value(name) for name in ("CLUSTER_M", "CLUSTER_N", "SPLIT_K", "STREAM_K")}
    if others != {"CLUSTER_M": 1, "CLUSTER_N": 1, "SPLIT_K": 1, "STREAM_K": 0}:
        knobs = ", ".join(f"{name} = {value}" for name, value in others.items())
        raise ValueError(f"CLUSTER_K = {cluster_k} sums a tile's slices of K inside the cluster: it takes no "
                         f"multicast cluster and no other cut, not {knobs}")  # fmt: skip
    if cfg.value("BLOCK_M") > MAX_CLUSTER_K_BLOCK_M:
        raise ValueError(f"CLUSTER_K = {cluster_k} takes BLOCK_M up to {MAX_CLUSTER_K_BLOCK_M}, "
                         f"not {cfg.value('BLOCK_M')}")  # fmt: skip


def check_pingpong(cfg: GemmConfig) -> None:
    """[13] Ping-pong: a consumer warpgroup holds a whole tile (BLOCK_M up to MAX_BLOCK_M, 128 rows at most
    PINGPONG_MAX_BLOCK_N wide), and every tile is whole (no split-K, stream-K or split in the cluster)."""
    if not cfg.value("PINGPONG"):
        return
    if cfg.value("BLOCK_M") > MAX_BLOCK_M:
        raise ValueError(f"PINGPONG = 1 gives each consumer warpgroup a whole tile: BLOCK_M up to "
                         f"{MAX_BLOCK_M}, not {cfg.value('BLOCK_M')}")  # fmt: skip
    if cfg.value("BLOCK_M") == MAX_BLOCK_M and cfg.value("BLOCK_N") > PINGPONG_MAX_BLOCK_N:
        raise ValueError(f"PINGPONG = 1 with BLOCK_M = {MAX_BLOCK_M} takes BLOCK_N up to "
                         f"{PINGPONG_MAX_BLOCK_N}, not {cfg.value('BLOCK_N')}: each consumer thread holds two "
                         "wgmma m64 fragments of BLOCK_N / 2 fp32 accumulators")  # fmt: skip
    cuts = {name: cfg.value(name) for name in ("SPLIT_K", "STREAM_K", "CLUSTER_K")}
    if cuts != {"SPLIT_K": 1, "STREAM_K": 0, "CLUSTER_K": 1}:
        knobs = ", ".join(f"{name} = {value}" for name, value in cuts.items())
        raise ValueError(f"PINGPONG = 1 takes whole tiles, not {knobs}")


def check_split(split: int, k: int, block_k: int, knob: str = "SPLIT_K") -> None:
    """Every slice of K gets at least one k-tile (split-K's, or [12] CLUSTER_K's): ValueError otherwise."""
    k_tiles = ceil_div(k, block_k)
    if split > k_tiles:
        raise ValueError(f"{knob} = {split} exceeds the {k_tiles} k-tiles of K = {k} (BLOCK_K = {block_k})")


def cut_scratch(cfg: GemmConfig, schedule: tuple[int, int]) -> tuple[int, int]:
    """[6] The fp32 partials and the counters a launch that cuts `schedule` = (sk_tiles, sk_workers) cluster
    tiles along K needs: a slot of one cluster tile (CLUSTER_M x CLUSTER_N CTA tiles of BLOCK_M x BLOCK_N)
    for every part, sk_workers + sk_tiles slots (the kernel's slot is worker + cut tile), and a counter per
    16-row strip of every cut tile; (0, 0) where no tile is cut."""
    sk_tiles, workers = schedule
    if not sk_tiles:
        return 0, 0
    cta_tiles = cfg.value("CLUSTER_M") * cfg.value("CLUSTER_N")
    tile_floats = cta_tiles * cfg.value("BLOCK_M") * cfg.value("BLOCK_N")
    return (workers + sk_tiles) * tile_floats, sk_tiles * cta_tiles * cfg.value("BLOCK_M") // STRIP_ROWS


def chosen_config(problem: Problem, device: int, config: GemmConfig | None = None) -> tuple[GemmConfig, str]:
    """The config a call runs and where it came from: the caller's ("caller"), else this GPU's autotune table
    entry ("table"), else the cost model's pick ("heuristic", `heuristic.pick_config`)."""
    if config is not None:
        return config, "caller"
    b_mn_major, a_mn_major = read_mn_major(problem.b.T), read_mn_major(problem.a)
    dtype = dtype_name(problem.a.dtype)
    sm_count = device_limits(device).sm_count
    return pick_config(problem.m, problem.n, problem.k, dtype, device_name(device), sm_count, b_mn_major, a_mn_major)


@dataclass(frozen=True)
class Operand:
    """How the kernel reads its A or its B, (rows, K) either: `source`, the caller's operand it is ("a", or
    "b" read as its transpose (N, K)); MN-major where K is the strided dimension; and `staged`, the
    (rows, padded K) buffer each call copies it into where TMA cannot read it as it lies (else None)."""

    source: str
    mn_major: bool
    staged: tuple[int, int] | None


@dataclass(frozen=True)
class Plan:
    """One call's launch, everything its key fixes. Calling it launches on the caller's current stream."""

    framework: Cupy | Torch
    device: int
    config: GemmConfig
    config_source: str  # "caller", "table" or "heuristic"
    kernel_a: Operand
    kernel_b: Operand
    out_shape: tuple[int, int]
    out_dtype: Any  # the framework's dtype
    out_staged: tuple[int, int] | None  # the padded buffer C is written to and copied from, where TMA cannot write out
    bias_in_place: bool  # a bias the kernel reads as it is (else each call converts it to float32)
    scratch: tuple[int, int]  # split-K's fp32 partials and counters (0, 0 without split-K)
    kernel_name: str
    launch: RawLaunch = field(repr=False)
    setters: tuple = field(repr=False)  # (name, write) for CALL_PARAMETERS
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # one parameter buffer

    def __call__(self, a: Any, b: Any, bias: Any, alpha: float, out: Any) -> Any:
        if cupy.cuda.runtime.getDevice() != self.device:  # the kernel is loaded in the device's primary context
            with cupy.cuda.Device(self.device):
                return self.run(a, b, bias, alpha, out)
        return self.run(a, b, bias, alpha, out)

    def run(self, a: Any, b: Any, bias: Any, alpha: float, out: Any) -> Any:
        fw = self.framework
        result = fw.empty(self.out_shape, self.out_dtype, a) if out is None else out
        if bias is not None and not self.bias_in_place:
            bias = fw.float32_vector(bias)  # on the same stream as the kernel: it lives until the kernel ran
        values = {"out": fw.pointer(result), "alpha": alpha, "bias": 0 if bias is None else fw.pointer(bias)}
        stream = fw.stream(self.device)
        captured = None
        if self.scratch[0]:  # without a cut tile the buffer keeps its null pointers: nothing to write
            if fw.capturing(self.device):  # a graph gets a pair of its own, zeroed by a node of that graph
                captured = capture_scratch(fw, self.scratch, a)
                values["partials"], values["counters"] = fw.pointer(captured[0]), fw.pointer(captured[1])
            else:
                values["partials"], values["counters"] = split_k_scratch_pointers(self.device, stream, self.scratch)
        # Held until the kernel is queued: a buffer dropped earlier goes back to the framework's allocator,
        # which may hand its memory to the next one (the padded out) for the same kernel to write into.
        staged = None
        if self.kernel_a.staged is None and self.kernel_b.staged is None:  # both read as they lie: the usual call
            first, second = fw.pointer(a), fw.pointer(b)
            values["a"], values["b"] = (second, first) if self.kernel_a.source == "b" else (first, second)
        else:
            staged = [self.operand_pointer(operand, name, a, b, values) for name, operand in
                      (("a", self.kernel_a), ("b", self.kernel_b))]  # fmt: skip
        written = None
        if self.out_staged is not None:
            written = fw.empty(self.out_staged, self.out_dtype, a)[:, : self.out_shape[1]]
            values["out"] = fw.pointer(written)
        with self.lock:
            try:
                for name, write in self.setters:
                    write(values[name])
            except TypeError:  # every value but alpha is a pointer the plan took from an array
                raise TypeError(f"alpha must be a real number, got {type(alpha).__name__}") from None
            status = self.launch.launch(stream)
            if status == CUDA_ERROR_INVALID_CONTEXT:  # a thread that has not used the GPU: make it current
                with cupy.cuda.Device(self.device):
                    status = self.launch.launch(stream)
            check(status, f"cuLaunchKernel of {self.kernel_name}")
        if written is not None:
            fw.copy(result, written)
        del staged, captured  # queued before (the copies, the zeroing) or with the kernel on this stream
        return result

    def operand_pointer(self, operand: Operand, name: str, a: Any, b: Any, values: dict[str, Any]) -> Any:
        """Writes the pointer the kernel reads `operand` (its A or B) from into values[name]: the caller's
        array, or a row-padded copy made on the kernel's stream (returned, to be held until then)."""
        fw = self.framework
        source = a if operand.source == "a" else b
        if operand.staged is None:
            values[name] = fw.pointer(source)
            return None
        rows_k = source if operand.source == "a" else source.T  # as the kernel reads it: (M or N, K)
        k = rows_k.shape[1]
        padded = (fw.zeros if operand.staged[1] > k else fw.empty)(operand.staged, rows_k.dtype, a)  # K's padding read
        fw.copy(padded[:, :k], rows_k)
        values[name] = fw.pointer(padded)
        return padded


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
    kept): checks that name what is wrong, the config, the layouts, the compiled kernel, its grid and maps."""
    device = framework.meta(a)[3]
    with cupy.cuda.Device(device):
        require_hopper(device)
        problem = check_operands(a, b, out, out_dtype)
        cfg, source = chosen_config(problem, device, config)
        cfg = cfg.merged_over(DEFAULTS)
        check_config(cfg)
        for knob in ("SPLIT_K", "CLUSTER_K"):
            check_split(cfg.value(knob), problem.k, cfg.value("BLOCK_K"), knob)
        act = activation_name(activation)
        return _build(framework, device, problem, cfg, source, act, kernel_bias(bias, problem))


@dataclass(frozen=True)
class KernelBias:
    """How the kernel reads a call's bias: as a vector of `dtype` ("fp16", "bf16" or "fp32": its BIAS_DTYPE),
    the caller's own where `in_place`, else the contiguous float32 copy that every call makes."""

    dtype: str
    in_place: bool


def kernel_bias(bias: Any, p: Problem) -> KernelBias | None:
    """None without a bias; else how the kernel reads it: as it is, in its own type, where it is a contiguous
    vector of N float16, bfloat16 or float32 values (a 16-bit model's nn.Linear bias is one), else converted
    to float32 by every call (a strided or float64 bias). ValueError names a bias of the wrong shape, on
    another GPU, or under `out`."""
    if bias is None:
        return None
    view = check_bias(bias, p.n, p.a.device.id)
    if p.out is not None:
        require_apart(p.out, view, "bias")
    if view.dtype in OUTPUT_DTYPES.values() and view.strides == (view.itemsize,):
        return KernelBias(dtype_name(view.dtype), in_place=True)
    return KernelBias("fp32", in_place=False)


def epilogue_defines(bias: KernelBias | None, act: str, out_dtype: Any) -> dict[str, int]:
    """The fused epilogue's defines, the same in both library kernels: the bias (whether there is one, and
    its type: fp32, the kernels' default, without one), the activation and the output type."""
    return {"HAS_BIAS": int(bias is not None), "BIAS_DTYPE": DTYPE_CODES[bias.dtype if bias else "fp32"],
            "ACTIVATION": ACTIVATIONS[act], "OUT_DTYPE": DTYPE_CODES[dtype_name(out_dtype)]}  # fmt: skip


def _build(
    framework: Cupy | Torch, device: int, p: Problem, cfg: GemmConfig, source: str, act: str, bias: KernelBias | None
) -> Plan:
    swap = cfg.value("SWAP_AB") == 1
    block_m, block_n, box_k = cfg.value("BLOCK_M"), cfg.value("BLOCK_N"), cfg.value("BOX_K")
    cluster_m, cluster_n = cfg.value("CLUSTER_M"), cfg.value("CLUSTER_N")
    # The kernel computes A (M', K) times B (N', K)^T: a and b^T, or [8] swapped, b^T and a (C^T).
    names = ("b", "a") if swap else ("a", "b")
    rows_k = {"a": p.a, "b": p.b.T}
    m, n = (p.n, p.m) if swap else (p.m, p.n)
    itemsize = p.a.itemsize
    operands, maps = [], []
    for role, name, rows, knobs in (("A", names[0], block_m // cluster_n, "BLOCK_M / CLUSTER_N"),
                                    ("B", names[1], block_n // cluster_m, "BLOCK_N / CLUSTER_M")):  # fmt: skip
        x = rows_k[name]
        found = read_in_place(x, mn_major_ok=True)
        if found is None:  # rows TMA cannot describe: each call copies them K-major, K padded to 16 bytes
            staged = (x.shape[0], padded_k(x.shape[1]))
            view_shape, view_strides, mn_major = staged, (staged[1] * itemsize, itemsize), False
        else:
            view, mn_major = found
            staged, view_shape, view_strides = None, view.shape, view.strides
        if mn_major:
            require_whole_boxes(role, rows, knobs, itemsize)
        box = operand_box(mn_major, rows, box_k, SWIZZLE_BYTES, itemsize)
        spec = tile_map_spec(view_shape, view_strides, PLACEHOLDER_ADDRESS, itemsize, *box, SWIZZLE_BYTES)
        maps.append(encode_spec(spec, p.a.dtype, PLACEHOLDER_ADDRESS))
        operands.append(Operand(name, mn_major, staged))

    out_dtype = p.out_dtype
    out_itemsize = np.dtype(out_dtype).itemsize
    out_rows_stride = leading_dim(p.out) if p.out is not None else p.n
    c_rows_whole = rows_writable(0 if p.out is None else p.out.data.ptr, out_rows_stride * out_itemsize,
                                 p.n * out_itemsize)  # fmt: skip
    defines = {
        **kernel_defines(cfg), **dtype_defines(p.a.dtype), "A_MN_MAJOR": int(operands[0].mn_major),
        "B_MN_MAJOR": int(operands[1].mn_major), **epilogue_defines(bias, act, out_dtype),
        **shape_defines(cfg, swap, m, n, p.k), **({"C_UNALIGNED": 1} if swap and not c_rows_whole else {}),
    }  # fmt: skip
    require_at_most("dynamic shared memory", tile_smem_bytes(cfg), device_limits(device).smem_per_block_optin,
                    "shared memory per block")  # fmt: skip
    kernel, facts = get_kernel(LIBRARY_KERNEL, defines), launch_facts(LIBRARY_KERNEL, defines)
    require_at_most("shared memory (dynamic + static)", facts.smem_bytes + kernel.shared_size_bytes,
                    device_limits(device).smem_per_block_optin, "shared memory per block")  # fmt: skip
    function = kernel.kernel.ptr
    allow_dynamic_smem(function, facts.smem_bytes)

    out_shape = (p.m, p.n)
    out_staged, values = None, {}
    if facts.store_box is None:  # [8] C by pointer (C^T stored transposed), any row stride
        values["out"], values["ldc"] = np.uint64(0), np.int32(out_rows_stride)
    else:
        strides = (out_rows_stride * out_itemsize, out_itemsize)
        if not c_rows_whole:  # TMA cannot write rows such as 4097 fp16: written padded, then copied
            out_staged = (p.m, round_up(p.n, 16 // out_itemsize))
            strides = (out_staged[1] * out_itemsize, out_itemsize)
        swizzle = facts.store_box[1] * out_itemsize  # [7] a store box's row is one swizzle span: 128, 64 or 32 bytes
        spec = tile_map_spec(out_shape, strides, PLACEHOLDER_ADDRESS, out_itemsize, *facts.store_box, swizzle)
        values["out"] = encode_spec(spec, out_dtype, PLACEHOLDER_ADDRESS)
    grid, schedule = persistent_grid(device, m, n, p.k, cfg, function, facts.threads, facts.smem_bytes)
    values.update(a=maps[0], b=maps[1], bias=np.uint64(0), alpha=np.float32(1.0), partials=np.uint64(0),
                  counters=np.uint64(0), m=np.int32(m), n=np.int32(n), k=np.int32(p.k),
                  sk_tiles=np.int32(schedule[0]), sk_workers=np.int32(schedule[1]))  # fmt: skip
    parameters = kernel_parameters(facts.store_box is None)
    raw = RawLaunch(function, grid, facts.threads, facts.smem_bytes, [values[name] for name, _ in parameters],
                    programmatic=cfg.value("PDL") == 1)  # fmt: skip
    slots = call_slots(facts.store_box is None, schedule[0] > 0)
    return Plan(
        framework=framework,
        device=device,
        config=cfg,
        config_source=source,
        kernel_a=operands[0],
        kernel_b=operands[1],
        out_shape=out_shape,
        out_dtype=framework.framework_dtype(out_dtype),
        out_staged=out_staged,
        bias_in_place=bias is not None and bias.in_place,
        scratch=cut_scratch(cfg, schedule),
        kernel_name=kernel.name,
        launch=raw,
        setters=tuple(raw.setters(slots)),
    )


def require_whole_boxes(role: str, rows: int, knobs: str, itemsize: int) -> None:
    """[5] ValueError unless each CTA's `rows` of an MN-major operand are whole boxes, one swizzle span wide."""
    span = SWIZZLE_BYTES // itemsize
    if rows % span:
        raise ValueError(f"an MN-major {role} arrives in {span}-wide boxes, and each CTA loads {rows} of its "
                         f"rows: pass it K-major, or make {knobs} a multiple of {span}")  # fmt: skip


def persistent_grid(
    device: int, m: int, n: int, k: int, cfg: GemmConfig, function: int, threads: int, smem: int
) -> tuple[int, tuple[int, int]]:
    """CTAs of the persistent grid and [6] the schedule of the tiles cut along K, (sk_tiles, sk_workers)
    (`model.stream_k_schedule` / `split_k_schedule`; (0, 0): every tile whole). Slots: as many whole
    clusters as fit on the GPU at once (one CTA per SM without clusters). Stream-K runs a worker on every
    slot; otherwise only as many as finish the work units (cluster tiles times split-K's slices) in as
    many rounds, so that every round is full (`balanced_workers`)."""
    cluster_m, cluster_n = cfg.value("CLUSTER_M"), cfg.value("CLUSTER_N")
    size = cluster_m * cluster_n * cfg.value("CLUSTER_K")  # [12] a tile's slices of K are CTAs of its cluster
    tiles = cluster_tiles(m, n, cfg.value("BLOCK_M"), cfg.value("BLOCK_N"), cluster_m, cluster_n)
    slots = device_limits(device).sm_count if size == 1 else max_active_clusters(function, size, threads, smem)
    k_tiles = ceil_div(k, cfg.value("BLOCK_K"))
    check_int_index("cluster tiles x k-tiles (the scheduler's k-tile numbers)", tiles * k_tiles)
    check_int_index("GROUP_M x tile columns", cfg.value("GROUP_M") * ceil_div(n, cfg.value("BLOCK_N")))
    if cfg.value("STREAM_K"):
        schedule = stream_k_schedule(tiles, slots, k_tiles, rounds=cfg.value("STREAM_K"))
        check_cut(schedule, k_tiles)
        if schedule[0]:
            return slots * size, schedule
        return balanced_workers(tiles, slots) * size, schedule  # every round full: nothing to cut
    schedule = split_k_schedule(tiles, cfg.value("SPLIT_K"))
    check_cut(schedule, k_tiles)
    units = schedule[1] or tiles
    return balanced_workers(units, slots) * size, schedule


def check_int_index(what: str, value: int) -> None:
    """ValueError where a count the kernels keep in an int (k-tile numbers, the tile order's group, split-K's
    k-tile bounds, the grid) would not fit one: a knob far from what any shape needs, or tiles this small on a
    problem this large."""
    if value > INT32_MAX:
        raise ValueError(f"{what} = {value}: over the kernels' 2^31 limit; use larger tiles or a smaller knob")


def check_cut(schedule: tuple[int, int], k_tiles: int) -> None:
    """ValueError where the cut part is too large for the kernel's 32-bit arithmetic (a split of a big problem
    that split-K is not for: stream-K's part is at most two rounds of tiles)."""
    sk_tiles, workers = schedule
    if sk_tiles * k_tiles * workers > INT32_MAX:
        raise ValueError(
            f"SPLIT_K cuts {sk_tiles} tiles of {k_tiles} k-tiles into {workers} parts: over the "
            f"kernel's 2^31 limit on k-tiles x parts; split a problem this large less, or not at all"
        )


def kernel_defines(cfg: GemmConfig) -> dict[str, int]:
    """The config's defines as the kernel takes them: SPLIT_K and STREAM_K are the plan's schedule (host
    only), so every config that cuts tiles compiles to one kernel, PARTIAL_TILES 1."""
    defines = {name: value for name, value in cfg.defines().items() if name not in HOST_ONLY_KNOBS}
    for knob, default in (("CLUSTER_K", 1), ("PINGPONG", 0)):  # builds without them keep their defines and cache
        if defines.get(knob) == default:
            del defines[knob]
    cuts = cfg.extra.get("SPLIT_K", 1) > 1 or cfg.extra.get("STREAM_K", 0) > 0
    return {**defines, "PARTIAL_TILES": int(cuts)}


def shape_defines(cfg: GemmConfig, swap: bool, m: int, n: int, k: int) -> dict[str, int]:
    """[11] With SHAPE_JIT, the weight's dimensions compiled into the kernel, as the seed's per-shape JIT does:
    K and the weight's rows (the kernel's N' plain, its M' swapped), so that a model's layer compiles once
    whatever its tokens; `m` and `n` are the kernel's M' and N'."""
    if not cfg.value("SHAPE_JIT"):
        return {}
    return {"FIXED_K": k, **({"FIXED_M": m} if swap else {"FIXED_N": n})}


def require_hopper(device: int) -> None:
    """RuntimeError unless `device` is an sm_90a GPU (H100, H200): wgmma and setmaxnreg exist there alone."""
    cc = device_limits(device).compute_capability
    if cc != MIN_CC:
        check_compute_capability(cc, device_name(device), MIN_CC, "deepgemm.gemm", exact=True)


@dataclass(frozen=True)
class Scratch:
    """Split-K's scratch on one stream: `partials` fp32 words and `counters` 32-bit words (zeroed), by pointer."""

    partials: int
    partials_words: int
    counters: int
    counters_words: int


_SCRATCH: dict[tuple[int, int], Scratch] = {}  # (device, stream) -> split-K's scratch
_SCRATCH_LOCK = threading.Lock()
_CAPTURED: list[tuple[Any, Any]] = []  # CuPy's captured scratch, held for the process (see capture_scratch)


def capture_scratch(fw: Cupy | Torch, need: tuple[int, int], like: Any) -> tuple[Any, Any]:
    """A fresh pair of need[0] fp32 partials and need[1] zeroed counters for a launch being captured in a
    CUDA graph: the zeroing is then a node of that graph, run before the kernel at every replay, and no two
    graphs share a pair (the stream's shared pair would be zeroed only by the graph that first allocated
    it, and graphs replayed at once on two streams would race on it). torch allocates it in the graph's
    own pool, which keeps it as long as the graph; CuPy's pool does not know graphs, so the pair is held
    for the process."""
    f32 = fw.framework_dtype(FLOAT32)
    pair = (fw.empty((1, need[0]), f32, like), fw.zeros((1, need[1]), f32, like))
    if fw.name == "cupy":
        _CAPTURED.append(pair)
    return pair


def split_k_scratch_pointers(device: int, stream: int, need: tuple[int, int], memory: Any = None) -> tuple[int, int]:
    """Pointers to at least need[0] fp32 partials and need[1] zeroed counters for a split-K launch on
    `stream`. The pair is shared by every plan on that stream and regrown (the old pair freed in stream
    order, after the launches queued on it) when a launch needs more. It is the library's own memory
    (`driver.StreamMemory`, or `memory` standing in for it), not the framework's, since it outlives the
    call: a tensor kept from inside torch.compile's cudagraph-tree warm-up would sit in that graph's pool,
    which then refuses to record."""
    key = (device, stream)
    with _SCRATCH_LOCK:
        held = _SCRATCH.get(key)
        if held is None or held.partials_words < need[0] or held.counters_words < need[1]:
            words = (need[0], need[1]) if held is None else (max(need[0], held.partials_words),
                                                             max(need[1], held.counters_words))  # fmt: skip
            memory = memory or StreamMemory(device)
            partials, counters = memory.allocate(4 * words[0], stream), memory.allocate(4 * words[1], stream)
            memory.zero(counters, words[1], stream)  # all-zero bits: unsigned 0 in the kernel
            if held is not None:
                memory.free(held.partials, stream)
                memory.free(held.counters, stream)
            held = _SCRATCH[key] = Scratch(partials, words[0], counters, words[1])
            if ON_SCRATCH is not None:  # in the lock: the C++ call path never sees a freed pair
                ON_SCRATCH(device, stream, held)
    return held.partials, held.counters


# Told of each stream's scratch as it is made or regrown (deepgemm.fast: the C++ call path launches split-K
# plans with the same pair).
ON_SCRATCH: Callable[[int, int, Scratch], None] | None = None
