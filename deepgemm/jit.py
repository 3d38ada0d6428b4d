"""Compile a kernel source specialised by `-D` defines: the JIT of the seeds.

On a GPU, `get_kernel` compiles through CuPy's NVRTC backend. CuPy keeps compiled modules on disk keyed by
source and options, so a shape seen before costs a disk read; the map here keeps them in memory on top.
Without a GPU, `compile_file_report` runs the same NVRTC compile through the low-level bindings and returns
the cubin with ptxas's resource report (the tests read registers, spills and SASS from it).

A kernel exports what it fixes about its launch as `extern "C" __device__ const int` globals,
LAUNCH_THREADS and LAUNCH_SMEM_BYTES (and LAUNCH_STORE_ROWS / LAUNCH_STORE_COLS where it stores C through a
tensor map); `launch_facts` reads them back from the compiled module once per kernel, and
`CompileReport.launch_facts` from a cubin, so no launcher types them again.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import cupy
import numpy as np

from deepgemm.operands import SM90A, real_compute_capability

LIBRARY_KERNEL = Path(__file__).resolve().parent / "kernels" / "gemm_sm90.cu"  # what deepgemm.gemm runs on Hopper
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
LAUNCH_FACTS = (LAUNCH_THREADS, LAUNCH_SMEM_BYTES, LAUNCH_STORE_ROWS, LAUNCH_STORE_COLS)


@dataclass(frozen=True)
class LaunchFacts:
    """What a kernel source fixes about its launch: threads per block, dynamic shared memory in bytes, and
    the box (rows, columns) of C's tensor map where the kernel stores C with TMA (None: it takes a pointer)."""

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


def define_options(defines: Mapping[str, int]) -> tuple[str, ...]:
    return tuple(f"-D{name}={int(value)}" for name, value in sorted(defines.items()))


def device_arch() -> str:
    """The NVRTC target for the current GPU: `sm_90a` on Hopper (wgmma, setmaxnreg), else `sm_XY`.

    The GPU's real capability, never DEEPGEMM_CC's: a cubin loads only on the architecture it was built for,
    so an H200 told it is 8.0 must still get sm_90a code. Built for sm_90a, the sm_80 kernel and v0 to v2
    are the same source an sm_80 card compiles (their instructions are in every architecture since 8.0), so
    forcing their branch on an H200 tests the code a reader's GPU runs; only the SASS differs."""
    cc = real_compute_capability()
    return "sm_90a" if cc == SM90A else f"sm_{cc[0]}{cc[1]}"


@cache
def include_options() -> tuple[str, ...]:
    """-I for cuda_fp16.h where the nvidia-cuda-runtime wheel or a toolkit has it (CuPy also looks in a
    toolkit of its own finding): an installed package compiles without a toolkit."""
    try:
        return (f"-I{cuda_include_dir()}",)
    except RuntimeError:
        return ()


_modules: dict[tuple, cupy.RawModule] = {}
_kernels: dict[tuple, cupy.RawKernel] = {}
_facts: dict[tuple, LaunchFacts] = {}


def _key(path: Path, defines: Mapping[str, int]) -> tuple:
    return str(path), device_arch(), tuple(sorted(defines.items())), compile_options()


def get_module(path: Path, defines: Mapping[str, int]) -> cupy.RawModule:
    """The kernel source at `path` compiled for the current GPU with these defines (cached)."""
    key = _key(path, defines)
    if key not in _modules:
        options = (f"-arch={key[1]}", *key[3], *include_options(), *define_options(defines))
        _modules[key] = cupy.RawModule(code=path.read_text(), options=options, backend="nvrtc")
    return _modules[key]


def get_kernel(path: Path, defines: Mapping[str, int], name: str = ENTRY_POINT) -> cupy.RawKernel:
    """The source's `gemm_kernel` (or another of its kernels) compiled for the current GPU (cached)."""
    key = (*_key(path, defines), name)
    if key not in _kernels:
        _kernels[key] = get_module(path, defines).get_function(name)
    return _kernels[key]


def module_of(kernel: cupy.RawKernel) -> cupy.RawModule:
    """The module `get_kernel` took `kernel` from (for its globals, e.g. a kernel's timeline stamps)."""
    for key, found in _kernels.items():
        if found is kernel:
            return _modules[key[:-1]]
    raise KeyError("this kernel was not compiled by deepgemm.jit.get_kernel")


def launch_facts(path: Path, defines: Mapping[str, int]) -> LaunchFacts:
    """The LAUNCH_* globals of the source compiled with these defines, read back from the module on the GPU
    once per compiled kernel. RuntimeError where the kernel lacks threads or shared memory."""
    key = _key(path, defines)
    if key not in _facts:
        module = get_module(path, defines)
        try:
            _facts[key] = LaunchFacts.from_globals(lambda name: find_global_int(module, name))
        except KeyError as missing:
            what = f'{missing.args[0]}: an extern "C" __device__ const int'
            raise RuntimeError(f"{path.name} lacks a launch fact ({what})") from None
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
    """Where cuda_fp16.h lives: the nvidia-cuda-runtime wheel's headers or the toolkit's include folder."""
    from cuda.pathfinder import find_nvidia_header_directory  # comes with CuPy; looked up once

    found = find_nvidia_header_directory("cudart")
    if found is None:
        raise RuntimeError("cuda_fp16.h not found: install the CUDA toolkit or nvidia-cuda-runtime")
    return found


def compile_file_report(
    path: Path, defines: Mapping[str, int], arch: str = "sm_90a", extra: tuple[str, ...] = (), name: str = ""
) -> CompileReport:
    """Compile the source at `path` without a GPU, through NVRTC with the options a GPU compile uses
    (`extra` besides, e.g. -lineinfo); RuntimeError with the compiler's log where it fails."""
    return _compile_text_report(path.read_text(), path.name, defines, arch, extra, name or path.name)


def _compile_text_report(
    text: str, file_name: str, defines: Mapping[str, int], arch: str, extra: tuple[str, ...], label: str
) -> CompileReport:
    from cupy.cuda import nvrtc  # CuPy's low-level NVRTC bindings, only for compiles without a GPU

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
    program = nvrtc.createProgram(text, f"{label}/{file_name}", [], [])
    try:
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError:
            raise RuntimeError(f"{label} failed to compile:\n{nvrtc.getProgramLog(program)}") from None
        log = nvrtc.getProgramLog(program)
        cubin = nvrtc.getCUBIN(program) + b"\0"  # the binding drops the cubin's last byte
    finally:
        nvrtc.destroyProgram(program)
    if "Used" not in log:
        raise RuntimeError(f"{label}: ptxas printed no resource report, so registers and spills are unknown:\n{log}")
    return CompileReport(cubin=cubin, log=log, **parse_ptxas(log))


def compile_source(source: str, defines: Mapping[str, int], arch: str = "sm_90a") -> CompileReport:
    """Compile kernel source text as a file is compiled (NVRTC, no GPU needed), from memory: the library
    writes no files."""
    return _compile_text_report(source, "kernel.cu", defines, arch, (), "kernel")


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
