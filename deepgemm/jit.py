"""Compile a stage's kernel.cu, specialised by `-D` defines: the JIT of the seeds.

On a GPU, `get_kernel` compiles through CuPy's NVRTC backend. CuPy keeps compiled modules on disk keyed by
source and options, so a shape seen before costs a disk read; the map here keeps them in memory on top.
Without a GPU, `compile_report` runs the same NVRTC compile through the low-level bindings and returns
the cubin with ptxas's resource report, for the tests and for reading SASS (`disassemble`).

The TMA stages (v3-v5) export what their kernel fixes about its launch as `extern "C" __device__ const int`
globals, LAUNCH_THREADS and LAUNCH_SMEM_BYTES; `launch_facts` reads them back from the compiled module
(once per compiled kernel) and `CompileReport.launch_facts` from a cubin, so no launcher types them again.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import cupy
import numpy as np

STAGES_DIR = Path(__file__).resolve().parent.parent / "stages"
ENTRY_POINT = "gemm_kernel"
BASE_OPTIONS = ("-std=c++17",)
# CuPy adds these to every RawModule it compiles; a compile without a GPU adds them too, so that its SASS
# is the SASS that runs (-ftz=true flushes fp32 denormals: FFMA.FTZ, not FFMA).
CUPY_ADDED_OPTIONS = ("-ftz=true",)
LINEINFO_ENV = "DEEPGEMM_LINEINFO"  # "1": kernels also carry a line table (-lineinfo), for ncu's source view


def compile_options() -> tuple[str, ...]:
    """BASE_OPTIONS, and -lineinfo where LINEINFO_ENV asks for it (the SASS stays the same: a CPU test)."""
    return (*BASE_OPTIONS, "-lineinfo") if os.environ.get(LINEINFO_ENV) == "1" else BASE_OPTIONS


LAUNCH_THREADS = "LAUNCH_THREADS"  # threads per block
LAUNCH_SMEM_BYTES = "LAUNCH_SMEM_BYTES"  # dynamic shared memory the kernel needs, alignment slack included
LAUNCH_STORE_ROWS = "LAUNCH_STORE_ROWS"  # the box C is stored in through TMA, rows x columns (elements);
LAUNCH_STORE_COLS = "LAUNCH_STORE_COLS"  # only kernels that store C with TMA export them

_modules: dict[tuple, cupy.RawModule] = {}
_kernels: dict[tuple, cupy.RawKernel] = {}
_facts: dict[tuple, LaunchFacts] = {}


@dataclass(frozen=True)
class LaunchFacts:
    """What a kernel.cu fixes about its launch: threads per block, dynamic shared memory in bytes, and the
    box (rows, columns) of C's tensor map where the kernel stores C with TMA (None: it takes a pointer)."""

    threads: int
    smem_bytes: int
    store_box: tuple[int, int] | None = None

    @classmethod
    def from_globals(cls, read: Callable[[str], int | None]) -> LaunchFacts:
        """The facts from `read(name)`, a kernel global's value or None where the kernel has no such global."""
        threads, smem, rows, cols = (read(name) for name in LAUNCH_FACTS)
        if threads is None or smem is None:
            raise KeyError(f"no symbol {LAUNCH_THREADS if threads is None else LAUNCH_SMEM_BYTES}")
        return cls(threads, smem, (rows, cols) if rows and cols else None)


LAUNCH_FACTS = (LAUNCH_THREADS, LAUNCH_SMEM_BYTES, LAUNCH_STORE_ROWS, LAUNCH_STORE_COLS)


def kernel_path(stage: str) -> Path:
    path = STAGES_DIR / stage / "kernel.cu"
    if not path.is_file():
        raise ValueError(f"no kernel for stage {stage!r} at {path}")
    return path


def define_options(defines: Mapping[str, int]) -> tuple[str, ...]:
    return tuple(f"-D{name}={int(value)}" for name, value in sorted(defines.items()))


def device_arch() -> str:
    """The NVRTC target for the current GPU: `sm_90a` on Hopper (wgmma, setmaxnreg), else `sm_XY`."""
    cc = cupy.cuda.Device().compute_capability
    return "sm_90a" if cc == "90" else f"sm_{cc}"


def _key(stage: str, defines: Mapping[str, int]) -> tuple:
    return stage, device_arch(), tuple(sorted(defines.items())), compile_options()


def get_module(stage: str, defines: Mapping[str, int]) -> cupy.RawModule:
    """The stage's kernel.cu compiled for the current GPU with these defines (cached)."""
    key = _key(stage, defines)
    if key not in _modules:
        source = kernel_path(stage).read_text()
        options = (f"-arch={key[1]}", *key[3], *define_options(defines))
        _modules[key] = cupy.RawModule(code=source, options=options, backend="nvrtc")
    return _modules[key]


def get_kernel(stage: str, defines: Mapping[str, int], name: str = ENTRY_POINT) -> cupy.RawKernel:
    """The stage's `gemm_kernel` (or another of its kernels) compiled for the current GPU with these defines
    (cached)."""
    key = (*_key(stage, defines), name)
    if key not in _kernels:
        _kernels[key] = get_module(stage, defines).get_function(name)
    return _kernels[key]


def module_of(kernel: cupy.RawKernel) -> cupy.RawModule:
    """The module `get_kernel` took `kernel` from (for its globals, e.g. a kernel's timeline stamps)."""
    for key, found in _kernels.items():
        if found is kernel:
            return _modules[key[:-1]]
    raise KeyError("this kernel was not compiled by deepgemm.jit.get_kernel")


def launch_facts(stage: str, defines: Mapping[str, int]) -> LaunchFacts:
    """The LAUNCH_* globals of the stage's kernel compiled with these defines, read back from the module on
    the GPU once per compiled kernel. RuntimeError where the kernel lacks threads or shared memory."""
    key = _key(stage, defines)
    if key not in _facts:
        module = get_module(stage, defines)
        try:
            _facts[key] = LaunchFacts.from_globals(lambda name: find_global_int(module, name))
        except KeyError as missing:
            what = f'{missing.args[0]}: an extern "C" __device__ const int'
            raise RuntimeError(f"{stage}/kernel.cu lacks a launch fact ({what})") from None
    return _facts[key]


def find_global_int(module: cupy.RawModule, name: str) -> int | None:
    """The value of an `extern "C" __device__ const int` of a compiled module (4 bytes copied to the host),
    or None where the module has no such global."""
    try:
        pointer = module.get_global(name)
    except cupy.cuda.driver.CUDADriverError:
        return None
    value = np.zeros(1, dtype=np.int32)
    runtime = cupy.cuda.runtime
    runtime.memcpy(value.ctypes.data, pointer.ptr, value.nbytes, runtime.memcpyDeviceToHost)
    return int(value[0])


@dataclass(frozen=True)
class CompileReport:
    """What NVRTC and ptxas said about one compile."""

    cubin: bytes
    log: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    static_smem_bytes: int

    def global_int(self, name: str) -> int:
        """The initial value of an `extern "C" __device__ const int` in the cubin (`cubin_global_int`)."""
        return cubin_global_int(self.cubin, name)

    def launch_facts(self) -> LaunchFacts:
        """The LAUNCH_* globals, as `launch_facts` reads them on a GPU; KeyError without threads or memory."""

        def read(name: str) -> int | None:
            try:
                return self.global_int(name)
            except KeyError:
                return None

        return LaunchFacts.from_globals(read)


_PTXAS_PATTERNS = {
    "registers": r"Used (\d+) registers",
    "stack_bytes": r"(\d+) bytes stack frame",
    "spill_stores": r"(\d+) bytes spill stores",
    "spill_loads": r"(\d+) bytes spill loads",
    "static_smem_bytes": r"(\d+) bytes smem",
}


def parse_ptxas(log: str) -> dict[str, int]:
    """Registers, spills, stack and static shared memory from a `ptxas -v` report (0 where absent)."""
    return {name: int(m.group(1)) if (m := re.search(pat, log)) else 0 for name, pat in _PTXAS_PATTERNS.items()}


@cache
def cuda_include_dir() -> str:
    """Where cuda_fp16.h lives: the toolkit's include folder or the nvidia-cuda-runtime wheel's."""
    from cuda.pathfinder import find_nvidia_header_directory  # only for compiles without a GPU (tests)

    found = find_nvidia_header_directory("cudart")
    if found is None:
        raise RuntimeError("cuda_fp16.h not found: install the CUDA toolkit or nvidia-cuda-runtime")
    return found


def compile_report(
    stage: str, defines: Mapping[str, int], arch: str = "sm_90a", options: tuple[str, ...] = ()
) -> CompileReport:
    """Compile a stage without a GPU through NVRTC (`options` besides the usual, e.g. -lineinfo); raises
    RuntimeError with the compiler log on failure."""
    return compile_file_report(kernel_path(stage), stage, defines, arch, options)


def compile_file_report(
    path: Path, name: str, defines: Mapping[str, int], arch: str = "sm_90a", extra: tuple[str, ...] = ()
) -> CompileReport:
    """Compile any .cu file as `compile_report` compiles a stage (the harness's own probe kernels too)."""
    from cupy.cuda import nvrtc  # CuPy's low-level NVRTC bindings, only for compiles without a GPU

    source = path.read_text()
    options = [
        f"-arch={arch}",
        *BASE_OPTIONS,
        *CUPY_ADDED_OPTIONS,
        *extra,
        f"-I{cuda_include_dir()}",
        "--ptxas-options=-v",
        "--no-cache",  # NVRTC 12.9+ may reuse an earlier compile, and then ptxas runs and reports nothing
        *define_options(defines),
    ]
    program = nvrtc.createProgram(source, f"{name}/{path.name}", [], [])
    try:
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError:
            raise RuntimeError(f"{name} failed to compile:\n{nvrtc.getProgramLog(program)}") from None
        log = nvrtc.getProgramLog(program)
        cubin = nvrtc.getCUBIN(program) + b"\0"  # the binding drops the cubin's last byte
    finally:
        nvrtc.destroyProgram(program)
    if "Used" not in log:
        raise RuntimeError(f"{name}: ptxas printed no resource report, so registers and spills are unknown:\n{log}")
    return CompileReport(cubin=cubin, log=log, **parse_ptxas(log))


def compile_source(source: str, defines: Mapping[str, int], arch: str = "sm_90a") -> CompileReport:
    """Compile kernel source text as a stage is compiled (NVRTC, no GPU needed)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cu"
        path.write_text(source)
        return compile_file_report(path, "kernel", defines, arch)


def binary_utility(name: str) -> str:
    """A CUDA binary utility, cuobjdump or nvdisasm: the nvidia-cuda-<name> wheel that `make test` installs,
    or the toolkit's."""
    from cuda.pathfinder import find_nvidia_binary_utility  # only for reading SASS (tests, notebooks)

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


_SHT_SYMTAB = 2
_SHT_NOBITS = 8


def cubin_global_int(cubin: bytes, name: str) -> int:
    """The initial value of a 4-byte global `name` in a cubin (a 64-bit little-endian ELF): its symbol in the
    symbol table gives its section and offset, and the section's bytes hold the value (a global initialised
    to 0 sits in a zero-filled section with no bytes). KeyError names a symbol the cubin does not have."""
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != _SHT_SYMTAB:
            continue
        strings = sections[link][4]
        for entry in range(offset, offset + size, entsize):
            name_at, _sym_info, _other, index, value, _size = struct.unpack_from("<IBBHQQ", cubin, entry)
            end = cubin.index(b"\0", strings + name_at)
            if cubin[strings + name_at : end].decode() == name:
                if sections[index][1] == _SHT_NOBITS:
                    return 0
                (found,) = struct.unpack_from("<i", cubin, sections[index][4] + value)
                return found
    raise KeyError(f"the cubin has no symbol {name}")
