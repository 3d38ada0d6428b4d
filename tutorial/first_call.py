"""The first call in a fresh process: `import deepgemm` and the first `deepgemm.gemm`, cold and warm.

Each runs in an interpreter of its own (`sys.executable -c SCRIPT`) with CUPY_CACHE_DIR pointing at one
temporary directory: first empty ("cold": NVRTC compiles the kernel, CuPy writes the cubin there), then
again ("warm": the cubin is read back from disk). The caller's framework is imported and its inputs made
before the clock starts, since a caller has both already; the first call's time runs until the GPU has
finished it. The script also counts the compiles CuPy runs on a cache miss: its `_compile_with_cache_cuda`
calls `cupy.cuda.compiler._compile_using_nvrtc_no_warning` (not the public `compile_using_nvrtc`) only
when the disk has no cubin for the source and options, so a warm process shows none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from string import Template
from typing import Any

from tutorial.results import REPO

SHAPE = (4096, 4096, 4096)
DTYPE = "fp16"
FRAMEWORK = "torch"  # the caller issue 14 measures: a PyTorch model
MODES = ("cold", "warm")
TIMEOUT_S = 300

INPUTS = {  # imports the framework, makes a (M, K) and b (K, N) row-major, defines synchronize()
    "torch": Template("""
import torch
a = torch.rand(($m, $k), device="cuda", dtype=torch.$torch_dtype) * 2 - 1
b = torch.rand(($k, $n), device="cuda", dtype=torch.$torch_dtype) * 2 - 1
synchronize = torch.cuda.synchronize
"""),
    "cupy": Template("""
import cupy, ml_dtypes, numpy
rng = cupy.random.default_rng(0)
a = (rng.random(($m, $k), dtype=cupy.float32) * 2 - 1).astype($cupy_dtype)
b = (rng.random(($k, $n), dtype=cupy.float32) * 2 - 1).astype($cupy_dtype)
synchronize = cupy.cuda.Device().synchronize
"""),
}
DTYPES = {"fp16": {"torch_dtype": "float16", "cupy_dtype": "numpy.float16"},
          "bf16": {"torch_dtype": "bfloat16", "cupy_dtype": "ml_dtypes.bfloat16"}}  # fmt: skip

CLOCKED = """
import json, time


def count_nvrtc_compiles():
    import cupy.cuda.compiler as compiler  # deepgemm compiles through CuPy: loaded by now, or by the call

    compile_ = getattr(compiler, "_compile_using_nvrtc_no_warning", None)
    if compile_ is None:  # a CuPy without it: the count is unknown, not zero
        return None
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return compile_(*args, **kwargs)

    compiler._compile_using_nvrtc_no_warning = counted
    return calls


synchronize()
start = time.perf_counter()
import deepgemm
imported = time.perf_counter()
compiles = count_nvrtc_compiles()
c = deepgemm.gemm(a, b)
synchronize()
done = time.perf_counter()
print(json.dumps({"import_s": imported - start, "first_call_s": done - imported,
                  "nvrtc_compiles": None if compiles is None else len(compiles)}))
"""


def script(m: int, n: int, k: int, dtype_name: str, framework: str) -> str:
    """The Python source the subprocess runs: inputs made, then `import deepgemm` and the first call timed."""
    if framework not in INPUTS:
        raise ValueError(f"framework {framework!r} is none of {tuple(INPUTS)}")
    if dtype_name not in DTYPES:
        raise ValueError(f"dtype {dtype_name!r} is none of {tuple(DTYPES)}")
    return INPUTS[framework].substitute(m=m, n=n, k=k, **DTYPES[dtype_name]) + CLOCKED


def command(m: int, n: int, k: int, dtype_name: str, framework: str) -> list[str]:
    """The subprocess: this interpreter, running `script`."""
    return [sys.executable, "-c", script(m, n, k, dtype_name, framework)]


def environment(cache_dir: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (this process's environment) with CuPy's kernel cache on disk in `cache_dir`."""
    env = dict(os.environ if base is None else base)
    env.update(CUPY_CACHE_DIR=str(cache_dir), CUPY_CACHE_IN_MEMORY="0")  # in memory would bypass the disk
    return env


def parse(stdout: str) -> dict[str, Any]:
    """The script's result: the JSON object on its last line of output."""
    lines = stdout.strip().splitlines()
    if not lines:
        raise RuntimeError("the first-call subprocess printed nothing")
    return json.loads(lines[-1])


def run_once(
    cache_dir: Path,
    mode: str,
    shape: tuple[int, int, int] = SHAPE,
    dtype_name: str = DTYPE,
    framework: str = FRAMEWORK,
    *,
    cwd: Path = REPO,
    runner: Callable[..., subprocess.CompletedProcess] = subprocess.run,
) -> dict[str, Any]:
    """One fresh process's first call with CuPy's disk cache in `cache_dir`, as a row (`mode` names the
    cache's state). Run from `cwd`, the repository, so that the child imports the same deepgemm."""
    m, n, k = shape
    done = runner(
        command(m, n, k, dtype_name, framework),
        env=environment(cache_dir),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} first-call subprocess failed ({done.returncode}): {done.stderr[-2000:]}")
    cache_files = sum(1 for path in Path(cache_dir).rglob("*") if path.is_file())
    return {"mode": mode, "framework": framework, "dtype": dtype_name, "m": m, "n": n, "k": k,
            **parse(done.stdout), "cache_files": cache_files}  # fmt: skip


def first_call_rows(
    shape: tuple[int, int, int] = SHAPE,
    dtype_name: str = DTYPE,
    framework: str = FRAMEWORK,
    *,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """The first call cold (an empty cache directory) and then warm (the same directory), one row each."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="deepgemm-cupy-cache-") as cache_dir:
        for mode in MODES:
            rows.append(run_once(Path(cache_dir), mode, shape, dtype_name, framework))
            row = rows[-1]
            log(f"  first call, {mode}: import {row['import_s']:.3f} s, call {row['first_call_s']:.3f} s, "
                f"{row['nvrtc_compiles']} NVRTC compiles")  # fmt: skip
    return rows
