"""Shared fixtures: GPU detection for the `gpu` marker."""

from __future__ import annotations

import pytest


def _gpu_count() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


HAVE_GPU = _gpu_count() > 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAVE_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
