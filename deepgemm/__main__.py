"""python -m deepgemm: what the installed library has, and what it would run for a shape.

    python -m deepgemm                      the kernels, the autotune tables, the GPU (if any) and its kernel,
                                            and whether torch's calls run from C++ here (deepgemm.fast)
    python -m deepgemm 128 4096 4096 [bf16] the config gemm would run for M N K, and where it comes from

The tutorial's commands (benchmarks, profiles, notebooks) live in the repository: python -m tutorial.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import dataclass

from deepgemm import heuristic, heuristic_sm80, jit, plan_sm80
from deepgemm.config import GemmConfig
from deepgemm.driver import device_limits
from deepgemm.operands import capability_label, device_name

REFERENCE_GPU = ("NVIDIA H200", 132)  # what a shape is planned for where no GPU is here: the tables' GPU


@dataclass(frozen=True)
class Gpu:
    """The current GPU as the library sees it."""

    name: str
    sm_count: int
    smem_per_block: int
    capability: str  # as messages name it: "9.0", or "8.9 (DEEPGEMM_CC; really 9.0)"
    runs_sm80: bool  # whether deepgemm.gemm runs the sm_80 kernel here (`plan_sm80.runs_on`)

    @property
    def kernel(self) -> str:
        return (plan_sm80.KERNEL if self.runs_sm80 else jit.LIBRARY_KERNEL).name


def describe_gpu() -> Gpu | None:
    """The current GPU, or None where there is none. A malformed DEEPGEMM_CC is raised, not taken for no GPU."""
    try:
        import cupy  # the library's one hard GPU dependency; absent or without a GPU, nothing to describe

        if cupy.cuda.runtime.getDeviceCount() == 0:
            return None
        device = cupy.cuda.Device().id
        limits = device_limits(device)
        return Gpu(device_name(device), limits.sm_count, limits.smem_per_block_optin, capability_label(),
                   plan_sm80.runs_on(device))  # fmt: skip
    except ValueError:
        raise
    except Exception:  # no driver, no CuPy build for this CUDA: the library says so on a call
        return None


def shape_line(m: int, n: int, k: int, dtype: str, gpu: Gpu | None) -> str:
    """The config gemm would run for M x N x K on `gpu` (the tables' GPU where None), and where it comes from."""
    if gpu is not None and gpu.runs_sm80:
        cfg = heuristic_sm80.choose(m, n, k, gpu.sm_count, gpu.smem_per_block)
        return f"{m} x {n} x {k} {dtype} on {gpu.name}: {defines_label(cfg)} (from the sm_80 heuristic)"
    name, sm_count = (gpu.name, gpu.sm_count) if gpu else REFERENCE_GPU
    cfg, source = heuristic.pick_config(m, n, k, dtype, name, sm_count, b_mn_major=False)
    return f"{m} x {n} x {k} {dtype} on {name}: {heuristic.config_name(cfg)} (from the {source})"


def cpp_call_line() -> str:
    """Whether torch's calls can run from C++ here (deepgemm.fast): built, not yet, off, or no torch. Builds
    nothing."""
    if importlib.util.find_spec("torch") is None:
        return "C++ call path: torch is not installed (the path serves torch's calls)"
    import torch  # noqa: F401 - deepgemm.fast is a torch module

    import deepgemm.fast as fast

    if not fast.enabled():
        return f"C++ call path: off ({fast.ENV}=0): every call runs through Python"
    where = fast.library_file()
    if where.is_file():
        return f"C++ call path: built, in {where.parent}"
    return f"C++ call path: not built yet; the first torch call on Hopper builds it in {where.parent} (about a minute)"


def defines_label(cfg: GemmConfig) -> str:
    """A config as its kernel's defines: 'BLOCK_M=16 BLOCK_N=64 ...'."""
    return " ".join(f"{name}={value}" for name, value in cfg.defines().items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deepgemm", description=__doc__.splitlines()[0])
    parser.add_argument("shape", nargs="*", type=int, help="M N K: the config gemm would run for it")
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    args = parser.parse_args(argv)
    gpu = describe_gpu()
    tables = sorted(p.parent.name for p in heuristic.TABLES_DIR.glob(f"*/{heuristic.TABLE_NAME}.json"))
    print(f"kernels: {jit.LIBRARY_KERNEL.name} on Hopper (sm_90a), {plan_sm80.KERNEL.name} on any other GPU of "
          f"compute capability 8.0 or newer (in {jit.LIBRARY_KERNEL.parent})")  # fmt: skip
    print(f"autotune tables: {', '.join(tables) or 'none'} (in {heuristic.TABLES_DIR})")
    if gpu is None:
        print("GPU: none found")
    else:
        print(f"GPU: {gpu.name}, {gpu.sm_count} SMs, compute capability {gpu.capability}: runs {gpu.kernel}")
    print(cpp_call_line())
    if args.shape:
        if len(args.shape) != 3:
            parser.error(f"a shape is M N K, got {args.shape}")
        print(shape_line(*args.shape, args.dtype, gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
