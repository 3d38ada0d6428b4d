"""The library's kernel for GPUs without wgmma (deepgemm/kernels/gemm_sm80.cu, stage "library_sm80") and its
plan (deepgemm/plan_sm80.py, deepgemm/heuristic_sm80.py), without a GPU.

The kernel compiles through NVRTC for sm_80, sm_86, sm_89 and sm_120 with every tile the heuristic gives,
every operand layout, split-K and every epilogue, without spills or local memory; its SASS holds what it
claims (mma.sync, ldmatrix and its transposing form, cp.async; no wgmma; one atomic with split-K); it exports
its launch facts. The plan's pure parts (the config checks, the layouts it reads in place, the grid, the
scratch, the parameter buffer, which GPUs take this kernel) and the heuristic's choices are checked on their
own; tests/test_gpu_sm80.py runs the kernel against the float64 reference.
"""

from __future__ import annotations

import ctypes
import re
from types import SimpleNamespace

import cupy
import numpy as np
import pytest
from kernels import compiled, kernel_knobs, launcher_defines, sass

from deepgemm import heuristic_sm80, plan_sm80
from deepgemm.config import GemmConfig, tile_smem_bytes
from deepgemm.driver import DeviceLimits
from deepgemm.dtypes import BFLOAT16, FLOAT16
from deepgemm.epilogue import ACTIVATIONS
from deepgemm.frameworks import Cupy
from deepgemm.heuristic_sm80 import TILES, WIDE, Tile, choose
from deepgemm.jit import LaunchFacts
from deepgemm.model import ceil_div, output_tiles
from deepgemm.operands import check_operands
from deepgemm.plan import CALL_PARAMETERS, DTYPE_CODES, KernelBias, Operand, kernel_bias
from deepgemm.plan_sm80 import (
    DEFAULTS,
    FORCE_ENV,
    HOST_ONLY_KNOBS,
    KERNEL,
    PARAMETERS,
    call_slots,
    check_config,
    grid,
    kernel_defines,
    kernel_operands,
    read_in_place,
    split_scratch,
)
from tutorial.diff import diff_excerpt, kernel_diff
from tutorial.stages import LIBRARY_SM80, kernel_path, stage_name

SM80 = LIBRARY_SM80
ARCHS = ("sm_80", "sm_86", "sm_89", "sm_120")  # Ampere, Ada's and Ampere's consumer cards, consumer Blackwell
MAX_REGISTERS = 255
REGISTER_FILE = 65536  # 32-bit registers per SM: one block's threads x registers must fit
SMALLEST_SMEM_PER_BLOCK = 99 * 1024  # what a block may use on sm_86, sm_89 and sm_120
A100_SMEM_PER_BLOCK = 163 * 1024  # sm_80's: the most any target but Hopper gives a block
LAYOUTS = [(0, 0), (1, 0), (0, 1), (1, 1)]  # (A_MN_MAJOR, B_MN_MAJOR)
HEURISTIC_TILES = (*TILES, WIDE)


def _tile_knobs(tile: Tile, **extra: int) -> dict[str, int]:
    """The defines of one of the heuristic's tiles, at its deepest pipeline."""
    return {"BLOCK_M": tile.block_m, "BLOCK_N": tile.block_n, "BLOCK_K": tile.block_k, "NUM_STAGES": tile.max_stages,
            "WARPS_M": tile.warps_m, "WARPS_N": tile.warps_n, **extra}  # fmt: skip


def _tile_id(tile: Tile) -> str:
    return f"{tile.block_m}x{tile.block_n}x{tile.block_k}-w{tile.warps_m}x{tile.warps_n}"


def _fits(report, what) -> None:
    """No spills, no local memory, registers within the hardware's and one block's share of the file."""
    assert report.spill_stores == 0 and report.spill_loads == 0, (what, report.log)
    assert report.stack_bytes == 0, (what, report.log)
    threads = report.launch_facts().threads
    assert 0 < report.registers <= MAX_REGISTERS and report.registers * threads <= REGISTER_FILE, (what, report.log)


def _config(**knobs) -> GemmConfig:
    core = {k: knobs.pop(k) for k in ("block_m", "block_n", "block_k", "num_stages") if k in knobs}
    return GemmConfig(**core, extra=knobs).merged_over(DEFAULTS)


# ---- the kernel compiles, without spills ----------------------------------------------------------------------


@pytest.mark.parametrize("partial", [0, 1])
@pytest.mark.parametrize(("a_mn", "b_mn"), LAYOUTS)
@pytest.mark.parametrize("tile", HEURISTIC_TILES, ids=_tile_id)
def test_every_tile_layout_and_split_compiles_for_sm_80_without_spills(tile, a_mn, b_mn, partial):
    """Each tile the heuristic gives, with each operand K- or MN-major, with and without split-K, from either
    input type: no spills, no local memory, one block fits an SM's registers, and the launch facts are the
    config's: 32 x WARPS_M x WARPS_N threads, NUM_STAGES x (BLOCK_M + BLOCK_N) x BLOCK_K x 2 bytes (an
    MN-major tile is the same bytes in k-lines). At its own depth a tile fits an A100's 163 KB; the smallest
    target's 99 KB holds at least two of its stages (the heuristic gives it as many as fit)."""
    knobs = _tile_knobs(tile, A_MN_MAJOR=a_mn, B_MN_MAJOR=b_mn, PARTIAL_TILES=partial)
    for bf16 in (False, True):
        report = compiled(SM80, launcher_defines(SM80, bf16, **knobs), "sm_80")
        _fits(report, (bf16, knobs))
        facts = report.launch_facts()
        assert facts.threads == 32 * tile.warps_m * tile.warps_n
        cfg = _config(block_m=tile.block_m, block_n=tile.block_n, block_k=tile.block_k, num_stages=tile.max_stages)
        assert facts.smem_bytes == tile_smem_bytes(cfg) == tile.max_stages * tile.stage_bytes()
        assert facts.smem_bytes + report.static_smem_bytes <= A100_SMEM_PER_BLOCK
        assert heuristic_sm80.stages_for(tile, tile.block_n, SMALLEST_SMEM_PER_BLOCK) >= 2
        assert facts.store_box is None  # C by pointer: the plan encodes no map


@pytest.mark.parametrize("arch", ARCHS)
def test_nvrtc_builds_every_target_without_spills(arch):
    """NVRTC 13 targets Ampere (sm_80, sm_86), Ada (sm_89) and consumer Blackwell (sm_120): the default tile
    and the decode tile, plainly and at their most demanding (both operands MN-major, split-K, a fused
    epilogue into fp32), compile for each without spills."""
    heaviest = {"A_MN_MAJOR": 1, "B_MN_MAJOR": 1, "PARTIAL_TILES": 1, "HAS_BIAS": 1, "ACTIVATION": 2, "OUT_DTYPE": 2}
    for tile in (WIDE, TILES[0]):
        for extra in ({}, heaviest):
            for bf16 in (False, True):
                knobs = _tile_knobs(tile, **extra)
                _fits(compiled(SM80, launcher_defines(SM80, bf16, **knobs), arch), (arch, knobs))


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("out_dtype", [0, 1, 2])
@pytest.mark.parametrize("has_bias", [0, 1])
def test_every_epilogue_compiles_without_spills_at_the_heaviest_build(bf16, out_dtype, has_bias):
    """Every activation deepgemm.gemm fuses into every output type, on the default 128 x 256 tile (128
    accumulators a thread) with both operands MN-major and split-K: the build that needs the most registers."""
    for activation in ACTIVATIONS.values():
        knobs = {"HAS_BIAS": has_bias, "ACTIVATION": activation, "OUT_DTYPE": out_dtype, "A_MN_MAJOR": 1,
                 "B_MN_MAJOR": 1, "PARTIAL_TILES": 1}  # fmt: skip
        _fits(compiled(SM80, launcher_defines(SM80, bf16, **knobs), "sm_80"), knobs)


@pytest.mark.parametrize("arch", ["sm_80", "sm_120"])
@pytest.mark.parametrize("bias_dtype", ["fp16", "bf16"])
def test_a_16_bit_bias_is_read_in_its_own_type_without_spills(bias_dtype, arch):
    """[5] A 16-bit model's bias is read as it is: one 16-bit load per bias value (LDG.E.U16), as many as an fp32
    bias takes 32-bit ones and no other; at the heaviest build (both operands MN-major, split-K, GELU into fp32
    and into the other 16-bit type), from either input type: no spills, no local memory."""
    code = DTYPE_CODES[bias_dtype]
    heaviest = {"A_MN_MAJOR": 1, "B_MN_MAJOR": 1, "PARTIAL_TILES": 1, "HAS_BIAS": 1, "BIAS_DTYPE": code,
                "ACTIVATION": ACTIVATIONS["gelu_tanh"]}  # fmt: skip
    for bf16 in (False, True):
        for out_dtype in (DTYPE_CODES["fp32"], 1 - code):
            knobs = {**heaviest, "OUT_DTYPE": out_dtype}
            _fits(compiled(SM80, launcher_defines(SM80, bf16, **knobs), arch), (arch, bf16, knobs))
    half = sass(SM80, launcher_defines(SM80, False, HAS_BIAS=1, BIAS_DTYPE=code), arch)
    single = sass(SM80, launcher_defines(SM80, False, HAS_BIAS=1), arch)  # fp32, the default
    columns = 2 * DEFAULTS.block_n // DEFAULTS.extra["WARPS_N"] // 8  # a thread's columns: 2 of every n8 tile
    assert _count(half, "LDG.E.U16.CONSTANT") == columns == _count(single, "LDG.E.CONSTANT")
    assert _count(half, "LDG.E.CONSTANT") == 0 and "LDG.E.U16" not in single


@pytest.mark.parametrize(("block_k", "num_stages"), [(32, 2), (32, 3), (32, 6), (64, 2), (64, 4)])
def test_every_pipeline_depth_and_k_tile_compiles_without_spills(block_k, num_stages):
    """A caller's GemmConfig may set the depth and BLOCK_K 64 (128-byte K-major lines, the swizzle's other
    form) on the default tile; the plan refuses what the GPU's shared memory cannot hold."""
    for a_mn, b_mn in LAYOUTS:
        knobs = {"BLOCK_K": block_k, "NUM_STAGES": num_stages, "A_MN_MAJOR": a_mn, "B_MN_MAJOR": b_mn}
        report = compiled(SM80, launcher_defines(SM80, False, **knobs), "sm_80")
        _fits(report, knobs)
        assert report.launch_facts().smem_bytes == num_stages * (128 + 256) * block_k * 2


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"BLOCK_K": 48}, "4 or 8 chunks a K-major row"),
        ({"BLOCK_M": 96, "WARPS_M": 2}, "powers of two"),
        ({"BLOCK_N": 512}, "powers of two"),
        ({"BLOCK_M": 32, "WARPS_M": 4}, "each warp owns whole m16 tiles"),
        ({"BLOCK_N": 64, "WARPS_N": 8}, "each warp owns whole pairs of n8 tiles"),
        ({"NUM_STAGES": 1}, "at least double buffering"),
    ],
)
def test_a_build_the_kernel_is_not_written_for_stops_at_a_static_assert_that_says_why(knobs, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        compiled(SM80, launcher_defines(SM80, False, **knobs), "sm_80")


def test_compiles_by_hand_with_nvcc_for_sm_80_and_file_defaults(tmp_path):
    """What the kernel's header tells a reader to run: the file alone, its own defaults, nvcc for sm_80."""
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed here (NVRTC covers the JIT path above)")
    cubin = tmp_path / "gemm_sm80.cubin"
    cmd = [nvcc, "-cubin", "-gencode=arch=compute_80,code=sm_80", "-o", str(cubin), str(KERNEL)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "gencode=arch=compute_80,code=sm_80" in KERNEL.read_text()


def test_file_defaults_are_the_plans_defaults():
    """The constants a reader sees in gemm_sm80.cu are the ones the plan compiles with by default."""
    text = KERNEL.read_text()
    for name, value in kernel_defines(DEFAULTS).items():
        found = re.search(rf"#define {name} (\d+)", text)
        assert found, f"gemm_sm80.cu has no default for {name}"
        assert int(found.group(1)) == value, f"gemm_sm80.cu says {name} {found.group(1)}, the plan {value}"


def test_the_kernel_reads_the_knobs_the_plan_sets_and_no_others():
    """Every define the plan passes has an #ifndef default in the kernel, and the kernel reads no knob the plan
    never sets (a build with it would silently be the default one)."""
    plan_sets = set(kernel_defines(DEFAULTS)) | {"DTYPE_BF16", "A_MN_MAJOR", "B_MN_MAJOR", "HAS_BIAS", "BIAS_DTYPE",
                                                 "ACTIVATION", "OUT_DTYPE"}  # fmt: skip
    assert kernel_knobs(SM80) == plan_sets
    assert not set(HOST_ONLY_KNOBS) & kernel_knobs(SM80)


# ---- the SASS holds what the kernel claims ----------------------------------------------------------------------


def _count(code: str, opcode: str) -> int:
    """Instructions of exactly this opcode (with all its modifiers: STG.E is not STG.E.U16)."""
    return len(re.findall(rf"\b{re.escape(opcode)} ", code))


@pytest.mark.parametrize("arch", ["sm_80", "sm_120"])
@pytest.mark.parametrize("bf16", [False, True])
def test_sass_uses_mma_sync_ldmatrix_and_cp_async_and_no_wgmma(bf16, arch):
    """The default build: HMMA.16816 with fp32 accumulators (BF16 marked), LDSM x4, LDGSTS with zero-fill (the
    tails), no Hopper instruction (HGMMA, TMA, mbarriers), no transposing LDSM where both operands are
    K-major, no atomics without split-K."""
    code = sass(SM80, launcher_defines(SM80, bf16), arch)
    hmma = "HMMA.16816.F32.BF16" if bf16 else "HMMA.16816.F32"
    assert _count(code, hmma) == 64  # a 64 x 64 warp tile: 32 mma a k16 step, two steps a k-tile
    assert "LDSM.16.M88.4" in code and "LDSM.16.MT88.4" not in code
    assert "LDGSTS.E.BYPASS.LTC128B.128.ZFILL" in code
    for hopper in ("HGMMA", "UTMALDG", "SYNCS", "ATOMG", "MEMBAR"):
        assert hopper not in code, hopper


@pytest.mark.parametrize(("a_mn", "b_mn"), LAYOUTS)
@pytest.mark.parametrize("tile", [WIDE, TILES[0], TILES[2]], ids=_tile_id)
def test_mn_major_operands_are_read_with_the_transposing_ldmatrix(tile, a_mn, b_mn):
    """[1] An MN-major operand's fragments come from LDSM.16.MT88.4, a K-major one's from LDSM.16.M88.4: per
    k16 step MMA_TILES_M x4 loads for A and MMA_TILES_N / 2 for B, so the share of transposing ones is A's,
    B's, both or neither."""
    code = sass(SM80, launcher_defines(SM80, False, **_tile_knobs(tile, A_MN_MAJOR=a_mn, B_MN_MAJOR=b_mn)))
    a_loads = tile.block_m // tile.warps_m // 16
    b_loads = tile.block_n // tile.warps_n // 16
    trans, plain = _count(code, "LDSM.16.MT88.4"), _count(code, "LDSM.16.M88.4")
    assert trans + plain > 0
    assert trans * (a_loads + b_loads) == (trans + plain) * (a_mn * a_loads + b_mn * b_loads), (trans, plain)


@pytest.mark.parametrize("bf16", [False, True])
def test_split_k_counts_each_block_in_with_one_acquire_release_atomic(bf16):
    """[4] A build that may cut tiles: one GPU-scope atomic per block (the tile's counter, acquire-release: no
    sequentially consistent fence), the barrier that hands its verdict to the block (BAR.RED.OR), the
    partials stored and loaded at L2 (strong, GPU scope), and no second kernel."""
    code = sass(SM80, launcher_defines(SM80, bf16, PARTIAL_TILES=1))
    assert _count(code, "ATOMG.E.ADD.STRONG.GPU") == 1 and "MEMBAR.SC.GPU" not in code
    assert "BAR.RED.OR" in code
    pairs = 64 * 64 // 32 // 2  # float2s a thread holds of its warp's 64 x 64
    assert _count(code, "STG.E.64.STRONG.GPU") == pairs and _count(code, "LDG.E.64.STRONG.GPU") == pairs
    assert code.count("Function : ") == 1


def _gemm_sass(**knobs) -> str:
    return sass(SM80, launcher_defines(SM80, False, **knobs))


@pytest.mark.parametrize("activation", ["gelu_tanh", "silu"])
@pytest.mark.parametrize(("out_dtype", "fast"), [(0, True), (1, True), (2, False)])
def test_gelu_tanh_and_silu_are_the_sm90_kernels_forms(activation, out_dtype, fast):
    """[5] The same ACTIVATION codes and forms as gemm_sm90.cu: GELU (tanh) and SiLU are 0.5 x (1 + tanh(v)),
    one MUFU.TANH per accumulator into fp16 or bf16, expf and IEEE division (FCHK) into fp32."""
    code = _gemm_sass(HAS_BIAS=1, ACTIVATION=ACTIVATIONS[activation], OUT_DTYPE=out_dtype)
    if fast:
        assert _count(code, "MUFU.TANH") == 128 and "FCHK" not in code  # 128 accumulators a thread
    else:
        assert "MUFU.TANH" not in code and "MUFU.EX2" in code and "FCHK" in code


@pytest.mark.parametrize("out_dtype", [0, 1, 2])
def test_gelu_erf_takes_erff_and_relu_a_max(out_dtype):
    """[5] GELU's erf form (PyTorch's default) through erff: no tanh, no division; ReLU is a max; no activation
    is neither."""
    erf = _gemm_sass(HAS_BIAS=1, ACTIVATION=ACTIVATIONS["gelu_erf"], OUT_DTYPE=out_dtype)
    assert "MUFU.TANH" not in erf and "FCHK" not in erf and _count(erf, "MUFU.EX2") == 128
    relu = _gemm_sass(ACTIVATION=ACTIVATIONS["relu"], OUT_DTYPE=out_dtype)
    assert "FMNMX" in relu and "MUFU.TANH" not in relu and "MUFU.EX2" not in relu
    plain = _gemm_sass(OUT_DTYPE=out_dtype)
    assert "FMNMX" not in plain and "MUFU.EX2" not in plain


@pytest.mark.parametrize(("out_dtype", "pair_store"), [(0, "STG.E"), (1, "STG.E"), (2, "STG.E.64")])
def test_the_output_type_sets_the_store_width(out_dtype, pair_store):
    """[5] Two neighbouring outputs go out as one store (4 bytes of fp16 or bf16, 8 of fp32), with single
    element stores for an odd N or a misaligned row."""
    code = _gemm_sass(OUT_DTYPE=out_dtype)
    single = "STG.E" if out_dtype == 2 else "STG.E.U16"
    assert _count(code, pair_store) >= 64 and _count(code, single) >= 64


# ---- the plan's pure parts ---------------------------------------------------------------------------------------


def test_the_parameters_are_the_kernels_signature_in_order():
    """The parameter buffer is laid out from PARAMETERS: a name or kind out of step with the kernel would hand
    it a pointer for an int, or K for lda."""
    source = KERNEL.read_text()
    (params,) = re.findall(r"gemm_kernel\(([^)]*)\)", source)
    parsed = []
    for param in " ".join(params.split()).split(","):
        declaration, name = param.strip().rsplit(" ", 1)
        kind = "ptr" if "*" in declaration else {"float": "f32", "int": "i32"}[declaration]
        parsed.append(({"A": "a", "B": "b", "C": "out"}.get(name, name.lower()), kind))
    assert list(PARAMETERS) == parsed


def test_a_call_writes_the_pointers_and_alpha_and_with_split_k_the_scratch():
    plain, split = call_slots(False), call_slots(True)
    assert set(plain) == set(CALL_PARAMETERS[:-2]) and set(split) == set(CALL_PARAMETERS)
    names = [name for name, _ in PARAMETERS]
    for name, (slot, kind) in split.items():
        assert names[slot] == name and PARAMETERS[slot][1] == kind
    assert not {"m", "n", "k", "lda", "ldb", "ldc", "splits"} & set(split)  # fixed by the plan's key


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"block_m": 48}, r"BLOCK_M = 48 must be one of \(16, 32, 64, 128, 256\)"),
        ({"block_n": 512}, r"BLOCK_N = 512 must be one of"),
        ({"block_k": 16}, r"BLOCK_K = 16 must be one of \(32, 64\)"),
        ({"WARPS_M": 3}, r"WARPS_M = 3 must be one of \(1, 2, 4, 8\)"),
        ({"block_m": 16}, r"BLOCK_M = 16 must be a positive multiple of 32 \(each warp owns whole m16 tiles\)"),
        ({"block_n": 32}, r"BLOCK_N = 32 must be a positive multiple of 64"),
        ({"block_m": 256, "block_n": 256, "WARPS_M": 8, "WARPS_N": 8}, "64 warps: a block has at most 32"),
        ({"num_stages": 1}, "NUM_STAGES = 1 must be at least 2"),
        ({"GROUP_M": 0}, "GROUP_M = 0 must be a positive number of tile rows"),
        ({"SPLIT_K": 0}, "SPLIT_K = 0 must be a positive number of slices of K"),
        ({"block_m": 16, "block_n": 64, "WARPS_M": 1, "SPLIT_K": 16}, None),
    ],
)
def test_a_config_the_kernel_cannot_run_is_named_by_its_knob(knobs, message):
    if message is None:
        check_config(_config(**knobs))
        return
    with pytest.raises(ValueError, match=message):
        check_config(_config(**knobs))


def test_a_config_of_the_sm90_kernel_is_refused_by_its_knob():
    """A GemmConfig written for the sm_90a kernel names a knob this kernel does not have."""
    with pytest.raises(ValueError, match=r"config knobs \['CLUSTER_M'\] do not exist"):
        GemmConfig(extra={"CLUSTER_M": 2}).merged_over(DEFAULTS)


def test_split_k_is_the_plans_grid_so_every_split_compiles_to_one_kernel():
    split2, split7 = kernel_defines(_config(SPLIT_K=2)), kernel_defines(_config(SPLIT_K=7))
    assert split2 == split7 and split2["PARTIAL_TILES"] == 1 and "SPLIT_K" not in split2
    assert kernel_defines(DEFAULTS)["PARTIAL_TILES"] == 0


def test_the_grid_is_a_block_per_tile_and_slice_and_the_scratch_a_slot_per_block():
    cfg = _config(block_m=16, block_n=64, WARPS_M=1, SPLIT_K=3)
    tiles = ceil_div(17, 16) * ceil_div(1000, 64)
    assert grid(17, 1000, cfg) == tiles * 3
    assert split_scratch(17, 1000, cfg) == (tiles * 3 * 16 * 64, tiles)
    assert split_scratch(17, 1000, _config()) == (0, 0)
    assert grid(4096, 4096, _config()) == 32 * 16


def _gpu_array(shape, strides=None, dtype=np.float16, ptr=0x10000):
    """A CuPy array over memory that is never touched: its metadata is all the plan's checks read."""
    itemsize = np.dtype(dtype).itemsize
    strides = strides or tuple(itemsize * int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
    memory = cupy.cuda.UnownedMemory(ptr, 1 << 32, None, 0)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides)


@pytest.mark.parametrize(
    ("shape", "strides", "ptr", "expected"),
    [
        ((300, 4096), None, 0x10000, (False, 4096)),  # row-major a: K-major
        ((304, 4096), (2, 608), 0x10000, (True, 304)),  # the transposed view of a row-major (K, 304): MN-major
        ((300, 4096), (2, 600), 0x10000, None),  # ... of a (K, 300): k-lines of 600 bytes, copied
        ((300, 4100), (2 * 4104, 2), 0x10000, (False, 4104)),  # K = 4100 in rows padded to 4104: in place
        ((300, 4100), None, 0x10000, None),  # rows of 8200 bytes: not 16-byte aligned, copied
        ((1, 4100), None, 0x10000, (False, 4104)),  # one row: its stride is never used
        ((301, 1), (2, 2 * 301), 0x10000, (True, 304)),  # one k (K = 1), rows contiguous
        ((300, 4096), None, 0x10008, None),  # a base 8 bytes off 16: copied
        ((300, 2048), (2 * 4096, 4), 0x10000, None),  # every other k: neither dimension contiguous
        ((301, 64), (2, 2 * 301), 0x10000, None),  # MN-major with k-lines of 602 bytes: copied
    ],
)
def test_an_operand_is_read_in_place_where_cp_async_can_read_it(shape, strides, ptr, expected):
    """cp.async reads 16-byte chunks from 16-byte aligned addresses: base, and the stride of the dimension that
    is not contiguous, whole 16 bytes; K (K-major) or the rows (MN-major) contiguous."""
    assert read_in_place(_gpu_array(shape, strides, ptr=ptr)) == expected


def test_the_kernel_reads_each_of_the_four_layouts_in_place_and_copies_the_rest():
    """a row-major (K-major A) or the transposed view of a (K, M) (MN-major A); b row-major (K, N) (MN-major B)
    or the transposed view of an (N, K) (K-major B). K = 7 rows are copied into rows of 8."""
    m, n, k = 304, 520, 96
    a_rows, a_t = _gpu_array((m, k)), _gpu_array((k, m)).T
    b_rows, b_t = _gpu_array((k, n), ptr=0x800000), _gpu_array((n, k), ptr=0x800000).T
    for a, b, a_mn, b_mn in ((a_rows, b_rows, False, True), (a_rows, b_t, False, False), (a_t, b_rows, True, True),
                             (a_t, b_t, True, False)):  # fmt: skip
        (kernel_a, lda), (kernel_b, ldb) = kernel_operands(check_operands(a, b))
        assert kernel_a == Operand("a", a_mn, None) and kernel_b == Operand("b", b_mn, None)
        assert (lda, ldb) == (m if a_mn else k, n if b_mn else k)
    odd = check_operands(_gpu_array((m, 7)), _gpu_array((n, 7), ptr=0x800000).T)
    (kernel_a, lda), (kernel_b, ldb) = kernel_operands(odd)
    assert kernel_a == Operand("a", False, (m, 8)) and kernel_b == Operand("b", False, (n, 8)) and lda == ldb == 8


# ---- which GPUs take this kernel -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cc", "forced", "expected"),
    [
        *((cc, None, True) for cc in ((8, 0), (8, 6), (8, 9), (10, 0), (12, 0))),
        ((9, 0), None, False),
        ((9, 0), "0", False),
        ((9, 0), "1", True),
    ],
)
def test_every_gpu_but_hopper_runs_this_kernel_and_hopper_when_forced(monkeypatch, cc, forced, expected):
    monkeypatch.setattr(plan_sm80, "device_limits", lambda device: DeviceLimits(100, 101_376, cc))
    if forced is None:
        monkeypatch.delenv(FORCE_ENV, raising=False)
    else:
        monkeypatch.setenv(FORCE_ENV, forced)
    assert plan_sm80.runs_on(0) is expected


def test_a_gpu_older_than_ampere_is_named_with_its_compute_capability(monkeypatch):
    monkeypatch.setattr(plan_sm80, "device_limits", lambda device: DeviceLimits(40, 65_536, (7, 5)))
    monkeypatch.setattr(plan_sm80, "device_name", lambda device: "Tesla T4")
    with pytest.raises(RuntimeError, match=r"deepgemm\.gemm needs compute capability 8\.0 or newer; Tesla T4 is 7\.5"):
        plan_sm80.require_sm80(0)
    monkeypatch.setattr(plan_sm80, "device_limits", lambda device: DeviceLimits(108, 166_912, (8, 0)))
    monkeypatch.setattr(plan_sm80, "device_name", lambda device: pytest.fail("the name is asked only for the error"))
    plan_sm80.require_sm80(0)


# ---- the heuristic ------------------------------------------------------------------------------------------------

A100 = (108, 166_912)  # SMs, shared memory a block may use
RTX_4090 = (128, 101_376)
RTX_3060 = (28, 101_376)


@pytest.mark.parametrize(
    ("shape", "gpu", "expected"),
    [
        # Decode: a 16-row tile. 16 tiles of 16 x 64 on 108 SMs: K cut into 6 slices (64 k-tiles, 10 each) ...
        ((1, 1024, 4096), A100, (16, 64, 64, 6, 6)),
        # ... but never into slices under 4 k-tiles: K = 256 is 4 of them, one slice.
        ((1, 1024, 256), A100, (16, 64, 64, 6, 1)),
        ((1, 1024, 512), RTX_3060, (16, 64, 64, 6, 1)),
        # Large: 128 x 256 x 64 at the 3 stages its rate was measured at (an A100's 163 KB holds them); the
        # 4090's 99 KB holds 2 of its 48 KB stages, so its BLOCK_K 32 form at 4 stages of 24 KB takes its place.
        ((4096, 4096, 4096), A100, (128, 256, 64, 3, 1)),
        ((4096, 4096, 4096), RTX_4090, (128, 256, 32, 4, 1)),
        # 48 KB (an sm_80 block's default without opt-in): no tile keeps its depth, so each runs as many as fit.
        ((4096, 4096, 4096), (108, 49_152), (64, 128, 64, 2, 1)),
        # 128 tokens: 32 tiles of 128 x 128 on 108 SMs, 3 slices (96 blocks).
        ((128, 4096, 4096), A100, (128, 128, 64, 3, 3)),
        # N narrower than the tile: the power of two that covers it, at least 16 per warp.
        ((4096, 100, 4096), A100, (128, 128, 64, 3, 3)),
        ((4096, 40, 4096), A100, (128, 64, 64, 3, 3)),
    ],
)
def test_the_heuristic_picks_by_its_cost_model(shape, gpu, expected):
    cfg = choose(*shape, *gpu)
    got = (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_stages, cfg.extra["SPLIT_K"])
    assert got == expected, cfg
    check_config(cfg.merged_over(DEFAULTS))


@pytest.mark.parametrize("m", [1, 3, 16, 17, 33, 64, 65, 129, 777, 4096])
@pytest.mark.parametrize("n", [3, 40, 520, 4096, 14336])
@pytest.mark.parametrize("k", [7, 64, 1000, 4096, 14336])
@pytest.mark.parametrize("gpu", [A100, RTX_4090, RTX_3060])
def test_every_pick_is_a_config_the_kernel_runs_and_fits_the_gpu(m, n, k, gpu):
    """Whatever the shape: the kernel takes the config, its stages fit the GPU, every slice has a k-tile (at
    least 4 where K is cut), and split-K never makes more than two rounds of blocks."""
    sm_count, smem = gpu
    cfg = choose(m, n, k, sm_count, smem).merged_over(DEFAULTS)
    check_config(cfg)
    assert tile_smem_bytes(cfg) <= smem
    split, k_tiles = cfg.value("SPLIT_K"), ceil_div(k, cfg.value("BLOCK_K"))
    assert 1 <= split <= k_tiles
    if split > 1:
        assert k_tiles // split >= heuristic_sm80.MIN_K_TILES_PER_SLICE
        assert output_tiles(m, n, cfg.block_m, cfg.block_n) * split <= 2 * sm_count


def test_a_tile_is_offered_only_at_the_depth_its_rate_was_measured_at():
    """On 99 KB the 16- and 32-row tiles 128 wide (6 stages of 18 and 20 KB) and 128 x 256 x 64 (3 of 48 KB)
    do not keep their depth: the first two are not offered, the third is offered as WIDE; on an A100 all are."""

    def offered(m, gpu):
        return {
            (t.block_m, c.block_n, t.block_k, c.num_stages) for t, c in heuristic_sm80.candidates(m, 4096, 4096, *gpu)
        }

    assert {(16, 128, 64, 6), (32, 128, 64, 6)} <= offered(16, A100) | offered(32, A100)
    assert not {cfg for cfg in offered(16, RTX_4090) | offered(32, RTX_4090) if cfg[1] == 128}
    assert (128, 256, 64, 3) in offered(4096, A100) and (128, 256, 32, 4) not in offered(4096, A100)
    assert (128, 256, 32, 4) in offered(4096, RTX_4090) and (128, 256, 64, 2) not in offered(4096, RTX_4090)


def test_a_gpu_with_too_little_shared_memory_for_two_stages_is_told_so():
    with pytest.raises(ValueError, match="needs 2 stages of 24576 bytes; this GPU gives a block 40000"):
        heuristic_sm80.stages_for(WIDE, 256, 40_000)
    assert heuristic_sm80.stages_for(WIDE, 256, 49_152) == 2


# ---- the plan, assembled without a GPU ------------------------------------------------------------------------


def _fake_gpu(monkeypatch, cc=(8, 6)):
    """plan_sm80._build's GPU calls replaced: a 4090-like GPU, a kernel that compiles to nothing, the launch
    facts the kernel would export. Returns the defines each compile asked for."""
    asked = []

    def get_kernel(path, defines):
        assert path == KERNEL
        asked.append(dict(defines))
        return SimpleNamespace(kernel=SimpleNamespace(ptr=0), shared_size_bytes=0, name="gemm_kernel")

    def facts(path, defines):
        cfg = GemmConfig.from_defines(defines)
        threads = 32 * defines["WARPS_M"] * defines["WARPS_N"]
        return LaunchFacts(threads, cfg.num_stages * (cfg.block_m + cfg.block_n) * cfg.block_k * 2)

    monkeypatch.setattr(plan_sm80, "device_limits", lambda device: DeviceLimits(128, 101_376, cc))
    monkeypatch.setattr(plan_sm80, "get_kernel", get_kernel)
    monkeypatch.setattr(plan_sm80, "launch_facts", facts)
    monkeypatch.setattr(plan_sm80, "allow_dynamic_smem", lambda function, smem: None)
    return asked


def _slot_value(raw, slot: int, kind: str) -> int | float:
    ctype = {"i32": ctypes.c_int32, "f32": ctypes.c_float, "ptr": ctypes.c_uint64}[kind]
    return ctype.from_address(raw.addresses[slot]).value


@pytest.mark.parametrize("split", [1, 3])
def test_the_plan_lays_out_the_shape_strides_and_slices_once_and_leaves_the_pointers_to_each_call(monkeypatch, split):
    """The plan of a 304 x 520 x 96 bf16 call with b row-major (MN-major B), the transposed view of a (K, M) a
    (MN-major A) and an out with a row stride of 600: the kernel is compiled for those layouts, the buffer
    holds M, N, K, lda = M, ldb = N, ldc = 600 and the slices, and the pointers are left for the calls."""
    asked = _fake_gpu(monkeypatch)
    m, n, k = 304, 520, 96
    a = _gpu_array((k, m), dtype=BFLOAT16).T
    b = _gpu_array((k, n), dtype=BFLOAT16, ptr=0x800000)
    out = _gpu_array((m, 600), dtype=BFLOAT16, ptr=0x4000000)[:, :n]
    cfg = _config(block_m=64, block_n=128, SPLIT_K=split, WARPS_M=2, WARPS_N=2)
    bias = KernelBias("fp16", in_place=True)  # a bias of another type than the output's
    found = plan_sm80._build(Cupy, 0, check_operands(a, b, out), cfg, "caller", "gelu_tanh", bias)
    assert asked == [{**kernel_defines(cfg), "DTYPE_BF16": 1, "A_MN_MAJOR": 1, "B_MN_MAJOR": 1, "HAS_BIAS": 1,
                      "BIAS_DTYPE": 0, "ACTIVATION": ACTIVATIONS["gelu_tanh"], "OUT_DTYPE": 1}]  # fmt: skip
    assert (found.kernel_a, found.kernel_b, found.out_staged) == (Operand("a", True, None), Operand("b", True, None),
                                                                  None)  # fmt: skip
    raw = found.launch
    assert raw.grid == output_tiles(m, n, 64, 128) * split and raw.block == 128
    assert raw.shared_mem == 4 * (64 + 128) * 32 * 2
    fixed = {"m": m, "n": n, "k": k, "lda": m, "ldb": n, "ldc": 600, "splits": split, "alpha": 1.0}
    for slot, (name, kind) in enumerate(PARAMETERS):
        if name in fixed:
            assert _slot_value(raw, slot, kind) == fixed[name], name
        else:
            assert _slot_value(raw, slot, kind) == 0, name  # a pointer: each call writes its own
    assert [name for name, _ in found.setters] == list(call_slots(split > 1))
    assert found.scratch == split_scratch(m, n, cfg) and bool(found.scratch[0]) == (split > 1)
    assert found.bias_in_place and found.config_source == "caller"


def test_the_plan_refuses_a_tile_whose_stages_exceed_the_gpus_shared_memory(monkeypatch):
    _fake_gpu(monkeypatch)
    a, b = _gpu_array((300, 96)), _gpu_array((96, 520), ptr=0x800000)
    with pytest.raises(ValueError, match="dynamic shared memory = 147456 exceeds the GPU's shared memory per block"):
        plan_sm80._build(Cupy, 0, check_operands(a, b), _config(num_stages=6), "caller", "none", None)


def test_a_contiguous_16_bit_bias_is_compiled_in_and_read_in_place_and_any_other_converted(monkeypatch):
    """The plan of a bf16 call reads a contiguous fp16 or bf16 bias as it lies, compiled for its type (BIAS_DTYPE,
    whatever the output's); a float64 or strided one is converted to float32 by every call, so it compiles the
    fp32 kernel; without a bias the kernel is the file's default fp32 build."""
    asked = _fake_gpu(monkeypatch)
    a, b = _gpu_array((64, 96), dtype=BFLOAT16), _gpu_array((96, 128), dtype=BFLOAT16, ptr=0x800000)
    cases = (
        (_gpu_array((128,), dtype=FLOAT16, ptr=0x4000000), 1, "fp16", True),
        (_gpu_array((128,), dtype=BFLOAT16, ptr=0x4000000), 1, "bf16", True),
        (_gpu_array((128,), dtype=np.float64, ptr=0x4000000), 1, "fp32", False),
        (_gpu_array((128,), strides=(4,), dtype=FLOAT16, ptr=0x4000000), 1, "fp32", False),
        (None, 0, "fp32", False),
    )
    default = int(re.search(r"#define BIAS_DTYPE (\d+)", KERNEL.read_text()).group(1))
    assert default == DTYPE_CODES["fp32"]
    problem = check_operands(a, b)
    for bias, has_bias, read_as, in_place in cases:
        found = plan_sm80._build(Cupy, 0, problem, _config(), "caller", "none", kernel_bias(bias, problem))
        assert (asked[-1]["HAS_BIAS"], asked[-1]["BIAS_DTYPE"]) == (has_bias, DTYPE_CODES[read_as]), bias
        assert found.bias_in_place == in_place and asked[-1]["OUT_DTYPE"] == DTYPE_CODES["bf16"]


def test_a_call_without_a_config_runs_the_heuristics_pick_for_this_gpu(monkeypatch):
    _fake_gpu(monkeypatch)
    problem = check_operands(_gpu_array((1, 4096)), _gpu_array((4096, 1024), ptr=0x800000))
    assert plan_sm80.chosen_config(problem, 0) == (choose(1, 1024, 4096, 128, 101_376), "heuristic")
    mine = GemmConfig(block_n=128)
    assert plan_sm80.chosen_config(problem, 0, mine) == (mine, "caller")


def test_fp16_and_bf16_compile_to_their_own_kernel(monkeypatch):
    asked = _fake_gpu(monkeypatch)
    for dtype in (FLOAT16, BFLOAT16):
        a, b = _gpu_array((64, 64), dtype=dtype), _gpu_array((64, 64), dtype=dtype, ptr=0x800000)
        plan_sm80._build(Cupy, 0, check_operands(a, b), _config(), "caller", "none", None)
    assert [d["DTYPE_BF16"] for d in asked] == [0, 1] and [d["OUT_DTYPE"] for d in asked] == [0, 1]


# ---- the tutorial shows it as one more lesson ------------------------------------------------------------------


def test_python_m_tutorial_diff_shows_the_sm80_kernel_against_v2():
    """`python -m tutorial diff library_sm80`: the library's sm_80 kernel against the stage it is grown from,
    every block its header names marked in the lines it adds."""
    assert stage_name("library_sm80") == SM80 and kernel_path(SM80) == KERNEL
    lines = kernel_diff("library_sm80")
    assert lines[:2] == ["--- stages/v2_mma_sync/kernel.cu", "+++ deepgemm/kernels/gemm_sm80.cu"]
    header = KERNEL.read_text().split("#include")[0]
    blocks = sorted(set(re.findall(r"^//\s+(\[\d+\])", header, re.M)))
    assert blocks == [f"[{i}]" for i in range(1, 7)]
    added = "\n".join(line for line in lines[2:] if line.startswith("+") and not line.startswith("+//   ["))
    for block in blocks:
        assert block in added, f"{block} is named in the header but marks no added line"
    excerpt = diff_excerpt("library_sm80", "trans")
    assert "ldmatrix_x4_trans" in excerpt and excerpt.endswith("(the whole diff: python -m tutorial diff library_sm80)")


def test_counts_the_kernel_keeps_in_an_int_are_refused_where_a_knob_would_overflow_them():
    """GROUP_M x tile columns (the tile order), SPLIT_K x k-tiles (a slice's bounds) and the grid are ints in
    the kernel: a caller's knob past 2^31 there is named, not wrapped into out-of-bounds stores."""
    p = check_operands(_gpu_array((64, 1 << 21)), _gpu_array((1 << 21, 128), ptr=0x800000))
    plan_sm80.check_indices(p, _config())  # the defaults: far inside
    with pytest.raises(ValueError, match="GROUP_M x tile columns = 2147483648"):
        plan_sm80.check_indices(p, _config(GROUP_M=1 << 31))  # one tile column of 256
    with pytest.raises(ValueError, match="SPLIT_K x k-tiles = 2147483648"):
        plan_sm80.check_indices(p, _config(SPLIT_K=1 << 15))  # 65536 k-tiles of 32


def test_an_operand_whose_row_stride_overflows_the_kernels_int_is_copied():
    wide = _gpu_array((4, 64), strides=((1 << 31) * 2, 2))
    assert plan_sm80.read_in_place(wide) is None
    assert plan_sm80.read_in_place(_gpu_array((4, 64))) == (False, 64)
