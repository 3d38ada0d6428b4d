"""Ablations: each stage with the technique it adds switched off, verified, timed beside cuBLAS and profiled.

A stage's README says what its technique buys; an ablation measures it. Each variant is the stage as it
ships with one thing changed: a compile-time knob (`GemmConfig`, e.g. v2's `SMEM_SWIZZLE=0`), a knob that
applies a diff to the source (v5's `TMA_STORE=0`, `tutorial.stages.SOURCE_ABLATIONS`), or for v5 a different
plan (one CTA per tile instead of the persistent grid, bias and GELU as separate kernels). The
first variant is the stage as shipped; every row carries its time relative to it (`x_shipped`) and to cuBLAS
in the same run, and, where ncu is on the PATH and the variant is a config, the profile's bank conflicts
and stalls, so the counter the technique moves is seen to move.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cupy

from deepgemm.config import GemmConfig
from deepgemm.model import cluster_tiles
from tutorial import stages
from tutorial.bench import Workload, cublas_row, measure
from tutorial.profile import SHARED_OPS, profile_stage, top_stalls

GELU_TANH = "gelu_tanh"
DEFAULT_SIZE = 4096  # M = N = K of every stage's ablation but v0's
SIZES = {"v0_naive": 2048}  # v0 takes 0.27 s at 4096^3, its uncoalesced variant several times that


@dataclass(frozen=True)
class Variant:
    """One row of a stage's ablation: a config over the stage's defaults, or a plan of its own."""

    name: str
    knobs: dict[str, int] = dataclasses.field(default_factory=dict)  # define name -> value
    plan: Callable[[Any, Any, Workload], Callable[[], object]] | None = None  # (a, b, workload) -> launch
    epilogue: bool = False  # measured against act(a @ b + bias) rather than a @ b

    def config(self) -> GemmConfig:
        return GemmConfig.from_defines(self.knobs)


def knobs_text(knobs: dict[str, int]) -> str:
    return ",".join(f"{name}={value}" for name, value in knobs.items())


def v5_with_tiles(a: Any, b: Any) -> tuple[Any, int, int]:
    """v5's plan as shipped, its cluster tiles and CTAs per cluster: what a different grid is made from."""
    v5 = stages.load("v5_fused")
    cfg = v5.DEFAULTS
    cluster_m = cfg.value("CLUSTER_M")
    tiles = cluster_tiles(a.shape[0], b.shape[1], cfg.value("BLOCK_M"), cfg.value("BLOCK_N"), cluster_m)
    return v5.plan(a, b), tiles, cluster_m


def one_cta_per_tile(a: Any, b: Any, _work: Workload) -> Callable[[], object]:
    """v5 not persistent: a CTA per tile (its cluster's share of them), so each loops once and exits."""
    launch, tiles, cluster_m = v5_with_tiles(a, b)
    return dataclasses.replace(launch, grid=(tiles * cluster_m,))


def fused_epilogue(a: Any, b: Any, work: Workload) -> Callable[[], object]:
    return stages.load("v5_fused").plan(a, b, bias=work.bias, activation=GELU_TANH)


ADD_BIAS = cupy.ElementwiseKernel("T x, float32 bias", "T y", "y = (T)((float)x + bias)", "deepgemm_add_bias")
GELU = cupy.ElementwiseKernel(
    "T x", "T y", "float v = (float)x; y = (T)(0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))))",
    "deepgemm_gelu_tanh",
)  # fmt: skip


@dataclass
class SeparateEpilogue:
    """v5's plain GEMM, then bias and GELU(tanh) as two more kernels, each reading and writing C in HBM:
    what a framework runs where the epilogue is not fused."""

    gemm: Any
    bias: cupy.ndarray
    out: cupy.ndarray

    def __call__(self) -> cupy.ndarray:
        c = self.gemm()
        ADD_BIAS(c, self.bias, c)
        return GELU(c, self.out)


def separate_epilogue(a: Any, b: Any, work: Workload) -> Callable[[], object]:
    gemm = stages.load("v5_fused").plan(a, b)
    return SeparateEpilogue(gemm, work.bias, cupy.empty_like(gemm.out))


ABLATIONS: dict[str, tuple[Variant, ...]] = {
    "v0_naive": (
        Variant("as shipped: a warp along N (32 x 8 threads)"),
        Variant("a warp down M (1 x 256 threads): uncoalesced", {"BLOCK_X": 1, "BLOCK_Y": 256}),
    ),
    "v1_tiled": (
        Variant("as shipped: swizzled shared-memory stores"),
        Variant("stores unswizzled", {"SMEM_SWIZZLE": 0}),
    ),
    "v2_mma_sync": (
        Variant("as shipped: swizzled chunks, 4 stages"),
        Variant("chunks unswizzled", {"SMEM_SWIZZLE": 0}),
        Variant("2 stages (one k-tile in flight)", {"NUM_STAGES": 2}),
    ),
    "v3_wgmma_tma": (
        Variant("as shipped: 2 stages"),
        Variant("1 stage: TMA and wgmma take turns", {"NUM_STAGES": 1}),
    ),
    "v4_pipeline_swizzle": (
        Variant("as shipped: 4 stages, GROUP_M 8"),
        Variant("2 stages", {"NUM_STAGES": 2}),
        Variant("GROUP_M 1 (row-major tile order)", {"GROUP_M": 1}),
        Variant("64-byte swizzle (two boxes a k-tile)", {"BOX_K": 32}),
        Variant("no swizzle (eight 16-byte boxes a k-tile)", {"BOX_K": 8}),
    ),
    "v5_fused": (
        Variant("as shipped: persistent, clusters of 2, GROUP_M 16"),
        Variant("no multicast (clusters of 1)", {"CLUSTER_M": 1}),
        Variant("no wgmma batch left in flight ([3] off)", {"WGMMA_IN_FLIGHT": 0}),
        Variant("GROUP_M 1 (row-major tile order)", {"GROUP_M": 1}),
        Variant("not persistent: a CTA per tile", plan=one_cta_per_tile),
        Variant("C from registers, no TMA store ([4] off)", {"TMA_STORE": 0}),
        Variant("bias + GELU fused in the epilogue", plan=fused_epilogue, epilogue=True),
        Variant("bias + GELU as two more kernels", plan=separate_epilogue, epilogue=True),
    ),
}

PROFILE_FIELDS = (
    "duration_ns", "bank_conflicts_ld", "bank_conflicts_st", "bank_conflicts_ldsm", "bank_conflicts_gmma",
    "bank_conflicts_ldgsts",
    "wavefronts_shared_ld", "wavefronts_shared_st", "wavefronts_shared_gmma", "dram_throughput_pct", "l2_hit_rate_pct",
    "tensor_pipe_active_pct",
)  # fmt: skip


def size_of(stage: str) -> int:
    return SIZES.get(stage, DEFAULT_SIZE)


def launches(stage: str, variant: Variant, work: Workload) -> list[Callable[[], object]]:
    """The variant's launch on each of the workload's input sets."""
    if variant.plan is not None:
        return [variant.plan(a, b, work) for a, b in work.problems]
    launcher = stages.load(stage)
    return [launcher.plan(a, b, config=variant.config()) for a, b in work.problems]


def profile_fields(stage: str, variant: Variant, m: int, n: int, k: int, dtype: str) -> dict[str, Any]:
    """The variant's ncu counters (None where it is a plan of its own or ncu is missing)."""
    if variant.plan is not None or shutil.which("ncu") is None:
        return {}
    row = profile_stage(stage, m, n, k, dtype, knobs=knobs_text(variant.knobs))
    stalls = ", ".join(f"{name} {value:.2f}" for name, value in top_stalls(row, 3))
    counts = (row.get(f"bank_conflicts_{op}") for op in (*SHARED_OPS, "ldsm"))
    counted = [c for c in counts if isinstance(c, float)]
    total = sum(counted) if counted else None
    return {**{f: row.get(f) for f in PROFILE_FIELDS}, "bank_conflicts": total, "top_stalls": stalls}


def run(
    stage: str,
    dtype: str,
    *,
    size: int | None = None,
    settle_s: float = 1.0,
    profile: bool = True,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """A stage's ablation at M = N = K = `size` (the stage's default size): cuBLAS's row, then one row per
    variant, each verified before it is timed, with `x_shipped` and `x_cublas`, and its profile."""
    n = size or size_of(stage)
    plain = Workload.make(n, n, n, dtype)
    fused = Workload.make(n, n, n, dtype, bias=True, activation=GELU_TANH)
    baseline = cublas_row(plain, settle_s, log)
    baseline.update(ablation="cuBLAS", ablated_stage=stage, us=baseline["ms"] * 1e3)
    rows = []
    for variant in ABLATIONS[stage]:
        work = fused if variant.epilogue else plain
        row = measure(stage, work, launches(stage, variant, work), settle_s=settle_s)
        row.update(ablation=variant.name, ablated_stage=stage, knobs=knobs_text(variant.knobs), us=row["ms"] * 1e3)
        if profile:
            row.update(profile_fields(stage, variant, n, n, n, dtype))
        row["x_shipped"] = rows[0]["ms"] / row["ms"] if rows else 1.0
        row["x_cublas"] = baseline["ms"] / row["ms"]
        verdict = "ok" if row["passed"] else "FAILED"
        log(f"  {variant.name:<48} {row['us']:9.1f} us  x shipped {row['x_shipped']:.2f}  {verdict}")
        rows.append(row)
    return [*rows, baseline]
