"""Compiling stages without a GPU, shared by the compile and SASS tests (each compile runs once)."""

from __future__ import annotations

from functools import cache

from deepgemm import stages
from deepgemm.jit import CompileReport, compile_report, disassemble

TENSOR_CORE_STAGES = ("v3_wgmma_tma", "v4_pipeline_swizzle", "v5_fused")
PORTABLE_STAGES = ("v0_naive", "v1_tiled", "v2_mma_sync")  # also built for sm_80


def launcher_defines(stage: str, bf16: bool, **extra: int) -> tuple[tuple[str, int], ...]:
    """The defines the stage's launcher compiles with by default, as a hashable key."""
    defines = {**stages.default_defines(stage, "bf16" if bf16 else "fp16"), **extra}
    return tuple(sorted(defines.items()))


@cache
def compiled(stage: str, defines: tuple[tuple[str, int], ...], arch: str = "sm_90a") -> CompileReport:
    return compile_report(stage, dict(defines), arch)


@cache
def sass(stage: str, defines: tuple[tuple[str, int], ...], arch: str = "sm_90a") -> str:
    """The SASS of a compile, as cuobjdump prints it."""
    return disassemble(compiled(stage, defines, arch).cubin)


def block_threads(stage: str, report: CompileReport) -> int:
    """Threads per block as the launcher launches the default config: from the launcher's `threads` (v0-v2,
    whose block shape is a define) or from the LAUNCH_THREADS the kernel exports (v3-v5)."""
    launcher = stages.load(stage)
    if hasattr(launcher, "threads"):
        return launcher.threads(launcher.DEFAULTS)
    return report.launch_facts().threads


def normalised_sass(code: str, name: str) -> list[str]:
    """One function's SASS lines with runs of blanks collapsed (cuobjdump pads to the widest line)."""
    return [" ".join(line.split()) for line in function_sass(code, name).splitlines() if line.strip()]


def function_sass(code: str, name: str) -> str:
    """One function's part of a cubin's SASS (kernel.cu may hold several kernels)."""
    for part in code.split("Function : ")[1:]:
        if part.startswith(name) and not part[len(name)].isalnum() and part[len(name)] != "_":
            return part
    raise AssertionError(f"no function {name} in the SASS")
