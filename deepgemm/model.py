"""The arithmetic of tiles and traffic: plain Python, no GPU, what the launchers and the notebooks share.

Tile counts and the persistent grid's rounds (what a launcher sizes its grid by), and the analytic model
the notebooks draw: arithmetic intensity, operand traffic, the grouped tile order, the roofline.
"""

from __future__ import annotations

HBM_TBS = 4.8  # H200 HBM3e bandwidth of the datasheet, TB/s: the memory roof


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up, for non-negative a and positive b."""
    return -(-a // b)


def round_up(a: int, multiple: int) -> int:
    """a rounded up to a multiple of `multiple`."""
    return ceil_div(a, multiple) * multiple


def cluster_rows(m: int, block_m: int, cluster_m: int) -> int:
    """Rows of cluster tiles: clusters of `cluster_m` CTAs stack their tiles along M."""
    return ceil_div(ceil_div(m, block_m), cluster_m)


def cluster_tiles(m: int, n: int, block_m: int, block_n: int, cluster_m: int, cluster_n: int = 1) -> int:
    """Cluster tiles that cover an M x N output: clusters of `cluster_m` x `cluster_n` CTAs take that many
    tiles along M and N at a time."""
    return cluster_rows(m, block_m, cluster_m) * cluster_rows(n, block_n, cluster_n)


def output_tiles(m: int, n: int, block_m: int, block_n: int) -> int:
    """BLOCK_M x BLOCK_N tiles that cover an M x N output."""
    return ceil_div(m, block_m) * ceil_div(n, block_n)


def balanced_workers(tiles: int, slots: int) -> int:
    """The fewest persistent workers (CTAs or clusters) that finish `tiles` in as few rounds as `slots`
    workers would. 512 tiles on 132 SMs take 4 rounds either way, the last one a sixth empty; 128 CTAs
    take the same 4 rounds with every round full, and the 4 idle SMs leave power to the others."""
    rounds = ceil_div(tiles, slots)
    return ceil_div(tiles, rounds)


MIN_K_TILES_PER_WORKER = 4  # a run of k-tiles shorter than this cannot fill the pipeline it runs through


def stream_k_schedule(
    tiles: int, slots: int, k_tiles: int, rounds: int = 1, min_k_tiles: int = MIN_K_TILES_PER_WORKER
) -> tuple[int, int]:
    """Stream-K's share of a persistent launch of `tiles` (cluster) tiles on `slots` workers: (sk_tiles,
    sk_workers). The first tiles - sk_tiles run whole, a round at a time on every slot; the last sk_tiles
    (the partial round, and with rounds = 2 also the full round before it, where there is one) are cut
    into sk_workers equal runs of k-tiles, one per worker, at least `min_k_tiles` long. A tile cut between
    workers is summed by the last of them to finish, in worker order. (0, 0) where every round is full.
    288 tiles of 64 k-tiles on 132 slots: 264 whole (two rounds), then 24 x 64 k-tiles in 132 runs of
    11 or 12, so every slot does 2.18 tiles of work instead of 3 rounds' worth."""
    full, rest = divmod(tiles, slots)
    if rest == 0:
        return 0, 0
    sk_tiles = rest + slots * min(rounds - 1, full)
    return sk_tiles, min(slots, max(1, sk_tiles * k_tiles // min_k_tiles))


def split_k_schedule(tiles: int, split: int) -> tuple[int, int]:
    """Split-K as the same schedule: every tile cut into `split` runs, each its own worker."""
    return (tiles, tiles * split) if split > 1 else (0, 0)


def worker_of_k_tile(i: int, sk_iters: int, workers: int) -> int:
    """Which worker's run holds k-tile i of the stream-K part (sk_tiles x k_tiles of them, `sk_iters`):
    worker w runs k-tiles [w * sk_iters // workers, (w + 1) * sk_iters // workers)."""
    return ((i + 1) * workers + sk_iters - 1) // sk_iters - 1


def tile_rounds(m: int, n: int, block_m: int, block_n: int, cluster_m: int, sm_count: int) -> dict[str, float]:
    """How v5's persistent grid covers an M x N output: its cluster tiles, the CTAs it launches (full rounds,
    `balanced_workers`), the rounds, the share of the SMs busy, and the share of the computed rows that are
    rows of C (the rest multiply the zeros TMA fills in past M)."""
    rows = cluster_rows(m, block_m, cluster_m)
    cluster_tiles = rows * ceil_div(n, block_n)
    clusters = balanced_workers(cluster_tiles, sm_count // cluster_m)
    return {
        "m": m, "n": n, "cluster_tiles": cluster_tiles, "ctas": clusters * cluster_m,
        "rounds": ceil_div(cluster_tiles, clusters), "sms_busy_pct": 100 * clusters * cluster_m / sm_count,
        "rows_of_c_pct": 100 * m / (rows * cluster_m * block_m),
    }  # fmt: skip


def arithmetic_intensity(
    m: int, n: int, k: int, bytes_per_element: int = 2, out_bytes_per_element: int | None = None
) -> float:
    """FLOP per byte of DRAM traffic when A and B are read once and C is written once: the best any kernel can do.

    `out_bytes_per_element` defaults to the input size (C in the input dtype).
    """
    out = bytes_per_element if out_bytes_per_element is None else out_bytes_per_element
    return 2 * m * n * k / ((m * k + k * n) * bytes_per_element + m * n * out)


def operand_traffic_bytes(
    m: int, n: int, k: int, block_m: int = 1, block_n: int = 1, bytes_per_element: int = 2
) -> int:
    """Bytes of A and B fetched when every block_m x block_n tile of C reads its rows of A and columns of B once.

    A is then read ceil(n / block_n) times and B ceil(m / block_m) times. A 1 x 1 "tile" is v0's thread: B is
    re-read m times and A n times, 2 * m * n * k elements in all.
    """
    return (m * k * ceil_div(n, block_n) + k * n * ceil_div(m, block_m)) * bytes_per_element


def grouped_tile(index: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    """(tile_m, tile_n) of the index-th tile in v4/v5's launch order: GROUP_M tile rows walked column by
    column (the kernels' `grouped_tile`); group_m <= 1 is plain row-major order."""
    if group_m <= 1:
        return divmod(index, tiles_n)
    group_tiles = group_m * tiles_n
    first_m = index // group_tiles * group_m
    rows = min(tiles_m - first_m, group_m)
    return first_m + index % group_tiles % rows, index % group_tiles // rows


def wave_operand_bytes(
    m: int, n: int, k: int, block_m: int, block_n: int, ctas: int, group_m: int, bytes_per_element: int = 2
) -> int:
    """Bytes of A and B that the first `ctas` tiles (the ones running together) read between them: their
    distinct row blocks of A and column blocks of B. Less means more of the wave's reads hit in L2."""
    tiles_m, tiles_n = ceil_div(m, block_m), ceil_div(n, block_n)
    tiles = [grouped_tile(i, tiles_m, tiles_n, group_m) for i in range(min(ctas, tiles_m * tiles_n))]
    a_blocks, b_blocks = len({tm for tm, _ in tiles}), len({tn for _, tn in tiles})
    return (a_blocks * block_m + b_blocks * block_n) * k * bytes_per_element


def roof_tflops(intensity: float, peak_tflops: float, bandwidth_tbs: float = HBM_TBS) -> float:
    """The roofline: the most TFLOP/s a kernel of this arithmetic intensity (FLOP/byte) can reach."""
    return min(peak_tflops, bandwidth_tbs * intensity)


def ridge_intensity(peak_tflops: float, bandwidth_tbs: float = HBM_TBS) -> float:
    """The arithmetic intensity (FLOP/byte) above which a kernel can be compute-bound."""
    return peak_tflops / bandwidth_tbs


SWIZZLE_CHUNK_BYTES = 16  # what the 128-byte swizzle permutes: 16 bytes, four of the 32 four-byte banks
SWIZZLE_ROW_CHUNKS = 8  # chunks in a 128-byte tile row: one per bank group, so a row spans all 32 banks


def swizzled_chunk(row: int, chunk: int, swizzle: bool = True) -> int:
    """Where 16-byte chunk `chunk` of tile row `row` (128-byte rows) lies within its row: TMA's 128-byte
    swizzle puts it at chunk ^ (row % 8), the permutation the v4 and v5 kernels address their tiles and
    store boxes by; without the swizzle it stays at `chunk`. The position is also its bank group."""
    return chunk ^ (row % SWIZZLE_ROW_CHUNKS) if swizzle else chunk


def column_conflict_ways(chunk: int, swizzle: bool, rows: int = 8) -> int:
    """The n of the n-way bank conflict when 8 threads read 16 bytes each of chunk `chunk` in `rows`
    consecutive rows (one 8x8 matrix of ldmatrix / stmatrix): the most of those rows that land in one
    bank group, each group serving one 16-byte access per cycle."""
    groups = [swizzled_chunk(row, chunk, swizzle) for row in range(rows)]
    return max(groups.count(group) for group in set(groups))
