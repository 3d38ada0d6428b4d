"""The kernels that deepgemm.gemm launches, first call included: run it under Nsight Compute.

    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
        python3 scripts/gemm_kernels.py

The inputs are made before profiling starts; between cudaProfilerStart and Stop there are only the calls:
a first one (it compiles the kernel, or loads it from CuPy's cache), a second alike, then one per other
layout of a and b (row-major or the transposed view of a row-major array), each read in place: every call
should launch gemm_kernel and nothing else. A (K, 4097) row-major b, which TMA cannot describe, is copied.
"""

from __future__ import annotations

import cupy

import deepgemm
from tutorial.check import random_problem

M = N = K = 2048


def main() -> None:
    a_mk, b_nk = random_problem(M, N, K, cupy.float16, seed=0)  # b_nk: the (K, N) view of an (N, K) array
    b_kn = cupy.ascontiguousarray(b_nk)  # the same values, row-major (K, N)
    a_km = cupy.ascontiguousarray(a_mk.T).T  # the (M, K) view of a row-major (K, M) array
    b_odd = cupy.ascontiguousarray(b_nk[:, : N - 1])  # (K, N - 1): rows of 4094 bytes, not a multiple of 16
    calls = [
        ("a mk, b nk, first call", a_mk, b_nk),
        ("a mk, b nk", a_mk, b_nk),
        ("a mk, b kn", a_mk, b_kn),
        ("a km, b kn", a_km, b_kn),
        ("a km, b nk", a_km, b_nk),
        ("a mk, b kn with N - 1 columns: b and C copied", a_mk, b_odd),
    ]
    cupy.cuda.Device().synchronize()
    cupy.cuda.profiler.start()
    for label, a, b in calls:
        deepgemm.gemm(a, b)
        cupy.cuda.Device().synchronize()
        print(f"called: {label}", flush=True)
    cupy.cuda.profiler.stop()


if __name__ == "__main__":
    main()
