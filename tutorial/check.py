"""Numerics: fresh random inputs, a float64 reference, error statistics and a per-element bound.

A kernel passes when every element is finite and within

    |out - ref| <= 2 * (u_out * max(|ref|, |x|) + K * u_fp32 * (|a| @ |b|)) + floor

where u_out is the unit roundoff of the output type (the final cast), K * u_fp32 * (|a| @ |b|) bounds the
FP32 accumulation error of any summation order (the seeds' section 6.3: orders differ between kernels),
and the factor 2 leaves room for the epilogue's arithmetic. x is the activation's input, alpha * a @ b +
bias (x = ref without an activation): a GEMM that rounds its result to the output type and then runs the
activation as a separate kernel errs by u_out * |x| times the activation's slope, so a fused activation
may err as much, which is what an approximate tanh costs where GELU and SiLU tend to zero. That bound is a
worst case, loose enough at large K to pass an output a few percent off everywhere, so the output's relative
Frobenius error must also stay within a few roundings (`rel_fro_limit`). The output is poisoned with NaN
before every checked run, so an element the kernel never wrote fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import cupy
import numpy as np

from deepgemm.dtypes import FLOAT32
from deepgemm.epilogue import activation_name
from deepgemm.operands import as_device_array


def apply_activation(x: cupy.ndarray, activation: str | None) -> cupy.ndarray:
    """The activation in the precision of `x` (the reference runs it in float64)."""
    name = activation_name(activation)
    if name == "none":
        return x
    if name == "relu":
        return cupy.maximum(x, 0)
    if name == "gelu_tanh":
        return 0.5 * x * (1 + cupy.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    if name == "gelu_erf":
        from cupyx.scipy.special import erf  # heavy (SciPy's special functions): only for the erf form

        return 0.5 * x * (1 + erf(x / math.sqrt(2)))
    return x / (1 + cupy.exp(-x))  # silu


UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24}
ABS_FLOOR = 1e-6  # below float16's smallest normal (6.1e-5) times its roundoff: room for subnormals
NAN_BITS = {"float16": 0x7E00, "bfloat16": 0x7FC0}  # quiet NaNs (0x7E00 as bfloat16 is 4.25e37, finite)
# The statistical gate beside the per-element bound, which at large K allows whole-output errors of tens of
# percent (its K * u_fp32 term is the worst case of any summation order, |a| @ |b| grows as K): the output's
# relative Frobenius error must stay within REL_FRO_ROUNDINGS roundings of the output type, plus K * u_fp32 /
# REL_FRO_K_STEPS for fp32 accumulation (a tensor core that truncates at each of K / 16 wgmma steps drifts
# by up to K / 16 roundings, one way). Every recorded run sits at 0.6 roundings or less (fp16 and bf16, K up
# to 16384); an output 5% off, an accumulation in the output type, a K tile dropped all exceed it.
REL_FRO_ROUNDINGS = 2.0
REL_FRO_K_STEPS = 4


def random_matrix(rows: int, cols: int, dtype: np.dtype, rng: cupy.random.Generator) -> cupy.ndarray:
    """Uniform in [-1, 1), rounded to `dtype`: never zeros, never a pattern a wrong index could match."""
    return (rng.random((rows, cols), dtype=cupy.float32) * 2 - 1).astype(dtype)


def random_problem(
    m: int, n: int, k: int, dtype: np.dtype, seed: int | None = None, b_k_major: bool = True
) -> tuple[cupy.ndarray, cupy.ndarray]:
    """a (M, K) and b (K, N); b is the transposed view of an (N, K) array when `b_k_major`."""
    rng = cupy.random.default_rng(seed)
    a = random_matrix(m, k, dtype, rng)
    b = random_matrix(n, k, dtype, rng).T if b_k_major else random_matrix(k, n, dtype, rng)
    return a, b


def poison(out: cupy.ndarray) -> None:
    """Fill with NaN so that an element the kernel does not write fails the check."""
    if out.itemsize == 4:
        out.fill(np.nan)
    else:
        out.view(cupy.uint16).fill(NAN_BITS[np.dtype(out.dtype).name])


@dataclass(frozen=True)
class Reference:
    """What an output is checked against: act(alpha * a @ b + bias) in float64, |alpha| * |a| @ |b| (the
    scale of the accumulation error), the magnitude of the activation's input (None without one), and K."""

    value: cupy.ndarray
    scale: cupy.ndarray
    activation_input: cupy.ndarray | None
    k: int


def reference(
    a: cupy.ndarray,
    b: cupy.ndarray,
    alpha: float = 1.0,
    bias: cupy.ndarray | None = None,
    activation: str | None = None,
) -> Reference:
    """The float64 reference of act(alpha * a @ b + bias)."""
    a64, b64 = a.astype(FLOAT32).astype(cupy.float64), b.astype(FLOAT32).astype(cupy.float64)
    x = alpha * (a64 @ b64)
    if bias is not None:
        x += bias.astype(FLOAT32).astype(cupy.float64)[None, :]
    scale = abs(alpha) * (cupy.abs(a64) @ cupy.abs(b64))
    value = apply_activation(x, activation)
    return Reference(value, scale, None if value is x else cupy.abs(x), k=a.shape[1])


@dataclass(frozen=True)
class ErrorStats:
    """How far `out` is from the reference, and whether it is within the bound."""

    max_abs: float
    max_rel: float
    rel_fro: float
    p50_abs: float
    p99_abs: float
    p999_abs: float
    nonfinite: int
    over_bound: int
    passed: bool
    rel_fro_limit: float  # the statistical gate (REL_FRO_ROUNDINGS, REL_FRO_K_STEPS)

    def as_dict(self) -> dict[str, float | int | bool]:
        return asdict(self)

    def summary(self) -> str:
        verdict = "ok" if self.passed else (
            f"FAIL ({self.nonfinite} non-finite, {self.over_bound} over bound, rel fro {self.rel_fro:.3g} against "
            f"{self.rel_fro_limit:.3g})"
        )
        return f"max abs {self.max_abs:.3g}, rel fro {self.rel_fro:.3g}, p99.9 abs {self.p999_abs:.3g}: {verdict}"


def error_stats(out: cupy.ndarray, expected: Reference) -> ErrorStats:
    """Compare `out` with the float64 reference and its per-element bound."""
    ref, k = expected.value, expected.k
    got = out.astype(FLOAT32).astype(cupy.float64)
    finite = cupy.isfinite(got)
    err = cupy.where(finite, cupy.abs(got - ref), cupy.inf)
    u_out = UNIT_ROUNDOFF[np.dtype(out.dtype).name]
    magnitude = cupy.abs(ref)
    if expected.activation_input is not None:
        magnitude = cupy.maximum(magnitude, expected.activation_input)
    bound = 2 * (u_out * magnitude + k * UNIT_ROUNDOFF["float32"] * expected.scale) + ABS_FLOOR
    finite_err = cupy.where(finite, err, 0)
    q50, q99, q999 = (float(q) for q in cupy.quantile(finite_err.ravel(), cupy.array([0.5, 0.99, 0.999])))
    ref_norm = float(cupy.linalg.norm(ref))
    nonfinite = int((~finite).sum())
    over = int((err > bound).sum())
    rel_fro = float(cupy.linalg.norm(finite_err)) / ref_norm if ref_norm else float("inf")
    limit = rel_fro_limit(u_out, k)
    return ErrorStats(
        max_abs=float(err.max()),
        max_rel=float((err / cupy.maximum(cupy.abs(ref), ABS_FLOOR)).max()),
        rel_fro=rel_fro,
        p50_abs=q50,
        p99_abs=q99,
        p999_abs=q999,
        nonfinite=nonfinite,
        over_bound=over,
        passed=nonfinite == 0 and over == 0 and (ref_norm == 0 or rel_fro <= limit),
        rel_fro_limit=limit,
    )


def rel_fro_limit(u_out: float, k: int) -> float:
    """The relative Frobenius error a correct output stays within: REL_FRO_ROUNDINGS roundings to the output
    type, and K / REL_FRO_K_STEPS roundings of fp32 for the accumulation."""
    return REL_FRO_ROUNDINGS * u_out + k / REL_FRO_K_STEPS * UNIT_ROUNDOFF["float32"]


def verify(run: Callable[[], Any], expected: Reference, out: cupy.ndarray | None = None) -> ErrorStats:
    """Poison `out`, call `run` once, and compare what it wrote with the reference.

    `out` is where `run` writes (a plan's `out`); None for a call that returns its result instead, which is
    then what is checked. Such a call's memory comes from a caching allocator (CuPy's pool, torch's), which
    may hand back a block that already holds this right answer from an earlier call: so a first result is
    poisoned and dropped, and the checked call gets that block back (the same size, just freed).
    """
    if out is None:
        poison(as_device_array(run(), "the result"))
    else:
        poison(out)
    if getattr(run, "written", None) is not None:  # where a launch's kernel writes, copied into `out` after it
        poison(run.written)
    cupy.cuda.Device().synchronize()  # the poison written, whichever stream `run` launches on
    result = run()
    cupy.cuda.Device().synchronize()  # a launch error surfaces here, not later
    return error_stats(out if out is not None else as_device_array(result, "the result"), expected)


def first_failing(stats: list[ErrorStats]) -> ErrorStats:
    """Of several checks of one thing, the first that failed, else the first."""
    return next((s for s in stats if not s.passed), stats[0])
