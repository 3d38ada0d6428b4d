"""Operand checks: everything a caller can get wrong, caught before anything is compiled or launched.

Each error names the operand and the value: host arrays, wrong dtypes, mismatched shapes, an `out` of the
wrong shape or layout, a missing GPU or one too old. The checks read the arrays (as CuPy views, no copy)
and allocate nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import cupy
import numpy as np

from deepgemm.driver import CC_ENV, effective_capability
from deepgemm.dtypes import FLOAT32, INPUT_DTYPES, output_dtype
from deepgemm.frameworks import Cupy, spans_overlap, torch_view
from deepgemm.model import round_up

VECTOR_BYTES = 16  # cp.async, 16-byte loads and TMA all need 16-byte aligned rows
SM90A = (9, 0)  # wgmma, setmaxnreg: sm_90a's arch-specific instructions, which Hopper alone runs


def as_device_array(x: Any, name: str) -> cupy.ndarray:
    """A CuPy view of a GPU array (CuPy, or anything with DLPack / __cuda_array_interface__), no copy."""
    if isinstance(x, cupy.ndarray):  # a subclass as a plain view: plans key on the plain type
        return x if type(x) is cupy.ndarray else cupy.ndarray(x.shape, x.dtype, x.data, x.strides)
    if isinstance(x, np.ndarray):
        raise TypeError(f"{name} is a host numpy.ndarray; pass a CuPy array or a CUDA tensor")
    view = torch_view(x)
    if view is not None:
        return view
    if hasattr(x, "__dlpack_device__"):
        device_type, _ = x.__dlpack_device__()
        if device_type not in (2, 3):  # kDLCUDA, kDLCUDAHost is refused by from_dlpack below
            raise TypeError(f"{name} lives on DLPack device type {device_type}, not on a CUDA GPU")
        return cupy.from_dlpack(x)
    if hasattr(x, "__cuda_array_interface__"):
        return cupy.asarray(x)
    raise TypeError(f"{name} is a {type(x).__name__}; pass a CuPy array or a CUDA tensor")


def require_gpu(min_cc: tuple[int, int], stage: str, *, exact: bool = False) -> None:
    """RuntimeError unless a CUDA GPU of compute capability `min_cc` (or newer, unless `exact`) is current.

    `exact` is for the sm_90a stages: wgmma and setmaxnreg exist on Hopper (9.0) alone, not on later chips.
    """
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as err:
        raise RuntimeError(f"{stage} needs a CUDA GPU and none is usable here ({err})") from None
    if count == 0:
        raise RuntimeError(f"{stage} needs a CUDA GPU and none is visible")
    cc = compute_capability()
    if not supports(cc, min_cc, exact=exact):  # the name is looked up only for the error
        check_compute_capability(cc, device_name(cupy.cuda.Device().id), min_cc, stage, exact=exact)


def supports(cc: tuple[int, int], min_cc: tuple[int, int], *, exact: bool = False) -> bool:
    """Whether a GPU of compute capability `cc` runs code that needs `min_cc` or newer, or, where `exact`,
    `min_cc` itself (sm_90a code, SM90A: wgmma and setmaxnreg exist on Hopper alone)."""
    return cc == min_cc if exact else cc >= min_cc


def check_compute_capability(
    cc: tuple[int, int], name: str, min_cc: tuple[int, int], stage: str, *, exact: bool = False
) -> None:
    """RuntimeError naming the GPU when its compute capability `cc` cannot run the stage."""
    if not supports(cc, min_cc, exact=exact):
        wanted = f"exactly {min_cc[0]}.{min_cc[1]} (sm_90a, Hopper)" if exact else f"{min_cc[0]}.{min_cc[1]} or newer"
        raise RuntimeError(f"{stage} needs compute capability {wanted}; {name} is {cc[0]}.{cc[1]}")


@cache
def device_name(device: int) -> str:
    """The GPU's name, asked once per device: the properties query builds a dictionary of about a hundred
    (~1 ms)."""
    return cupy.cuda.runtime.getDeviceProperties(device)["name"].decode()


def real_compute_capability() -> tuple[int, int]:
    """The current GPU's own compute capability, whatever DEEPGEMM_CC says: what code is compiled for."""
    cc = cupy.cuda.Device().compute_capability
    return int(cc[:-1]), int(cc[-1])


def compute_capability() -> tuple[int, int]:
    """The current GPU's compute capability as the library and the tutorial go by it: DEEPGEMM_CC where set
    (`deepgemm.driver.effective_capability`), else the GPU's own."""
    return effective_capability(real_compute_capability())


def capability_label() -> str:
    """The capability `compute_capability` gives, as messages name it: "8.9", and where DEEPGEMM_CC sets it,
    what the GPU really is ("8.9 (DEEPGEMM_CC; really 9.0)")."""
    cc, real = compute_capability(), real_compute_capability()
    shown = f"{cc[0]}.{cc[1]}"
    return shown if cc == real else f"{shown} ({CC_ENV}; really {real[0]}.{real[1]})"


@dataclass(frozen=True)
class Problem:
    """A checked GEMM problem: a (M, K) @ b (K, N) -> out (M, N) of out_dtype; out is None where the caller
    gave none (whoever launches allocates it)."""

    a: cupy.ndarray
    b: cupy.ndarray
    out: cupy.ndarray | None
    m: int
    n: int
    k: int
    out_dtype: np.dtype


def check_operands(a: Any, b: Any, out: Any = None, out_dtype: Any = None) -> Problem:
    """Validate a @ b (and `out`) and return them as CuPy views."""
    a, b = as_device_array(a, "a"), as_device_array(b, "b")
    for name, x in (("a", a), ("b", b)):
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {x.shape}")
        if x.dtype not in INPUT_DTYPES.values():
            raise TypeError(f"{name} has dtype {x.dtype}; the kernels take float16 or bfloat16")
    if a.dtype != b.dtype:
        raise TypeError(f"a is {a.dtype} but b is {b.dtype}; both must have the same dtype")
    if a.device.id != b.device.id:
        raise ValueError(f"a is on GPU {a.device.id} but b is on GPU {b.device.id}")
    (m, k), (kb, n) = a.shape, b.shape
    if kb != k:
        raise ValueError(f"b has {kb} rows but a has K = {k} columns")
    if min(m, n, k) < 1:
        raise ValueError(f"empty problem: M = {m}, N = {n}, K = {k}; every dimension must be >= 1")
    if max(m, n, k) > MAX_DIMENSION:
        raise ValueError(f"M = {m}, N = {n}, K = {k}: the kernels take each as a 32-bit int, at most {MAX_DIMENSION}")
    out_dtype = output_dtype(out_dtype) if out_dtype is not None else a.dtype
    out = _check_out(out, a, b, out_dtype) if out is not None else None
    return Problem(a=a, b=b, out=out, m=m, n=n, k=k, out_dtype=out_dtype)


INT32_MAX = 2**31 - 1  # M, N, K and C's row stride are the kernels' int parameters
MAX_DIMENSION = INT32_MAX + 1 - 2**16  # room for a tile count's ceil-div, (N + BLOCK_N - 1) / BLOCK_N, in an int


def _check_out(out: Any, a: cupy.ndarray, b: cupy.ndarray, dtype: np.dtype) -> cupy.ndarray:
    out = as_device_array(out, "out")
    m, n = a.shape[0], b.shape[1]
    if out.shape != (m, n):
        raise ValueError(f"out has shape {out.shape}; the product is {(m, n)}")
    if out.dtype != dtype:
        raise TypeError(f"out has dtype {out.dtype}; expected {dtype}")
    if out.device.id != a.device.id:
        raise ValueError(f"out is on GPU {out.device.id} but a and b are on GPU {a.device.id}")
    rows_apart = m == 1 or out.strides[0] >= n * out.itemsize  # a single row's stride is never used
    if out.strides[1] != out.itemsize or not rows_apart:
        raise ValueError(f"out must be row-major with unit column stride; it has strides {out.strides}")
    if out.strides[0] > INT32_MAX * out.itemsize:
        raise ValueError(f"out's row stride of {out.strides[0]} bytes is over the kernels' 32-bit int of elements")
    for name, x in (("a", a), ("b", b)):
        require_apart(out, x, name)
    return out


def require_apart(out: cupy.ndarray, x: cupy.ndarray, name: str) -> None:
    """ValueError where `out`'s memory overlaps input `name`'s: the kernel reads its inputs while other CTAs
    already write C, so an output over an input is silently wrong (as torch's out= functions refuse)."""
    if spans_overlap(Cupy.span(out), Cupy.span(x)):
        raise ValueError(f"out overlaps {name} in memory; pass an out that shares no memory with the inputs")


def leading_dim(x: cupy.ndarray) -> int:
    """Row stride in elements of a row-major 2-D array with unit column stride."""
    return x.strides[0] // x.itemsize


def padded_k(k: int) -> int:
    """K rounded up to a whole number of 16-byte vectors of 16-bit elements."""
    return round_up(k, VECTOR_BYTES // 2)


def check_bias(bias: Any, n: int, device: int | None = None) -> cupy.ndarray:
    """The per-column bias as a CuPy view; ValueError / TypeError where it is not a float vector of N (on GPU
    `device`, where given)."""
    bias = as_device_array(bias, "bias")
    if bias.shape != (n,):
        raise ValueError(f"bias has shape {bias.shape}; it must be a vector of N = {n} elements")
    if bias.dtype.kind != "f" and bias.dtype not in INPUT_DTYPES.values():
        raise TypeError(f"bias has dtype {bias.dtype}; it must be a floating-point vector")
    if device is not None and bias.device.id != device:
        raise ValueError(f"bias is on GPU {bias.device.id} but a and b are on GPU {device}")
    return bias


def bias_vector(bias: Any, n: int) -> cupy.ndarray:
    """The per-column bias as a contiguous float32 vector of N elements (a copy where it is not one)."""
    return cupy.ascontiguousarray(check_bias(bias, n), dtype=FLOAT32)
