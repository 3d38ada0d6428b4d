"""The wheel is the library and nothing else, and it works installed: built here, installed into a fresh
virtual environment, imported from another directory, its kernel compiled there through NVRTC."""

from __future__ import annotations

import email
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The package's wheel, built without network access (setuptools from the dev environment)."""
    pytest.importorskip("setuptools", reason="the wheel is built with the dev environment's setuptools")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out)], check=True, capture_output=True)  # fmt: skip
    (found,) = out.glob("deepgemm_staged-*.whl")
    return found


def test_the_wheel_holds_the_library_alone(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"deepgemm"}, f"the wheel installs top-level packages {sorted(top)}"
    assert "deepgemm/kernels/gemm_sm90.cu" in names
    assert "deepgemm/csrc/fast_call.cpp" in names  # built on the caller's machine (deepgemm.fast)
    assert "deepgemm/kernels/tables/h200/autotune.json" in names
    assert not any(name.startswith(("stages/", "tutorial/", "lab/")) or "results/" in name for name in names)


def test_the_cuda_extras_bring_cupy_and_nvrtc(wheel):
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        requires = email.message_from_bytes(archive.read(meta)).get_all("Requires-Dist")
    extras = {"cuda13": ("cupy-cuda13x", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime"),
              "cuda12": ("cupy-cuda12x", "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12")}
    for extra, packages in extras.items():
        declared = [r for r in requires if f'extra == "{extra}"' in r]
        for package in packages:
            assert any(r.startswith(package) for r in declared), f"[{extra}] lacks {package}: {declared}"
    assert not any(r.startswith("matplotlib") and "extra" not in r for r in requires)


INSTALLED_CHECK = textwrap.dedent(
    """
    import importlib.util, pathlib, sys
    import deepgemm
    from deepgemm import heuristic, jit
    here = pathlib.Path(deepgemm.__file__).resolve().parent
    assert here.parent == pathlib.Path(sys.argv[1]).resolve(), here
    for name in ("tutorial", "stages", "lab"):
        assert importlib.util.find_spec(name) is None, name + " is importable from an installed library"
    assert heuristic.table_path("NVIDIA H200").is_file()
    cfg, source = heuristic.pick_config(1, 4096, 4096, "fp16", "NVIDIA H200", 132, b_mn_major=False)
    assert source == "table", source
    report = jit.compile_file_report(jit.LIBRARY_KERNEL, {"SPLIT_K": 2, "DTYPE_BF16": 1}, name="library")
    assert report.registers > 0 and report.spill_stores == 0, report.log
    print("ok", here)
    """
)


def lend_dependencies(site: Path) -> None:
    """This environment's installed packages, linked into a fresh one's site-packages (nothing downloaded;
    NVRTC's finder looks in site-packages folders, not along sys.path), all but this project's own."""
    for source in sorted({Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()}):
        for entry in source.iterdir():
            own = entry.name.startswith(("deepgemm", "__editable__", "_deepgemm")) or entry.suffix == ".pth"
            if not own and not (site / entry.name).exists():
                (site / entry.name).symlink_to(entry)


def test_the_installed_wheel_imports_and_compiles_its_kernel_elsewhere(wheel, tmp_path):
    """A fresh environment with the wheel installed and this one's dependencies lent to it, run from a
    directory outside the repository."""
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    site = next((env / "lib").glob("python*/site-packages"))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--no-deps",
                    "-q", str(wheel)], check=True, capture_output=True)  # fmt: skip
    lend_dependencies(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    python = str(env / "bin" / "python")
    done = subprocess.run([python, "-c", INSTALLED_CHECK, str(site)], cwd=elsewhere, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    shown = subprocess.run([python, "-m", "deepgemm", "1", "4096", "4096"], cwd=elsewhere, capture_output=True,
                           text=True)  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "from the table" in shown.stdout
