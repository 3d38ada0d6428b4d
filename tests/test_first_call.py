"""The first call in a fresh process, without a GPU: the script and its order, the subprocess's command and
environment, and the real subprocess on fake torch, CuPy and deepgemm modules."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tutorial import first_call


def test_the_first_call_script_times_the_import_and_the_call_but_not_the_framework():
    source = first_call.script(4096, 2048, 1024, "bf16", "torch")
    compile(source, "<first call>", "exec")  # valid Python
    steps = ("import torch", "start = time.perf_counter()", "import deepgemm", "imported = time.perf_counter()",
             "deepgemm.gemm(a, b)", "synchronize()\ndone")  # fmt: skip
    order = [source.index(step) for step in steps]
    assert order == sorted(order)
    assert "(4096, 1024)" in source and "(1024, 2048)" in source and "torch.bfloat16" in source
    assert "ml_dtypes.bfloat16" in first_call.script(8, 8, 8, "bf16", "cupy")
    with pytest.raises(ValueError, match="framework 'jax'"):
        first_call.script(8, 8, 8, "fp16", "jax")


def test_the_first_call_runs_in_this_interpreter_with_its_own_cache_directory(tmp_path):
    cmd = first_call.command(64, 64, 64, "fp16", "cupy")
    assert cmd[:2] == [sys.executable, "-c"] and cmd[2] == first_call.script(64, 64, 64, "fp16", "cupy")
    env = first_call.environment(tmp_path, {"PATH": "/bin", "CUPY_CACHE_IN_MEMORY": "1"})
    assert env == {"PATH": "/bin", "CUPY_CACHE_DIR": str(tmp_path), "CUPY_CACHE_IN_MEMORY": "0"}


FAKE_MODULES = {  # what the script imports, faked: a gemm that compiles through CuPy's private function
    "torch.py": """
        class _Tensor:
            def __mul__(self, other): return self
            __sub__ = __mul__
        float16 = bfloat16 = None
        def rand(shape, device, dtype): return _Tensor()
        class cuda:
            synchronize = staticmethod(lambda: None)
    """,
    "cupy/__init__.py": "",
    "cupy/cuda/__init__.py": "",
    "cupy/cuda/compiler.py": "def _compile_using_nvrtc_no_warning(source): return b'cubin'",
    "deepgemm/__init__.py": """
        import cupy.cuda.compiler as compiler
        def gemm(a, b):
            compiler._compile_using_nvrtc_no_warning('kernel')
            return a
    """,
}


def test_the_first_call_script_runs_and_counts_nvrtc_compiles(tmp_path):
    """The real subprocess, on fake torch, CuPy and deepgemm modules in its working directory."""
    for name, source in FAKE_MODULES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(source))
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "kernel.cubin").write_bytes(b"cubin")
    row = first_call.run_once(cache, "cold", (8, 16, 32), "fp16", "torch", cwd=tmp_path)
    assert row["nvrtc_compiles"] == 1 and row["cache_files"] == 1
    assert (row["mode"], row["framework"], row["m"], row["n"], row["k"]) == ("cold", "torch", 8, 16, 32)
    assert 0 <= row["import_s"] < 5 and 0 <= row["first_call_s"] < 5


def test_a_failed_first_call_names_its_mode_and_error(tmp_path):
    def failed(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="RuntimeError: no GPU")

    with pytest.raises(RuntimeError, match=r"warm first-call subprocess failed \(1\): RuntimeError: no GPU"):
        first_call.run_once(tmp_path, "warm", runner=failed)
    assert first_call.parse('log line\n{"import_s": 0.1}\n') == {"import_s": 0.1}
