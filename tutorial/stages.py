"""The six stages by name, in order, how to load their launchers, and the baseline's name."""

from __future__ import annotations

import importlib
from types import ModuleType

from deepgemm.dtypes import dtype_defines, input_dtype

STAGES = (
    "v0_naive",
    "v1_tiled",
    "v2_mma_sync",
    "v3_wgmma_tma",
    "v4_pipeline_swizzle",
    "v5_fused",
)
CUBLAS = "cublas"  # the baseline, measured and profiled like a stage: cuBLAS through CuPy's a @ b


def stage_name(short_or_full: str) -> str:
    """'v3' or 'v3_wgmma_tma' -> 'v3_wgmma_tma'; ValueError for anything else."""
    for stage in STAGES:
        if short_or_full in (stage, stage.split("_", 1)[0]):
            return stage
    raise ValueError(f"unknown stage {short_or_full!r}; the stages are {', '.join(STAGES)}")


def parse_stages(spec: str) -> list[str]:
    """A comma-separated list of stages ('v0,v2' or 'all')."""
    if spec == "all":
        return list(STAGES)
    return [stage_name(part.strip()) for part in spec.split(",") if part.strip()]


def load(stage: str) -> ModuleType:
    """The stage's launch module (it has MIN_CC, DEFAULTS, plan and gemm)."""
    return importlib.import_module(f"stages.{stage_name(stage)}.launch")


def default_defines(stage: str, dtype_name: str = "fp16") -> dict[str, int]:
    """The defines the stage's launcher compiles its default config with, for one input dtype."""
    return {**load(stage).DEFAULTS.defines(), **dtype_defines(input_dtype(dtype_name))}
