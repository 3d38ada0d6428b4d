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
