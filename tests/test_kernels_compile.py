"""Every stage and the library's kernel compile through NVRTC (the JIT's compiler) with their launchers'
defaults, and ptxas's report and the SASS hold what each claims. No GPU needed.

v5 is the last lesson: its tests build it with its own knobs (CLUSTER_M 1 or 2, WGMMA_IN_FLIGHT, TMA_STORE,
ACTIVATION up to gelu_tanh). What only the library's kernel has (MN-major layouts, split-K, tile widths,
BLOCK_M 64, swap AB, CLUSTER_N, other output types, every activation) is tested on it, as stage "library"."""

from __future__ import annotations

import json
import re

import pytest
from kernels import (
    KERNELS,
    PORTABLE_STAGES,
    TENSOR_CORE_STAGES,
    autotune_builds,
    block_threads,
    compiled,
    function_sass,
    launcher_defines,
    sass,
)

from deepgemm.config import GemmConfig, tile_smem_bytes
from deepgemm.epilogue import ACTIVATIONS
from deepgemm.plan import DTYPE_CODES
from tutorial import stages
from tutorial.stages import LIBRARY

MAX_REGISTERS = 255  # the per-thread hardware limit; beyond it ptxas spills
REGISTER_FILE = 65536  # 32-bit registers per SM: a block's threads x registers must fit
SMEM_PER_BLOCK = 227 * 1024  # what one block may opt in to on Hopper (dynamic + static)
V5 = "v5_fused"
WGMMA_KERNELS = (*TENSOR_CORE_STAGES, LIBRARY)  # v3-v5 and the library's kernel
V5_ACTIVATIONS = tuple(ACTIVATIONS[name] for name in stages.load(V5).STAGE_ACTIVATIONS)  # 0 none, 1 relu, 2 gelu_tanh

BUILDS = [(s, bf16, "sm_90a") for s in KERNELS for bf16 in (False, True)]
BUILDS += [(s, bf16, "sm_80") for s in PORTABLE_STAGES for bf16 in (False, True)]


@pytest.mark.parametrize(("stage", "bf16", "arch"), BUILDS)
def test_compiles_without_spills(stage, bf16, arch):
    report = compiled(stage, launcher_defines(stage, bf16), arch)
    assert report.spill_stores == 0 and report.spill_loads == 0, report.log
    assert report.stack_bytes == 0, f"{stage} keeps an array in local memory:\n{report.log}"
    assert 0 < report.registers <= MAX_REGISTERS
    threads = block_threads(stage, report)
    assert report.registers * threads <= REGISTER_FILE, f"{stage} cannot fit one block of {threads} threads per SM"


SERIALISED_WGMMA = "C7511"  # ptxas: "wgmma.mma_async instructions are serialized due to insufficient register ..."


def _fits(report, what) -> None:
    """No spills, no local memory, and ptxas kept the wgmma pipelined."""
    assert report.spill_stores == 0 and report.spill_loads == 0 and report.stack_bytes == 0, (what, report.log)
    assert SERIALISED_WGMMA not in report.log, (what, report.log)


AUTOTUNE_BUILDS = [
    pytest.param(dtype, fields, defines, id=dtype + "-" + "-".join(f"{k}{v}" for k, v in json.loads(fields).items()))
    for dtype, fields, defines in autotune_builds()
]


@pytest.mark.parametrize(("dtype", "fields", "defines"), AUTOTUNE_BUILDS)
def test_every_config_of_the_autotune_record_compiles_without_spills_or_serialised_wgmma(dtype, fields, defines):
    """The configs the package's table makes deepgemm.gemm run (swap AB, split-K, 64-row and narrow tiles):
    each compiles without spills or serialised wgmma, and one block of it fits an SM's registers and
    shared memory."""
    report = compiled(LIBRARY, defines)
    _fits(report, (dtype, fields))
    facts = report.launch_facts()
    assert report.registers * facts.threads <= REGISTER_FILE, (dtype, fields)
    assert facts.smem_bytes + report.static_smem_bytes <= SMEM_PER_BLOCK, (dtype, fields)


# What the TMA kernels' launch facts must come to, worked out from the config: threads are warpgroups of 128
# (a producer and one consumer per 64 rows of BLOCK_M from v4 on), and dynamic shared memory is the
# pipeline's stages, then the staging of C for TMA stores (v5, the library: consumer warpgroups x 4 warps
# x 2 boxes of 16 rows x 128 bytes), then 1024 bytes of slack to align to 1024.
WARPGROUPS = {"v3_wgmma_tma": 2, "v4_pipeline_swizzle": 3, V5: 3, LIBRARY: 3}
STORES_THROUGH_SMEM = {"v3_wgmma_tma": False, "v4_pipeline_swizzle": False, V5: True, LIBRARY: True}
ALIGNMENT_SLACK_BYTES = 1024


def store_staging_bytes(consumer_warpgroups: int) -> int:
    return consumer_warpgroups * 4 * 2 * 16 * 128


@pytest.mark.parametrize("num_stages", [2, 3, 4])
@pytest.mark.parametrize("stage", WGMMA_KERNELS)
def test_tma_kernels_export_the_threads_and_shared_memory_they_launch_with(stage, num_stages):
    cfg = GemmConfig(num_stages=num_stages).merged_over(stages.load(stage).DEFAULTS)
    report = compiled(stage, launcher_defines(stage, False, NUM_STAGES=num_stages))
    facts = report.launch_facts()
    assert facts.threads == 128 * WARPGROUPS[stage]
    staging = store_staging_bytes(WARPGROUPS[stage] - 1) if STORES_THROUGH_SMEM[stage] else 0
    assert facts.smem_bytes == tile_smem_bytes(cfg) + staging + ALIGNMENT_SLACK_BYTES
    assert facts.smem_bytes + report.static_smem_bytes <= SMEM_PER_BLOCK


@pytest.mark.parametrize("tma_store", [0, 1])
def test_v5_stages_c_in_shared_memory_only_for_its_tma_stores(tma_store):
    """[4] TMA_STORE 1 adds the store boxes after the stages; the ablation (store_from_registers.diff), which
    stores from registers, adds none. Both export the same box: they have one signature, and the launcher
    always encodes C's map."""
    report = compiled(V5, launcher_defines(V5, False, TMA_STORE=tma_store))
    cfg = stages.load(V5).DEFAULTS
    facts = report.launch_facts()
    assert facts.smem_bytes == tile_smem_bytes(cfg) + tma_store * store_staging_bytes(2) + ALIGNMENT_SLACK_BYTES
    assert facts.store_box == (16, 64)


@pytest.mark.parametrize("bf16", [False, True])
def test_v5_exports_the_box_it_stores_c_in(bf16):
    """Each consumer warp stores 16 rows of C, 128 bytes of columns at a time (the 128B swizzle span): the
    launcher builds C's tensor map from this box."""
    assert compiled(V5, launcher_defines(V5, bf16)).launch_facts().store_box == (16, 64)
    for stage in ("v3_wgmma_tma", "v4_pipeline_swizzle"):  # these store C from registers, through a pointer
        assert compiled(stage, launcher_defines(stage, False)).launch_facts().store_box is None


@pytest.mark.parametrize(("out_dtype", "element_bytes"), [(0, 2), (1, 2), (2, 4)])
@pytest.mark.parametrize(("block_n", "row_bytes_fp16"), [(256, 128), (192, 128), (96, 64), (208, 32), (48, 32)])
def test_library_exports_the_box_it_stores_c_in_for_every_output_type(
    out_dtype, element_bytes, block_n, row_bytes_fp16
):
    """The plan builds C's tensor map from this box (fp16, bf16 or fp32 C from either input type): 16 rows
    of the widest chunk of 128, 64 or 32 bytes that divides the tile's row, whose span the map swizzles; the
    staging in shared memory follows (2 buffers per consumer warp)."""
    for bf16 in (False, True):
        defines = launcher_defines(LIBRARY, bf16, OUT_DTYPE=out_dtype, BLOCK_N=block_n, CLUSTER_M=1)
        report = compiled(LIBRARY, defines)
        facts = report.launch_facts()
        row_bytes = 128 if (block_n * element_bytes) % 128 == 0 else min(128, row_bytes_fp16 * element_bytes // 2)
        assert facts.store_box == (16, row_bytes // element_bytes), (bf16, out_dtype, block_n)
        assert block_n % facts.store_box[1] == 0
        cfg = GemmConfig(block_n=block_n).merged_over(stages.load(LIBRARY).DEFAULTS)
        staging = 2 * 4 * 2 * 16 * row_bytes  # consumer warpgroups x warps x buffers x a box
        assert facts.smem_bytes == tile_smem_bytes(cfg) + staging + ALIGNMENT_SLACK_BYTES


def test_stages_without_tma_export_no_launch_facts():
    with pytest.raises(KeyError, match="no symbol LAUNCH_THREADS"):
        compiled("v2_mma_sync", launcher_defines("v2_mma_sync", False)).launch_facts()


@pytest.mark.parametrize("stage", WGMMA_KERNELS)
def test_hopper_kernels_refuse_plain_sm_80(stage):
    with pytest.raises(RuntimeError, match="failed to compile"):
        compiled(stage, launcher_defines(stage, False), "sm_80")


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"BLOCK_N": 128}, "the wgmma below is m64n256k16"),
        ({"BLOCK_M": 64}, "two consumer warpgroups of 64 rows"),
        ({"CLUSTER_M": 4}, "one CTA, or two sharing B"),
    ],
)
def test_v5_refuses_by_name_what_only_the_library_builds(knobs, message):
    """v5 is written for one 128 x 256 tile and clusters of one or two: any other build stops at a
    static_assert that says why (the library's kernel takes the other tiles)."""
    with pytest.raises(RuntimeError, match=re.escape(message)):
        compiled(V5, launcher_defines(V5, False, **knobs))


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("has_bias", [0, 1])
def test_v5_compiles_every_epilogue_without_spills_or_serialised_wgmma(bf16, has_bias):
    """Every epilogue v5 fuses compiles without spills, and ptxas keeps the wgmma pipelined: if the
    epilogue's live values and the 128 accumulators did not fit the registers together, it would serialise
    every wgmma of the kernel (its warning C7511), a loss no test on results would notice."""
    for activation in V5_ACTIVATIONS:
        defines = launcher_defines(V5, bf16, HAS_BIAS=has_bias, ACTIVATION=activation)
        _fits(compiled(V5, defines), (activation, has_bias))


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("out_dtype", [0, 1, 2])
@pytest.mark.parametrize("has_bias", [0, 1])
def test_library_compiles_every_epilogue_without_spills_or_serialised_wgmma(bf16, out_dtype, has_bias):
    """Every output type and every activation deepgemm.gemm fuses, from either input type: no spills, and
    the wgmma stay pipelined (C7511 would serialise every wgmma of the kernel)."""
    for activation in ACTIVATIONS.values():
        defines = launcher_defines(LIBRARY, bf16, HAS_BIAS=has_bias, ACTIVATION=activation, OUT_DTYPE=out_dtype)
        _fits(compiled(LIBRARY, defines), (activation, out_dtype, has_bias))


SWAPPED_CUT = {"SWAP_AB": 1, "BLOCK_M": 64, "BLOCK_N": 200, "CLUSTER_M": 1, "PARTIAL_TILES": 1}  # [8] [6]


@pytest.mark.parametrize("bias_dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("out_dtype", [0, 1, 2])
def test_library_reads_a_16_bit_bias_in_its_own_type_without_spills_or_serialised_wgmma(bias_dtype, out_dtype):
    """A 16-bit model's bias is read as it is: one 16-bit load per bias value (LDG.E.U16), as many as an fp32
    bias takes 32-bit ones and no other, into every output type. With both GELU forms, from either input type,
    and where the epilogue reads the bias by row after adding the parts of a cut tile (swap AB with split-K):
    no spills, and the wgmma stay pipelined."""
    code = DTYPE_CODES[bias_dtype]
    for bf16 in (False, True):
        for knobs in ({"ACTIVATION": ACTIVATIONS["gelu_tanh"]}, {"ACTIVATION": ACTIVATIONS["gelu_erf"]}, SWAPPED_CUT):
            defines = launcher_defines(LIBRARY, bf16, HAS_BIAS=1, BIAS_DTYPE=code, OUT_DTYPE=out_dtype, **knobs)
            _fits(compiled(LIBRARY, defines), (bias_dtype, out_dtype, bf16, knobs))
    defines = launcher_defines(LIBRARY, False, HAS_BIAS=1, BIAS_DTYPE=code, OUT_DTYPE=out_dtype)
    half = sass(LIBRARY, defines)
    single = sass(LIBRARY, launcher_defines(LIBRARY, False, HAS_BIAS=1, OUT_DTYPE=out_dtype))  # fp32, the default
    columns = dict(defines)["BLOCK_N"] // 4  # a consumer thread's columns of the tile: 2 of every 8
    assert len(re.findall(r"LDG\.E\.U16\.CONSTANT ", half)) == columns == len(re.findall(r"LDG\.E\.CONSTANT ", single))
    assert "LDG.E.CONSTANT " not in half and "LDG.E.U16" not in single


@pytest.mark.parametrize("cluster_m", [1, 2])
@pytest.mark.parametrize("num_stages", [2, 3, 4])
@pytest.mark.parametrize("group_m", [1, 16])  # v5 compiles the row-major walk for 1, the grouped one for 16
def test_v5_wgmma_stay_pipelined_under_every_pipeline_knob(cluster_m, num_stages, group_m):
    """The knobs a GemmConfig may change in v5 also move ptxas's register budget: no build of the plain
    epilogue may serialise its wgmma. (GROUP_M picks one of two tile walks at
    compile time, `#if GROUP_M / CLUSTER_M > 1`; values between 1 and 16 only change its constants.)"""
    for bf16 in (False, True):
        knobs = {"CLUSTER_M": cluster_m, "NUM_STAGES": num_stages, "GROUP_M": group_m}
        report = compiled(V5, launcher_defines(V5, bf16, **knobs))
        assert SERIALISED_WGMMA not in report.log, (bf16, knobs)


@pytest.mark.parametrize("cluster_m", [1, 2])
@pytest.mark.parametrize("num_stages", [2, 3, 4])
@pytest.mark.parametrize("group_m", [1, 8, 16])
@pytest.mark.parametrize("block_n", [128, 256])
def test_library_wgmma_stay_pipelined_under_every_pipeline_knob(cluster_m, num_stages, group_m, block_n):
    """The same for the library's kernel, with its tile widths, to the input's type and to fp32."""
    for bf16 in (False, True):
        for out_dtype in (int(bf16), 2):
            knobs = {"CLUSTER_M": cluster_m, "NUM_STAGES": num_stages, "GROUP_M": group_m, "OUT_DTYPE": out_dtype,
                     "BLOCK_N": block_n}  # fmt: skip
            report = compiled(LIBRARY, launcher_defines(LIBRARY, bf16, **knobs))
            assert SERIALISED_WGMMA not in report.log, (bf16, knobs)


@pytest.mark.parametrize("cluster_m", [1, 2])
def test_v5_multicasts_b_across_its_cluster(cluster_m):
    """[2] A cluster of two CTAs on neighbouring tile rows shares B: B's load is multicast
    (UTMALDG.2D.MULTICAST), A's plain; a cluster of one loads both plainly. Neither costs spills or
    serialised wgmma."""
    defines = launcher_defines(V5, False, CLUSTER_M=cluster_m)
    _fits(compiled(V5, defines), cluster_m)
    loads = re.findall(r"UTMALDG\.2D[.\w]*", sass(V5, defines))
    assert sorted(loads) == sorted(["UTMALDG.2D", "UTMALDG.2D.MULTICAST" if cluster_m > 1 else "UTMALDG.2D"])


@pytest.mark.parametrize(("cluster_m", "cluster_n"), [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_library_multicasts_the_operands_its_cluster_shares(cluster_m, cluster_n):
    """A cluster along M shares B, one along N shares A ([9]): those loads are multicast
    (UTMALDG.2D.MULTICAST), the others plain, and no cluster shape costs spills or serialised wgmma."""
    defines = launcher_defines(LIBRARY, False, CLUSTER_M=cluster_m, CLUSTER_N=cluster_n)
    _fits(compiled(LIBRARY, defines), (cluster_m, cluster_n))
    loads = re.findall(r"UTMALDG\.2D[.\w]*", sass(LIBRARY, defines))
    assert sorted(loads) == sorted(
        "UTMALDG.2D.MULTICAST" if shared > 1 else "UTMALDG.2D" for shared in (cluster_n, cluster_m)
    )


@pytest.mark.parametrize("knobs", [{}, {"SWAP_AB": 1, "BLOCK_N": 8, "BLOCK_M": 256, "CLUSTER_M": 1},
                                   {"PARTIAL_TILES": 1, "CLUSTER_M": 1}, {"PINGPONG": 1, "BLOCK_N": 128}])
def test_library_lets_the_next_kernel_in_after_its_last_load(knobs):
    """[10] PDL: griddepcontrol.wait (ACQBULK) before any load, and one launch_dependents (PREEXIT), after the
    producer's TMA loads in the code: the next kernel is let in once every CTA has issued its last load."""
    code = sass(LIBRARY, launcher_defines(LIBRARY, False, **knobs))
    lines = code.splitlines()
    at = {op: [i for i, line in enumerate(lines) if re.search(rf"\b{op}\b", line)] for op in ("ACQBULK", "PREEXIT")}
    loads = [i for i, line in enumerate(lines) if "UTMALDG" in line]
    assert len(at["ACQBULK"]) == 1 and len(at["PREEXIT"]) == 1 and loads, at
    assert at["ACQBULK"][0] < min(loads) < max(loads) < at["PREEXIT"][0]


@pytest.mark.parametrize("block_n", [16, 48, 64, 112, 128, 176, 192, 208, 256])
def test_library_issues_one_wgmma_shape_per_tile_width(block_n):
    """[7] BLOCK_N picks the instruction: four m64nBLOCK_Nk16 per k-tile (one per k16 step) and no other,
    with as many stages as the heuristic gives the width, no spills and no serialised wgmma."""
    from deepgemm.heuristic import max_stages

    for bf16 in (False, True):
        defines = launcher_defines(LIBRARY, bf16, BLOCK_N=block_n, NUM_STAGES=max_stages(block_n))
        _fits(compiled(LIBRARY, defines), (bf16, block_n))
        code = sass(LIBRARY, defines)
        assert code.count(f"HGMMA.64x{block_n}x16") == 4
        assert code.count("HGMMA.") == 4


MAIN_LOOP_MAX_INSTRUCTIONS = 56  # v5's and the library's loop (the same code), NVRTC: 49 to 54; 95 when the
# descriptors were rebuilt every k-tile


def _sass_loop_around(code: str, marker: str) -> list[str]:
    """The instructions of the innermost loop holding the first `marker`: from the target of the first
    backward branch after it to that branch, within gemm_kernel (each function's addresses start at 0)."""
    code = function_sass(code, "gemm_kernel")
    lines = [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*;)", code)]
    first = next(addr for addr, text in lines if marker in text)
    for addr, text in lines:
        branch = re.search(r"BRA (?:\S+ )?0x([0-9a-f]+)", text)
        if addr > first and branch and int(branch.group(1), 16) <= first:
            start = int(branch.group(1), 16)
            return [t for a, t in lines if start <= a <= addr]
    raise AssertionError(f"no loop around {marker}")


@pytest.mark.parametrize(("a_mn", "b_mn"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize(("cluster_m", "cluster_n", "block_n"), [(2, 1, 256), (1, 2, 128), (1, 1, 128)])
def test_library_reads_each_operand_layout_with_the_transpose_bit_and_64_wide_boxes(
    a_mn, b_mn, cluster_m, cluster_n, block_n
):
    """[5] An MN-major operand sets its wgmma transpose bit (tnspA / tnspB on every HGMMA) and arrives as
    one 64 x 64 box per 64 rows of the CTA's part of its tile; a K-major one as a single box. The main loop
    stays as short as the K-major one's, with no spills or serialised wgmma."""
    knobs = {"A_MN_MAJOR": a_mn, "B_MN_MAJOR": b_mn, "CLUSTER_M": cluster_m, "CLUSTER_N": cluster_n, "BLOCK_N": block_n}
    for bf16 in (False, True):
        defines = launcher_defines(LIBRARY, bf16, **knobs)
        _fits(compiled(LIBRARY, defines), knobs)
        code = sass(LIBRARY, defines)
        wgmma = re.findall(rf"HGMMA\.64x{block_n}x16\.F32[.\w]* [^;]*", code)
        assert len(wgmma) == 4, wgmma
        assert all(("tnspA" in w) == bool(a_mn) and ("tnspB" in w) == bool(b_mn) for w in wgmma), wgmma
        a_boxes = 128 // cluster_n // 64 if a_mn else 1
        b_boxes = block_n // cluster_m // 64 if b_mn else 1
        assert len(re.findall(r"UTMALDG\.2D", code)) == a_boxes + b_boxes, (knobs, a_boxes, b_boxes)
        loop = _sass_loop_around(code, f"HGMMA.64x{block_n}x16")
        assert len(loop) <= MAIN_LOOP_MAX_INSTRUCTIONS, f"{knobs}: {len(loop)} instructions per k-tile"


@pytest.mark.parametrize(
    ("block_m", "cluster_m", "cluster_n", "block_n", "epilogue"),
    [
        (128, 2, 1, 256, {}),
        (128, 1, 1, 128, {"HAS_BIAS": 1, "ACTIVATION": 2}),
        (64, 2, 1, 128, {"OUT_DTYPE": 2}),
        (128, 2, 4, 176, {}),
        (64, 1, 1, 200, {"SWAP_AB": 1}),
    ],
)
def test_library_builds_that_cut_tiles_keep_the_main_loop_and_add_the_parts_in_the_same_kernel(
    block_m, cluster_m, cluster_n, block_n, epilogue
):
    """[6] A build that may cut tiles along K (stream-K, split-K) adds the parts inside gemm_kernel, with any
    epilogue, tile and cluster: no spills, no serialised wgmma, the main loop as short as without it; one
    atomic per strip (the counter, acquire-release: no sequentially consistent fence), the partials stored
    and loaded at L2 (strong, GPU scope), and no second kernel."""
    for bf16 in (False, True):
        knobs = {"PARTIAL_TILES": 1, "BLOCK_M": block_m, "CLUSTER_M": cluster_m, "CLUSTER_N": cluster_n,
                 "BLOCK_N": block_n, **epilogue}  # fmt: skip
        defines = launcher_defines(LIBRARY, bf16, **knobs)
        _fits(compiled(LIBRARY, defines), knobs)
        code = sass(LIBRARY, defines)
        loop = _sass_loop_around(code, f"HGMMA.64x{block_n}x16")
        # [9] A stage goes back to every CTA that loads into it: each beyond the three of a 2 x 2 cluster adds
        # its arrival and that arrival's address to the loop.
        extra = 2 * max(0, cluster_m + cluster_n - 1 - 3)
        assert len(loop) <= MAIN_LOOP_MAX_INSTRUCTIONS + extra, f"{knobs}: {len(loop)} instructions per k-tile"
        assert code.count("ATOMG.E.ADD.STRONG.GPU") == 1 and "MEMBAR.SC.GPU" not in code, knobs
        pairs = block_n // 4  # float2 pairs per lane in a strip
        assert code.count("STG.E.64.STRONG.GPU") == pairs and code.count("LDG.E.64.STRONG.GPU") == pairs, knobs
        assert code.count("Function : ") == 1, "one kernel"


@pytest.mark.parametrize(("block_m", "block_n", "cluster_k", "swap"),
                         [(64, 8, 2, 1), (64, 128, 2, 1), (128, 64, 4, 0), (128, 16, 2, 1)])
def test_library_split_k_in_the_cluster_sends_parts_to_shared_memory_and_keeps_the_main_loop(
    block_m, block_n, cluster_k, swap
):
    """[12] CLUSTER_K: no spills, no serialised wgmma, the main loop within five instructions of the build
    without it (the full barrier's address is rebuilt from the CTA's shared window each k-tile); a strip's part
    goes to its owner as st.async (STAS, 8 bytes a pair: BLOCK_N / 4 per fragment), nothing through global
    memory (no atomic, no partial stored or loaded at L2); the shared memory holds the slots
    `heuristic.cluster_sum_bytes` counts."""
    from deepgemm.heuristic import cluster_sum_bytes, store_box_bytes

    for bf16 in (False, True):
        knobs = {"BLOCK_M": block_m, "BLOCK_N": block_n, "CLUSTER_M": 1, "SWAP_AB": swap, "NUM_STAGES": 4}
        whole, sliced = (launcher_defines(LIBRARY, bf16, **knobs, **extra) for extra in ({}, {"CLUSTER_K": cluster_k}))
        report = compiled(LIBRARY, sliced)
        _fits(report, knobs)
        code = sass(LIBRARY, sliced)
        loops = [len(_sass_loop_around(sass(LIBRARY, d), f"HGMMA.64x{block_n}x16")) for d in (whole, sliced)]
        assert loops[1] <= loops[0] + 5, f"{knobs}: {loops} instructions per k-tile without and with CLUSTER_K"
        assert len(re.findall(r"\bSTAS\.64\b", code)) == block_n // 4, knobs
        assert "ATOMG" not in code and "STG.E.64.STRONG.GPU" not in code, knobs
        # The owner hands its slots back to the other CTAs releasing at cluster scope: each remote arrival
        # (no multicast here, so these alone) comes right after the fence ptxas emits for that release.
        instructions = [line.split(";")[0] for line in code.splitlines() if ";" in line]
        remote = [i for i, line in enumerate(instructions) if "SYNCS.ARRIVE.TRANS64.RED" in line]
        assert remote and all(any("MEMBAR.ALL.GPU" in line for line in instructions[i - 4 : i]) for i in remote)
        cfg = GemmConfig(block_m=block_m, block_n=block_n, num_stages=4).merged_over(stages.load(LIBRARY).DEFAULTS)
        slots = cluster_sum_bytes(block_n, block_m, cluster_k) - (block_m // 16 + block_m // 16 // cluster_k) * 8
        boxes = store_box_bytes(block_n, block_m, bool(swap), 1)
        assert report.launch_facts().smem_bytes == tile_smem_bytes(cfg) + boxes + slots + ALIGNMENT_SLACK_BYTES


@pytest.mark.parametrize(
    "knobs",
    [{"CLUSTER_K": 2, "CLUSTER_M": 2}, {"CLUSTER_K": 2, "CLUSTER_M": 1, "PARTIAL_TILES": 1},
     {"CLUSTER_K": 3, "CLUSTER_M": 1}, {"CLUSTER_K": 2, "CLUSTER_M": 1, "BLOCK_M": 256, "BLOCK_N": 64}],
)
def test_library_refuses_split_k_in_the_cluster_beside_other_clusters_or_cuts(knobs):
    """[12] A split in the cluster takes 2 or 4 CTAs, no multicast cluster and no tiles cut in global memory."""
    with pytest.raises(RuntimeError, match="2 or 4 CTAs on one tile, each a slice of K"):
        compiled(LIBRARY, launcher_defines(LIBRARY, False, **knobs))


@pytest.mark.parametrize("stage", [V5, LIBRARY])
def test_builds_without_split_k_have_no_atomics(stage):
    """v5 (which has no split-K) and the library's default build carry none of split-K's counting."""
    assert "ATOMG" not in sass(stage, launcher_defines(stage, False))


@pytest.mark.parametrize("block_n", [64, 256])
def test_library_block_m_64_runs_one_consumer_warpgroup(block_n):
    """[7] BLOCK_M 64: 256 threads (a producer and one consumer warpgroup), the same wgmma, no spills, and
    the store boxes of one consumer warpgroup after the stages."""
    for bf16 in (False, True):
        defines = launcher_defines(LIBRARY, bf16, BLOCK_M=64, BLOCK_N=block_n, NUM_STAGES=4)
        report = compiled(LIBRARY, defines)
        _fits(report, (bf16, block_n))
        assert len(re.findall(rf"HGMMA\.64x{block_n}x16\.F32", sass(LIBRARY, defines))) == 4
        facts = report.launch_facts()
        assert facts.threads == 256
        cfg = GemmConfig(block_m=64, block_n=block_n, num_stages=4).merged_over(stages.load(LIBRARY).DEFAULTS)
        assert facts.smem_bytes == tile_smem_bytes(cfg) + store_staging_bytes(1) + ALIGNMENT_SLACK_BYTES



WIDE_TILE_BUILDS = [(128, {}), (64, {"SWAP_AB": 1}), (128, {"PARTIAL_TILES": 1, "CLUSTER_M": 2}),
                    (128, {"A_MN_MAJOR": 1, "B_MN_MAJOR": 1, "CLUSTER_N": 2, "CLUSTER_M": 1})]


@pytest.mark.parametrize(("block_n", "knobs"), WIDE_TILE_BUILDS)
def test_library_block_m_256_runs_two_wgmma_m64_per_consumer_warpgroup(block_n, knobs):
    """[7] BLOCK_M 256: 384 threads (a producer and two consumers, as at 128), eight wgmma m64 per k-tile (two
    per k16 step, the second 64 rows further into A), no spills, and two consumers' store boxes."""
    from deepgemm.heuristic import store_box_bytes

    for bf16 in (False, True):
        defines = launcher_defines(LIBRARY, bf16, BLOCK_M=256, BLOCK_N=block_n, NUM_STAGES=4, **knobs)
        report = compiled(LIBRARY, defines)
        _fits(report, (bf16, block_n, knobs))
        assert len(re.findall(rf"HGMMA\.64x{block_n}x16\.F32", sass(LIBRARY, defines))) == 8
        facts = report.launch_facts()
        assert facts.threads == 384
        cfg = GemmConfig(block_m=256, block_n=block_n, num_stages=4).merged_over(stages.load(LIBRARY).DEFAULTS)
        built = dict(defines)
        epilogue = store_box_bytes(block_n, 256, bool(built["SWAP_AB"]), built["CLUSTER_M"] * built["CLUSTER_N"])
        assert facts.smem_bytes == tile_smem_bytes(cfg) + epilogue + ALIGNMENT_SLACK_BYTES


PINGPONG_BUILDS = [(64, 224, {"CLUSTER_M": 2}), (128, 128, {"CLUSTER_M": 1, "CLUSTER_N": 2}),
                   (128, 144, {"CLUSTER_M": 2, "SWAP_AB": 1})]  # fmt: skip


@pytest.mark.parametrize(("block_m", "block_n", "knobs"), PINGPONG_BUILDS)
def test_library_pingpong_gives_each_consumer_warpgroup_whole_tiles_and_keeps_the_main_loop(block_m, block_n, knobs):
    """[13] PINGPONG: 384 threads at any BLOCK_M (a producer and two consumers, each on its own tiles), a
    consumer's wgmma for a whole tile (BLOCK_M / 64 m64 per k16 step), the named barriers that take turns
    (BAR.SYNC, BAR.ARV; none without it), no spills, both consumers' store boxes (as many stages as
    `heuristic.max_stages` offers fit beside them), and the main loop within ten instructions of the build
    without it that issues as many wgmma (BLOCK_M 256, at most 128 wide, for 128-row tiles): ptxas rebuilds the
    full barrier's address and the A descriptor's base from the shared window each k-tile, uniform instructions
    beside 8 wgmma of 64 x 128 x 16."""
    from deepgemm.heuristic import max_stages, store_box_bytes

    for bf16 in (False, True):
        turns = launcher_defines(LIBRARY, bf16, BLOCK_M=block_m, BLOCK_N=block_n, NUM_STAGES=4, PINGPONG=1, **knobs)
        report = compiled(LIBRARY, turns)
        _fits(report, (bf16, block_m, block_n, knobs))
        code = sass(LIBRARY, turns)
        assert len(re.findall(rf"HGMMA\.64x{block_n}x16\.F32", code)) == 4 * block_m // 64
        assert "BAR.SYNC" in code and "BAR.ARV" in code
        facts = report.launch_facts()
        assert facts.threads == 384
        cfg = GemmConfig(block_m=block_m, block_n=block_n, num_stages=4).merged_over(stages.load(LIBRARY).DEFAULTS)
        built = dict(turns)
        boxes = store_box_bytes(block_n, block_m, bool(built["SWAP_AB"]), built["CLUSTER_M"] * built["CLUSTER_N"],
                                pingpong=True)  # fmt: skip
        assert facts.smem_bytes <= tile_smem_bytes(cfg) + boxes + ALIGNMENT_SLACK_BYTES  # rows under 128 B: less
        deepest = max_stages(block_n, block_m, bool(built["SWAP_AB"]), built["CLUSTER_M"] * built["CLUSTER_N"],
                             pingpong=True)  # fmt: skip
        compiled(LIBRARY, launcher_defines(LIBRARY, bf16, BLOCK_M=block_m, BLOCK_N=block_n, NUM_STAGES=deepest,
                                           PINGPONG=1, **knobs))  # fmt: skip
        wide = block_m == 128  # the build without it: 256 rows, at most 128 wide
        ref_n = min(block_n, 128) if wide else block_n
        both = launcher_defines(LIBRARY, bf16, BLOCK_M=2 * block_m if wide else block_m, BLOCK_N=ref_n,
                                NUM_STAGES=4, **knobs)  # fmt: skip
        assert "BAR.ARV" not in sass(LIBRARY, both)
        builds = ((both, ref_n), (turns, block_n))
        loops = [len(_sass_loop_around(sass(LIBRARY, d), f"HGMMA.64x{n}x16")) for d, n in builds]
        assert loops[1] <= loops[0] + 10, f"{knobs}: {loops} instructions per k-tile without and with PINGPONG"


@pytest.mark.parametrize(
    ("knobs", "message"),
    [({"BLOCK_M": 256, "BLOCK_N": 64}, "a warpgroup holds a whole tile"),
     ({"BLOCK_M": 128, "BLOCK_N": 160}, "BLOCK_N <= 144"),
     ({"BLOCK_M": 128, "BLOCK_N": 128, "PARTIAL_TILES": 1}, "every tile is whole"),
     ({"BLOCK_M": 64, "BLOCK_N": 64, "CLUSTER_M": 1, "CLUSTER_K": 2}, "every tile is whole")],
)  # fmt: skip
def test_library_refuses_pingpong_where_a_warpgroup_cannot_hold_a_whole_tile(knobs, message):
    """[13] Each consumer warpgroup holds a whole tile, at most two m64 fragments of 144 columns, and no tile is
    cut along K (in global memory or in the cluster)."""
    with pytest.raises(RuntimeError, match=message):
        compiled(LIBRARY, launcher_defines(LIBRARY, False, NUM_STAGES=3, PINGPONG=1, **knobs))


def test_library_block_m_256_refuses_a_tile_wider_than_128():
    """[7] Two m64n256 fragments would be 256 accumulators per thread: the kernel refuses it by name."""
    with pytest.raises(RuntimeError, match="BLOCK_N <= 128"):
        compiled(LIBRARY, launcher_defines(LIBRARY, False, BLOCK_M=256, BLOCK_N=256, NUM_STAGES=3))


@pytest.mark.parametrize("swap", [0, 1])
def test_library_shape_jit_folds_the_weights_dimensions_into_fewer_instructions(swap):
    """[11] FIXED_N (plain) or FIXED_M (swapped) and FIXED_K: the same wgmma, no spills, and a shorter kernel
    than the one that reads them as parameters (the tile counts and the scheduler's divisions fold)."""
    knobs = {"SWAP_AB": swap, "PARTIAL_TILES": 1, "BLOCK_N": 64 if swap else 256}
    fixed = {"FIXED_M" if swap else "FIXED_N": 4096, "FIXED_K": 4096}
    runtime, jit = (launcher_defines(LIBRARY, False, **knobs, **extra) for extra in ({}, fixed))
    _fits(compiled(LIBRARY, jit), fixed)
    count = [len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/", function_sass(sass(LIBRARY, d), "gemm_kernel"), re.M))
             for d in (runtime, jit)]
    assert 0 < count[1] < 0.9 * count[0], count
    assert re.findall(r"HGMMA\.[\w.]+", sass(LIBRARY, runtime)) == re.findall(r"HGMMA\.[\w.]+", sass(LIBRARY, jit))


def _accumulators(defines) -> int:
    """fp32 accumulators per consumer thread: a warpgroup's 64 x BLOCK_N over its 128 threads."""
    return 64 * dict(defines)["BLOCK_N"] // 128


def _assert_tanh_per_element(code: str, defines: tuple, fast: bool) -> None:
    """A 16-bit output's activation takes one MUFU.TANH per accumulator (the few other MUFU are the tile walk's
    integer divisions); an fp32 output keeps expf and IEEE division, whose slow path FCHK guards."""
    per_thread = _accumulators(defines)
    if fast:
        assert code.count("MUFU.TANH") == per_thread and code.count("MUFU") - per_thread < 16
    else:
        assert "MUFU.TANH" not in code
    assert ("MUFU.EX2" in code) is not fast and ("FCHK" in code) is not fast


@pytest.mark.parametrize("bf16", [False, True])
def test_v5_gelu_takes_one_mufu_tanh_per_element(bf16):
    """[4] 0.5 x (1 + tanh(v)): one MUFU.TANH per element (the special-function unit sets the epilogue's
    pace), no expf and no IEEE division."""
    defines = launcher_defines(V5, bf16, HAS_BIAS=1, ACTIVATION=ACTIVATIONS["gelu_tanh"])
    code = function_sass(sass(V5, defines), "gemm_kernel")
    _assert_tanh_per_element(code, defines, fast=True)


@pytest.mark.parametrize("activation", ["gelu_tanh", "silu"])
@pytest.mark.parametrize(("out_dtype", "fast"), [(0, True), (1, True), (2, False)])
def test_library_gelu_and_silu_take_one_mufu_tanh_for_16_bit_outputs(activation, out_dtype, fast):
    """Both are 0.5 x (1 + tanh(v)): one MUFU.TANH per element for fp16/bf16 outputs; an fp32 output keeps
    expf and IEEE division (FCHK)."""
    defines = launcher_defines(LIBRARY, False, HAS_BIAS=1, ACTIVATION=ACTIVATIONS[activation], OUT_DTYPE=out_dtype)
    code = function_sass(sass(LIBRARY, defines), "gemm_kernel")
    _assert_tanh_per_element(code, defines, fast)


@pytest.mark.parametrize("out_dtype", [0, 1, 2])
def test_library_gelu_erf_takes_erff_and_no_tanh_at_any_output_type(out_dtype):
    """GELU's erf form (PyTorch's default) is x Phi(x) through erff: one MUFU.EX2 per element whatever the
    output type, no tanh approximation and no division."""
    defines = launcher_defines(LIBRARY, False, HAS_BIAS=1, ACTIVATION=ACTIVATIONS["gelu_erf"], OUT_DTYPE=out_dtype)
    code = function_sass(sass(LIBRARY, defines), "gemm_kernel")
    assert "MUFU.TANH" not in code and "FCHK" not in code
    assert code.count("MUFU.EX2") == _accumulators(defines)


CLUSTER_BUILDS = [(V5, {}), (LIBRARY, {}), (LIBRARY, {"CLUSTER_M": 2, "CLUSTER_N": 2})]


@pytest.mark.parametrize(("stage", "knobs"), CLUSTER_BUILDS)
def test_cluster_arrivals_carry_no_gpu_wide_fence(stage, knobs):
    """Releasing a stage to another CTA of the cluster is a remote mbarrier arrival; with a .cluster-scope
    release ptxas puts a MEMBAR.ALL.GPU before each one, in the main loop. Only the two cluster barriers
    (start and end) may have one."""
    code = sass(stage, launcher_defines(stage, False, **knobs))
    assert "SYNCS.ARRIVE.TRANS64.RED" in code  # the remote arrivals are there
    assert code.count("MEMBAR.ALL.GPU") <= 2


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("stage", [V5, LIBRARY])
def test_main_loop_issues_little_besides_the_wgmma(stage, bf16):
    """On the power-capped H200 every instruction costs clock: the descriptors are built once, so a k-tile
    is the barrier wait, four HGMMA, the release and little else; and a wait sleeps (NANOSLEEP.SYNCS from
    try_wait's suspend hint) instead of spinning."""
    code = sass(stage, launcher_defines(stage, bf16))
    loop = _sass_loop_around(code, "HGMMA.64x256x16")
    assert sum("HGMMA" in text for text in loop) == 4, loop
    assert len(loop) <= MAIN_LOOP_MAX_INSTRUCTIONS, f"{len(loop)} instructions per k-tile:\n" + "\n".join(loop)
    assert "NANOSLEEP.SYNCS" in code


@pytest.mark.parametrize("wgmma_in_flight", [0, 1])
def test_v5_main_loop_leaves_as_many_wgmma_batches_in_flight_as_asked(wgmma_in_flight):
    """[3] After issuing a k-tile a consumer waits until at most WGMMA_IN_FLIGHT batches still run (the
    loop's one WARPGROUP.DEPBAR.LE): 1 as shipped, 0 in the ablation, which waits for its own batch as v4
    does. Either loop stays short, without spills or serialised wgmma."""
    for bf16 in (False, True):
        defines = launcher_defines(V5, bf16, WGMMA_IN_FLIGHT=wgmma_in_flight)
        _fits(compiled(V5, defines), (bf16, wgmma_in_flight))
        loop = _sass_loop_around(sass(V5, defines), "HGMMA.64x256x16")
        waits = [text for text in loop if "WARPGROUP.DEPBAR" in text]
        assert waits == [f"WARPGROUP.DEPBAR.LE gsb0, 0x{wgmma_in_flight} ;"], waits
        assert len(loop) <= MAIN_LOOP_MAX_INSTRUCTIONS, f"{len(loop)} instructions per k-tile"


@pytest.mark.parametrize("bf16", [False, True])
def test_v5_without_tma_stores_writes_c_from_registers(bf16):
    """[4] off (TMA_STORE 0, the ablation: v5 with store_from_registers.diff applied): no TMA store and no
    stmatrix, C written by global stores from registers as v4 writes it; the fused epilogue still compiles
    without spills or serialised wgmma, and no compile warns (nothing the diff leaves is unused)."""
    for activation in V5_ACTIVATIONS:
        defines = launcher_defines(V5, bf16, TMA_STORE=0, HAS_BIAS=1, ACTIVATION=activation)
        _fits(compiled(V5, defines), (bf16, activation))
        assert "warning" not in compiled(V5, defines).log, compiled(V5, defines).log
    code = sass(V5, launcher_defines(V5, bf16, TMA_STORE=0))
    assert "UTMASTG" not in code and "STSM" not in code and "UTMASTG" in sass(V5, launcher_defines(V5, bf16))
    assert re.search(r"\bSTG\.E\b", code)


def _has(stage: str, bf16: bool, instruction: str) -> bool:
    return instruction in sass(stage, launcher_defines(stage, bf16))


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("stage", ["v0_naive", "v1_tiled"])
def test_cuda_core_stages_use_no_tensor_cores(stage, bf16):
    for instruction in ("HMMA", "HGMMA", "LDSM"):
        assert not _has(stage, bf16, instruction), f"{stage} uses {instruction}"
    assert _has(stage, bf16, "FFMA")


@pytest.mark.parametrize("bf16", [False, True])
def test_v1_loads_16_bytes_at_a_time(bf16):
    assert _has("v1_tiled", bf16, "LDG.E.128")


@pytest.mark.parametrize("bf16", [False, True])
def test_v2_sass_uses_mma_sync_ldmatrix_and_cp_async(bf16):
    for instruction in ("HMMA.16816.F32", "LDSM.16.M88.4", "LDGSTS"):
        assert _has("v2_mma_sync", bf16, instruction), instruction
    assert not _has("v2_mma_sync", bf16, "HGMMA")


_FUSED = (
    "HGMMA.64x256x16.F32",
    "UTMALDG.2D",
    "SYNCS.ARRIVE",
    "USETMAXREG",
    "UTMASTG.2D",
    "STSM.16.M88.4",
    "UTMALDG.2D.MULTICAST",
)
HOPPER_SASS = {
    "v3_wgmma_tma": ("HGMMA.64x128x16.F32", "UTMALDG.2D", "SYNCS"),
    "v4_pipeline_swizzle": ("HGMMA.64x256x16.F32", "UTMALDG.2D", "SYNCS.ARRIVE", "USETMAXREG"),
    V5: _FUSED,
    LIBRARY: _FUSED,  # its default build is v5's
}


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("stage", WGMMA_KERNELS)
def test_hopper_sass_uses_wgmma_tma_and_mbarriers(stage, bf16):
    for instruction in HOPPER_SASS[stage]:
        assert _has(stage, bf16, instruction), f"{stage} lacks {instruction}"
    assert not _has(stage, bf16, "HMMA.16816"), f"{stage} fell back to mma.sync"


@pytest.mark.parametrize("stage", KERNELS)
def test_compiles_by_hand_with_nvcc_and_file_defaults(stage, tmp_path):
    """What the READMEs tell a reader to run: the file alone, its own defaults, nvcc for sm_90a."""
    import shutil
    import subprocess

    from tutorial.stages import kernel_path

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed here (NVRTC covers the JIT path above)")
    cubin = tmp_path / "kernel.cubin"
    cmd = [nvcc, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-o", str(cubin), str(kernel_path(stage))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert cubin.stat().st_size > 0


@pytest.mark.parametrize("stage", KERNELS)
def test_file_defaults_match_the_launcher_defaults(stage):
    """The constants a reader sees in kernel.cu (gemm_sm90.cu) are the ones the launcher (the plan) compiles
    with."""
    from tutorial.stages import kernel_path

    text = kernel_path(stage).read_text()
    for name, value in stages.default_defines(stage).items():
        if name in stages.source_knobs(stage):  # it picks a source, kernel.cu as shipped by default
            assert kernel_path(stage, {name: value}) == kernel_path(stage), f"{stage}'s default {name} patches it"
            continue
        found = re.search(rf"#define {name} (\d+)", text)
        assert found, f"{stage}'s kernel has no default for {name}"
        assert int(found.group(1)) == value, f"{stage}: its kernel says {name} {found.group(1)}, launcher {value}"


SWAPPED_BUILDS = [  # [8] (BLOCK_M, BLOCK_N, PARTIAL_TILES, CLUSTER_M, CLUSTER_N, OUT_DTYPE, rows of C per store box)
    (128, 16, 0, 1, 1, 0, 16), (64, 32, 1, 1, 1, 0, 32), (128, 8, 1, 1, 1, 0, 8), (64, 200, 0, 1, 1, 0, 8),
    (64, 128, 0, 2, 1, 0, 64), (128, 96, 1, 1, 2, 0, 32),  # 16-bit C through store boxes
    (64, 64, 0, 2, 1, 0, None), (64, 32, 1, 1, 2, 0, None), (64, 40, 1, 1, 1, 2, None),  # C by pointer
]


@pytest.mark.parametrize(("block_m", "block_n", "cut", "cluster_m", "cluster_n", "out_dtype", "box_rows"),
                         SWAPPED_BUILDS)  # fmt: skip
def test_library_swap_ab_builds_issue_the_tokens_wgmma_and_store_c_transposed(
    block_m, block_n, cut, cluster_m, cluster_n, out_dtype, box_rows
):
    """[8] Swapped: wgmma m64nBLOCK_Nk16 for any 8 rows of C, no spills, the main loop as short as the others.
    A 16-bit C goes through store boxes of 32-byte rows (a warp's 16 columns of C), written by stmatrix's
    transpose form and stored by TMA, the box as many rows as the largest power-of-two multiple of 8 in
    BLOCK_N (64 at most), with the heuristic's count of their shared memory and no store by pointer; fp32,
    and clusters of tiles under 96 rows of C, store each value by pointer: no box, no TMA store, no
    stmatrix, no shared memory staged for C."""
    from deepgemm.heuristic import max_stages, store_box_bytes, swap_box_rows

    for bf16 in (False, True):
        knobs = {"SWAP_AB": 1, "BLOCK_M": block_m, "BLOCK_N": block_n, "PARTIAL_TILES": cut, "CLUSTER_M": cluster_m,
                 "CLUSTER_N": cluster_n, "OUT_DTYPE": out_dtype if out_dtype == 2 else int(bf16),
                 "NUM_STAGES": max_stages(block_n, block_m, True, cluster_m * cluster_n), "HAS_BIAS": 1,
                 "ACTIVATION": 2}  # fmt: skip
        defines = launcher_defines(LIBRARY, bf16, **knobs)
        report = compiled(LIBRARY, defines)
        _fits(report, knobs)
        facts = report.launch_facts()
        tile = GemmConfig(block_m=block_m, block_n=block_n, num_stages=knobs["NUM_STAGES"])
        cfg = tile.merged_over(stages.load(LIBRARY).DEFAULTS)
        code = sass(LIBRARY, defines)
        assert len(re.findall(rf"HGMMA\.64x{block_n}x16\.F32", code)) == 4, knobs
        if box_rows is None:
            assert facts.store_box is None
            assert facts.smem_bytes == tile_smem_bytes(cfg) + ALIGNMENT_SLACK_BYTES
            assert "UTMASTG" not in code and "STSM" not in code, knobs
        else:
            assert facts.store_box == (box_rows, 16) and swap_box_rows(block_n) == box_rows
            boxes = store_box_bytes(block_n, block_m, True, cluster_m * cluster_n)
            assert boxes == min(block_m // 64, 2) * 4 * 2 * box_rows * 32
            assert facts.smem_bytes == tile_smem_bytes(cfg) + boxes + ALIGNMENT_SLACK_BYTES
            assert re.findall(r"STSM[.\w]*", code) == ["STSM.16.MT88.2"] * (block_n // 8), knobs
            assert "UTMASTG.2D" in code and "STG.E.U16" not in code, knobs  # no 2-byte store of C
        loop = _sass_loop_around(code, f"HGMMA.64x{block_n}x16")
        assert len(loop) <= MAIN_LOOP_MAX_INSTRUCTIONS, f"{knobs}: {len(loop)} instructions per k-tile"
