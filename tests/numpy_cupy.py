"""NumPy standing in for CuPy in tutorial.check, so that its checks run on the CPU (the same calls)."""

from __future__ import annotations

import types

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
