"""The ablation suite without a GPU: every variant's knobs exist and compile for sm_90a, a switched-off
swizzle changes the shared-memory addressing in the SASS, and the knob parser refuses bad text."""

from __future__ import annotations

import re

import pytest
from gpu import stage_or_skip
from kernels import compiled, launcher_defines, sass

from deepgemm.config import GemmConfig, parse_defines
from tutorial import ablation, stages

CONFIG_VARIANTS = [
    (stage, variant)
    for stage, variants in ablation.ABLATIONS.items()
    for variant in variants
    if variant.knobs and variant.plan is None
]


def test_every_stage_has_an_ablation_whose_first_row_is_the_stage_as_shipped():
    assert set(ablation.ABLATIONS) == set(stages.STAGES)
    for stage, variants in ablation.ABLATIONS.items():
        assert variants[0].knobs == {} and variants[0].plan is None, stage
        assert len(variants) >= 2, f"{stage} switches nothing off"
        assert len({v.name for v in variants}) == len(variants), f"{stage} repeats a variant's name"


@pytest.mark.parametrize(("stage", "variant"), CONFIG_VARIANTS, ids=lambda x: getattr(x, "name", x))
def test_variant_knobs_are_knobs_of_the_stage_and_compile_without_spills(stage, variant):
    launcher = stages.load(stage)
    merged = variant.config().merged_over(launcher.DEFAULTS)  # raises on a knob the stage does not have
    for name, value in variant.knobs.items():
        assert merged.value(name) == value
    report = compiled(stage, launcher_defines(stage, False, **variant.knobs))
    assert report.spill_stores == 0 and report.spill_loads == 0, report.log


def test_v5_switches_off_each_of_its_techniques_in_the_lesson_kernel():
    """v5's rows: clusters of one, no wgmma batch in flight, row-major tile order, a CTA per tile, no TMA
    store, then bias + GELU fused and as separate kernels; every knob one the trimmed v5 has."""
    v5 = ablation.ABLATIONS["v5_fused"]
    assert [v.knobs for v in v5 if v.plan is None] == [
        {}, {"CLUSTER_M": 1}, {"WGMMA_IN_FLIGHT": 0}, {"GROUP_M": 1}, {"TMA_STORE": 0}
    ]  # fmt: skip
    planned = [v.plan for v in v5 if v.plan is not None]
    assert planned == [ablation.one_cta_per_tile, ablation.fused_epilogue, ablation.separate_epilogue]
    assert [v.epilogue for v in v5 if v.plan is not None] == [False, True, True]
    launcher = stages.load("v5_fused")
    assert ablation.GELU_TANH in launcher.STAGE_ACTIVATIONS  # what v5's fused epilogue takes
    assert launcher.epilogue_defines(True, ablation.GELU_TANH)["HAS_BIAS"] == 1


def test_one_cta_per_tile_replaces_v5_s_persistent_grid_with_every_output_tile(monkeypatch):
    """The variant's grid from v5's plan as it ships: a CTA for every 128 x 256 tile, clusters padded whole."""
    import dataclasses
    import types

    import numpy as np

    @dataclasses.dataclass(frozen=True)
    class Launch:
        grid: tuple[int, ...]

    v5 = stages.load("v5_fused")
    planned = []
    fake = types.SimpleNamespace(DEFAULTS=v5.DEFAULTS, plan=lambda a, b: planned.append((a, b)) or Launch((66,)))
    monkeypatch.setattr(ablation.stages, "load", lambda stage: fake)
    for (m, n), grid in (((4096, 4096), 32 * 16), ((300, 520), 4 * 3)):  # M tiles rounded up to clusters of 2
        a, b = np.empty((m, 64)), np.empty((64, n))
        assert ablation.one_cta_per_tile(a, b, None).grid == (grid,)
        assert planned[-1][0] is a and planned[-1][1] is b


def _shared_stores(code: str) -> list[str]:
    return re.findall(r"\b(?:STS|LDGSTS|LDSM)[.\w]*", code)


@pytest.mark.parametrize("stage", ["v1_tiled", "v2_mma_sync"])
def test_smem_swizzle_off_changes_the_addresses_not_the_instructions(stage):
    """SMEM_SWIZZLE=0 keeps the same shared-memory instructions (the same work), at other addresses."""
    shipped = sass(stage, launcher_defines(stage, False))
    unswizzled = sass(stage, launcher_defines(stage, False, SMEM_SWIZZLE=0))
    assert sorted(_shared_stores(shipped)) == sorted(_shared_stores(unswizzled))
    assert shipped != unswizzled


def test_knobs_parse_into_a_config_and_bad_text_is_refused():
    knobs = parse_defines("num_stages=2, SMEM_SWIZZLE=0")
    assert knobs == {"NUM_STAGES": 2, "SMEM_SWIZZLE": 0}
    assert GemmConfig.from_defines(knobs) == GemmConfig(num_stages=2, extra={"SMEM_SWIZZLE": 0})
    assert ablation.knobs_text(knobs) == "NUM_STAGES=2,SMEM_SWIZZLE=0"
    assert parse_defines("") == {}
    for bad in ("NUM_STAGES", "NUM_STAGES=two", "=2"):
        with pytest.raises(ValueError, match="NAME=INTEGER"):
            parse_defines(bad)


def test_the_ablation_suite_refuses_a_shape_that_is_not_a_cube():
    from tutorial.cli import run_suite

    with pytest.raises(ValueError, match="M = N = K, not 128x256x512"):
        run_suite("ablation", ["v1_tiled"], (128, 256, 512), "fp16", 0.0)


@pytest.mark.gpu
@pytest.mark.parametrize("stage", list(ablation.ABLATIONS))
def test_every_ablation_variant_computes_the_product_at_tails(stage):
    """Each variant, switched off as in the suite, is still a correct GEMM (its own reference for the
    epilogue rows) at a shape with tails in every dimension: the timings compare right answers."""
    from tutorial.bench import Workload
    from tutorial.check import verify

    stage_or_skip(stage)
    plain = Workload.make(300, 520, 260, "fp16", seed=5)
    fused = Workload.make(300, 520, 260, "fp16", seed=5, bias=True, activation=ablation.GELU_TANH)
    for variant in ablation.ABLATIONS[stage]:
        work = fused if variant.epilogue else plain
        launch = ablation.launches(stage, variant, work)[0]
        stats = verify(launch, work.expected, getattr(launch, "out", None))
        assert stats.passed, f"{variant.name}: {stats.summary()}"


def test_the_notebook_table_sets_a_live_run_beside_the_record():
    from tutorial.tables import ablation_table

    def row(name, us, stage="v4_pipeline_swizzle", dtype="fp16"):
        return {"ablation": name, "ablated_stage": stage, "dtype": dtype, "us": us, "x_shipped": 231.0 / us}

    recorded = [row("shipped", 231.0), row("2 stages", 257.0), row("shipped", 99.0, dtype="bf16")]
    live = [row("2 stages", 260.0), row("only live", 240.0), row("shipped", 1.0, stage="v5_fused")]
    table = ablation_table(recorded, "v4_pipeline_swizzle", "fp16", live)
    assert [t["ablation"] for t in table] == ["shipped", "2 stages", "only live"]
    assert table[0]["us"] == 231.0 and table[0]["live_us"] is None
    assert table[1]["live_us"] == 260.0 and table[2]["us"] is None and table[2]["live_us"] == 240.0


def test_v4_without_a_swizzle_loads_eight_boxes_per_operand():
    """BOX_K=8: eight 16-byte-wide TMA loads per operand per k-tile where the shipped kernel issues one."""
    shipped = sass("v4_pipeline_swizzle", launcher_defines("v4_pipeline_swizzle", False))
    plain = sass("v4_pipeline_swizzle", launcher_defines("v4_pipeline_swizzle", False, BOX_K=8))
    assert shipped.count("UTMALDG") == 2 and plain.count("UTMALDG") == 16


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_v5_storing_c_from_registers_runs_the_fused_epilogue_at_tails(dtype):
    """The ablation's pointer store with bias and GELU, at tails in every dimension, in both dtypes."""
    from tutorial.bench import Workload
    from tutorial.check import verify

    v5 = stage_or_skip("v5_fused")
    work = Workload.make(300, 520, 260, dtype, seed=7, bias=True, activation=ablation.GELU_TANH)
    a, b = work.problems[0]
    launch = v5.plan(a, b, bias=work.bias, activation=ablation.GELU_TANH, config=GemmConfig(extra={"TMA_STORE": 0}))
    stats = verify(launch, work.expected, launch.out)
    assert stats.passed, stats.summary()
