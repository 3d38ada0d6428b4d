"""deepgemm.model: the tile and traffic arithmetic, checked against counts done by hand."""

from __future__ import annotations

import pytest

from deepgemm import model


def test_arithmetic_intensity_of_square_gemm_is_n_over_3_for_two_byte_operands():
    # 2 n^3 FLOP over 3 n^2 elements of 2 bytes (A, B read once, C written once)
    assert model.arithmetic_intensity(4096, 4096, 4096) == pytest.approx(4096 / 3)
    # inputs only: the seed's 2048 FLOP/byte at 4096^3
    assert model.arithmetic_intensity(4096, 4096, 4096, out_bytes_per_element=0) == pytest.approx(2048)
    # an FP32 C costs more bytes, so a lower intensity
    assert model.arithmetic_intensity(64, 64, 64, 2, 4) < model.arithmetic_intensity(64, 64, 64)


def test_naive_traffic_rereads_b_m_times_and_tiles_divide_it():
    m, n, k = 512, 256, 128
    assert model.operand_traffic_bytes(m, n, k) == 2 * m * n * k * 2  # one A and one B element per FMA
    # B (k x n) is read once per row tile of C: m / block_m times; A once per column tile
    assert model.operand_traffic_bytes(m, n, k, 128, 64) == (m * k * (n // 64) + k * n * (m // 128)) * 2
    # a tile that does not divide the matrix still reads its partial rows and columns
    assert model.operand_traffic_bytes(100, 100, 8, 64, 64, 1) == (100 * 8 * 2 + 8 * 100 * 2)


def test_grouped_tile_order_walks_group_columns_and_covers_every_tile_once():
    tiles_m, tiles_n = 5, 3  # a last group shorter than GROUP_M
    order = [model.grouped_tile(i, tiles_m, tiles_n, 2) for i in range(tiles_m * tiles_n)]
    assert order[:4] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert order[-3:] == [(4, 0), (4, 1), (4, 2)]
    assert sorted(order) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)]
    assert [model.grouped_tile(i, 2, 3, 1) for i in range(4)] == [(0, 0), (0, 1), (0, 2), (1, 0)]


def test_grouped_order_reads_less_per_wave_than_row_major_on_wide_problems():
    # 8 tiles running together on a 16 x 32 grid of 1 x 1 tiles, k = 1, 1-byte elements:
    # row-major touches 1 row and 8 columns, groups of 4 rows touch 4 rows and 2 columns
    assert model.wave_operand_bytes(16, 32, 1, 1, 1, 8, 1, 1) == 1 + 8
    assert model.wave_operand_bytes(16, 32, 1, 1, 1, 8, 4, 1) == 4 + 2


def test_roof_is_memory_bound_below_the_ridge_and_flat_above():
    ridge = model.ridge_intensity(989.4, 4.8)
    assert ridge == pytest.approx(989.4 / 4.8)
    assert model.roof_tflops(ridge / 2, 989.4, 4.8) == pytest.approx(989.4 / 2)
    assert model.roof_tflops(ridge * 10, 989.4, 4.8) == 989.4


def test_tile_rounds_say_how_v5_covers_skinny_and_square_outputs():
    one_row = model.tile_rounds(1, 4096, 128, 256, 2, 132)
    assert (one_row["cluster_tiles"], one_row["ctas"], one_row["rounds"]) == (16, 32, 1)
    assert one_row["rows_of_c_pct"] == pytest.approx(100 / 256)  # 1 row of C in a 256-row cluster tile
    square = model.tile_rounds(4096, 4096, 128, 256, 2, 132)
    assert (square["cluster_tiles"], square["ctas"], square["rounds"]) == (256, 128, 4)
    assert square["rows_of_c_pct"] == 100.0


@pytest.mark.parametrize(
    ("tiles", "slots", "workers"),
    [
        (512, 132, 128),  # 4096^3, one CTA per tile of 128 x 256: 4 rounds either way
        (256, 66, 64),  # the same in clusters of two: 64 clusters, 128 CTAs
        (1024, 66, 64),  # 8192^3 in clusters: 16 rounds either way (15.5 with 66)
        (100, 132, 100),  # fewer tiles than SMs: one tile each
        (133, 132, 67),  # one tile too many: two rounds, so half the SMs suffice
        (132, 132, 132),
        (1, 66, 1),
    ],
)
def test_balanced_workers_keep_the_round_count_and_fill_every_round(tiles, slots, workers):
    assert model.balanced_workers(tiles, slots) == workers
    assert model.ceil_div(tiles, workers) == model.ceil_div(tiles, slots)  # no extra round
    assert workers <= slots


def test_the_128_byte_swizzle_spreads_a_column_of_8_rows_over_8_bank_groups():
    from deepgemm.model import SWIZZLE_ROW_CHUNKS, column_conflict_ways, swizzled_chunk

    for row in range(16):  # a permutation of the row's chunks, the same every 8 rows
        placed = [swizzled_chunk(row, chunk) for chunk in range(SWIZZLE_ROW_CHUNKS)]
        assert sorted(placed) == list(range(SWIZZLE_ROW_CHUNKS))
        assert placed == [swizzled_chunk(row + 8, chunk) for chunk in range(SWIZZLE_ROW_CHUNKS)]
    for chunk in range(SWIZZLE_ROW_CHUNKS):
        assert column_conflict_ways(chunk, swizzle=False) == 8
        assert column_conflict_ways(chunk, swizzle=True) == 1


def test_the_swizzle_model_is_the_formula_v5_addresses_by():
    """v5 writes its store boxes at row * 128 + (group ^ (row % 8)) * 16: the model's chunk ^ (row % 8)."""
    from pathlib import Path

    source = (Path(__file__).resolve().parent.parent / "stages/v5_fused/kernel.cu").read_text()
    assert "box + row * SWIZZLE_ROW_BYTES + ((group ^ (row % 8)) * 16)" in source


def _epi_swizzle(offset: int, row_bytes: int) -> int:
    """The library kernel's epi_swizzle, as written there (the test below reads it from the source)."""
    return offset ^ (((offset >> 7) & (row_bytes // 16 - 1)) << 4)


@pytest.mark.parametrize("row_bytes", [128, 64, 32])
def test_the_library_kernels_store_swizzle_is_the_models_and_conflict_free_at_every_span(row_bytes):
    """The library kernel stores C in chunks of 128, 64 or 32 bytes a row, each with the TMA swizzle of that
    span: group bits XOR line bits. With 128-byte rows that is the model's chunk ^ (row % 8); at every span,
    the 8 rows of one stmatrix matrix (one 16-byte group each) fall in 8 different bank groups."""
    from pathlib import Path

    source = (Path(__file__).resolve().parent.parent / "deepgemm/kernels/gemm_sm90.cu").read_text()
    assert "return offset ^ (((offset >> 7) & (EPI_ROW_BYTES / 16 - 1)) << 4);" in source
    groups = row_bytes // 16
    for group in range(groups):
        banks = [(_epi_swizzle(row * row_bytes + group * 16, row_bytes) // 16) % 8 for row in range(8)]
        assert len(set(banks)) == 8, (row_bytes, group, banks)
        if row_bytes == 128:
            for row in range(16):
                assert _epi_swizzle(row * 128 + group * 16, 128) == row * 128 + model.swizzled_chunk(row, group) * 16
