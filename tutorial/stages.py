"""The six stages by name, in order, where their kernels are, how to load their launchers; the library's
kernels as two more (`LIBRARY`, and `LIBRARY_SM80` for GPUs without wgmma), and the baseline's name; and the
one rule for which of them this GPU runs (`runs_here`), which the commands, the notebooks and the GPU tests ask."""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from types import ModuleType

import cupy

from deepgemm import jit, plan_sm80
from deepgemm.dtypes import dtype_defines, input_dtype
from deepgemm.operands import SM90A, capability_label, compute_capability, device_name, supports
from deepgemm.plan import kernel_defines
from tutorial.patch import apply_diff

STAGES_DIR = Path(__file__).resolve().parent.parent / "stages"

STAGES = (
    "v0_naive",
    "v1_tiled",
    "v2_mma_sync",
    "v3_wgmma_tma",
    "v4_pipeline_swizzle",
    "v5_fused",
)
CUBLAS = "cublas"  # the baseline, measured and profiled like a stage: cuBLAS through CuPy's a @ b
LIBRARY = "library"  # deepgemm.gemm and its kernel (deepgemm/kernels/gemm_sm90.cu), grown from v5
LIBRARY_SM80 = "library_sm80"  # the library's kernel without wgmma (deepgemm/kernels/gemm_sm80.cu), grown from v2
LIBRARIES = (LIBRARY, LIBRARY_SM80)
PARENT = {LIBRARY: STAGES[-1], LIBRARY_SM80: "v2_mma_sync"}  # the stage each library kernel is grown from
# Ablations that change a stage's code, not a define: (stage, knob, value) -> a diff in the stage's folder,
# applied where a config sets the knob to that value (the kernel itself reads no such define).
SOURCE_ABLATIONS = {("v5_fused", "TMA_STORE", 0): "store_from_registers.diff"}


def stage_name(short_or_full: str) -> str:
    """'v3' or 'v3_wgmma_tma' -> 'v3_wgmma_tma', 'library' -> 'library', 'library_sm80' -> 'library_sm80';
    ValueError for anything else."""
    if short_or_full in LIBRARIES:
        return short_or_full
    for stage in STAGES:
        if short_or_full in (stage, stage.split("_", 1)[0]):
            return stage
    raise ValueError(
        f"unknown stage {short_or_full!r}; the stages are {', '.join(STAGES)} (and {', '.join(LIBRARIES)})"
    )


def parse_stages(spec: str) -> list[str]:
    """A comma-separated list of stages ('v0,v2' or 'all')."""
    if spec == "all":
        return list(STAGES)
    return [stage_name(part.strip()) for part in spec.split(",") if part.strip()]


def load(stage: str) -> ModuleType:
    """The stage's launch module (it has MIN_CC, DEFAULTS, plan and gemm); the library's are tutorial.library
    and tutorial.library_sm80."""
    name = stage_name(stage)
    return importlib.import_module(f"tutorial.{name}" if name in LIBRARIES else f"stages.{name}.launch")


def kernel_path(stage: str, defines: Mapping[str, int] | None = None) -> Path:
    """The stage's kernel.cu, or one of the library's kernels; where `defines` ask for one of the stage's
    SOURCE_ABLATIONS, a copy with its diff applied."""
    name = stage_name(stage)
    if name in LIBRARIES:
        return jit.LIBRARY_KERNEL if name == LIBRARY else plan_sm80.KERNEL
    for (patched, knob, value), diff in SOURCE_ABLATIONS.items():
        if patched == name and (defines or {}).get(knob) == value:
            return ablation_source(name, diff)
    return STAGES_DIR / name / "kernel.cu"


def source_knobs(stage: str) -> frozenset[str]:
    """The knobs that select one of the stage's SOURCE_ABLATIONS."""
    return frozenset(knob for patched, knob, _ in SOURCE_ABLATIONS if patched == stage_name(stage))


@cache
def ablation_source(stage: str, diff: str) -> Path:
    """The stage's kernel.cu with the diff applied, written once per process into a folder of its own that
    lives as long as the process (the JIT caches compiles by path)."""
    folder = Path(_ablation_folder().name)
    path = folder / f"{stage}_{Path(diff).stem}.cu"
    kernel = STAGES_DIR / stage / "kernel.cu"
    path.write_text(apply_diff(kernel.read_text(), (kernel.parent / diff).read_text()))
    return path


@cache
def _ablation_folder() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="deepgemm-ablations-")


def compiled_source(stage: str, defines: Mapping[str, int]) -> tuple[Path, dict[str, int]]:
    """What to compile for these defines: the file (`kernel_path`) and the defines it reads, a knob that picks
    one of SOURCE_ABLATIONS left out."""
    knobs = source_knobs(stage)
    return kernel_path(stage, defines), {name: value for name, value in defines.items() if name not in knobs}


def get_kernel(stage: str, defines: Mapping[str, int]) -> cupy.RawKernel:
    """The stage's kernel compiled for the current GPU with these defines (`deepgemm.jit`, cached)."""
    return jit.get_kernel(*compiled_source(stage, defines))


def launch_facts(stage: str, defines: Mapping[str, int]) -> jit.LaunchFacts:
    """The launch facts the stage's kernel exports, compiled with these defines."""
    return jit.launch_facts(*compiled_source(stage, defines))


def compile_report(
    stage: str, defines: Mapping[str, int], arch: str = "sm_90a", options: tuple[str, ...] = ()
) -> jit.CompileReport:
    """The stage compiled without a GPU (NVRTC), with ptxas's report: for the tests and for reading SASS."""
    path, read = compiled_source(stage, defines)
    return jit.compile_file_report(path, read, arch, options, name=stage_name(stage))


def default_defines(stage: str, dtype_name: str = "fp16") -> dict[str, int]:
    """The defines the stage's launcher compiles its default config with, for one input dtype."""
    defaults = load(stage).DEFAULTS
    host_knobs = {LIBRARY: kernel_defines, LIBRARY_SM80: plan_sm80.kernel_defines}.get(stage_name(stage))
    knobs = host_knobs(defaults) if host_knobs else defaults.defines()
    return {**knobs, **dtype_defines(input_dtype(dtype_name))}


def runs_here(stage: str) -> bool:
    """Whether the current GPU runs the stage, by the capability the code goes by (DEEPGEMM_CC where set): a
    stage of MIN_CC 9.0 is sm_90a code (wgmma, setmaxnreg) and runs on Hopper alone, the others on MIN_CC and
    newer; the library's sm_90a kernel (`LIBRARY`) wherever `deepgemm.gemm` runs it, which is Hopper unless
    DEEPGEMM_FORCE_SM80=1 sends the call to the sm_80 kernel."""
    name = stage_name(stage)
    if name == LIBRARY:
        return not plan_sm80.runs_on(current_device())
    min_cc = load(name).MIN_CC
    return supports(compute_capability(), min_cc, exact=min_cc == SM90A)


def missing_here(stage_list: Sequence[str]) -> list[str]:
    """The stages of `stage_list` the current GPU cannot run (`runs_here`), in order."""
    return [stage for stage in stage_list if not runs_here(stage)]


def requirement(stage: str) -> str:
    """What the stage needs of a GPU, as `unavailable_line` names it."""
    min_cc = load(stage).MIN_CC
    return "sm_90a (Hopper)" if min_cc == SM90A else f"compute capability {min_cc[0]}.{min_cc[1]} or newer"


def unavailable_line(missing: Sequence[str], outcome: str) -> str:
    """The one line that says why stages are not run here, and what is shown instead (`outcome`), e.g.
    "v3, v4, v5 need sm_90a (Hopper); this GPU (NVIDIA GeForce RTX 4090) is 8.9: showing the NVIDIA H200 record"."""
    needs: dict[str, list[str]] = {}
    for stage in missing:
        short = stage if stage in LIBRARIES else stage.split("_", 1)[0]
        needs.setdefault(requirement(stage), []).append(short)
    why = "; ".join(f"{', '.join(names)} need{'s' if len(names) == 1 else ''} {need}" for need, names in needs.items())
    return f"{why}; this GPU ({device_name(current_device())}) is {capability_label()}: {outcome}"


def current_device() -> int:
    """CuPy's current GPU, the one the stages launch on."""
    return cupy.cuda.Device().id
