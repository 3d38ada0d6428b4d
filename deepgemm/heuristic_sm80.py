"""Which configuration of the sm_80 kernel (kernels/gemm_sm80.cu) a problem gets: a tile by M, narrowed to N,
the deepest pipeline the GPU's shared memory holds, and split-K where the tiles leave SMs idle.

This is the kernel for GPUs without wgmma (Ampere, Ada, consumer Blackwell), and no such GPU has measured
it yet: there is no autotune table and no cost model, only the rules below, each with its reason.

- **A tile by M** (`TILES`). A decode step's few tokens take a 16-row tile (and 32 rows up to 32 tokens):
  the work is streaming B once, and a 128-row tile would multiply 127 rows of zeros for every token. Up to
  64 tokens, 64 x 128 tiles; beyond, v2's 128 x 256 where those tiles fill every SM once, else 128 x 128,
  whose warps own the same 64 x 64 of C and which makes twice the tiles (and takes an N narrower than 256).
- **Narrowed to N**: a tile no wider than the power of two that covers N, as long as each warp keeps its
  pair of n8 tiles (16 x WARPS_N columns at least).
- **The pipeline**: the tile's own depth (`Tile.max_stages`), or as many stages as fit the GPU's shared
  memory per block (99 KB on Ada and consumer Blackwell, 163 KB on A100).
- **Split-K** only while the tiles leave half the SMs idle: as many slices as fill the SMs once, each at
  least `MIN_K_TILES_PER_SLICE` k-tiles long so that its pipeline fills, at most `MAX_SPLIT`.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepgemm.config import ELEMENT_BYTES, GemmConfig
from deepgemm.model import ceil_div, output_tiles


@dataclass(frozen=True)
class Tile:
    """A tile of the kernel and the problems it serves: M up to `max_m` (None: any)."""

    max_m: int | None
    block_m: int
    block_n: int
    block_k: int
    warps_m: int
    warps_n: int
    max_stages: int

    def stage_bytes(self, block_n: int | None = None) -> int:
        """One k-tile of A and one of B in shared memory."""
        return (self.block_m + (block_n or self.block_n)) * self.block_k * ELEMENT_BYTES


TILES = (
    Tile(16, 16, 64, 64, 1, 4, 6),  # decode: 4 warps of 16 x 16; 10 KB stages, 6 of them in flight
    Tile(32, 32, 64, 64, 1, 4, 6),  # 4 warps of 32 x 16
    Tile(64, 64, 128, 32, 2, 2, 4),  # 4 warps of 32 x 64
    Tile(None, 128, 128, 32, 2, 2, 4),  # 4 warps of 64 x 64, 128 accumulators a thread
)
WIDE = Tile(None, 128, 256, 32, 2, 4, 4)  # v2's tile and the kernel's default: 8 warps of 64 x 64
MIN_STAGES = 2  # double buffering: the kernel's least
MIN_K_TILES_PER_SLICE = 4  # a slice shorter than this cannot fill the pipeline it runs through
MAX_SPLIT = 16
GROUP_M = 8  # tile rows a group of the launch order walks (the kernel's default)


def tile_for(m: int, n: int, sm_count: int) -> Tile:
    """The tile for M tokens: the first of TILES that holds M, or WIDE where N is as wide as its tiles and
    they fill every SM."""
    for tile in TILES:
        if tile.max_m is None or m <= tile.max_m:
            wide_fills = n >= WIDE.block_n and output_tiles(m, n, WIDE.block_m, WIDE.block_n) >= sm_count
            if tile.max_m is None and wide_fills:
                return WIDE
            return tile
    raise AssertionError("the last tile takes any M")


def narrow_block_n(tile: Tile, n: int) -> int:
    """The tile's width, or the power of two that covers N where that is narrower (16 x WARPS_N at least)."""
    cover = 1 << max(0, n - 1).bit_length()
    return max(16 * tile.warps_n, min(tile.block_n, cover))


def stages_for(tile: Tile, block_n: int, smem_per_block: int) -> int:
    """The tile's depth, or as many stages as fit `smem_per_block` bytes; ValueError where not even two do."""
    fit = smem_per_block // tile.stage_bytes(block_n)
    if fit < MIN_STAGES:
        raise ValueError(f"a {tile.block_m} x {block_n} x {tile.block_k} tile needs {MIN_STAGES} stages of "
                         f"{tile.stage_bytes(block_n)} bytes; this GPU gives a block {smem_per_block}")  # fmt: skip
    return min(tile.max_stages, fit)


def split_for(tiles: int, k: int, block_k: int, sm_count: int) -> int:
    """Slices of K per tile: 1 unless the tiles leave half the SMs idle; then as many as fill the SMs once,
    each at least MIN_K_TILES_PER_SLICE k-tiles, at most MAX_SPLIT."""
    if 2 * tiles > sm_count:
        return 1
    return max(1, min(sm_count // tiles, ceil_div(k, block_k) // MIN_K_TILES_PER_SLICE, MAX_SPLIT))


def choose(m: int, n: int, k: int, sm_count: int, smem_per_block: int) -> GemmConfig:
    """The configuration for an M x N x K problem on a GPU of `sm_count` SMs whose blocks may use
    `smem_per_block` bytes of shared memory (module docstring)."""
    tile = tile_for(m, n, sm_count)
    block_n = narrow_block_n(tile, n)
    split = split_for(output_tiles(m, n, tile.block_m, block_n), k, tile.block_k, sm_count)
    extra = {"WARPS_M": tile.warps_m, "WARPS_N": tile.warps_n, "GROUP_M": GROUP_M, "SPLIT_K": split}
    stages = stages_for(tile, block_n, smem_per_block)
    return GemmConfig(block_m=tile.block_m, block_n=block_n, block_k=tile.block_k, num_stages=stages, extra=extra)
