"""The CUDA driver as the library's plans use it, through one binding (ctypes on libcuda).

What a plan asks of the driver: the GPU's limits (`device_limits`), a kernel's dynamic shared-memory limit
and how many of its clusters fit at once (`max_active_clusters`), tensor maps (`encode_tiled_2d`), and
launches from a parameter buffer laid out once (`RawLaunch`). CuPy's RawKernel packs its arguments anew on
every call (about 13 µs for three 128-byte tensor maps and five scalars); a `RawLaunch` call re-points only
what changed, a tensor map through `cuTensorMapReplaceAddress` and a pointer or a scalar by writing its
bytes, and calls `cuLaunchKernel`. Each of those costs well under a microsecond. Compiling and loading a
module is the JIT's (`deepgemm.jit`, through CuPy).
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

import cupy
import numpy as np

MAP_BYTES = 128  # a CUtensorMap, passed by value
MAP_ALIGN = 64  # cuTensorMapReplaceAddress and the kernel's __grid_constant__ both want 64-byte alignment
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_CONTEXT = 201  # no context current on this thread: it has not used the GPU yet


@cache
def libcuda() -> ctypes.CDLL:
    """The driver library, initialised, with the signatures of the entry points used here. RuntimeError where
    there is no driver (no GPU on this machine)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as err:
        raise RuntimeError(f"the CUDA driver (libcuda.so.1) is not installed here: {err}") from None
    ptr, i32 = ctypes.c_void_p, ctypes.c_int
    # cuLaunchKernel has no argtypes: `RawLaunch` passes ctypes objects, which need no conversion.
    lib.cuTensorMapReplaceAddress.argtypes = [ptr, ptr]
    u32, u64s, u32s = ctypes.c_uint, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint)
    lib.cuTensorMapEncodeTiled.argtypes = [ptr, i32, u32, ptr, u64s, u64s, u32s, u32s, *[i32] * 4]
    lib.cuGetErrorName.argtypes = [i32, ctypes.POINTER(ctypes.c_char_p)]
    lib.cuDeviceGetAttribute.argtypes = [ctypes.POINTER(i32), i32, i32]
    lib.cuFuncSetAttribute.argtypes = [ptr, i32, i32]
    lib.cuOccupancyMaxActiveClusters.argtypes = [ctypes.POINTER(i32), ptr, ctypes.POINTER(LaunchConfig)]
    lib.cuMemAllocAsync.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ptr]
    lib.cuMemFreeAsync.argtypes = [ctypes.c_uint64, ptr]
    lib.cuMemsetD32Async.argtypes = [ctypes.c_uint64, u32, ctypes.c_size_t, ptr]
    check_with(lib, lib.cuInit(0), "cuInit")
    return lib


def check(result: int, what: str) -> None:
    """RuntimeError naming the driver's error when `result` is not CUDA_SUCCESS."""
    check_with(libcuda(), result, what)


def check_with(lib: ctypes.CDLL, result: int, what: str) -> None:
    if result != CUDA_SUCCESS:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"{what} failed with {(name.value or b'an unknown error').decode()} ({result})")


class StreamMemory:
    """Device memory of the library's own on `device`, allocated and freed in a stream's order
    (cuMemAllocAsync, from the device's default pool), outside every framework's allocator: torch may be
    routing a thread's allocations into a CUDA graph's private pool (torch.compile's cudagraph trees warm a
    model up that way), where memory the library keeps past the call breaks the graph's accounting. Each call
    makes the device's primary context current first, so a thread new to the GPU may call it too."""

    def __init__(self, device: int) -> None:
        self.device = device

    def allocate(self, nbytes: int, stream: int) -> int:
        pointer = ctypes.c_uint64()
        with cupy.cuda.Device(self.device):
            status = libcuda().cuMemAllocAsync(ctypes.byref(pointer), nbytes, stream)
        check(status, f"cuMemAllocAsync of {nbytes} bytes")
        return pointer.value

    def zero(self, pointer: int, words: int, stream: int) -> None:
        with cupy.cuda.Device(self.device):
            check(libcuda().cuMemsetD32Async(pointer, 0, words, stream), "cuMemsetD32Async")

    def free(self, pointer: int, stream: int) -> None:
        with cupy.cuda.Device(self.device):
            check(libcuda().cuMemFreeAsync(pointer, stream), "cuMemFreeAsync")


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h): a grid, a block, dynamic shared memory, a stream and launch attributes."""

    _fields_ = [
        *[(name, ctypes.c_uint) for name in ("gridDimX", "gridDimY", "gridDimZ", "blockDimX", "blockDimY")],
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
        ("numAttrs", ctypes.c_uint),
    ]


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute (cuda.h): an id, padding to 8 bytes, and a 64-byte value (a union; the switch set
    here is its first 4 bytes)."""

    _fields_ = [
        ("id", ctypes.c_uint),
        ("pad", ctypes.c_char * 4),
        ("value", ctypes.c_int),
        ("rest", ctypes.c_char * 60),
    ]


LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID: programmatic dependent launch

# CUdevice_attribute and CUfunction_attribute values (cuda.h) read or set here.
ATTRIBUTE_SM_COUNT, ATTRIBUTE_SMEM_PER_BLOCK_OPTIN = 16, 97
ATTRIBUTE_CC_MAJOR, ATTRIBUTE_CC_MINOR = 75, 76
FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


# An H200 runs every branch a reader's GPU takes once the code believes it is that GPU: DEEPGEMM_CC="8.9" makes
# every reading of the capability (this module's limits, `deepgemm.operands.compute_capability`, and through them
# the library's dispatch, the stages' checks, the tutorial and the GPU tests) say 8.9. Only the JIT reads the
# real one (`deepgemm.jit.device_arch`): code must still be compiled for the GPU that runs it.
CC_ENV = "DEEPGEMM_CC"


def capability_override() -> tuple[int, int] | None:
    """DEEPGEMM_CC as (major, minor), or None where it is unset or empty; ValueError naming the variable where
    it is not "MAJOR.MINOR" (e.g. "8.0", "8.9", "12.0")."""
    text = os.environ.get(CC_ENV, "").strip()
    if not text:
        return None
    found = re.fullmatch(r"([0-9]{1,2})\.([0-9])", text)
    if found is None:
        raise ValueError(f"{CC_ENV}={text!r} is not a compute capability: write MAJOR.MINOR, e.g. 8.0, 8.9 or 12.0")
    return int(found[1]), int(found[2])


def effective_capability(real: tuple[int, int]) -> tuple[int, int]:
    """The compute capability the code goes by: DEEPGEMM_CC where set, else `real`, the GPU's own."""
    return capability_override() or real


@dataclass(frozen=True)
class DeviceLimits:
    """What a plan reads off a GPU: its SMs, the shared memory one block may use, its compute capability."""

    sm_count: int
    smem_per_block_optin: int
    compute_capability: tuple[int, int]


@cache
def device_limits(device: int) -> DeviceLimits:
    """The GPU's limits, asked once per device; its compute capability as the library goes by it
    (`effective_capability`: DEEPGEMM_CC where set)."""

    def attribute(which: int) -> int:
        value = ctypes.c_int()
        check(libcuda().cuDeviceGetAttribute(ctypes.byref(value), which, device), "cuDeviceGetAttribute")
        return value.value

    cc = effective_capability((attribute(ATTRIBUTE_CC_MAJOR), attribute(ATTRIBUTE_CC_MINOR)))
    return DeviceLimits(attribute(ATTRIBUTE_SM_COUNT), attribute(ATTRIBUTE_SMEM_PER_BLOCK_OPTIN), cc)


def allow_dynamic_smem(function: int, smem_bytes: int) -> None:
    """Let `function` (a CUfunction) launch with `smem_bytes` of dynamic shared memory (over 48 KB needs it)."""
    check(libcuda().cuFuncSetAttribute(ctypes.c_void_p(function), FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes),
          "cuFuncSetAttribute (dynamic shared memory)")  # fmt: skip


@cache
def max_active_clusters(function: int, cluster_size: int, threads: int, smem_bytes: int) -> int:
    """How many clusters of `function` (its compile-time cluster size) the GPU runs at once, from the
    driver's occupancy calculator: SMs come in GPCs, and a cluster must fit in one. Asked once per kernel."""
    allow_dynamic_smem(function, smem_bytes)
    config = LaunchConfig(cluster_size, 1, 1, threads, 1, 1, smem_bytes, None, None, 0)  # one cluster's grid
    clusters = ctypes.c_int()
    check(libcuda().cuOccupancyMaxActiveClusters(ctypes.byref(clusters), ctypes.c_void_p(function),
                                                 ctypes.byref(config)), "cuOccupancyMaxActiveClusters")  # fmt: skip
    if clusters.value < 1:
        raise RuntimeError(f"no cluster of {cluster_size} CTAs x {threads} threads, {smem_bytes} B fits this GPU")
    return clusters.value


# cuTensorMapEncodeTiled's enumerations (cuda.h), the values this library passes.
MAP_DATA_TYPES = {"float16": 6, "float32": 7, "bfloat16": 9}
MAP_SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
INTERLEAVE_NONE, L2_PROMOTION_256B, OOB_FILL_ZEROS = 0, 3, 0


def encode_tiled_2d(
    dtype_name: str, address: int, cols: int, rows: int, row_stride_bytes: int, box: tuple[int, int], swizzle: int
) -> bytes:
    """A 2-D CUtensorMap (128 bytes) of a row-major matrix read in boxes of box[0] rows x box[1] columns;
    out-of-bounds elements read as zeros. The caller has checked TMA's rules (`tma.tile_map_spec`)."""
    out = (ctypes.c_uint64 * (MAP_BYTES // 8 + MAP_ALIGN // 8))()  # room to align the map to 64 bytes
    start = ctypes.addressof(out) + (-ctypes.addressof(out) % MAP_ALIGN)
    check(
        libcuda().cuTensorMapEncodeTiled(
            start,
            MAP_DATA_TYPES[dtype_name],
            2,
            address,
            (ctypes.c_uint64 * 2)(cols, rows),  # innermost first
            (ctypes.c_uint64 * 1)(row_stride_bytes),
            (ctypes.c_uint * 2)(box[1], box[0]),
            (ctypes.c_uint * 2)(1, 1),
            INTERLEAVE_NONE,
            MAP_SWIZZLES[swizzle],
            L2_PROMOTION_256B,
            OOB_FILL_ZEROS,
        ),
        f"cuTensorMapEncodeTiled ({rows} x {cols} {dtype_name}, box {box[0]} x {box[1]}, swizzle {swizzle})",
    )
    return ctypes.string_at(start, MAP_BYTES)


def _parameter_bytes(arg: object) -> bytes:
    """What the kernel receives for one argument: a map's 128 bytes, an array's device pointer, a scalar."""
    if isinstance(arg, cupy.ndarray):
        return np.uint64(arg.data.ptr).tobytes()
    if isinstance(arg, (np.generic, np.void)):
        return arg.tobytes()
    raise TypeError(f"a kernel argument must be a CuPy array or a NumPy scalar, got {type(arg).__name__}")


class RawLaunch:
    """One kernel's launch: grid, block, dynamic shared memory and a parameter buffer that calls re-point.

    Not thread-safe by itself: a caller that shares one between threads holds a lock from the first write
    to the launch (the driver copies the parameters when `launch` returns).
    """

    def __init__(
        self, function: int, grid: int, block: int, shared_mem: int, args: Sequence[object], programmatic: bool = False
    ) -> None:
        self.function, self.grid, self.block, self.shared_mem = function, grid, block, shared_mem
        self.programmatic = programmatic
        # With programmatic dependent launch, cuLaunchKernelEx's config with the one attribute, built once.
        self._attribute = LaunchAttribute(LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, b"", 1)
        self._config = LaunchConfig(grid, 1, 1, block, 1, 1, shared_mem, None,
                                    ctypes.addressof(self._attribute), 1)  # fmt: skip
        # cuLaunchKernel's arguments but the stream, converted to ctypes once rather than on every call.
        u32 = ctypes.c_uint
        self._before_stream = (ctypes.c_void_p(function), u32(grid), u32(1), u32(1), u32(block), u32(1), u32(1))
        self._before_stream += (u32(shared_mem),)
        raw = [_parameter_bytes(arg) for arg in args]
        offsets, end = [], 0
        for value in raw:
            align = MAP_ALIGN if len(value) == MAP_BYTES else len(value)
            end += -end % align
            offsets.append(end)
            end += len(value)
        self.size = end  # the parameters' bytes, from the first
        self.slots: dict[str, tuple[int, str]] = {}  # what `setters` made writers for: name -> (position, kind)
        self._storage = (ctypes.c_uint8 * (end + MAP_ALIGN))()  # kept alive: the driver reads from it
        base = ctypes.addressof(self._storage)
        base += -base % MAP_ALIGN
        self.addresses = [base + offset for offset in offsets]
        for address, value in zip(self.addresses, raw, strict=True):
            ctypes.memmove(address, value, len(value))
        self._params = (ctypes.c_void_p * len(raw))(*self.addresses)
        self._mapped = {i: None for i, value in enumerate(raw) if len(value) == MAP_BYTES}  # slot -> address

    def repoint_map(self, slot: int, address: int) -> None:
        """Point the tensor map in `slot` at `address` (same shape, strides and box); skipped when it already is."""
        if self._mapped[slot] != address:
            check(libcuda().cuTensorMapReplaceAddress(self.addresses[slot], address), "cuTensorMapReplaceAddress")
            self._mapped[slot] = address

    def u64(self, slot: int) -> ctypes.c_uint64:
        """A handle whose `.value` writes the 8-byte parameter in `slot` (a pointer)."""
        return ctypes.c_uint64.from_address(self.addresses[slot])

    def f32(self, slot: int) -> ctypes.c_float:
        """A handle whose `.value` writes the float parameter in `slot`."""
        return ctypes.c_float.from_address(self.addresses[slot])

    def setters(self, slots: dict[str, tuple[int, str]]) -> list[tuple[str, Callable[[Any], None]]]:
        """For each named slot (position, kind "map" / "ptr" / "f32"), a function that writes a call's value."""
        found = []
        self.slots = dict(slots)
        for name, (slot, kind) in slots.items():
            if kind == "map":
                found.append((name, partial(self.repoint_map, slot)))
            else:
                handle = self.u64(slot) if kind == "ptr" else self.f32(slot)
                found.append((name, partial(setattr, handle, "value")))
        return found

    def launch(self, stream: int) -> int:
        """cuLaunchKernel on `stream` (a CUstream handle; 0 is the legacy default stream), or cuLaunchKernelEx
        with programmatic dependent launch: its CUresult."""
        if self.programmatic:
            self._config.hStream = stream
            return libcuda().cuLaunchKernelEx(ctypes.byref(self._config), self._before_stream[0], self._params, None)
        return libcuda().cuLaunchKernel(*self._before_stream, ctypes.c_void_p(stream), self._params, None)
