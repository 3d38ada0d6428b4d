"""A plan's pure parts, without a GPU: the kernel's parameters, the config checks, split-K's scratch, the
config a call gets, the Hopper check, and the hot path (`Plan.run`) on host arrays with a stand-in kernel.

`plan.build` itself asks the driver for the GPU's limits and compiles the kernel, so it runs on a GPU only
(tests/test_gpu_library.py); here every piece it assembles is checked on its own.
"""

from __future__ import annotations

import ctypes
import json
import re
import threading
import weakref
from contextlib import contextmanager
from types import SimpleNamespace

import cupy
import numpy as np
import pytest

from deepgemm import driver, heuristic, plan
from deepgemm.config import GemmConfig
from deepgemm.driver import CUDA_ERROR_INVALID_CONTEXT, DeviceLimits, RawLaunch
from deepgemm.dtypes import BFLOAT16
from deepgemm.epilogue import ACTIVATIONS
from deepgemm.jit import LIBRARY_KERNEL
from deepgemm.operands import check_operands
from deepgemm.plan import (
    CALL_PARAMETERS,
    DEFAULTS,
    DTYPE_CODES,
    KernelBias,
    Operand,
    Plan,
    call_slots,
    check_config,
    check_split,
    chosen_config,
    cut_scratch,
    epilogue_defines,
    kernel_bias,
    kernel_defines,
    kernel_parameters,
    persistent_grid,
    split_k_scratch_pointers,
)

H200 = DeviceLimits(sm_count=132, smem_per_block_optin=232_448, compute_capability=(9, 0))


# ---- the kernel's parameters -------------------------------------------------------------------------------


def _signatures() -> dict[bool, list[tuple[str, str]]]:
    """gemm_sm90.cu's two gemm_kernel signatures (by whether C comes by pointer) as (name, kind) lists, the
    names as kernel_parameters spells them (tma_a -> a, c_out / tma_c -> out, M -> m)."""
    source = LIBRARY_KERNEL.read_text()
    found = {}
    for params in re.findall(r"gemm_kernel\(([^)]*)\)", source):
        parsed = []
        for param in " ".join(params.split()).split(","):
            declaration, name = param.strip().rsplit(" ", 1)
            kind = ("map" if "TmaDesc" in declaration else "ptr" if "*" in declaration
                    else {"float": "f32", "int": "i32"}[declaration])  # fmt: skip
            name = {"tma_c": "out", "c_out": "out"}.get(name, name.removeprefix("tma_").lower())
            parsed.append((name, kind))
        found[("ldc", "i32") in parsed] = parsed
    return found


def test_the_parameters_are_the_kernels_signature_in_order():
    """The parameter buffer is laid out from kernel_parameters: a name or kind out of step with the kernel
    would hand it a pointer for a map, or K for ldc."""
    signatures = _signatures()
    assert set(signatures) == {False, True}
    for c_by_pointer, parsed in signatures.items():
        assert list(kernel_parameters(c_by_pointer)) == parsed
    assert set(CALL_PARAMETERS) <= {name for name, _ in kernel_parameters(True)}
    assert not {"m", "n", "k", "ldc"} & set(CALL_PARAMETERS)  # fixed by the plan's key, written once


# ---- the config checks ---------------------------------------------------------------------------------------


def _config(**knobs) -> GemmConfig:
    core = {k: knobs.pop(k) for k in ("block_m", "block_n", "num_stages") if k in knobs}
    return GemmConfig(**core, extra=knobs).merged_over(DEFAULTS)


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"SWAP_AB": 2}, r"SWAP_AB = 2 must be one of \(0, 1\)"),
        ({"block_n": 100}, r"BLOCK_N = 100 must be one of \(16, 32, 48, .*, 256\)"),
        ({"block_n": 8}, r"BLOCK_N = 8 must be one of \(16, 32, "),
        ({"block_n": 12, "SWAP_AB": 1}, r"BLOCK_N = 12 must be one of \(8, 16, 24, .*, 256\)"),
        ({"block_n": 264, "SWAP_AB": 1}, r"BLOCK_N = 264 must be one of \(8, 16, "),
        ({"block_m": 192}, r"BLOCK_M = 192 must be one of \(64, 128, 256\)"),
        ({"block_m": 256}, r"BLOCK_M = 256 takes BLOCK_N up to 128, not 256"),
        ({"SHAPE_JIT": 2}, r"SHAPE_JIT = 2 must be one of \(0, 1\)"),
        ({"CLUSTER_M": 3}, r"CLUSTER_M = 3 must be one of \(1, 2, 4\)"),
        ({"CLUSTER_N": 8}, r"CLUSTER_N = 8 must be one of \(1, 2, 4\)"),
        ({"CLUSTER_M": 4, "CLUSTER_N": 4}, "CLUSTER_M x CLUSTER_N = 16 exceeds the portable cluster of 8"),
        ({"block_n": 16, "CLUSTER_M": 4}, r"BLOCK_N / CLUSTER_M = 16 / 4: each CTA loads its part of B in whole"),
        ({"block_m": 64, "CLUSTER_N": 4, "CLUSTER_M": 1, "block_n": 8, "SWAP_AB": 1}, None),
        ({"GROUP_M": 0}, "GROUP_M = 0 must be a positive number of tile rows"),
        ({"num_stages": 1}, "NUM_STAGES = 1 must be at least 2: a stage is freed one k-tile late"),
        ({"num_stages": -1}, "NUM_STAGES = -1 must be at least 2"),
        ({"num_stages": 2}, None),
        ({"SPLIT_K": 0}, "SPLIT_K = 0 must be a positive number of slices of K"),
        ({"SPLIT_K": 1.5}, "SPLIT_K = 1.5 must be a positive number"),
        ({"STREAM_K": 3}, r"STREAM_K = 3 must be one of \(0, 1, 2\)"),
        ({"STREAM_K": 1, "SPLIT_K": 2}, "SPLIT_K = 2 and STREAM_K = 1: the tiles are cut one way or the other"),
        ({"CLUSTER_K": 3, "CLUSTER_M": 1}, r"CLUSTER_K = 3 must be one of \(1, 2, 4\)"),
        ({"CLUSTER_K": 2}, "CLUSTER_K = 2 sums a tile's slices of K inside the cluster: it takes no multicast cluster "
                           "and no other cut, not CLUSTER_M = 2, CLUSTER_N = 1, SPLIT_K = 1, STREAM_K = 0"),
        ({"CLUSTER_K": 2, "CLUSTER_M": 1, "SPLIT_K": 2}, "not CLUSTER_M = 1, CLUSTER_N = 1, SPLIT_K = 2"),
        ({"CLUSTER_K": 4, "CLUSTER_M": 1, "block_m": 256, "block_n": 64}, "CLUSTER_K = 4 takes BLOCK_M up to 128"),
        ({"CLUSTER_K": 4, "CLUSTER_M": 1, "block_n": 64}, None),
        ({"PINGPONG": 2}, r"PINGPONG = 2 must be one of \(0, 1\)"),
        ({"PINGPONG": 1, "block_m": 256, "block_n": 128}, "PINGPONG = 1 gives each consumer warpgroup a whole tile: "
                                                          "BLOCK_M up to 128, not 256"),
        ({"PINGPONG": 1, "block_n": 160}, "PINGPONG = 1 with BLOCK_M = 128 takes BLOCK_N up to 144, not 160"),
        ({"PINGPONG": 1, "block_n": 128, "STREAM_K": 1}, "PINGPONG = 1 takes whole tiles, not SPLIT_K = 1, "
                                                         "STREAM_K = 1, CLUSTER_K = 1"),
        ({"PINGPONG": 1, "block_m": 64, "block_n": 64, "CLUSTER_M": 1, "CLUSTER_K": 2}, "not SPLIT_K = 1, STREAM_K"
                                                                                         " = 0, CLUSTER_K = 2"),
        ({"PINGPONG": 1, "block_n": 144}, None),
        ({"PINGPONG": 1, "block_m": 64, "block_n": 256}, None),
    ],
)
def test_a_config_the_kernel_cannot_run_is_named_by_its_knob(knobs, message):
    if message is None:  # at the edge of the rules, and inside them: 16-row parts of a 64-row A
        check_config(_config(**knobs))
        return
    with pytest.raises(ValueError, match=message):
        check_config(_config(**knobs))


def test_the_kernels_configurations_pass():
    for knobs in ({}, {"block_n": 16, "block_m": 64, "SWAP_AB": 1, "CLUSTER_M": 1, "SPLIT_K": 4},
                  {"block_n": 64, "CLUSTER_M": 1, "CLUSTER_N": 2}, {"block_n": 200, "SWAP_AB": 1, "CLUSTER_N": 4,
                  "CLUSTER_M": 1, "STREAM_K": 2}, {"block_n": 176, "CLUSTER_M": 2, "CLUSTER_N": 4}):  # fmt: skip
        check_config(_config(**knobs))
    for choice in heuristic.candidates(16, 4096, 4096, 132)[:20]:  # the 20 cheapest at one shape (all shapes: below)
        check_config(choice.config().merged_over(DEFAULTS))


@pytest.mark.parametrize("layouts", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["both K-major", "b MN-major", "a MN-major", "both MN-major"])
def test_the_heuristic_picks_only_what_the_plan_builds_at_any_shape(layouts):
    """Whatever a model's shape (odd M, N and K, one token to thousands, K under one k-tile) and layout, the
    model's pick passes every check the plan makes of a config before it compiles: the kernel's tiles and
    clusters, a k-tile for every slice of K, and whole boxes of an MN-major operand in each CTA."""
    b_mn, a_mn = layouts
    for m in (1, 3, 8, 17, 33, 64, 100, 129, 257, 513, 777, 1025, 2049, 4097):
        for n in (8, 24, 100, 1000, 2112, 4097, 28672):
            for k in (8, 72, 700, 1536, 4097, 16384):
                cfg = heuristic.choose(m, n, k, 132, b_mn, a_mn).config().merged_over(DEFAULTS)
                check_config(cfg)
                for knob in ("SPLIT_K", "CLUSTER_K"):
                    check_split(cfg.value(knob), k, cfg.value("BLOCK_K"), knob)
                a_mn_major, b_mn_major = (b_mn, a_mn) if cfg.value("SWAP_AB") else (a_mn, b_mn)  # the kernel's
                parts = {"A": (a_mn_major, cfg.value("BLOCK_M") // cfg.value("CLUSTER_N")),
                         "B": (b_mn_major, cfg.value("BLOCK_N") // cfg.value("CLUSTER_M"))}  # fmt: skip
                for role, (mn_major, rows) in parts.items():
                    if mn_major:
                        plan.require_whole_boxes(role, rows, role, 2)


def test_split_k_needs_a_k_tile_for_every_slice():
    with pytest.raises(ValueError, match=r"SPLIT_K = 5 exceeds the 4 k-tiles of K = 200 \(BLOCK_K = 64\)"):
        check_split(5, 200, 64)
    with pytest.raises(ValueError, match=r"CLUSTER_K = 4 exceeds the 3 k-tiles of K = 129"):
        check_split(4, 129, 64, "CLUSTER_K")
    check_split(4, 200, 64)  # one k-tile per slice is allowed
    check_split(1, 1, 64)


def test_cut_scratch_holds_a_slot_per_part_and_a_counter_per_strip_of_every_cut_tile():
    """The kernel writes part (worker w, cut tile t) to slot w + t: sk_workers + sk_tiles slots of one
    cluster tile each (CLUSTER_M x CLUSTER_N CTA tiles), and a counter per 16 rows of every cut tile."""
    assert cut_scratch(_config(), (0, 0)) == (0, 0)
    cfg = _config(SPLIT_K=3)  # 128 x 256 tiles in clusters of two
    assert cut_scratch(cfg, (16, 48)) == ((48 + 16) * 2 * 128 * 256, 16 * 2 * 128 // 16)
    swapped = _config(block_m=64, block_n=16, SWAP_AB=1, CLUSTER_M=1, CLUSTER_N=4, STREAM_K=1)
    assert cut_scratch(swapped, (10, 132)) == (142 * 4 * 64 * 16, 10 * 4 * 64 // 16)


def test_the_kernel_is_compiled_once_for_every_cut_its_schedule_is_the_plans():
    """SPLIT_K and STREAM_K never reach the compiler: the plan passes the schedule at launch, so every split
    shares the kernel with PARTIAL_TILES 1, and a config that cuts nothing compiles without the sum."""
    split2, split4 = kernel_defines(_config(SPLIT_K=2)), kernel_defines(_config(SPLIT_K=4))
    assert split2 == split4 == kernel_defines(_config(STREAM_K=1))
    assert split2["PARTIAL_TILES"] == 1 and "SPLIT_K" not in split2 and "STREAM_K" not in split2
    assert kernel_defines(_config())["PARTIAL_TILES"] == 0
    assert "CLUSTER_K" not in kernel_defines(_config())  # [12] off: the defines, and so the cache, stay as they were
    assert kernel_defines(_config(CLUSTER_M=1, CLUSTER_K=2))["CLUSTER_K"] == 2
    assert "PINGPONG" not in kernel_defines(_config())  # [13] likewise
    assert kernel_defines(_config(block_n=128, PINGPONG=1))["PINGPONG"] == 1


@pytest.mark.parametrize(
    ("knobs", "shape", "expected"),
    [
        # 4096 x 4096 in 128 x 256 tiles, clusters of two: 256 cluster tiles, 66 slots: four rounds, the last
        # 58/66 full. Stream-K off: 64 clusters (the fewest that still take four rounds) and nothing cut.
        ({}, (4096, 4096, 4096), (128, (0, 0))),
        # Stream-K 1: the 58 tiles of the partial round cut over all 66 slots, 64 k-tiles each.
        ({"STREAM_K": 1}, (4096, 4096, 4096), (132, (58, 66))),
        # Stream-K 2: the partial round and the full one before it.
        ({"STREAM_K": 2}, (4096, 4096, 4096), (132, (124, 66))),
        # Every round full (132 tiles on 132 slots): stream-K cuts nothing and the grid stays balanced.
        ({"STREAM_K": 1, "CLUSTER_M": 1, "block_n": 128}, (128 * 33, 512, 64), (132, (0, 0))),
        # Split-K 3 on 16 tiles: every tile cut, 48 workers on 48 CTAs.
        ({"SPLIT_K": 3, "CLUSTER_M": 1}, (256, 2048, 4096), (48, (16, 48))),
        # A short K limits stream-K's workers: 10 tiles of 2 k-tiles, runs of at least 4: 5 workers.
        ({"STREAM_K": 1, "CLUSTER_M": 1, "block_n": 128}, (128, 1280, 128), (132, (10, 5))),
        # [12] A split in clusters of two: 33 swapped 64 x 8 tiles, one per cluster, 66 CTAs; 165 tiles of 128 x
        # 128 on 66 slots take three rounds, on 55 clusters.
        ({"CLUSTER_M": 1, "CLUSTER_K": 2, "SWAP_AB": 1, "block_m": 64, "block_n": 8}, (2112, 1, 7168), (66, (0, 0))),
        ({"CLUSTER_M": 1, "CLUSTER_K": 2, "block_n": 128}, (300, 7000, 4160), (110, (0, 0))),
    ],
)
def test_the_grid_and_the_schedule_of_cut_tiles(monkeypatch, knobs, shape, expected):
    monkeypatch.setattr(plan, "device_limits", lambda device: H200)
    monkeypatch.setattr(plan, "max_active_clusters", lambda function, size, threads, smem: 132 // size)
    m, n, k = shape
    assert persistent_grid(0, m, n, k, _config(**knobs), 0, 384, 0) == expected


# ---- the config a call gets ------------------------------------------------------------------------------------


def _gpu_array(shape, strides=None, dtype=np.float16, ptr=0x10000):
    """A CuPy array over memory that is never touched: its metadata is all a plan's checks read."""
    itemsize = np.dtype(dtype).itemsize
    strides = strides or tuple(itemsize * int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
    memory = cupy.cuda.UnownedMemory(ptr, 1 << 32, None, 0)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides)


@pytest.fixture
def h200(tmp_path, monkeypatch):
    """Device 0 is an H200 whose autotune table (in tmp_path) holds what a test writes into it."""
    monkeypatch.setattr(plan, "device_limits", lambda device: H200)
    monkeypatch.setattr(plan, "device_name", lambda device: "NVIDIA H200")
    monkeypatch.setattr(heuristic, "TABLES_DIR", tmp_path)
    heuristic.table.cache_clear()

    def write(rows: list[dict]) -> None:
        (tmp_path / "h200").mkdir(exist_ok=True)
        (tmp_path / "h200" / "autotune.json").write_text(json.dumps({"provenance": {}, "rows": rows}))
        heuristic.table.cache_clear()

    yield write
    heuristic.table.cache_clear()


def _row(m, n, k, **fields) -> dict:
    config = {"block_m": 128, "block_n": 256, "num_stages": 4, "CLUSTER_M": 2, "CLUSTER_N": 1, "SPLIT_K": 1,
              **fields}  # fmt: skip
    return {"dtype": "fp16", "m": m, "n": n, "k": k, "config": config}


def test_a_call_runs_the_callers_config_then_the_tables_then_the_models(h200, monkeypatch):
    a, b = _gpu_array((512, 1024)), _gpu_array((768, 1024), ptr=0x800000).T  # b the transposed view of (N, K)
    problem = check_operands(a, b)
    mine = GemmConfig(block_n=128)
    assert chosen_config(problem, 0, mine) == (mine, "caller")
    assert chosen_config(problem, 0) == (heuristic.choose(512, 768, 1024, 132).config(), "heuristic")
    h200([_row(512, 768, 1024, block_n=128, num_stages=6)])
    cfg, source = chosen_config(problem, 0)
    assert source == "table" and (cfg.block_n, cfg.num_stages) == (128, 6)
    b_row_major = _gpu_array((1024, 768), ptr=0x800000)  # MN-major, and 128 / 2 columns are one whole box
    assert chosen_config(check_operands(a, b_row_major), 0) == (cfg, "table")
    assert chosen_config(problem, 0, mine) == (mine, "caller")  # the caller's comes before the table
    monkeypatch.setattr(plan, "device_limits", lambda device: DeviceLimits(78, 232_448, (9, 0)))
    monkeypatch.setattr(plan, "device_name", lambda device: "NVIDIA H100 PCIe")  # no table: the model, its SMs
    m, n, k = 32, 7168, 2048  # swapped 64 x 32 tiles on 132 SMs, plain 64 x 96 on 78
    x, w = _gpu_array((m, k)), _gpu_array((n, k), ptr=0x800000).T
    assert chosen_config(check_operands(x, w), 0) == (heuristic.choose(m, n, k, 78).config(), "heuristic")
    assert heuristic.choose(m, n, k, 78).config() != heuristic.choose(m, n, k, 132).config()


def test_an_mn_major_operand_passes_over_a_table_entry_it_cannot_be_read_in(h200):
    """A row-major (K, N) b is MN-major as the kernel reads it: a table entry whose CTAs load 64 / 2 = 32 of
    its columns is passed over for the model's pick, which gives each whole 64-wide boxes."""
    a, b = _gpu_array((512, 1024)), _gpu_array((1024, 768))
    h200([_row(512, 768, 1024, block_n=64, num_stages=8)])
    b_k_major = _gpu_array((768, 1024), ptr=0x800000).T
    assert chosen_config(check_operands(a, b_k_major), 0)[1] == "table"
    cfg, source = chosen_config(check_operands(a, b), 0)
    assert source == "heuristic" and cfg == heuristic.choose(512, 768, 1024, 132, b_mn_major=True).config()
    assert (cfg.block_n // cfg.extra["CLUSTER_M"]) % 64 == 0


def test_a_transposed_a_is_never_given_swap_ab(h200):
    """At M = 8 the model swaps AB for a row-major a; a's transposed view (MN-major) cannot be read in the
    16- or 32-row boxes swapping needs, so its pick is unswapped, and so is a table entry's replacement.
    At M = 4 the transposed view's rows (8 bytes) are no TMA rows at all: a is copied K-major, and swaps."""
    b = _gpu_array((768, 4096), ptr=0x800000).T
    row_major = _gpu_array((8, 4096))
    transposed = _gpu_array((4096, 8), ptr=0x4000000).T
    assert chosen_config(check_operands(row_major, b), 0)[0].extra.get("SWAP_AB") == 1
    assert not chosen_config(check_operands(transposed, b), 0)[0].extra.get("SWAP_AB")
    copied = _gpu_array((4096, 4), ptr=0x4000000).T
    assert chosen_config(check_operands(copied, b), 0)[0] == heuristic.choose(4, 768, 4096, 132).config()
    h200([_row(8, 768, 4096, block_m=64, block_n=16, num_stages=16, CLUSTER_M=1, SPLIT_K=4, SWAP_AB=1)])
    assert chosen_config(check_operands(row_major, b), 0)[1] == "table"
    cfg, source = chosen_config(check_operands(transposed, b), 0)
    assert source == "heuristic" and not cfg.extra.get("SWAP_AB")


def test_bf16_takes_its_own_entry_and_else_fp16s(h200):
    a, b = _gpu_array((512, 1024), dtype=BFLOAT16), _gpu_array((768, 1024), dtype=BFLOAT16, ptr=0x800000).T
    h200([_row(512, 768, 1024, block_n=128)])  # FP16 only
    fp16_entry = heuristic.config_from_fields(_row(1, 1, 1, block_n=128)["config"])
    assert chosen_config(check_operands(a, b), 0) == (fp16_entry, "table")
    h200([_row(512, 768, 1024, block_n=128), {**_row(512, 768, 1024, block_n=64), "dtype": "bf16"}])
    assert chosen_config(check_operands(a, b), 0)[0].block_n == 64


# ---- the Hopper check ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("cc", "name"), [((8, 0), "NVIDIA A100-SXM4-80GB"), ((10, 0), "NVIDIA B200")])
def test_a_gpu_other_than_hopper_is_named_with_its_compute_capability(monkeypatch, cc, name):
    monkeypatch.setattr(plan, "device_limits", lambda device: DeviceLimits(108, 166_912, cc))
    monkeypatch.setattr(plan, "device_name", lambda device: name)
    message = rf"deepgemm\.gemm needs compute capability exactly 9\.0 \(sm_90a, Hopper\); {name} is {cc[0]}\.{cc[1]}"
    with pytest.raises(RuntimeError, match=message):
        plan.require_hopper(0)


def test_hopper_passes_without_asking_its_name(monkeypatch):
    monkeypatch.setattr(plan, "device_limits", lambda device: H200)
    monkeypatch.setattr(plan, "device_name", lambda device: pytest.fail("the name is asked only for the error"))
    plan.require_hopper(0)


# ---- the hot path ---------------------------------------------------------------------------------------------


class HostFramework:
    """NumPy arrays standing in for the caller's framework: a pointer finds its array again, so a stand-in
    kernel can read what the call handed it. Fresh memory holds NaN, as it may on the GPU."""

    name = "host"

    def __init__(self, stream: int = 7) -> None:
        # Weak: an array the call drops is gone, as a GPU buffer goes back to the allocator for reuse.
        self.arrays: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()
        self.current_stream = stream
        self.allocated: list[tuple] = []
        self.capture = False  # whether the current stream is capturing a CUDA graph

    def empty(self, shape, dtype, like):
        x = np.full(shape, np.nan, dtype=dtype)
        self.arrays[x.ctypes.data] = x
        self.allocated.append(shape)
        return x

    def zeros(self, shape, dtype, like):
        x = self.empty(shape, dtype, like)
        x[...] = 0
        return x

    def pointer(self, x) -> int:
        if x.ctypes.data not in self.arrays:
            self.arrays[x.ctypes.data] = x
        return x.ctypes.data

    def stream(self, device: int) -> int:
        return self.current_stream

    def capturing(self, device: int) -> bool:
        return self.capture

    @staticmethod
    def framework_dtype(dtype):
        return dtype

    def float32_vector(self, x):
        found = np.ascontiguousarray(x, dtype=np.float32)
        self.pointer(found)
        return found

    @staticmethod
    def copy(dst, src) -> None:
        np.copyto(dst, src)


class FakeKernel:
    """A RawLaunch stand-in: records what each call writes into its slots and the stream it launches on;
    `launch` computes what the library kernel would from what its A, B and C slots point at: A (M', K) times
    B (N', K)^T into C, or swapped, C^T stored transposed. K spans the padding of a staged operand, as the
    kernel's tensor maps do."""

    def __init__(self, fw: HostFramework, status: int = 0) -> None:
        self.fw, self.status, self.values, self.launches = fw, status, {}, []
        self.plan: Plan | None = None

    def setters(self, slots):
        return [(name, lambda value, name=name: self.values.__setitem__(name, value)) for name in slots]

    def operand(self, slot: str, operand: Operand) -> np.ndarray:
        found = self.fw.arrays.get(self.values[slot])
        assert found is not None, f"the buffer the {slot} slot points at was dropped before the launch"
        if operand.staged is not None:
            assert found.shape == operand.staged, (slot, found.shape)
            return found
        return found if operand.source == "a" else found.T  # the caller's own: a (M, K), b (K, N) as (N, K)

    def launch(self, stream: int) -> int:
        assert self.plan.lock.locked(), "slots written and launched outside the plan's lock"
        self.launches.append((stream, dict(self.values)))
        counters = self.fw.arrays.get(self.values.get("counters", 0))
        self.counters_seen = None if counters is None else counters.copy()  # alive until the launch is queued
        if self.status:
            return self.status
        a, b = self.operand("a", self.plan.kernel_a), self.operand("b", self.plan.kernel_b)
        assert a.shape[1] == b.shape[1], "A and B span different K"
        c = self.values["alpha"] * (a @ b.T)
        if self.plan.kernel_a.source == "b":  # swapped: C^T, stored transposed through the pointer
            c = c.T
        if self.values["bias"]:
            c = c + self.fw.arrays[self.values["bias"]]  # one per column of C
        out = self.fw.arrays[self.values["out"]]
        out[:, : c.shape[1]] = c
        if self.plan.scratch[0]:
            counters = self.fw.arrays[self.values["counters"]]
            assert counters.shape[1] >= self.plan.scratch[1] and not counters.any()
            assert self.fw.arrays[self.values["partials"]].shape[1] >= self.plan.scratch[0]
        return 0


A_IN_PLACE, B_IN_PLACE = Operand("a", False, None), Operand("b", False, None)  # both K-major, read as they lie


def _plan(fw, kernel, *, m, n, a=A_IN_PLACE, b=B_IN_PLACE, out_staged=None, bias_in_place=True, scratch=(0, 0),
          c_by_pointer=False) -> Plan:  # fmt: skip
    """A plan as `plan.build` makes one, its launch `kernel` (a FakeKernel or a RawLaunch)."""
    found = Plan(framework=fw, device=0, config=DEFAULTS, config_source="caller", kernel_a=a, kernel_b=b,
                 out_shape=(m, n), out_dtype=np.float64, out_staged=out_staged, bias_in_place=bias_in_place,
                 scratch=scratch, kernel_name="gemm_kernel", launch=kernel,
                 setters=tuple(kernel.setters(call_slots(c_by_pointer, scratch[0] > 0))))  # fmt: skip
    kernel.plan = found
    return found


@pytest.fixture
def rng():
    return np.random.default_rng()


class ErrorNames:
    """The one entry point a launch's status check asks of libcuda: the error's name."""

    @staticmethod
    def cuGetErrorName(result, name_ref):
        name_ref._obj.value = {700: b"CUDA_ERROR_ILLEGAL_ADDRESS"}.get(result)
        return 0


@pytest.fixture(autouse=True)
def no_driver_needed(monkeypatch):
    """A launch's status is checked through `driver.check`, which loads libcuda: a stand-in here."""
    monkeypatch.setattr(driver, "libcuda", ErrorNames)


def test_a_call_in_place_points_the_kernel_at_the_callers_arrays(rng):
    fw = HostFramework()
    kernel = FakeKernel(fw)
    call = _plan(fw, kernel, m=6, n=10)
    a, b = rng.standard_normal((6, 16)), rng.standard_normal((10, 16)).T  # b the transposed view of (N, K)
    alpha = float(rng.random())
    result = call.run(a, b, None, alpha, None)
    assert kernel.values == {
        "a": a.ctypes.data,
        "b": b.ctypes.data,
        "out": result.ctypes.data,
        "bias": 0,
        "alpha": alpha,
    }  # without split-K its scratch pointers stay the buffer's nulls
    assert kernel.launches[0][0] == 7  # the framework's current stream
    assert fw.allocated == [(6, 10)] and np.allclose(result, alpha * a @ b)


def test_with_out_the_result_is_out_itself_and_nothing_is_allocated(rng):
    fw = HostFramework()
    kernel = FakeKernel(fw)
    a, b = rng.standard_normal((6, 16)), rng.standard_normal((16, 10))
    call = _plan(fw, kernel, m=6, n=10, b=Operand("b", True, None))  # a row-major (K, N) b: MN-major
    out = np.zeros((6, 10))
    assert call.run(a, b, None, 1.0, out) is out
    assert kernel.values["out"] == out.ctypes.data and fw.allocated == []
    assert np.allclose(out, a @ b)


def test_a_bias_the_kernel_cannot_read_is_converted_by_every_call(rng):
    """A contiguous float32, float16 or bfloat16 bias is read where it lies, no copy made; any other (float64,
    strided) is converted to float32 on the kernel's stream, held until it is queued."""
    fw = HostFramework()
    a, b = rng.standard_normal((6, 16)), rng.standard_normal((10, 16)).T
    for bias, in_place in ((rng.standard_normal(10).astype(np.float32), True),
                           (rng.standard_normal(10).astype(np.float16), True),
                           (rng.standard_normal(10).astype(BFLOAT16), True),
                           (rng.standard_normal(10), False),  # float64
                           (rng.standard_normal(20).astype(np.float16)[::2], False)):  # fmt: skip
        kernel, alpha = FakeKernel(fw), float(rng.random())
        result = _plan(fw, kernel, m=6, n=10, bias_in_place=in_place).run(a, b, bias, alpha, None)
        assert (kernel.values["bias"] == bias.ctypes.data) == in_place
        assert np.allclose(result, alpha * a @ b + bias.astype(np.float32))


def test_the_kernel_reads_a_contiguous_16_or_32_bit_bias_in_its_own_type_and_any_other_as_float32():
    """How a bias of N is read: in place, in its own type, where it is a contiguous float32, float16 or bfloat16
    vector (a 16-bit model's nn.Linear bias needs no copy and no kernel of its own); as the float32 copy every
    call makes where it is strided or of another floating type; a vector of the wrong length is refused."""
    n = 300
    p = check_operands(_gpu_array((4, 64), ptr=0x4000000), _gpu_array((64, n), ptr=0x8000000))
    for dtype, name in ((np.float32, "fp32"), (np.float16, "fp16"), (BFLOAT16, "bf16")):
        itemsize = np.dtype(dtype).itemsize
        assert kernel_bias(_gpu_array((n,), dtype=dtype), p) == KernelBias(name, in_place=True)
        strided = _gpu_array((n,), strides=(2 * itemsize,), dtype=dtype)
        assert kernel_bias(strided, p) == KernelBias("fp32", in_place=False)
    assert kernel_bias(_gpu_array((n,), dtype=np.float64), p) == KernelBias("fp32", in_place=False)
    assert kernel_bias(None, p) is None
    with pytest.raises(ValueError, match="bias has shape \\(299,\\); it must be a vector of N = 300"):
        kernel_bias(_gpu_array((299,), dtype=np.float16), p)
    with_out = check_operands(p.a, p.b, _gpu_array((4, n), ptr=0xC000000))  # 2400 bytes of out
    assert kernel_bias(_gpu_array((n,), ptr=0xC000960), with_out) == KernelBias("fp16", in_place=True)
    with pytest.raises(ValueError, match="out overlaps bias in memory"):
        kernel_bias(_gpu_array((n,), ptr=0xC000800), with_out)


def test_the_epilogue_compiles_the_bias_type_whatever_the_output_type():
    """BIAS_DTYPE is the type the kernel reads the bias in, coded as OUT_DTYPE is and set apart from it (a bf16
    bias into an fp16 or fp32 output); without a bias it is the kernel file's default, fp32, so that a plan
    without a bias compiles the build a reader gets by hand."""
    bf16_bias = KernelBias("bf16", in_place=True)
    assert epilogue_defines(bf16_bias, "gelu_tanh", np.float16) == {
        "HAS_BIAS": 1, "BIAS_DTYPE": 1, "ACTIVATION": ACTIVATIONS["gelu_tanh"], "OUT_DTYPE": 0}  # fmt: skip
    assert epilogue_defines(bf16_bias, "none", np.float32)["BIAS_DTYPE"] == 1
    assert epilogue_defines(KernelBias("fp32", in_place=False), "none", BFLOAT16)["BIAS_DTYPE"] == 2
    default = int(re.search(r"#define BIAS_DTYPE (\d+)", LIBRARY_KERNEL.read_text()).group(1))
    assert epilogue_defines(None, "none", np.float16) == {"HAS_BIAS": 0, "BIAS_DTYPE": default, "ACTIVATION": 0,
                                                          "OUT_DTYPE": 0}  # fmt: skip
    assert default == DTYPE_CODES["fp32"]


def test_a_call_copies_what_tma_cannot_read_into_row_padded_buffers_and_writes_back_a_padded_out():
    """The plan of a layout TMA cannot describe stays: each call copies a (M, K = 7) and b's (N, K) into
    buffers whose rows are padded with zeros to 8 elements (16 bytes: the maps read the padding, so it must
    add nothing), launches on those, and copies the output, which the kernel writes into a padded (M, 8)
    buffer, back into the caller's (M, N = 5)."""
    fw, (m, n, k) = HostFramework(), (3, 5, 7)
    kernel = FakeKernel(fw)
    call = _plan(fw, kernel, m=m, n=n, a=Operand("a", False, (m, 8)), b=Operand("b", False, (n, 8)),
                 out_staged=(m, 8))  # fmt: skip
    for seed in (1, 2):  # a second call with other values: nothing of the first is reused
        rng = np.random.default_rng(seed)
        a, b = rng.random((m, k)), rng.random((n, k)).T  # b (K, N), its rows of N = 5 elements
        result = call.run(a, b, None, 1.0, None)
        assert kernel.values["a"] != a.ctypes.data and kernel.values["b"] != b.ctypes.data
        assert kernel.values["out"] != result.ctypes.data
        assert result.shape == (m, n) and np.allclose(result, a @ b)


def test_a_staged_out_given_by_the_caller_is_written_back_into_it(rng):
    fw, (m, n, k) = HostFramework(), (4, 5, 16)
    kernel = FakeKernel(fw)
    call = _plan(fw, kernel, m=m, n=n, out_staged=(m, 8))
    a, b = rng.standard_normal((m, k)), rng.standard_normal((n, k)).T
    out = np.full((m, n + 3), -1.0)[:, :n]  # the caller's, with a row stride past N
    assert call.run(a, b, None, 1.0, out) is out
    assert np.allclose(out, a @ b) and (out.base[:, n:] == -1).all()


def test_a_swapped_plan_reads_b_as_its_a_and_stores_c_transposed(rng):
    """[8] SWAP_AB: the kernel's A is b's (N, K), its B is a's (M, K), and C comes by pointer; a staged
    operand is copied from the caller's operand it stands for."""
    fw, (m, n, k) = HostFramework(), (3, 40, 16)
    kernel = FakeKernel(fw)
    call = _plan(fw, kernel, m=m, n=n, a=Operand("b", False, None), b=Operand("a", False, (m, 16)),
                 c_by_pointer=True)  # fmt: skip
    a, b = rng.standard_normal((m, 2 * k))[:, ::2], rng.standard_normal((n, k)).T  # a strided: copied
    result = call.run(a, b, None, 1.0, None)
    assert kernel.values["a"] == b.ctypes.data and kernel.values["b"] != a.ctypes.data
    assert result.shape == (m, n) and np.allclose(result, a @ b)


class HostMemory:
    """driver.StreamMemory on the host: words allocated as numpy float32 arrays (known to `fw` by pointer, so
    FakeKernel finds them), zeroed, freed; every step recorded with its stream, and every array held."""

    def __init__(self, fw: HostFramework) -> None:
        self.fw, self.held, self.steps = fw, {}, []

    def allocate(self, nbytes: int, stream: int) -> int:
        x = np.full((1, nbytes // 4), np.nan, dtype=np.float32)
        self.held[x.ctypes.data] = x
        self.steps.append(("allocate", nbytes, stream))
        return self.fw.pointer(x)

    def zero(self, pointer: int, words: int, stream: int) -> None:
        self.held[pointer][0, :words] = 0
        self.steps.append(("zero", words, stream))

    def free(self, pointer: int, stream: int) -> None:
        self.steps.append(("free", self.held.pop(pointer).nbytes, stream))


@pytest.fixture
def scratch(monkeypatch):
    """The split-K scratch table, empty, and the library's memory on the host (the fixture's `memory`)."""
    fw = HostFramework()
    memory = HostMemory(fw)
    monkeypatch.setattr(plan, "_SCRATCH", {})
    monkeypatch.setattr(plan, "StreamMemory", lambda device: memory)
    return SimpleNamespace(table=plan._SCRATCH, memory=memory, fw=fw)


def test_split_k_scratch_is_one_pair_per_stream_regrown_when_a_plan_needs_more(scratch):
    memory = scratch.memory
    first = split_k_scratch_pointers(0, 7, (1000, 64))
    assert split_k_scratch_pointers(0, 7, (500, 8)) == first  # smaller: the same pair
    other_stream = split_k_scratch_pointers(0, 8, (1000, 64))
    assert other_stream != first and len(scratch.table) == 2
    memory.steps.clear()
    grown = split_k_scratch_pointers(0, 7, (2000, 16))
    held = scratch.table[0, 7]
    assert grown == (held.partials, held.counters) and grown != first
    assert (held.partials_words, held.counters_words) == (2000, 64)  # each part at least what was held
    partials, counters = memory.held[held.partials], memory.held[held.counters]
    assert partials.shape == (1, 2000) and counters.shape == (1, 64) and not counters.any()
    # the new pair made and zeroed, then the old one freed, all on the stream, in its order
    assert memory.steps == [("allocate", 8000, 7), ("allocate", 256, 7), ("zero", 64, 7), ("free", 4000, 7),
                            ("free", 256, 7)]  # fmt: skip


def test_a_split_k_call_hands_the_kernel_its_streams_scratch(rng, scratch):
    fw, (m, n, k) = scratch.fw, (6, 10, 64)
    kernel = FakeKernel(fw)
    call = _plan(fw, kernel, m=m, n=n, scratch=(3 * 128 * 256, 8))
    a, b = rng.standard_normal((m, k)), rng.standard_normal((n, k)).T
    result = call.run(a, b, None, 1.0, None)
    held = scratch.table[0, 7]
    assert (kernel.values["partials"], kernel.values["counters"]) == (held.partials, held.counters)
    assert np.allclose(result, a @ b) and (3 * 128 * 256, 8) not in fw.allocated  # not the framework's memory
    fw.current_stream = 9  # another stream: its own pair, so that two launches never share counters
    call.run(a, b, None, 1.0, None)
    assert kernel.values["partials"] == scratch.table[0, 9].partials != held.partials


def test_a_call_being_captured_gets_a_zeroed_scratch_of_its_own(rng, scratch):
    """In a CUDA graph the stream's shared pair would be zeroed only by the graph that allocated it, and two
    graphs replayed at once would share it: each captured launch gets a fresh pair, its counters zeroed on
    the stream (a node of the graph), and the stream's pair is neither made nor touched."""
    fw, (m, n, k) = scratch.fw, (6, 10, 64)
    kernel = FakeKernel(fw)
    call = _plan(fw, kernel, m=m, n=n, scratch=(3 * 128 * 256, 8))
    a, b = rng.standard_normal((m, k)), rng.standard_normal((n, k)).T
    fw.capture = True
    for _ in range(2):
        call.run(a, b, None, 1.0, None)
        assert (kernel.counters_seen == 0).all()
    assert not scratch.table and not scratch.memory.steps  # the stream's shared pair: never made under capture
    assert fw.allocated.count((1, 3 * 128 * 256)) == 2 and fw.allocated.count((1, 8)) == 2  # a pair per launch


def test_a_failed_launch_names_the_kernel_and_the_drivers_error(rng):
    fw = HostFramework()
    call = _plan(fw, FakeKernel(fw, status=700), m=2, n=2)
    with pytest.raises(RuntimeError, match=r"cuLaunchKernel of gemm_kernel failed with CUDA_ERROR_ILLEGAL_ADDRESS"):
        call.run(rng.standard_normal((2, 8)), rng.standard_normal((2, 8)).T, None, 1.0, None)


class _Cupy:
    """What of CuPy a plan's call asks, recording the devices made current."""

    def __init__(self, current: int) -> None:
        self.entered: list[int] = []
        self.cuda = SimpleNamespace(Device=self.device, runtime=SimpleNamespace(getDevice=lambda: current))

    @contextmanager
    def device(self, index: int):
        self.entered.append(index)
        yield


def test_a_thread_without_a_context_is_given_the_devices_and_launches_again(monkeypatch, rng):
    fake = _Cupy(current=0)
    monkeypatch.setattr(plan, "cupy", fake)
    fw = HostFramework()
    kernel = FakeKernel(fw, status=CUDA_ERROR_INVALID_CONTEXT)
    call = _plan(fw, kernel, m=2, n=3)
    a, b = rng.standard_normal((2, 8)), rng.standard_normal((3, 8)).T
    original = kernel.launch

    def launch(stream):
        status = original(stream)
        kernel.status = 0  # the context is current now
        return status

    kernel.launch = launch
    assert np.allclose(call.run(a, b, None, 1.0, None), a @ b)
    assert fake.entered == [0] and len(kernel.launches) == 2


def test_a_call_from_another_current_device_runs_on_the_plans(monkeypatch, rng):
    fake = _Cupy(current=1)
    monkeypatch.setattr(plan, "cupy", fake)
    fw = HostFramework()
    call = _plan(fw, FakeKernel(fw), m=2, n=3)  # device 0
    a, b = rng.standard_normal((2, 8)), rng.standard_normal((3, 8)).T
    assert np.allclose(call(a, b, None, 1.0, None), a @ b)
    assert fake.entered == [0]
    monkeypatch.setattr(fake.cuda.runtime, "getDevice", lambda: 0)
    call(a, b, None, 1.0, None)
    assert fake.entered == [0]  # already current: no switch


def test_threads_sharing_a_plan_each_launch_their_own_values(rng):
    """One parameter buffer per plan: from the first write to the launch a call holds the plan's lock, so
    no thread launches with another's pointers."""
    fw = HostFramework()
    kernel = FakeKernel(fw)
    call = _plan(fw, kernel, m=4, n=8)
    pairs = [(rng.standard_normal((4, 16)), rng.standard_normal((8, 16)).T) for _ in range(8)]
    results = [None] * len(pairs)

    def work(i):
        for _ in range(20):
            results[i] = call.run(*pairs[i], None, 1.0, None)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(pairs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.allclose(r, a @ b) for r, (a, b) in zip(results, pairs))
    assert len(kernel.launches) == 20 * len(pairs)


# ---- the real parameter buffer ----------------------------------------------------------------------------------


@pytest.mark.parametrize("c_by_pointer", [False, True])
def test_a_calls_values_land_in_the_kernels_parameter_buffer(monkeypatch, rng, c_by_pointer):
    """The slots `_build` names, written through a real RawLaunch: the driver sees each call's pointers in
    the parameter the kernel's signature puts them, its maps re-pointed, and the plan's M, N, K (and ldc)."""
    maps: dict[int, int] = {}
    launched = []

    class Lib(ErrorNames):
        @staticmethod
        def cuTensorMapReplaceAddress(map_address, address):
            maps[map_address] = address
            return 0

        @staticmethod
        def cuLaunchKernel(*args):
            launched.append(args)
            return 0

    monkeypatch.setattr(driver, "libcuda", Lib)
    parameters = kernel_parameters(c_by_pointer)
    map_bytes = np.frombuffer(bytes(128), dtype=np.dtype((np.void, 128)))[0]
    initial = {"map": map_bytes, "ptr": np.uint64(0xDEAD0), "f32": np.float32(-3.0)}  # what a call must overwrite
    shape = {"m": 6, "n": 10, "k": 16, "ldc": 24, "sk_tiles": 0, "sk_workers": 0}  # no tile cut along K
    fixed = {**shape, "partials": 0, "counters": 0}  # written once by the plan: no split-K, null scratch
    args = [np.int32(shape[name]) if name in shape else np.uint64(0) if name in fixed else initial[kind]
            for name, kind in parameters]  # fmt: skip
    raw = RawLaunch(0x1234, 4, 384, 1024, args)
    fw = HostFramework()
    call = _plan(fw, raw, m=6, n=10, c_by_pointer=c_by_pointer)
    a, b, bias = rng.standard_normal((6, 16)), rng.standard_normal((10, 16)).T, rng.standard_normal(10)
    alpha = float(rng.random())
    result = call.run(a, b, bias, alpha, None)
    (args_seen,) = launched
    expected = {"a": a.ctypes.data, "b": b.ctypes.data, "out": result.ctypes.data, "bias": bias.ctypes.data,
                "alpha": alpha, "partials": 0, "counters": 0, **shape}  # fmt: skip
    read = {"map": maps.get, "ptr": lambda at: ctypes.c_uint64.from_address(at).value,
            "f32": lambda at: ctypes.c_float.from_address(at).value,
            "i32": lambda at: ctypes.c_int32.from_address(at).value}  # fmt: skip
    for (name, kind), address in zip(parameters, list(args_seen[-2]), strict=True):
        assert read[kind](address) == pytest.approx(expected[name]), name
    assert args_seen[-3].value == 7  # the framework's current stream


def test_an_alpha_that_is_not_a_number_is_named(monkeypatch):
    """alpha goes into the parameter buffer as a C float on every call: anything else is named, not left to
    ctypes' "must be real number, not NoneType"."""
    class Lib(ErrorNames):
        cuTensorMapReplaceAddress = cuLaunchKernel = staticmethod(lambda *args: 0)

    monkeypatch.setattr(driver, "libcuda", Lib)
    map_bytes = np.frombuffer(bytes(128), dtype=np.dtype((np.void, 128)))[0]
    initial = {"map": map_bytes, "ptr": np.uint64(0), "f32": np.float32(0), "i32": np.int32(8)}
    args = [initial[kind] for _, kind in kernel_parameters(True)]
    call = _plan(HostFramework(), RawLaunch(0x1234, 4, 384, 1024, args), m=6, n=10, c_by_pointer=True)
    a, b = np.ones((6, 16)), np.ones((16, 10))
    for alpha in (None, "2", 1j):
        with pytest.raises(TypeError, match=f"alpha must be a real number, got {type(alpha).__name__}"):
            call.run(a, b, None, alpha, None)


def test_a_problem_whose_k_tiles_the_kernel_cannot_number_in_32_bits_is_refused(monkeypatch):
    """The scheduler numbers k-tiles over every cluster tile (tile x k-tiles + k) in 32 bits: 65536 x 65536 in
    64 x 16 tiles at K = 32768 makes 2^22 tiles of 512 k-tiles, 2^31; 64 x 32 tiles halve it."""
    monkeypatch.setattr(plan, "device_limits", lambda device: H200)
    small = {"block_m": 64, "CLUSTER_M": 1, "SWAP_AB": 1}
    with pytest.raises(ValueError, match=r"cluster tiles x k-tiles .* = 2147483648: over the kernels' 2"):
        persistent_grid(0, 65536, 65536, 32768, _config(block_n=16, **small), 0, 384, 0)
    persistent_grid(0, 65536, 65536, 32768, _config(block_n=32, **small), 0, 384, 0)


def test_a_cut_too_large_for_the_kernels_32_bit_arithmetic_is_refused(monkeypatch):
    """The kernel finds a k-tile's worker as (i + 1) x workers / k-tiles in 32 bits: 1024 x 64 tiles of
    1024 k-tiles split 16 ways would overflow it, so the plan refuses the split by name."""
    monkeypatch.setattr(plan, "device_limits", lambda device: H200)
    with pytest.raises(ValueError, match="SPLIT_K cuts 65536 tiles of 1024 k-tiles into 1048576 parts"):
        persistent_grid(0, 131072, 16384, 65536, _config(SPLIT_K=16, CLUSTER_M=1), 0, 384, 0)
    persistent_grid(0, 4096, 4096, 65536, _config(SPLIT_K=2, CLUSTER_M=1), 0, 384, 0)  # 512 tiles: inside


def test_shape_jit_compiles_the_weights_dimensions_in_and_nothing_else():
    """[11] SHAPE_JIT: K and the weight's rows, the kernel's N' plain and its M' swapped (the tokens stay a
    parameter, so a layer compiles once whatever its M); without it, no dimension; the knob itself is host-only."""
    from deepgemm.plan import DEFAULTS, kernel_defines, shape_defines

    jit = GemmConfig(extra={"SHAPE_JIT": 1}).merged_over(DEFAULTS)
    assert shape_defines(jit, False, 200, 4096, 7168) == {"FIXED_N": 4096, "FIXED_K": 7168}
    assert shape_defines(jit, True, 4096, 200, 7168) == {"FIXED_M": 4096, "FIXED_K": 7168}
    assert shape_defines(DEFAULTS, False, 200, 4096, 7168) == {}
    assert "SHAPE_JIT" not in kernel_defines(jit) and kernel_defines(jit) == kernel_defines(DEFAULTS)
