"""The `gpu` marker for tests/ and lab/tests/: a test that needs a CUDA GPU skips cleanly without one."""

from __future__ import annotations

import pytest

from tutorial.runner import gpu_available

HAVE_GPU = gpu_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAVE_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
