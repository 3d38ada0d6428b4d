"""The layers import one way: stages/ and lab/ may import deepgemm/, deepgemm/ reaches a stage only through
its registry (deepgemm/stages.py) and the library call (deepgemm/api.py), and nothing but the lab imports it.
Read from the sources with `ast`, so a new import that breaks the rule fails here, not in a cycle later."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REGISTRY = {"deepgemm/stages.py", "deepgemm/api.py"}  # where deepgemm may name a stage


def _sources(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def _imports(path: Path, *, in_functions: bool = False) -> list[str]:
    """The absolute modules a file imports (`from a import b` counts as a.b too): at any depth, or only
    the imports inside functions."""
    tree = ast.parse(path.read_text())
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    nodes = [n for scope in scopes for n in ast.walk(scope)] if in_functions else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return found


def _package(module: str) -> str:
    return module.split(".", 1)[0]


def test_the_harness_names_a_stage_only_in_the_registry_and_the_library_call():
    offenders = {
        path.relative_to(REPO).as_posix(): module
        for path in _sources("deepgemm")
        if path.relative_to(REPO).as_posix() not in REGISTRY
        for module in _imports(path)
        if _package(module) == "stages"
    }
    assert not offenders, f"deepgemm/ imports stages outside {sorted(REGISTRY)}: {offenders}"


@pytest.mark.parametrize("folder", ["deepgemm", "stages"])
def test_nothing_below_the_lab_imports_it(folder):
    offenders = {
        p.relative_to(REPO).as_posix(): m for p in _sources(folder) for m in _imports(p) if _package(m) == "lab"
    }
    assert not offenders, f"{folder}/ imports the lab: {offenders}"


@pytest.mark.parametrize("folder", ["deepgemm", "stages"])
def test_no_function_imports_the_project_itself(folder):
    """A project import inside a function hides a cycle; only optional or heavy third-party modules (torch,
    cuda.bindings, pynvml ...) are imported where they are used."""
    offenders = {
        p.relative_to(REPO).as_posix(): m
        for p in _sources(folder)
        for m in _imports(p, in_functions=True)
        if _package(m) in ("deepgemm", "stages", "lab")
    }
    assert not offenders, f"function-local project imports in {folder}/: {offenders}"


def test_a_stage_runs_without_the_cli():
    for main in (REPO / "stages").glob("*/__main__.py"):
        assert "deepgemm.cli" not in _imports(main), main
