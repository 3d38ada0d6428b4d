"""The pitfalls notebook's demonstrations (no GPU): line removal, the SASS order a missing wait changes,
the bank-group model, accumulation order and the occupancy arithmetic."""

import pytest
from kernels import compiled, launcher_defines

from deepgemm.jit import compile_source
from tutorial import pitfalls
from tutorial.sass import disassemble
from tutorial.stages import kernel_path

WAIT_LINE = "wgmma_wait_group<0>();  // this warpgroup's reads of the stage are done"


def _trace(source: str) -> list[str]:
    defines = dict(launcher_defines("v3_wgmma_tma", False))
    return [line.split()[1] for line in pitfalls.sass_trace(disassemble(compile_source(source, defines).cubin))]


def test_a_line_is_taken_out_or_the_variant_is_refused():
    variant = pitfalls.variant_source("v3_wgmma_tma", WAIT_LINE)
    assert WAIT_LINE not in variant and variant.count("\n") == kernel_path("v3_wgmma_tma").read_text().count("\n")
    with pytest.raises(ValueError, match="no line of v3_wgmma_tma's kernel contains"):
        pitfalls.variant_source("v3_wgmma_tma", "a line that is not there")


def test_without_the_wait_the_barrier_comes_before_the_mma_is_done():
    """As shipped, each warpgroup waits for its wgmma (DEPBAR) before the __syncthreads (BAR.SYNC) that lets
    thread 0 refill the stage; without the wait ptxas still waits, but only after the barrier."""
    shipped = _trace(kernel_path("v3_wgmma_tma").read_text())
    broken = _trace(pitfalls.variant_source("v3_wgmma_tma", WAIT_LINE))
    after_mma = shipped.index("WARPGROUP.DEPBAR.LE") - 1
    assert shipped[after_mma].startswith("HGMMA") and shipped[after_mma + 2].startswith("BAR.SYNC")
    assert broken.index("BAR.SYNC.DEFER_BLOCKING", after_mma) < broken.index("WARPGROUP.DEPBAR.LE")


def test_without_the_fence_ptxas_puts_the_arrive_in_itself():
    source = pitfalls.variant_source("v3_wgmma_tma", "wgmma_fence();  // acc was written")
    assert _trace(source) == _trace(kernel_path("v3_wgmma_tma").read_text())


@pytest.mark.parametrize(("row_bytes", "swizzle", "wavefronts"),
                         [(128, False, 8), (128, True, 1), (144, False, 1), (64, False, 4), (64, True, 1),
                          (256, False, 8)])  # fmt: skip
def test_ldmatrix_phase_wavefronts(row_bytes, swizzle, wavefronts):
    assert pitfalls.ldmatrix_wavefronts(row_bytes, swizzle) == wavefronts


@pytest.mark.parametrize("row_bytes", [64, 128])
def test_the_swizzle_permutes_chunks_within_each_row(row_bytes):
    """v2's swizzle moves a chunk only within its own row: every row's chunks land on that row's bytes."""
    chunks = row_bytes // 16
    for row in range(16):
        offsets = sorted(pitfalls.tile_offset(row, c, row_bytes, True) for c in range(chunks))
        assert offsets == [row * row_bytes + 16 * c for c in range(chunks)]


def test_fp32_accumulation_errs_little_in_any_order_and_fp16_much():
    errors = pitfalls.accumulation_errors(4096, dots=64)
    fp32 = [e["max_err"] for way, e in errors.items() if way.startswith("fp32")]
    assert max(fp32) < 1e-4 and errors["fp16, k in order"]["max_err"] > 100 * max(fp32)
    assert errors["fp32, pairwise"]["max_err"] <= errors["fp32, k in order"]["max_err"]
    assert all(e["mean_err"] <= e["max_err"] for e in errors.values())


def test_occupancy_of_the_compiled_v3_and_v4():
    """From the compiled kernels' threads, registers and shared memory (dynamic, as exported, and static):
    two v3 CTAs fit an SM, one v4 (its 4 stages of 48 KB); and the arithmetic of the model itself."""
    for stage, ctas in (("v3_wgmma_tma", 2), ("v4_pipeline_swizzle", 1)):
        report = compiled(stage, launcher_defines(stage, False))
        facts = report.launch_facts()
        smem = facts.smem_bytes + report.static_smem_bytes
        assert pitfalls.ctas_per_sm(facts.threads, report.registers, smem)["ctas"] == ctas, (stage, facts)
    assert pitfalls.ctas_per_sm(256, 90, 66560)["by_smem"] == 3
