"""The layers import one way. deepgemm/ (the installed library) imports nothing of the repository around it;
tutorial/ (the harness) imports deepgemm, and the stage packages only through its registry
(tutorial/stages.py, `stages.load`) and the library's harness launch (tutorial/library.py); nothing but the
lab imports the lab; and the library writes no files, so that nothing it records can land in site-packages.
Read from the sources with `ast`, so a new import that breaks a rule fails here, not in a cycle later."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROJECT = ("deepgemm", "tutorial", "stages", "lab")
STAGE_REGISTRY = {"tutorial/stages.py", "tutorial/library.py"}  # where the harness may reach a stage package


def _sources(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


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


def _offenders(folders: list[str], forbidden: set[str], exempt: set[str] = frozenset()) -> dict[str, list[str]]:
    """File -> the modules of the `forbidden` packages it imports, at any depth."""
    found = {}
    for folder in folders:
        for path in _sources(folder):
            modules = sorted({m for m in _imports(path) if _package(m) in forbidden})
            if modules and _relative(path) not in exempt:
                found[_relative(path)] = modules
    return found


def test_the_rule_reads_imports_at_every_depth_and_relative_ones_not(tmp_path):
    """The reader the rules rely on: imports in functions and classes count, `from a import b` names a.b,
    and a relative import (inside one package) names no package."""
    source = tmp_path / "m.py"
    source.write_text(
        "import os\nfrom tutorial import stages\nfrom . import sibling\n"
        "class C:\n    def f(self):\n        import lab.gpc\n"
    )
    assert _imports(source) == ["os", "tutorial", "tutorial.stages", "lab.gpc"]
    assert _imports(source, in_functions=True) == ["lab.gpc"]


def test_the_library_imports_nothing_of_the_repository_around_it():
    offenders = _offenders(["deepgemm"], {"tutorial", "stages", "lab"})
    assert not offenders, f"deepgemm/ imports the tutorial, the stages or the lab: {offenders}"


def test_the_harness_reaches_a_stage_package_only_through_its_registry():
    offenders = _offenders(["tutorial"], {"stages"}, exempt=STAGE_REGISTRY)
    assert not offenders, f"tutorial/ imports a stage package outside {sorted(STAGE_REGISTRY)}: {offenders}"
    loaders = [
        _relative(path)
        for path in _sources("tutorial") + _sources("deepgemm")
        if "import_module(" in path.read_text() and _relative(path) not in STAGE_REGISTRY
    ]
    assert not loaders, f"a module loaded by name outside the registry: {loaders}"


def test_the_stages_import_the_library_and_the_harness_only():
    """A stage's launcher builds on deepgemm (its checks, config, maps) and tutorial.launch; the lab is
    not below it."""
    offenders = _offenders(["stages"], {"lab"})
    assert not offenders, f"stages/ imports the lab: {offenders}"


@pytest.mark.parametrize("folder", ["deepgemm", "tutorial", "stages", "scripts"])
def test_nothing_but_the_lab_imports_it(folder):
    """The library, the harness and the stages stand without the lab (the tests and notebooks read it)."""
    offenders = _offenders([folder], {"lab"})
    assert not offenders, f"{folder}/ imports the lab: {offenders}"


TORCH_DOORS = {  # the library's own torch modules, imported where torch first shows: `import deepgemm` imports no torch
    "deepgemm/__init__.py": {"deepgemm.nn"},  # deepgemm.linear, deepgemm.nn, asked for
    "deepgemm/api.py": {"deepgemm.torch_ops"},  # a torch tensor's first call, torch imported after deepgemm
    "deepgemm/__main__.py": {"deepgemm.fast"},  # python -m deepgemm saying whether the C++ call path is built
}


@pytest.mark.parametrize("folder", ["deepgemm", "tutorial", "stages"])
def test_no_function_imports_the_project_itself(folder):
    """A project import inside a function hides a cycle; only optional or heavy third-party modules (torch,
    cuda.bindings, pynvml ...) are imported where they are used, and the library's torch modules where torch
    first shows (TORCH_DOORS)."""
    offenders = {
        _relative(p): m
        for p in _sources(folder)
        for m in _imports(p, in_functions=True)
        if _package(m) in PROJECT and m not in TORCH_DOORS.get(_relative(p), ())
    }
    assert not offenders, f"function-local project imports in {folder}/: {offenders}"


WRITES = ("write_text(", "write_bytes(", "mkdir(", "makedirs(", "NamedTemporaryFile(", "TemporaryDirectory(")


def _writes(path: Path) -> list[str]:
    """What in a source writes a file: a path method or os function that writes, or open() in a mode
    other than reading."""
    text = path.read_text()
    found = [call for call in WRITES if call in text]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "open":
            modes = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "mode")]
            mode = modes[0] if modes else None
            if not (mode is None or (isinstance(mode, ast.Constant) and set(str(mode.value)) <= {"r", "b", "t"})):
                found.append(f"open(..., {ast.unparse(mode)}) at line {node.lineno}")
    return found


def test_the_write_check_sees_every_way_to_write(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "open(p)\nopen(p, 'rb')\nopen(p, mode='r')\nopen(p, 'w')\np.open(mode='a')\n"
        "p.write_text('x')\np.parent.mkdir()\n"
    )
    assert _writes(source) == ["write_text(", "mkdir(", "open(..., 'w') at line 4", "open(..., 'a') at line 5"]


# What the library writes, by file: only the build directory of its C++ call path, under the user's cache
# (torch's extension builder writes the build into it, as CuPy writes its kernel cache).
LIBRARY_WRITES = {"deepgemm/fast.py": ["mkdir("]}


def test_the_library_writes_no_files():
    """Records and tables are written by the tutorial (results/, and the package table from a checkout);
    an installed library only reads its package data, and builds its C++ call path in the user's cache."""
    offenders = {_relative(p): w for p in _sources("deepgemm") if (w := _writes(p))}
    assert offenders == LIBRARY_WRITES, f"deepgemm/ writes files: {offenders}"


def _module_file(module: str) -> Path | None:
    """The repository file of a project module, or None for a name that is not one (an attribute)."""
    base = REPO / module.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _closure(path: Path) -> set[str]:
    """Every project module a file imports, and the ones they import in turn (packages' __init__ too)."""
    seen, todo = set(), [path]
    while todo:
        for module in _imports(todo.pop()):
            if _package(module) not in PROJECT:
                continue
            parts = module.split(".")
            for name in (".".join(parts[: i + 1]) for i in range(len(parts))):
                found = _module_file(name)
                if found is not None and name not in seen:
                    seen.add(name)
                    todo.append(found)
    return seen


def test_the_closure_follows_imports_into_the_project():
    assert {"tutorial.runner", "tutorial.check"} <= _closure(REPO / "stages" / "v5_fused" / "__main__.py")


def test_a_stage_runs_without_the_cli():
    """`python -m stages.<stage>` checks and times one stage; the CLI (and all it imports) is not loaded."""
    mains = sorted((REPO / "stages").glob("*/__main__.py"))
    assert len(mains) == 6
    for main in mains:
        assert "tutorial.cli" not in _closure(main), main
