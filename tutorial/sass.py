"""Reading a compiled kernel's machine code: cuobjdump and nvdisasm on a cubin."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path


def binary_utility(name: str) -> str:
    """A CUDA binary utility, cuobjdump or nvdisasm: the nvidia-cuda-<name> wheel that `make test` installs,
    or the toolkit's."""
    from cuda.pathfinder import find_nvidia_binary_utility  # comes with CuPy

    found = find_nvidia_binary_utility(name) or shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: `pip install nvidia-cuda-{name}` (make test does)")
    return found


def read_cubin(cubin: bytes, tool: str, *options: str) -> str:
    """What `tool options... file` prints for a cubin written to a temporary file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run([binary_utility(tool), *options, str(path)], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip


def disassemble(cubin: bytes) -> str:
    """The SASS of a cubin, as `cuobjdump --dump-sass` prints it."""
    return read_cubin(cubin, "cuobjdump", "--dump-sass")
