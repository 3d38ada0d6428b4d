"""The kernel probe's patched kernels: every patch applies once to the shipped kernel, a missing anchor is
named, and both variants compile for sm_90a (ptxas) in the configurations the probe runs."""

import pytest

from deepgemm.jit import LIBRARY_KERNEL, compile_file_report
from lab import kernel_probe


def test_a_patch_whose_anchor_is_missing_or_repeated_is_refused_by_name():
    with pytest.raises(ValueError, match="occurs 0 times"):
        kernel_probe.patched("int x;", (("float y;", "double y;"),))
    with pytest.raises(ValueError, match="occurs 2 times"):
        kernel_probe.patched("a a", (("a", "b"),))


@pytest.mark.parametrize("variant", sorted(kernel_probe.VARIANTS))
def test_each_variant_patches_the_shipped_kernel(variant):
    source = kernel_probe.patched(LIBRARY_KERNEL.read_text(), kernel_probe.VARIANTS[variant])
    assert source != LIBRARY_KERNEL.read_text()
    marker = {
        "hints": "L2::cache_hint",
        "two_parts": "last - first == 1",
        "swap_pointer": "C_BY_POINTER SWAP_AB\n",
        "read_wait": "bulk_wait_group_read<0>();",
        "stamps": "%%globaltimer",
        "early_trigger": "griddepcontrol_wait();\n    griddepcontrol_launch_dependents();",
        "early_prefetch": "if (threadIdx.x == 0) {\n        prefetch_tensormap(&tma_a);",
        "two_ctas": "CONSUMER_REGS = 216;",
        "l2_prefetch": "#define LAB_PREFETCH_K_TILES (NUM_STAGES)\n",
        "l2_prefetch_2x": "#define LAB_PREFETCH_K_TILES (2 * NUM_STAGES)\n",
        "l2_prefetch_early": "griddepcontrol_wait();\n    griddepcontrol_launch_dependents();",
    }[variant]
    assert marker in source


@pytest.mark.parametrize("variant", sorted(set(kernel_probe.VARIANTS) - {"two_ctas"}))  # its own tiles: below
@pytest.mark.parametrize("defines", [
    {"BLOCK_M": 128, "BLOCK_N": 224, "NUM_STAGES": 4, "CLUSTER_M": 2},
    {"BLOCK_M": 256, "BLOCK_N": 8, "NUM_STAGES": 6, "CLUSTER_M": 1, "SWAP_AB": 1, "FIXED_M": 28672, "FIXED_K": 4096},
    {"BLOCK_M": 64, "BLOCK_N": 96, "NUM_STAGES": 10, "CLUSTER_M": 2, "PARTIAL_TILES": 1},
    {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 6, "CLUSTER_M": 1, "CLUSTER_N": 2, "SWAP_AB": 1, "A_MN_MAJOR": 1,
     "B_MN_MAJOR": 1},
])  # fmt: skip
def test_each_variant_compiles_for_sm90a_without_spilling(variant, defines):
    report = compile_file_report(kernel_probe.variant_kernel(variant), defines)  # RuntimeError where it fails
    assert report.registers > 0 and report.spill_stores == report.spill_loads == report.stack_bytes == 0


@pytest.mark.parametrize("block_n", [96, 200, 128, 8])
def test_swap_pointer_stores_every_swapped_tile_by_pointer_where_the_shipped_kernel_uses_boxes(block_n):
    tile = {"BLOCK_M": 64, "BLOCK_N": block_n, "NUM_STAGES": 4, "CLUSTER_M": 1, "SWAP_AB": 1}
    assert compile_file_report(LIBRARY_KERNEL, tile).launch_facts().store_box is not None
    assert compile_file_report(kernel_probe.variant_kernel("swap_pointer"), tile).launch_facts().store_box is None


def test_without_a_gpu_a_probe_record_shows_each_comparison(capsys):
    from lab import cli

    assert cli.main(["show", "kernel_probe_swap_pointer"]) == 0
    shown = capsys.readouterr().out
    assert "fp16 96x4096x4096 swap m64 n96 c1 s1 st10 pdl jit" in shown and "(x 0.918)" in shown
    assert shown.count("identical True") == 6


def test_early_prefetch_fetches_the_maps_before_the_barriers_and_the_wait():
    """The variant's tensor-map prefetches (UTMACCTL.PF) come first in SASS, ahead of the barriers' init
    (SYNCS.EXCH) and griddepcontrol.wait (ACQBULK); the shipped kernel's come after the wait."""
    from tutorial.sass import disassemble

    tile = {"BLOCK_M": 256, "BLOCK_N": 8, "NUM_STAGES": 6, "CLUSTER_M": 1, "SWAP_AB": 1, "FIXED_M": 28672,
            "FIXED_K": 4096}  # fmt: skip

    def first_of(path):
        lines = disassemble(compile_file_report(path, tile).cubin).splitlines()
        return lambda mnemonic: next(i for i, line in enumerate(lines) if mnemonic in line)

    early, shipped = first_of(kernel_probe.variant_kernel("early_prefetch")), first_of(LIBRARY_KERNEL)
    assert early("UTMACCTL.PF") < early("SYNCS.EXCH") < early("ACQBULK")
    assert shipped("ACQBULK") < shipped("UTMACCTL.PF")


@pytest.mark.parametrize(("variant", "k_tiles"), [("l2_prefetch", 6), ("l2_prefetch_2x", 12), ("l2_prefetch_early", 6)])
def test_l2_prefetch_prefetches_the_first_k_tiles_of_both_operands_before_the_barriers_and_the_wait(variant, k_tiles):
    """Thread 0's L2 prefetches (UTMAPF.L2.2D), one per operand and k-tile of the first unit (1 x 28672 x 4096's
    256 x 8 tile, 6 stages, K compiled in: the loop unrolled), come before the barriers' init (SYNCS.EXCH) and
    griddepcontrol.wait (ACQBULK); the shipped kernel has none."""
    from tutorial.sass import disassemble

    tile = {"BLOCK_M": 256, "BLOCK_N": 8, "NUM_STAGES": 6, "CLUSTER_M": 1, "SWAP_AB": 1, "FIXED_M": 28672,
            "FIXED_K": 4096}  # fmt: skip
    lines = disassemble(compile_file_report(kernel_probe.variant_kernel(variant), tile).cubin).splitlines()
    prefetches = [i for i, line in enumerate(lines) if "UTMAPF.L2.2D" in line]
    first = {name: next(i for i, line in enumerate(lines) if name in line) for name in ("SYNCS.EXCH", "ACQBULK")}
    assert len(prefetches) == 2 * k_tiles
    assert max(prefetches) < first["SYNCS.EXCH"] < first["ACQBULK"]
    assert "UTMAPF" not in disassemble(compile_file_report(LIBRARY_KERNEL, tile).cubin)


def test_l2_prefetch_is_timed_with_pdl_beside_the_shipped_kernel_and_itself_without_it():
    variants = {"early_trigger", "l2_prefetch", "l2_prefetch_2x", "l2_prefetch_early"}
    assert variants <= set(kernel_probe.PDL_VARIANTS) and variants <= set(kernel_probe.COMPARED)
    assert set(kernel_probe.CHANGED_WITHOUT_PDL) == {"l2_prefetch", "l2_prefetch_2x"}  # a trigger needs PDL
    timed = {"other": "L2 prefetch", "config": "swap m64 n8 c1 s1 st16 pdl jit", "graph_us": 10.1,
             "other_graph_us": 9.0, "other_over_shipped": 10.1 / 9.0, "no_pdl_graph_us": 10.8,
             "other_no_pdl_graph_us": 10.9, "torch_graph_us": 12.6, "identical": True}  # fmt: skip
    row = {"dtype": "fp16", "m": 1, "n": 4096, "k": 4096, "config": "swap m64 n8 c1 s1 st16 jit", "l2_prefetch": timed}
    (line,) = kernel_probe.lines([row])
    assert "graph    10.10 us, L2 prefetch     9.00 (x 1.122), no PDL    10.80 (L2 prefetch    10.90)" in line


TWO_CTAS_TILE = {"BLOCK_M": 64, "BLOCK_N": 8, "CLUSTER_M": 1, "SWAP_AB": 1, "FIXED_M": 28672, "FIXED_K": 4096}


@pytest.mark.parametrize("block_n", [8, 16, 32])
def test_two_ctas_launches_within_half_an_sm_and_gives_the_consumer_216_registers(block_n):
    """Two CTAs an SM: 128 registers a thread at launch (2 x 256 threads x 128 = 65536), no spills, the stages
    and the barriers within 113 KB; in SASS the producer gives back to 40 registers and the consumer takes 216."""
    from tutorial.sass import disassemble

    report = compile_file_report(kernel_probe.variant_kernel("two_ctas"),
                                 {**TWO_CTAS_TILE, "BLOCK_N": block_n, "NUM_STAGES": 8})  # fmt: skip
    assert report.registers <= 128 and report.spill_stores == report.spill_loads == report.stack_bytes == 0
    assert report.launch_facts().threads == 256
    assert 2 * (report.launch_facts().smem_bytes + report.static_smem_bytes + 1024) <= 228 * 1024
    code = disassemble(report.cubin)
    assert "USETMAXREG.DEALLOC.CTAPOOL 0x28" in code and "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xd8" in code


@pytest.mark.parametrize(("defines", "message"), [
    ({**TWO_CTAS_TILE, "NUM_STAGES": 13}, "two CTAs fit an SM"),
    ({**TWO_CTAS_TILE, "BLOCK_M": 128, "NUM_STAGES": 4}, "one consumer warpgroup"),
    ({**TWO_CTAS_TILE, "CLUSTER_N": 2, "NUM_STAGES": 4}, "no cluster"),
])  # fmt: skip
def test_two_ctas_refuses_what_two_ctas_an_sm_cannot_hold(defines, message):
    with pytest.raises(RuntimeError, match=message):
        compile_file_report(kernel_probe.variant_kernel("two_ctas"), defines)


def test_two_ctas_grid_is_a_cta_per_tile_and_refuses_cut_tiles_and_clusters(monkeypatch):
    monkeypatch.setattr(kernel_probe, "max_active_clusters", lambda function, size, threads, smem: 264)
    path = kernel_probe.variant_kernel("two_ctas")
    tile = kernel_probe.heuristic.config_from_name("swap m64 n8 c1 s1 st12").merged_over(
        kernel_probe.library_plan.DEFAULTS
    )
    assert kernel_probe.one_tile_per_cta(path, 0, 28672, 1, 4096, tile, 0, 256, 113664) == (448, (0, 0))
    assert kernel_probe.RESIDENT[path] == 264
    for name in ("swap m64 n8 c1 s2 st12", "swap m64 n8 c1 sk1 st12", "swap m64 n8 c1x2 s1 st12"):
        cfg = kernel_probe.heuristic.config_from_name(name).merged_over(kernel_probe.library_plan.DEFAULTS)
        with pytest.raises(ValueError, match="whole tiles without a cluster"):
            kernel_probe.one_tile_per_cta(path, 0, 28672, 1, 4096, cfg, 0, 256, 113664)
