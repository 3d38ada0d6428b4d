"""Every stage compiles through NVRTC (the JIT's compiler) with its launcher's defaults, and ptxas's report
and the SASS hold what the stage claims. No GPU needed."""

from __future__ import annotations

import re

import pytest
from kernels import (
    PORTABLE_STAGES,
    TENSOR_CORE_STAGES,
    block_threads,
    compiled,
    function_sass,
    launcher_defines,
    sass,
)

from deepgemm import stages
from deepgemm.config import GemmConfig, tile_smem_bytes
from deepgemm.stages import STAGES

MAX_REGISTERS = 255  # the per-thread hardware limit; beyond it ptxas spills
REGISTER_FILE = 65536  # 32-bit registers per SM: a block's threads x registers must fit
SMEM_PER_BLOCK = 227 * 1024  # what one block may opt in to on Hopper (dynamic + static)

BUILDS = [(s, bf16, "sm_90a") for s in STAGES for bf16 in (False, True)]
BUILDS += [(s, bf16, "sm_80") for s in PORTABLE_STAGES for bf16 in (False, True)]


@pytest.mark.parametrize(("stage", "bf16", "arch"), BUILDS)
def test_compiles_without_spills(stage, bf16, arch):
    report = compiled(stage, launcher_defines(stage, bf16), arch)
    assert report.spill_stores == 0 and report.spill_loads == 0, report.log
    assert report.stack_bytes == 0, f"{stage} keeps an array in local memory:\n{report.log}"
    assert 0 < report.registers <= MAX_REGISTERS
    threads = block_threads(stage, report)
    assert report.registers * threads <= REGISTER_FILE, f"{stage} cannot fit one block of {threads} threads per SM"


# What the TMA stages' launch facts must come to, worked out from the config: threads are warpgroups of 128,
# and dynamic shared memory is the pipeline's stages, then v5's staging of C for its TMA stores (2 consumer
# warpgroups x 4 warps x 2 boxes of 16 rows x 128 bytes), then 1024 bytes of slack to align to 1024.
WARPGROUPS = {"v3_wgmma_tma": 2, "v4_pipeline_swizzle": 3, "v5_fused": 3}
STORE_STAGING_BYTES = {"v3_wgmma_tma": 0, "v4_pipeline_swizzle": 0, "v5_fused": 2 * 4 * 2 * 16 * 128}
ALIGNMENT_SLACK_BYTES = 1024


@pytest.mark.parametrize("num_stages", [2, 3, 4])
@pytest.mark.parametrize("stage", TENSOR_CORE_STAGES)
def test_tma_stages_export_the_threads_and_shared_memory_they_launch_with(stage, num_stages):
    cfg = GemmConfig(num_stages=num_stages).merged_over(stages.load(stage).DEFAULTS)
    report = compiled(stage, launcher_defines(stage, False, NUM_STAGES=num_stages))
    facts = report.launch_facts()
    assert facts.threads == 128 * WARPGROUPS[stage]
    assert facts.smem_bytes == tile_smem_bytes(cfg) + STORE_STAGING_BYTES[stage] + ALIGNMENT_SLACK_BYTES
    assert facts.smem_bytes + report.static_smem_bytes <= SMEM_PER_BLOCK


@pytest.mark.parametrize(("out_dtype", "element_bytes"), [(0, 2), (1, 2), (2, 4)])
def test_v5_exports_the_box_it_stores_c_in(out_dtype, element_bytes):
    """Each consumer warp stores 16 rows of C, 128 bytes of columns at a time (the 128B swizzle span): the
    launcher builds C's tensor map from this box, so it must follow the output type."""
    facts = compiled("v5_fused", launcher_defines("v5_fused", False, OUT_DTYPE=out_dtype)).launch_facts()
    assert facts.store_box == (16, 128 // element_bytes)
    for stage in ("v3_wgmma_tma", "v4_pipeline_swizzle"):  # these store C from registers, through a pointer
        assert compiled(stage, launcher_defines(stage, False)).launch_facts().store_box is None


def test_stages_without_tma_export_no_launch_facts():
    with pytest.raises(KeyError, match="no symbol LAUNCH_THREADS"):
        compiled("v2_mma_sync", launcher_defines("v2_mma_sync", False)).launch_facts()


@pytest.mark.parametrize("stage", TENSOR_CORE_STAGES)
def test_hopper_stages_refuse_plain_sm_80(stage):
    with pytest.raises(RuntimeError, match="failed to compile"):
        compiled(stage, launcher_defines(stage, False), "sm_80")


SERIALISED_WGMMA = "C7511"  # ptxas: "wgmma.mma_async instructions are serialized due to insufficient register ..."


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("out_dtype", [0, 1, 2])
@pytest.mark.parametrize("has_bias", [0, 1])
def test_v5_compiles_every_epilogue_without_spills_or_serialised_wgmma(bf16, out_dtype, has_bias):
    """Every epilogue compiles without spills, and ptxas keeps the wgmma pipelined: if the epilogue's live
    values and the 128 accumulators did not fit the registers together, it would serialise every wgmma of
    the kernel (its warning C7511), a loss no test on results would notice."""
    for activation in range(5):
        defines = launcher_defines("v5_fused", bf16, HAS_BIAS=has_bias, ACTIVATION=activation, OUT_DTYPE=out_dtype)
        report = compiled("v5_fused", defines)
        assert report.spill_stores == 0 and report.stack_bytes == 0, (activation, out_dtype, report.log)
        assert SERIALISED_WGMMA not in report.log, (activation, out_dtype, has_bias)


@pytest.mark.parametrize("cluster_m", [1, 2])
@pytest.mark.parametrize("num_stages", [2, 3, 4])
@pytest.mark.parametrize("group_m", [1, 8, 16])
@pytest.mark.parametrize("block_n", [128, 256])
def test_v5_wgmma_stay_pipelined_under_every_pipeline_knob(cluster_m, num_stages, group_m, block_n):
    """The knobs a GemmConfig may change in v5 also move ptxas's register budget: no build of the plain
    epilogue may serialise its wgmma."""
    for bf16 in (False, True):
        for out_dtype in (0, 1):
            knobs = {"CLUSTER_M": cluster_m, "NUM_STAGES": num_stages, "GROUP_M": group_m, "OUT_DTYPE": out_dtype,
                     "BLOCK_N": block_n}  # fmt: skip
            report = compiled("v5_fused", launcher_defines("v5_fused", bf16, **knobs))
            assert SERIALISED_WGMMA not in report.log, (bf16, knobs)


@pytest.mark.parametrize(("cluster_m", "cluster_n"), [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_v5_multicasts_the_operands_its_cluster_shares(cluster_m, cluster_n):
    """A cluster along M shares B, one along N shares A: those loads are multicast (UTMALDG.2D.MULTICAST),
    the others plain, and no cluster shape costs spills or serialised wgmma."""
    defines = launcher_defines("v5_fused", False, CLUSTER_M=cluster_m, CLUSTER_N=cluster_n)
    report = compiled("v5_fused", defines)
    assert report.spill_stores == 0 and SERIALISED_WGMMA not in report.log, report.log
    loads = re.findall(r"UTMALDG\.2D[.\w]*", sass("v5_fused", defines))
    assert sorted(loads) == sorted(
        "UTMALDG.2D.MULTICAST" if shared > 1 else "UTMALDG.2D" for shared in (cluster_n, cluster_m)
    )


@pytest.mark.parametrize("block_n", [64, 128, 192, 256])
def test_v5_issues_one_wgmma_shape_per_tile_width(block_n):
    """[7] BLOCK_N picks the instruction: four m64nBLOCK_Nk16 per k-tile (one per k16 step) and no other,
    with as many stages as the heuristic gives the width, no spills and no serialised wgmma."""
    from deepgemm.heuristic import max_stages

    for bf16 in (False, True):
        defines = launcher_defines("v5_fused", bf16, BLOCK_N=block_n, NUM_STAGES=max_stages(block_n))
        report = compiled("v5_fused", defines)
        assert report.spill_stores == 0 and SERIALISED_WGMMA not in report.log, report.log
        code = sass("v5_fused", defines)
        assert code.count(f"HGMMA.64x{block_n}x16") == 4
        assert code.count("HGMMA.") == 4


@pytest.mark.parametrize(("a_mn", "b_mn"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize(("cluster_m", "cluster_n", "block_n"), [(2, 1, 256), (1, 2, 128), (1, 1, 128)])
def test_v5_reads_each_operand_layout_with_the_transpose_bit_and_64_wide_boxes(
    a_mn, b_mn, cluster_m, cluster_n, block_n
):
    """[5] An MN-major operand sets its wgmma transpose bit (tnspA / tnspB on every HGMMA) and arrives as
    one 64 x 64 box per 64 rows of the CTA's part of its tile; a K-major one as a single box. The main loop
    stays as short as the K-major one's, with no spills or serialised wgmma."""
    knobs = {"A_MN_MAJOR": a_mn, "B_MN_MAJOR": b_mn, "CLUSTER_M": cluster_m, "CLUSTER_N": cluster_n, "BLOCK_N": block_n}
    for bf16 in (False, True):
        defines = launcher_defines("v5_fused", bf16, **knobs)
        report = compiled("v5_fused", defines)
        assert report.spill_stores == 0 and SERIALISED_WGMMA not in report.log, (knobs, report.log)
        code = sass("v5_fused", defines)
        wgmma = re.findall(rf"HGMMA\.64x{block_n}x16\.F32[.\w]* [^;]*", code)
        assert len(wgmma) == 4, wgmma
        assert all(("tnspA" in w) == bool(a_mn) and ("tnspB" in w) == bool(b_mn) for w in wgmma), wgmma
        a_boxes = 128 // cluster_n // 64 if a_mn else 1
        b_boxes = block_n // cluster_m // 64 if b_mn else 1
        assert len(re.findall(r"UTMALDG\.2D", code)) == a_boxes + b_boxes, (knobs, a_boxes, b_boxes)
        loop = _sass_loop_around(code, f"HGMMA.64x{block_n}x16")
        assert len(loop) <= V5_MAIN_LOOP_MAX_INSTRUCTIONS, f"{knobs}: {len(loop)} instructions per k-tile"


@pytest.mark.parametrize(
    ("split", "block_m", "cluster_m", "block_n", "epilogue"),
    [(2, 128, 2, 256, {}), (4, 128, 1, 128, {"HAS_BIAS": 1, "ACTIVATION": 2}), (3, 64, 2, 128, {"OUT_DTYPE": 2})],
)
def test_v5_split_k_builds_keep_the_main_loop_and_add_slices_in_the_same_kernel(
    split, block_m, cluster_m, block_n, epilogue
):
    """[6] A split-K build adds its slices inside gemm_kernel, with any epilogue: no spills, no serialised
    wgmma, the main loop as short as without it; one atomic per strip (the counter, acquire-release: no
    sequentially consistent fence), the partials stored and loaded at L2 (strong, GPU scope), and no second
    kernel."""
    for bf16 in (False, True):
        knobs = {"SPLIT_K": split, "BLOCK_M": block_m, "CLUSTER_M": cluster_m, "BLOCK_N": block_n, **epilogue}
        defines = launcher_defines("v5_fused", bf16, **knobs)
        report = compiled("v5_fused", defines)
        assert report.spill_stores == 0 and SERIALISED_WGMMA not in report.log, (knobs, report.log)
        code = sass("v5_fused", defines)
        loop = _sass_loop_around(code, f"HGMMA.64x{block_n}x16")
        assert len(loop) <= V5_MAIN_LOOP_MAX_INSTRUCTIONS, f"{knobs}: {len(loop)} instructions per k-tile"
        assert code.count("ATOMG.E.ADD.STRONG.GPU") == 1 and "MEMBAR.SC.GPU" not in code, knobs
        pairs = block_n // 4  # float2 pairs per lane in a strip
        assert code.count("STG.E.64.STRONG.GPU") == pairs and code.count("LDG.E.64.STRONG.GPU") == pairs, knobs
        assert code.count("Function : ") == 1, "one kernel"


def test_v5_without_split_k_has_no_atomics():
    """The default build carries none of split-K's counting: no atomic."""
    code = sass("v5_fused", launcher_defines("v5_fused", False))
    assert "ATOMG" not in code


@pytest.mark.parametrize("block_n", [64, 256])
def test_v5_block_m_64_runs_one_consumer_warpgroup(block_n):
    """[7] BLOCK_M 64: 256 threads (a producer and one consumer warpgroup), the same wgmma, no spills."""
    for bf16 in (False, True):
        defines = launcher_defines("v5_fused", bf16, BLOCK_M=64, BLOCK_N=block_n, NUM_STAGES=4)
        report = compiled("v5_fused", defines)
        assert report.spill_stores == 0 and SERIALISED_WGMMA not in report.log, report.log
        assert len(re.findall(rf"HGMMA\.64x{block_n}x16\.F32", sass("v5_fused", defines))) == 4
        assert report.launch_facts().threads == 256


@pytest.mark.parametrize("activation", [2, 4])  # GELU (tanh form), SiLU
@pytest.mark.parametrize(("out_dtype", "fast"), [(0, True), (1, True), (2, False)])
def test_v5_gelu_and_silu_take_one_mufu_tanh_for_16_bit_outputs(activation, out_dtype, fast):
    """0.5 x (1 + tanh(v)): one MUFU.TANH per element for fp16/bf16 outputs (the special-function unit
    sets the epilogue's pace); an fp32 output keeps expf and IEEE division, whose slow path is a call
    (FCHK flags the operands that need it)."""
    defines = launcher_defines("v5_fused", False, HAS_BIAS=1, ACTIVATION=activation, OUT_DTYPE=out_dtype)
    code = function_sass(sass("v5_fused", defines), "gemm_kernel")
    if fast:  # one per accumulator (128 per thread); the few MUFU.RCP are the tile walk's integer divisions
        assert code.count("MUFU.TANH") == 128 and code.count("MUFU") - 128 < 16
    assert ("MUFU.EX2" in code) is not fast and ("FCHK" in code) is not fast


def test_v5_cluster_arrivals_carry_no_gpu_wide_fence():
    """Releasing a stage to the other CTA of the cluster is a remote mbarrier arrival; with a .cluster-scope
    release ptxas puts a MEMBAR.ALL.GPU before each one, in the main loop. Only the two cluster barriers
    (start and end) may have one."""
    code = sass("v5_fused", launcher_defines("v5_fused", False))
    assert "SYNCS.ARRIVE.TRANS64.RED" in code  # the remote arrivals are there
    assert code.count("MEMBAR.ALL.GPU") <= 2


V5_MAIN_LOOP_MAX_INSTRUCTIONS = 56  # NVRTC: 49; 95 when the descriptors were rebuilt every k-tile


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


@pytest.mark.parametrize("bf16", [False, True])
def test_v5_main_loop_issues_little_besides_the_wgmma(bf16):
    """On the power-capped H200 every instruction costs clock: the descriptors are built once, so a k-tile
    is the barrier wait, four HGMMA, the release and little else; and a wait sleeps (NANOSLEEP.SYNCS from
    try_wait's suspend hint) instead of spinning."""
    code = sass("v5_fused", launcher_defines("v5_fused", bf16))
    loop = _sass_loop_around(code, "HGMMA.64x256x16")
    assert sum("HGMMA" in text for text in loop) == 4, loop
    assert len(loop) <= V5_MAIN_LOOP_MAX_INSTRUCTIONS, f"{len(loop)} instructions per k-tile:\n" + "\n".join(loop)
    assert "NANOSLEEP.SYNCS" in code


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


HOPPER_SASS = {
    "v3_wgmma_tma": ("HGMMA.64x128x16.F32", "UTMALDG.2D", "SYNCS"),
    "v4_pipeline_swizzle": ("HGMMA.64x256x16.F32", "UTMALDG.2D", "SYNCS.ARRIVE", "USETMAXREG"),
    "v5_fused": (
        "HGMMA.64x256x16.F32",
        "UTMALDG.2D",
        "SYNCS.ARRIVE",
        "USETMAXREG",
        "UTMASTG.2D",
        "STSM.16.M88.4",
        "UTMALDG.2D.MULTICAST",
    ),
}


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("stage", TENSOR_CORE_STAGES)
def test_hopper_sass_uses_wgmma_tma_and_mbarriers(stage, bf16):
    for instruction in HOPPER_SASS[stage]:
        assert _has(stage, bf16, instruction), f"{stage} lacks {instruction}"
    assert not _has(stage, bf16, "HMMA.16816"), f"{stage} fell back to mma.sync"


@pytest.mark.parametrize("stage", STAGES)
def test_compiles_by_hand_with_nvcc_and_file_defaults(stage, tmp_path):
    """What the README tells a reader to run: the file alone, its own defaults, nvcc for sm_90a."""
    import shutil
    import subprocess

    from deepgemm.jit import kernel_path

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed here (NVRTC covers the JIT path above)")
    cubin = tmp_path / "kernel.cubin"
    cmd = [nvcc, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-o", str(cubin), str(kernel_path(stage))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert cubin.stat().st_size > 0


@pytest.mark.parametrize("stage", STAGES)
def test_file_defaults_match_the_launcher_defaults(stage):
    """The constants a reader sees in kernel.cu are the ones the launcher compiles with."""
    import re

    from deepgemm import stages
    from deepgemm.jit import kernel_path

    text = kernel_path(stage).read_text()
    for name, value in stages.load(stage).DEFAULTS.defines().items():
        found = re.search(rf"#define {name} (\d+)", text)
        assert found, f"{stage}/kernel.cu has no default for {name}"
        assert int(found.group(1)) == value, f"{stage}: kernel.cu says {name} {found.group(1)}, launcher {value}"


@pytest.mark.parametrize(("block_m", "block_n", "split"), [(128, 16, 1), (64, 32, 4), (128, 32, 16)])
def test_v5_swap_ab_builds_issue_narrow_wgmma_and_store_c_by_pointer(block_m, block_n, split):
    """[8] Swapped: wgmma m64n16 or m64n32, no spills, the main loop as short as the others; no store box
    (C comes as a pointer: the launcher then passes its row stride), so no TMA store and no stmatrix."""
    for bf16 in (False, True):
        knobs = {"SWAP_AB": 1, "BLOCK_M": block_m, "BLOCK_N": block_n, "SPLIT_K": split, "CLUSTER_M": 1,
                 "NUM_STAGES": 10, "HAS_BIAS": 1, "ACTIVATION": 2}  # fmt: skip
        defines = launcher_defines("v5_fused", bf16, **knobs)
        report = compiled("v5_fused", defines)
        assert report.spill_stores == 0 and SERIALISED_WGMMA not in report.log, (knobs, report.log)
        assert report.launch_facts().store_box is None
        code = sass("v5_fused", defines)
        assert len(re.findall(rf"HGMMA\.64x{block_n}x16\.F32", code)) == 4, knobs
        assert "UTMASTG" not in code and "STSM" not in code, knobs
        loop = _sass_loop_around(code, f"HGMMA.64x{block_n}x16")
        assert len(loop) <= V5_MAIN_LOOP_MAX_INSTRUCTIONS, f"{knobs}: {len(loop)} instructions per k-tile"
