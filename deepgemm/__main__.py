"""python -m deepgemm: what the installed library has, and what it would run for a shape.

    python -m deepgemm                      the kernel, the autotune tables, the GPU (if any)
    python -m deepgemm 128 4096 4096 [bf16] the config gemm would run for M N K, and where it comes from

The tutorial's commands (benchmarks, profiles, notebooks) live in the repository: python -m tutorial.
"""

from __future__ import annotations

import argparse
import sys

from deepgemm import heuristic, jit


def describe_gpu() -> tuple[str, int] | None:
    """The current GPU's name and SM count, or None where there is none."""
    try:
        import cupy  # the library's one hard GPU dependency; absent or without a GPU, nothing to describe

        if cupy.cuda.runtime.getDeviceCount() == 0:
            return None
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        return props["name"].decode(), int(props["multiProcessorCount"])
    except Exception:  # no driver, no CuPy build for this CUDA: the library says so on a call
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deepgemm", description=__doc__.splitlines()[0])
    parser.add_argument("shape", nargs="*", type=int, help="M N K: the config gemm would run for it")
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    args = parser.parse_args(argv)
    gpu = describe_gpu()
    tables = sorted(p.parent.name for p in heuristic.TABLES_DIR.glob(f"*/{heuristic.TABLE_NAME}.json"))
    print(f"kernel: {jit.LIBRARY_KERNEL}")
    print(f"autotune tables: {', '.join(tables) or 'none'} (in {heuristic.TABLES_DIR})")
    print(f"GPU: {gpu[0] + f', {gpu[1]} SMs' if gpu else 'none found'}")
    if args.shape:
        if len(args.shape) != 3:
            parser.error(f"a shape is M N K, got {args.shape}")
        m, n, k = args.shape
        name, sm_count = gpu if gpu else ("NVIDIA H200", 132)
        cfg, source = heuristic.pick_config(m, n, k, args.dtype, name, sm_count, b_mn_major=False)
        print(f"{m} x {n} x {k} {args.dtype} on {name}: {heuristic.config_name(cfg)} (from the {source})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
