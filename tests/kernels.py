"""Compiling stages and the library's kernel without a GPU, shared by the compile and SASS tests (each compile
runs once per test process: the caches are in memory, so parallel test processes never share a file)."""

from __future__ import annotations

import re
from functools import cache

from deepgemm.jit import CompileReport
from tutorial import stages
from tutorial.sass import disassemble
from tutorial.stages import LIBRARY, compile_report, kernel_path

TENSOR_CORE_STAGES = ("v3_wgmma_tma", "v4_pipeline_swizzle", "v5_fused")
PORTABLE_STAGES = ("v0_naive", "v1_tiled", "v2_mma_sync")  # also built for sm_80
KERNELS = (*stages.STAGES, LIBRARY)  # every kernel.cu, and the library's gemm_sm90.cu


@cache
def kernel_knobs(stage: str) -> frozenset[str]:
    """The defines a kernel reads, each with a default of its own (`#ifndef NAME`), and the knobs that pick one
    of its ablation diffs (`stages.source_knobs`: v5's TMA_STORE)."""
    return frozenset(re.findall(r"^#ifndef (\w+)$", kernel_path(stage).read_text(), re.M)) | stages.source_knobs(stage)


def launcher_defines(stage: str, bf16: bool, **extra: int) -> tuple[tuple[str, int], ...]:
    """The defines the stage's launcher compiles with by default, as a hashable key. A knob the kernel does
    not read is refused: its build would silently be the default one (v5's lesson kernel has no SWAP_AB,
    the library's kernel no TMA_STORE)."""
    unknown = sorted(set(extra) - kernel_knobs(stage))
    if unknown:
        raise ValueError(f"{stage}'s kernel reads no {', '.join(unknown)}; it reads {sorted(kernel_knobs(stage))}")
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
    whose block shape is a define) or from the LAUNCH_THREADS the kernel exports (v3-v5, the library)."""
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


def autotune_builds() -> list[tuple[str, str, tuple[tuple[str, int], ...]]]:
    """Every (dtype, config) the autotune record chose, as (dtype, the config's fields as JSON, the library
    kernel's defines): the configs the package's table makes deepgemm.gemm run (with as many stages as fit),
    with the plain epilogue; a SHAPE_JIT config once per shape, with its weight's dimensions compiled in as
    the plan compiles them."""
    import json

    from deepgemm.heuristic import config_from_fields, kernel_dims, stages_that_fit
    from deepgemm.plan import kernel_defines, shape_defines
    from tutorial import results

    record = results.load("autotune")
    keyed = set()
    for r in record["rows"]:
        shape = (r["m"], r["n"], r["k"]) if r["config"].get("SHAPE_JIT") else None
        keyed.add((r["dtype"], json.dumps(r["config"], sort_keys=True), shape))
    builds = []
    for dtype, fields, shape in sorted(keyed, key=lambda t: (t[0], t[1], t[2] or ())):
        cfg = stages_that_fit(config_from_fields(json.loads(fields))).merged_over(stages.load(LIBRARY).DEFAULTS)
        knobs = kernel_defines(cfg)
        if shape is not None:
            swap = cfg.value("SWAP_AB") == 1
            knobs.update(shape_defines(cfg, swap, *kernel_dims(shape[0], shape[1], swap), shape[2]))
            fields = json.dumps({**json.loads(fields), "shape": list(shape)}, sort_keys=True)
        builds.append((dtype, fields, launcher_defines(LIBRARY, dtype == "bf16", **knobs)))
    return builds
