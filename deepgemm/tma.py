"""Tensor-map descriptors for TMA (`cp.async.bulk.tensor`), built on the host and passed by value.

A kernel takes a map as `const __grid_constant__ TmaDesc` (128 bytes, 64-byte aligned); CuPy passes the
128 raw bytes as a NumPy void scalar. `tile_map_spec` is the pure part (dimensions, strides, box, checked
against TMA's rules) and runs anywhere; `encode_tile_map` asks the driver for the descriptor.
"""

from __future__ import annotations

from dataclasses import dataclass

import cupy
import numpy as np

from deepgemm.driver import encode_tiled_2d
from deepgemm.dtypes import BFLOAT16, FLOAT16, FLOAT32
from deepgemm.model import round_up

DESCRIPTOR_BYTES = 128
MAX_BOX_ROWS = 256  # a TMA box has at most 256 elements along each dimension
SWIZZLE_SPAN_BYTES = {0: None, 32: 32, 64: 64, 128: 128}  # a swizzled box row is at most the span


@dataclass(frozen=True)
class TileMapSpec:
    """A 2-D row-major matrix (rows x cols, row stride in bytes) read in boxes of box_rows x box_cols."""

    rows: int
    cols: int
    row_stride_bytes: int
    box_rows: int
    box_cols: int
    swizzle_bytes: int
    itemsize: int = 2


def tile_map_spec(
    shape: tuple[int, int],
    strides: tuple[int, int],
    ptr: int,
    itemsize: int,
    box_rows: int,
    box_cols: int,
    swizzle_bytes: int,
) -> TileMapSpec:
    """Check a matrix (shape, byte strides, address) and a box against TMA's rules; ValueError names the rule."""
    if len(shape) != 2 or strides[1] != itemsize:
        raise ValueError(f"TMA needs a row-major matrix with unit column stride, got strides {strides}")
    if ptr % 16:
        raise ValueError(f"TMA needs a 16-byte aligned base address, got {ptr:#x}")
    if strides[0] % 16:
        raise ValueError(f"TMA needs a row stride that is a multiple of 16 bytes, got {strides[0]}")
    if strides[0] < shape[1] * itemsize:
        raise ValueError(f"TMA needs rows apart, a row stride of at least one row's {shape[1] * itemsize} bytes, "
                         f"got {strides[0]}")  # fmt: skip
    if swizzle_bytes not in SWIZZLE_SPAN_BYTES:
        raise ValueError(f"swizzle must be one of {tuple(SWIZZLE_SPAN_BYTES)} bytes, got {swizzle_bytes}")
    if not (1 <= box_rows <= MAX_BOX_ROWS and 1 <= box_cols <= MAX_BOX_ROWS):
        raise ValueError(f"a TMA box is at most {MAX_BOX_ROWS} x {MAX_BOX_ROWS}, got {box_rows} x {box_cols}")
    if (box_cols * itemsize) % 16:
        raise ValueError(f"a TMA box row must be a multiple of 16 bytes, got {box_cols * itemsize}")
    span = SWIZZLE_SPAN_BYTES[swizzle_bytes]
    if span is not None and box_cols * itemsize > span:
        raise ValueError(f"a {swizzle_bytes}-byte swizzled box row holds at most {span} bytes")
    rows, cols = shape
    return TileMapSpec(rows, cols, strides[0], box_rows, box_cols, swizzle_bytes, itemsize)


def encode_tile_map(x: cupy.ndarray, box_rows: int, box_cols: int, swizzle_bytes: int) -> np.void:
    """The 128-byte tensor map for `x`, as the value a `const __grid_constant__ TmaDesc` takes. A map holds
    only the address, shape, strides, type, box and swizzle, so maps are cached by exactly those."""
    key = (x.data.ptr, x.shape, x.strides, np.dtype(x.dtype).str, box_rows, box_cols, swizzle_bytes)
    if key not in _MAPS:
        if len(_MAPS) >= MAP_CACHE_SIZE:
            _MAPS.pop(next(iter(_MAPS)))  # the oldest entry
        spec = tile_map_spec(x.shape, x.strides, x.data.ptr, x.itemsize, box_rows, box_cols, swizzle_bytes)
        _MAPS[key] = encode_spec(spec, x.dtype, x.data.ptr)
    return _MAPS[key]


MAP_CACHE_SIZE = 256
DTYPE_NAMES = {FLOAT16: "float16", BFLOAT16: "bfloat16", FLOAT32: "float32"}
_MAPS: dict[tuple, np.void] = {}


def encode_spec(spec: TileMapSpec, dtype: np.dtype, address: int) -> np.void:
    """The tensor map of `spec` at `address` (16-byte aligned; the driver reads no memory there, so a plan
    encodes its maps before any call's address is known and re-points them per call)."""
    raw = encode_tiled_2d(
        DTYPE_NAMES[np.dtype(dtype)], address, spec.cols, spec.rows, spec.row_stride_bytes,
        (spec.box_rows, spec.box_cols), spec.swizzle_bytes,
    )  # fmt: skip
    return np.frombuffer(raw, dtype=np.dtype((np.void, DESCRIPTOR_BYTES)))[0]


def operand_box(mn_major: bool, rows: int, box_k: int, swizzle_bytes: int, itemsize: int) -> tuple[int, int]:
    """The box (rows, columns) an operand's map reads, `rows` rows of M (or N) at a time: a K-major operand
    (rows, K) in boxes of rows x box_k; an MN-major one (K, M or N) in boxes of box_k rows x one swizzle span
    of columns, so that the kernel loads rows / span of them side by side."""
    return (box_k, swizzle_bytes // itemsize) if mn_major else (rows, box_k)


def operand_map(x: cupy.ndarray, mn_major: bool, rows: int, box_k: int, swizzle_bytes: int) -> np.void:
    """The map of one operand as a kernel reads it (`operand_box`), at x's address."""
    return encode_tile_map(x, *operand_box(mn_major, rows, box_k, swizzle_bytes, x.itemsize), swizzle_bytes)


def read_in_place(x: cupy.ndarray, mn_major_ok: bool) -> tuple[cupy.ndarray, bool] | None:
    """How TMA reads an operand `x` (M or N, K) as it lies, or None where it cannot: `(x, False)` K-major,
    `(x.T, True)` MN-major, where K is the strided dimension (the transposed view of a row-major array)."""
    if x.strides[1] == x.itemsize and tma_describable(x):
        return x, False
    if mn_major_ok and x.strides[0] == x.itemsize and tma_describable(x.T):
        return x.T, True
    return None


def read_mn_major(x: cupy.ndarray) -> bool:
    """Whether TMA reads an operand `x` (M or N, K) in place as MN-major (M or N contiguous)."""
    found = read_in_place(x, mn_major_ok=True)
    return found is not None and found[1]


def tma_describable(x: cupy.ndarray) -> bool:
    """Whether TMA can address `x` as it is: a 16-byte aligned base and a row stride of a multiple of 16 bytes,
    at least a row long (not negative, rows apart)."""
    row_stride, row_bytes = x.strides[0], x.shape[1] * x.itemsize
    return x.data.ptr % 16 == 0 and row_stride % 16 == 0 and row_stride >= row_bytes and x.strides[1] == x.itemsize


def rows_writable(ptr: int, row_stride_bytes: int, row_bytes: int) -> bool:
    """Whether TMA stores can write rows of `row_bytes` at `ptr`, `row_stride_bytes` apart, and nothing beside
    them: a 16-byte aligned base and stride at least a row long, and rows of whole 16-byte chunks, since a TMA
    store writes whole chunks (into a view of 700 fp16 columns it would write columns 700 to 703)."""
    return ptr % 16 == 0 and row_stride_bytes % 16 == 0 and row_bytes % 16 == 0 and row_stride_bytes >= row_bytes


def tma_writable(x: cupy.ndarray) -> bool:
    """Whether TMA stores can write the row-major matrix `x` and nothing beside it (`rows_writable`)."""
    return x.strides[1] == x.itemsize and rows_writable(x.data.ptr, x.strides[0], x.shape[1] * x.itemsize)


def tma_store_target(out: cupy.ndarray) -> cupy.ndarray:
    """`out` itself when TMA can store into it (`tma_writable`), else a buffer whose rows are padded to 16
    bytes (the caller copies it into `out` after each launch), as for rows such as 4097 fp16 elements."""
    if tma_writable(out):
        return out
    rows, cols = out.shape
    return cupy.empty((rows, round_up(cols, 16 // out.itemsize)), dtype=out.dtype)[:, :cols]
