"""The C++ call path's source against the Python that feeds it (no torch, no GPU): the codes deepgemm.fast
passes for a parameter's value and kind, and the activation codes, are the ones csrc/fast_call.cpp reads.
A mismatch would point a parameter at the wrong tensor; the GPU tests (test_gpu_fast.py) run the path."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from deepgemm.epilogue import ACTIVATIONS, ALIASES

PACKAGE = Path(__file__).resolve().parents[1] / "deepgemm"
CPP = (PACKAGE / "csrc" / "fast_call.cpp").read_text()


def python_dict(name: str) -> dict:
    """A dict literal assigned to `name` at the top of deepgemm/fast.py (read without importing torch)."""
    for node in ast.parse((PACKAGE / "fast.py").read_text()).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]:
            return ast.literal_eval(node.value)
    raise KeyError(name)


def cpp_enum(name: str) -> dict[str, int]:
    body = re.search(rf"enum {name} : int64_t \{{([^}}]*)\}}", CPP)
    assert body, f"fast_call.cpp has no enum {name}"
    return {key: int(value) for key, value in re.findall(r"(\w+) = (\d+)", body[1])}


def test_the_values_and_kinds_python_passes_are_the_ones_cpp_reads():
    assert {name.upper(): code for name, code in python_dict("VALUES").items()} == cpp_enum("Value")
    assert {name.upper(): code for name, code in python_dict("KINDS").items()} == cpp_enum("Kind")


def test_the_op_kernel_reads_every_activation_name_as_the_library_does():
    pairs = dict(re.findall(r'\{"(\w+)", (\d+)\}', CPP[CPP.index("activation_code") :]))
    names = {**ACTIVATIONS, **{alias: ACTIVATIONS[name] for alias, name in ALIASES.items() if alias is not None}}
    assert {name: int(code) for name, code in pairs.items()} == names


def test_python_m_deepgemm_says_whether_torch_calls_run_from_cpp(monkeypatch):
    from deepgemm import __main__ as cli

    if importlib.util.find_spec("torch") is None:
        assert cli.cpp_call_line() == "C++ call path: torch is not installed (the path serves torch's calls)"
    else:
        monkeypatch.setenv("DEEPGEMM_FAST", "0")
        assert cli.cpp_call_line().startswith("C++ call path: off (DEEPGEMM_FAST=0)")
