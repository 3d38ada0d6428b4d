"""The kernels that deepgemm.gemm launches, first call included: run it under Nsight Compute.

    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
        python3 scripts/gemm_kernels.py

The inputs are made before profiling starts; between cudaProfilerStart and Stop there are only the calls:
a first one (it compiles the kernel, or loads it from CuPy's cache) and two more, for b read in place (the
transposed view of an (N, K) array) and then for a row-major (K, N) b, which the call copies to K-major.
"""

from __future__ import annotations

import cupy

import deepgemm
from deepgemm.check import random_problem

M = N = K = 2048


def main() -> None:
    a, b_nk = random_problem(M, N, K, cupy.float16, seed=0)  # b_nk: the (K, N) view of an (N, K) array
    b_kn = cupy.ascontiguousarray(b_nk)  # the same values, row-major (K, N)
    cupy.cuda.Device().synchronize()
    cupy.cuda.profiler.start()
    for label, b in (("b in place, first call", b_nk), ("b in place", b_nk), ("b row-major", b_kn)):
        deepgemm.gemm(a, b)
        cupy.cuda.Device().synchronize()
        print(f"called: {label}", flush=True)
    cupy.cuda.profiler.stop()


if __name__ == "__main__":
    main()
