"""The numerics check on the CPU: tutorial.check's arithmetic with NumPy standing in for CuPy (the same calls),
on outputs made right and wrong in known ways."""

from __future__ import annotations

import numpy as np
import pytest

from deepgemm.dtypes import BFLOAT16, FLOAT16, FLOAT32
from tests.numpy_cupy import numpy_for_cupy
from tutorial import check


@pytest.fixture
def numpy_check(monkeypatch):
    monkeypatch.setattr(check, "cupy", np)
    return check


def _problem(m: int, n: int, k: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = (rng.random((m, k), dtype=np.float32) * 2 - 1).astype(dtype)
    b = (rng.random((k, n), dtype=np.float32) * 2 - 1).astype(dtype)
    return a, b


@pytest.mark.parametrize("dtype", [FLOAT16, BFLOAT16])
@pytest.mark.parametrize("k", [64, 7168, 16384])
def test_a_correct_output_passes_and_a_few_percent_off_everywhere_does_not(numpy_check, dtype, k):
    """The per-element bound is a worst case that grows as K^2 here (|a| @ |b| ~ K / 4): at K = 16384 it
    allows about a quarter of |ref|. The relative Frobenius gate catches what it lets through: the whole output
    5% off, an accumulation in the output type, the last 32 of K dropped."""
    a, b = _problem(8, 96, k, dtype)
    expected = numpy_check.reference(a, b)
    exact = expected.value
    right = exact.astype(dtype)
    stats = numpy_check.error_stats(right, expected)
    assert stats.passed and stats.rel_fro < 0.6 * numpy_check.UNIT_ROUNDOFF[np.dtype(dtype).name], stats.summary()
    a32, b32 = a.astype(np.float64), b.astype(np.float64)
    wrong = {
        "5% off": (1.05 * exact).astype(dtype),
        "K's last 32 dropped": (a32[:, : k - 32] @ b32[: k - 32]).astype(dtype),
    }
    if dtype == BFLOAT16 and k > 64:  # summed in bf16, 64 of K at a time
        acc = np.zeros(exact.shape, dtype)
        for k0 in range(0, k, 64):
            acc = (acc.astype(np.float32) + (a32[:, k0 : k0 + 64] @ b32[k0 : k0 + 64])).astype(dtype)
        wrong["accumulated in bf16"] = acc
    for name, out in wrong.items():
        stats = numpy_check.error_stats(out, expected)
        assert not stats.passed, (name, stats.summary())
        if k == 16384:  # where the per-element bound alone would have passed every one of them
            assert stats.over_bound == 0 and stats.nonfinite == 0, (name, stats.summary())


def test_the_gate_leaves_fp32_accumulation_room_that_grows_with_k():
    u16, u32 = check.UNIT_ROUNDOFF["float16"], check.UNIT_ROUNDOFF["float32"]
    assert check.rel_fro_limit(u16, 1) == pytest.approx(2 * u16 + u32 / 4)
    assert check.rel_fro_limit(u32, 16384) == pytest.approx(2 * u32 + 4096 * u32)  # K / 16 truncations, 4 times
    assert check.rel_fro_limit(check.UNIT_ROUNDOFF["bfloat16"], 16384) < 0.01


@pytest.mark.parametrize("dtype", [FLOAT16, BFLOAT16, FLOAT32])
def test_poison_is_nan_in_every_output_type(numpy_check, dtype):
    out = np.zeros((3, 5), dtype)
    numpy_check.poison(out)
    assert np.isnan(out.astype(np.float64)).all()


def test_an_unwritten_element_fails_as_non_finite(numpy_check):
    a, b = _problem(4, 32, 256, BFLOAT16)
    expected = numpy_check.reference(a, b)
    out = expected.value.astype(BFLOAT16)
    numpy_check.poison(out[1:2, 3:4])
    stats = numpy_check.error_stats(out, expected)
    assert not stats.passed and stats.nonfinite == 1 and stats.over_bound == 1


@pytest.fixture
def numpy_verify(monkeypatch):
    """tutorial.check with NumPy for CuPy, its synchronisation and array conversion included (verify)."""
    numpy_for_cupy(monkeypatch)
    return check


def test_a_call_that_returns_a_stale_block_it_never_wrote_fails(numpy_verify):
    """A caching allocator can hand a returning call the block an earlier call left its right answer in; a call
    that then writes nothing must still fail, as it does into a poisoned out=."""
    a, b = _problem(8, 96, 64, FLOAT16)
    expected = numpy_verify.reference(a, b)
    block = expected.value.astype(FLOAT16)  # the pool's block, holding the right answer already
    calls = []

    def writes_once():  # the kernel runs once, then every later call returns the block unwritten
        calls.append(1)
        if len(calls) == 1:
            block[:] = expected.value.astype(FLOAT16)
        return block

    assert not numpy_verify.verify(writes_once, expected).passed
    assert numpy_verify.verify(lambda: expected.value.astype(FLOAT16), expected).passed
    out = np.empty_like(block)
    assert not numpy_verify.verify(lambda: None, expected, out).passed  # out= never written: NaN
