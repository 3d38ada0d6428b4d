"""What ncu and compute-sanitizer run: two launches of each named stage (or the library call, or cuBLAS)
on random inputs, in a process of their own.

    python -m tutorial.target --stage v5 --m 4096 [--knobs NUM_STAGES=2]
    python -m tutorial.target --stage library --shapes 256,129x200x72 --knobs SPLIT_K=4
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import cupy

from deepgemm.config import GemmConfig, parse_defines
from deepgemm.dtypes import input_dtype
from tutorial import bench, stages
from tutorial.check import random_problem
from tutorial.runner import add_problem_args, shapes
from tutorial.stages import CUBLAS, parse_stages


def profiled_stages(spec: str) -> list[str]:
    """Stages as parse_stages reads them, plus "cublas" anywhere in the list (its kernel, profiled alike)."""
    parts = [part.strip() for part in spec.split(",") if part.strip()]
    chosen = parse_stages(",".join(p for p in parts if p != CUBLAS)) if parts != [CUBLAS] else []
    return chosen + ([CUBLAS] if CUBLAS in parts else [])


def launch_twice(stage: str, m: int, n: int, k: int, dtype: str, knobs: str = "") -> None:
    """Two launches of one stage on fresh random inputs, then a synchronize (a profiler skips the first)."""
    a, b = random_problem(m, n, k, input_dtype(dtype), seed=0)
    if stage == CUBLAS:
        launch = bench.cublas_launch(a, b, cupy.empty((m, n), dtype=a.dtype))
    else:
        defines = parse_defines(knobs)
        launch = stages.load(stage).plan(a, b, config=GemmConfig.from_defines(defines) if defines else None)
    launch()
    launch()
    cupy.cuda.Device().synchronize()


def command(stage: str, m: int, n: int, k: int, dtype: str, knobs: str = "") -> list[str]:
    """This module's command line for one stage and shape, as a profiler wraps it."""
    target = [sys.executable, "-m", "tutorial.target", "--stage", stage, "--m", str(m), "--n", str(n)]
    return [*target, "--k", str(k), "--dtype", dtype, *(["--knobs", knobs] if knobs else [])]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tutorial.target", description=__doc__.splitlines()[0])
    parser.add_argument("--stage", required=True, help="one or more, e.g. v3,v4,v5, library or cublas")
    parser.add_argument("--knobs", default="", help="compile-time knobs over the defaults, e.g. NUM_STAGES=2")
    add_problem_args(parser, settle=None)
    args = parser.parse_args(argv)
    for stage in profiled_stages(args.stage):
        for m, n, k in shapes(args):
            launch_twice(stage, m, n, k, "bf16" if args.dtype == "bf16" else "fp16", args.knobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
