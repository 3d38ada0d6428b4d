"""The GPU runner's notebook artifact: every cell run, outputs kept, a failing notebook saved and reported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _notebook(path: Path, *sources: str) -> Path:
    cells = [{"cell_type": "code", "id": f"cell-{i}", "metadata": {}, "execution_count": None, "outputs": [],
              "source": s} for i, s in enumerate(sources)]  # fmt: skip
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_executed_notebooks_keep_their_outputs_and_a_failure_is_reported(tmp_path):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    sys.path.insert(0, str(REPO / "scripts"))
    from execute_notebooks import main

    good = _notebook(tmp_path / "a.ipynb", "print(6 * 7)")
    bad = _notebook(tmp_path / "b.ipynb", "x = 1", "raise ValueError('planted')", "print('after')")
    out = tmp_path / "out"
    assert main(["--out", str(out), str(good)]) == 0
    assert main(["--out", str(out), str(good), str(bad)]) == 1
    ran = json.loads((out / "a.ipynb").read_text())["cells"][0]["outputs"]
    assert "".join(ran[0]["text"]) == "42\n"
    failed = json.loads((out / "b.ipynb").read_text())["cells"]
    assert failed[1]["outputs"][0]["ename"] == "ValueError"
    assert failed[2]["outputs"] == []  # the notebook stops at the failing cell
