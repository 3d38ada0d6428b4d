"""NumPy standing in for CuPy in tutorial.check, so that its checks run on the CPU (the same calls), and a
workload of rotating input sets to check."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tutorial import check


def numpy_for_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    """tutorial.check computes with NumPy, synchronises with nothing, and takes NumPy arrays as they are."""
    fake = types.ModuleType("numpy_as_cupy")
    fake.__dict__.update(np.__dict__)
    fake.cuda = types.SimpleNamespace(Device=lambda: types.SimpleNamespace(synchronize=lambda: None))
    monkeypatch.setattr(check, "cupy", fake)
    monkeypatch.setattr(check, "as_device_array", lambda x, name: x)


def rotating_workload(sets: int = 3, seed: int = 0) -> tuple[Any, Callable[[int], np.ndarray]]:
    """A small FP16 workload of `sets` input sets in NumPy (8 x 16 x 64), and each set's right product."""
    from tutorial.bench import Workload

    rng = np.random.default_rng(seed)
    problems = [((rng.random((8, 64)) - 0.5).astype(np.float16), (rng.random((64, 16)) - 0.5).astype(np.float16))
                for _ in range(sets)]  # fmt: skip

    def product(i: int) -> np.ndarray:
        return (problems[i][0].astype(np.float32) @ problems[i][1].astype(np.float32)).astype(np.float16)

    return Workload(8, 16, 64, "fp16", problems, None, {}, check.reference(*problems[0])), product
