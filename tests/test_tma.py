"""TMA's rules, the layouts read in place, and the tensor-map cache, without a GPU."""

from types import SimpleNamespace

import numpy as np
import pytest

from deepgemm.tma import tile_map_spec

ROW = (4096 * 2, 2)  # byte strides of a contiguous 4096-column FP16 matrix


def test_accepts_the_v4_box():
    spec = tile_map_spec((4096, 4096), ROW, 0x10000, 2, 256, 64, 128)
    assert (spec.rows, spec.cols, spec.row_stride_bytes, spec.box_rows, spec.box_cols) == (4096, 4096, 8192, 256, 64)


@pytest.mark.parametrize(
    ("shape", "strides", "ptr", "box", "swizzle", "message"),
    [
        ((64, 4097), (8194, 2), 0, (64, 64), 128, "multiple of 16 bytes, got 8194"),
        ((64, 64), (128, 2), 8, (64, 64), 128, "16-byte aligned base"),
        ((64, 64), (2, 128), 0, (64, 64), 128, "unit column stride"),
        ((64, 64), (128, 2), 0, (512, 64), 128, "at most 256 x 256"),
        ((64, 64), (128, 2), 0, (64, 128), 128, "at most 128 bytes"),
        ((64, 64), (128, 2), 0, (64, 4), 0, "multiple of 16 bytes, got 8"),
        ((64, 64), (128, 2), 0, (64, 64), 16, "swizzle must be one of"),
    ],
)
def test_rejects_what_tma_cannot_describe(shape, strides, ptr, box, swizzle, message):
    with pytest.raises(ValueError, match=message):
        tile_map_spec(shape, strides, ptr, 2, *box, swizzle)


def _matrix(ptr: int, row_bytes: int, itemsize: int = 2, cols: int | None = None):
    cols = abs(row_bytes) // itemsize if cols is None else cols
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr), shape=(9, cols), strides=(row_bytes, itemsize),
                           itemsize=itemsize)  # fmt: skip


@pytest.mark.parametrize(
    ("ptr", "row_bytes", "itemsize", "cols", "describable"),
    [
        (0x10000, 8192, 2, None, True),  # 4096 fp16 columns
        (0x10000, 8194, 2, None, False),  # 4097 fp16 columns: the row stride is not a multiple of 16 bytes
        (0x10008, 8192, 2, None, False),  # a view that starts 8 bytes into an allocation
        (0x10000, 16388, 4, None, False),  # 4097 fp32 columns
        (0x10000, 176, 2, 80, True),  # 80 of 88 columns: a padded row stride is fine
        (0x10000, -8192, 2, None, False),  # rows read backwards (a[::-1]): TMA's strides are unsigned
        (0x10000, 0, 2, 64, False),  # one row repeated (a broadcast)
        (0x10000, 64, 2, 64, False),  # rows that overlap: 64 columns 32 apart
    ],
)
def test_tma_describable_follows_the_16_byte_rules(ptr, row_bytes, itemsize, cols, describable):
    from deepgemm.tma import tma_describable

    assert tma_describable(_matrix(ptr, row_bytes, itemsize, cols)) is describable


@pytest.mark.parametrize("row_bytes", [-8192, 0, 4096])
def test_a_map_of_rows_not_apart_is_refused_naming_the_stride(row_bytes):
    from deepgemm.tma import tile_map_spec

    with pytest.raises(ValueError, match=f"row stride of at least one row's 8192 bytes, got {row_bytes}"):
        tile_map_spec((64, 4096), (row_bytes, 2), 0x10000, 2, 64, 64, 128)


@pytest.mark.parametrize(
    ("ptr", "row_bytes", "cols", "writable"),
    [
        (0x10000, 2080, 1000, True),  # 1000 of 1040 fp16 columns: rows of whole 16-byte chunks
        (0x10000, 2080, 700, False),  # 700 columns, 1400 bytes: a TMA store would write to column 703
        (0x10000, 1400, 700, False),  # the whole 700-column matrix: its row stride is not describable
        (0x10010, 2080, 1000, True),  # a view 8 columns in: aligned
    ],
)
def test_tma_stores_only_into_rows_of_whole_16_byte_chunks(ptr, row_bytes, cols, writable):
    from deepgemm.tma import tma_writable

    x = SimpleNamespace(data=SimpleNamespace(ptr=ptr), shape=(9, cols), strides=(row_bytes, 2), itemsize=2)
    assert tma_writable(x) is writable


def _matrix_2d(ptr: int, rows: int = 64, cols: int = 64, dtype=np.float16):
    """A stand-in for a row-major CuPy matrix: what `encode_tile_map` reads of one."""
    itemsize = np.dtype(dtype).itemsize
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr), shape=(rows, cols), strides=(cols * itemsize, itemsize),
                           itemsize=itemsize, dtype=np.dtype(dtype))  # fmt: skip


def test_tensor_maps_are_encoded_once_per_address_shape_and_box(monkeypatch):
    from deepgemm import tma

    calls = []
    monkeypatch.setattr(tma, "_MAPS", {})
    monkeypatch.setattr(tma, "encode_spec", lambda spec, dtype, address: calls.append((address, spec)) or len(calls))

    first = tma.encode_tile_map(_matrix_2d(0x1000), 64, 64, 128)
    assert first == tma.encode_tile_map(_matrix_2d(0x1000), 64, 64, 128) == 1
    tma.encode_tile_map(_matrix_2d(0x2000), 64, 64, 128)  # another address
    tma.encode_tile_map(_matrix_2d(0x1000, rows=32), 64, 64, 128)  # another shape
    tma.encode_tile_map(_matrix_2d(0x1000), 32, 64, 128)  # another box
    tma.encode_tile_map(_matrix_2d(0x1000, cols=32), 64, 32, 64)  # another swizzle (and row stride)
    tma.encode_tile_map(_matrix_2d(0x1000, dtype=np.float32, cols=32), 64, 32, 128)  # another dtype
    assert len(calls) == 6
    address, spec = calls[2]
    assert address == 0x1000 and (spec.rows, spec.box_rows) == (32, 64)


def test_the_map_cache_drops_its_oldest_entry_when_full(monkeypatch):
    from deepgemm import tma

    calls = []
    monkeypatch.setattr(tma, "_MAPS", {})
    monkeypatch.setattr(tma, "MAP_CACHE_SIZE", 2)
    monkeypatch.setattr(tma, "encode_spec", lambda spec, dtype, address: calls.append(address) or address)
    for ptr in (0x1000, 0x2000, 0x3000, 0x2000, 0x1000):
        tma.encode_tile_map(_matrix_2d(ptr), 64, 64, 128)
    assert calls == [0x1000, 0x2000, 0x3000, 0x1000]  # 0x2000 was still held; 0x1000 had been dropped
    assert len(tma._MAPS) == 2


def test_a_map_is_refused_before_the_driver_is_asked(monkeypatch):
    from deepgemm import tma

    monkeypatch.setattr(tma, "_MAPS", {})
    monkeypatch.setattr(tma, "encode_spec", lambda *args: pytest.fail("encoded a map TMA cannot describe"))
    with pytest.raises(ValueError, match="16-byte aligned base"):
        tma.encode_tile_map(_matrix_2d(0x1008), 64, 64, 128)
    assert not tma._MAPS


@pytest.mark.parametrize(("dtype", "name"), [(np.float16, "float16"), (np.float32, "float32"), ("bf16", "bfloat16")])
def test_encode_spec_asks_the_driver_for_the_spec_at_the_address(monkeypatch, dtype, name):
    """A plan encodes its maps at a placeholder address; the driver gets the matrix innermost first as
    `encode_tiled_2d` takes it, and the 128 bytes come back as the value a __grid_constant__ map takes."""
    from deepgemm import tma
    from deepgemm.dtypes import BFLOAT16

    dtype = BFLOAT16 if dtype == "bf16" else np.dtype(dtype)
    asked = []

    def encode_tiled_2d(dtype_name, address, cols, rows, row_stride_bytes, box, swizzle):
        asked.append((dtype_name, address, cols, rows, row_stride_bytes, box, swizzle))
        return bytes(range(128))

    monkeypatch.setattr(tma, "encode_tiled_2d", encode_tiled_2d)
    spec = tma.tile_map_spec((300, 520), (1040 * dtype.itemsize, dtype.itemsize), 0, dtype.itemsize, 128,
                             64 // dtype.itemsize, 128)  # fmt: skip
    found = tma.encode_spec(spec, dtype, 1 << 20)
    assert asked == [(name, 1 << 20, 520, 300, 1040 * dtype.itemsize, (128, 64 // dtype.itemsize), 128)]
    assert found.dtype.itemsize == tma.DESCRIPTOR_BYTES and found.tobytes() == bytes(range(128))


@pytest.mark.parametrize(
    ("mn_major", "rows", "itemsize", "box"),
    [
        (False, 128, 2, (128, 64)),  # K-major: rows x box_k
        (False, 16, 2, (16, 64)),  # a swapped B of 16 rows
        (True, 128, 2, (64, 64)),  # MN-major: box_k rows of K x one 128-byte span of M
        (True, 256, 4, (64, 32)),
    ],
)
def test_an_operand_box_spans_k_or_one_swizzle_row_of_mn(mn_major, rows, itemsize, box):
    from deepgemm.tma import operand_box

    assert operand_box(mn_major, rows, 64, 128, itemsize) == box


class _Operand:
    """A stand-in for a (rows, K) CuPy view: byte strides, a base address, and `.T`."""

    def __init__(self, strides: tuple[int, int], ptr: int = 0x10000, itemsize: int = 2, shape=(80, 80)) -> None:
        self.strides, self.itemsize, self.data, self.shape = strides, itemsize, SimpleNamespace(ptr=ptr), shape

    @property
    def T(self) -> "_Operand":
        return _Operand(self.strides[::-1], self.data.ptr, self.itemsize, self.shape[::-1])


@pytest.mark.parametrize(
    ("strides", "mn_major_ok", "expected"),
    [
        ((8192, 2), True, "K-major"),  # a row-major (M, K), or b.T of a row-major (N, K)
        ((2, 8192), True, "MN-major"),  # the transposed view of a row-major (K, M), or a row-major (K, N) b
        ((2, 8192), False, None),  # v3 and v4 read K-major operands only: copied
        ((8194, 2), True, None),  # K = 4097 row-major: the row stride is not a multiple of 16 bytes
        ((2, 8194), True, None),  # M = 4097 stored K x M: neither
        ((176, 2), True, "K-major"),  # a padded row stride is fine
        ((-8192, 2), True, None),  # a[::-1]: copied, not handed to the driver as a stride of 2^64 - 8192
        ((2, -8192), True, None),
    ],
)
def test_operands_are_read_in_place_in_either_layout_where_tma_can_describe_them(strides, mn_major_ok, expected):
    from deepgemm.tma import read_in_place, read_mn_major

    x = _Operand(strides)
    found = read_in_place(x, mn_major_ok)
    if mn_major_ok:
        assert read_mn_major(x) == (expected == "MN-major")
    if expected is None:
        assert found is None
        return
    view, mn_major = found
    assert mn_major == (expected == "MN-major")
    assert view.strides == (strides[::-1] if mn_major else strides)  # what the map describes: unit column stride


def test_an_operand_at_an_unaligned_address_is_not_read_in_place():
    from deepgemm.tma import read_in_place

    assert read_in_place(_Operand((8192, 2), ptr=0x10008), True) is None
    assert read_in_place(_Operand((2, 8192), ptr=0x10008), True) is None
