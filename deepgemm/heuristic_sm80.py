"""Which configuration of the sm_80 kernel (kernels/gemm_sm80.cu) a problem gets: of the tiles that suit its M,
at one, a few or many slices of K, the one a small cost model says finishes first.

This is the kernel for GPUs without wgmma (Ampere, Ada, consumer Blackwell). No such GPU has measured it; an
H200 has, running it as sm_80 code: `python -m lab.sm80_space` timed 15 tiles at up to three splits each at the
shape table's 76 layer shapes (`lab/results/h200/sm80_space.json`), and the model below is read from that
record. Over it, the model's first choice is a mean 1.7% slower than the fastest candidate timed, 15% at worst
(the rules by M it replaced: 15% and 75%).

- **The tiles** (`TILES`): BLOCK_K 64, which beat BLOCK_K 32 at every tile in the record (half the barriers
  and half the waits per K); 16 and 32 rows for a decode step's few tokens (a 128-row tile multiplies 127 rows
  of zeros per token), 64 and 128 rows beyond. A tile is timed only where it suits M (`suits`) and is no
  wider than the power of two that covers N (`narrow_block_n`).
- **The splits of K**: none, and the most slices that keep the blocks within one and within two rounds of
  the SMs, each slice at least `MIN_K_TILES_PER_SLICE` k-tiles long, at most `MAX_SPLIT`.
- **The cost** (`estimate_us`): the busiest SM runs its blocks in rounds of as many as it holds (`resident`),
  a full round at the tile's own rate, a last round of fewer at (held / fit) ** 0.4 of it; plus split-K's
  partials (written, then read back) and each slice's fixed cost.
- **The pipeline**: each tile at the depth its rate was measured at. Where a GPU's shared memory per block
  cuts a tile below it (128 x 256 x 64, three 48 KB stages, on the 99 KB of Ada and consumer Blackwell), its
  BLOCK_K 32 form takes its place at four stages (`WIDE`, 96 KB, measured at that depth), not the cut tile
  at a rate measured at three; as many stages as fit only where no tile keeps its depth.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepgemm.config import ELEMENT_BYTES, GemmConfig
from deepgemm.model import ceil_div, output_tiles


@dataclass(frozen=True)
class Tile:
    """A tile of the kernel, its warp grid and depth, and its rate: the TFLOP/s one SM sustains with this tile
    when it holds as many of its blocks as fit (the median over the record's rows of four or more rounds)."""

    block_m: int
    block_n: int
    block_k: int
    warps_m: int
    warps_n: int
    max_stages: int
    tflops_per_sm: float

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    def stage_bytes(self, block_n: int | None = None) -> int:
        """One k-tile of A and one of B in shared memory."""
        return (self.block_m + (block_n or self.block_n)) * self.block_k * ELEMENT_BYTES

    def registers(self, block_n: int | None = None) -> int:
        """Registers a thread holds: its fp32 accumulators and about 100 more (ptxas for sm_80: 79 at 16 x 64,
        106 at 64 x 64, 168 at 64 x 128, 232 at 128 x 128), at most 255."""
        accumulators = self.block_m * (block_n or self.block_n) // self.threads
        return min(MAX_REGISTERS, accumulators + REGISTERS_BESIDE_ACCUMULATORS)


TILES = (
    Tile(16, 64, 64, 1, 4, 6, 0.89),  # decode: 4 warps of 16 x 16
    Tile(16, 128, 64, 1, 4, 6, 0.97),  # 4 warps of 16 x 32: half the blocks at a wide N
    Tile(32, 64, 64, 1, 4, 6, 1.24),  # 4 warps of 32 x 16
    Tile(32, 128, 64, 1, 4, 6, 1.36),  # 4 warps of 32 x 32
    Tile(64, 64, 64, 2, 2, 4, 1.98),  # 4 warps of 32 x 32: many blocks where M x N is small
    Tile(64, 128, 64, 2, 2, 4, 2.35),  # 4 warps of 32 x 64
    Tile(128, 128, 64, 2, 2, 3, 2.88),  # 4 warps of 64 x 64, two blocks to an SM
    Tile(128, 256, 64, 2, 4, 3, 3.02),  # 8 warps of 64 x 64: the fewest shared-memory reads per multiply
)
WIDE = Tile(128, 256, 32, 2, 4, 4, 2.94)  # v2's tile and the kernel's default (plan_sm80.DEFAULTS)
SHALLOWER = {TILES[-1]: WIDE}  # a tile -> its measured BLOCK_K 32 form, for GPUs that cannot hold its depth
MIN_STAGES = 2  # double buffering: the kernel's least
MIN_K_TILES_PER_SLICE = 4  # a slice shorter than this cannot fill the pipeline it runs through
MAX_SPLIT = 16
GROUP_M = 8  # tile rows a group of the launch order walks (the kernel's default)
MAX_REGISTERS = 255
REGISTERS_BESIDE_ACCUMULATORS = 100
REGISTERS_PER_SM = 65536  # every GPU from sm_80 on
WARPS_PER_SM = 48  # the least from sm_80 on (sm_86, sm_89, sm_120; A100 and Hopper hold 64)
SMEM_RESERVED_PER_BLOCK = 1024  # the system's 1 KB per block; an SM holds a block's opt-in limit plus it
# Fitted to the record (`python -m lab.sm80_space --regret` prints the picks): an SM holding j of the `fit`
# blocks it could runs at (j / fit) ** 0.4 of the tile's rate; split-K costs 1 µs per MB of fp32 partials
# (M x N x 4 x slices, written and read back) and 1.6 µs per slice (its pipeline's fill, its count-in).
LONE_BLOCKS_EXPONENT = 0.4
SPLIT_US_PER_MB = 1.0
SLICE_US = 1.6


def suits(tile: Tile, m: int) -> bool:
    """Whether a tile is worth its place at M: no taller than M's power of two (16 at least), and, past 64
    rows, no shorter than a quarter of it (a 16-row tile at M = 512 would read B 32 times)."""
    cover = 1 << max(0, m - 1).bit_length()
    return tile.block_m <= max(16, cover) and (m <= 64 or 4 * tile.block_m >= min(cover, 256))


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


def resident(tile: Tile, block_n: int, stages: int, smem_per_block: int) -> int:
    """Blocks of this tile one SM holds at once: the least that its shared memory, registers and warp slots
    allow (1 at least)."""
    by_smem = (smem_per_block + SMEM_RESERVED_PER_BLOCK) // (
        stages * tile.stage_bytes(block_n) + SMEM_RESERVED_PER_BLOCK
    )
    by_registers = REGISTERS_PER_SM // (tile.threads * tile.registers(block_n))
    by_warps = WARPS_PER_SM // (tile.threads // 32)
    return max(1, min(by_smem, by_registers, by_warps))


def splits(tiles: int, k: int, block_k: int, sm_count: int) -> list[int]:
    """1, and the most slices (of at least MIN_K_TILES_PER_SLICE k-tiles, at most MAX_SPLIT) that keep the
    blocks within one and within two rounds of the SMs."""
    most = min(ceil_div(k, block_k) // MIN_K_TILES_PER_SLICE, MAX_SPLIT)
    found = {1}
    for rounds in (1, 2):
        fit = min(most, rounds * sm_count // tiles)
        if fit > 1:
            found.add(fit)
    return sorted(found)


def estimate_us(m: int, n: int, k: int, cfg: GemmConfig, tile: Tile, sm_count: int, smem_per_block: int) -> float:
    """The model's time of one configuration (module docstring): the busiest SM's blocks in rounds of as many as
    it holds, each full round at the tile's rate, a last partial one of j blocks at (j / fit) ** 0.4 of it;
    plus split-K's partials and slices."""
    block_n, split = cfg.block_n or tile.block_n, cfg.extra["SPLIT_K"]
    fit = resident(tile, block_n, cfg.num_stages or tile.max_stages, smem_per_block)
    blocks = ceil_div(output_tiles(m, n, tile.block_m, block_n) * split, sm_count)  # on the busiest SM
    full_rounds, rest = divmod(blocks, fit)
    work = 2 * tile.block_m * block_n * ceil_div(ceil_div(k, tile.block_k), split) * tile.block_k  # a block's
    rate = tile.tflops_per_sm * 1e6  # flop per µs
    last = rest * work / (rate * (rest / fit) ** LONE_BLOCKS_EXPONENT) if rest else 0.0
    partials = SPLIT_US_PER_MB * m * n * 4 * split / 1e6 + SLICE_US * split if split > 1 else 0.0
    return full_rounds * fit * work / rate + last + partials


def config_of(tile: Tile, block_n: int, split: int, smem_per_block: int) -> GemmConfig:
    extra = {"WARPS_M": tile.warps_m, "WARPS_N": tile.warps_n, "GROUP_M": GROUP_M, "SPLIT_K": split}
    stages = stages_for(tile, block_n, smem_per_block)
    return GemmConfig(block_m=tile.block_m, block_n=block_n, block_k=tile.block_k, num_stages=stages, extra=extra)


def at_depth(tile: Tile, block_n: int, smem_per_block: int) -> Tile | None:
    """The tile, where `smem_per_block` holds its measured depth; else its BLOCK_K 32 form where that was
    measured and holds its own (`SHALLOWER`: 128 x 256 x 64 -> WIDE on a 99 KB GPU); else None."""
    for form in (tile, SHALLOWER.get(tile)):
        if form is not None and smem_per_block >= form.max_stages * form.stage_bytes(block_n):
            return form
    return None


def candidates(m: int, n: int, k: int, sm_count: int, smem_per_block: int) -> list[tuple[Tile, GemmConfig]]:
    """Every tile that suits M, narrowed to N, at the depth its rate was measured at (`at_depth`), at each of
    its splits (`splits`), in TILES' order; a narrowed tile that repeats an earlier one is left out. Where no
    tile keeps its depth, every tile that fits two stages, at as many as fit."""
    found = _candidates(m, n, k, sm_count, smem_per_block, cut=False)
    return found or _candidates(m, n, k, sm_count, smem_per_block, cut=True)


def _candidates(
    m: int, n: int, k: int, sm_count: int, smem_per_block: int, *, cut: bool
) -> list[tuple[Tile, GemmConfig]]:
    found, seen = [], set()
    for listed in TILES:
        block_n = narrow_block_n(listed, n)
        tile = listed if cut else at_depth(listed, block_n, smem_per_block)
        fits = tile is not None and smem_per_block >= MIN_STAGES * tile.stage_bytes(block_n)
        if not (fits and suits(listed, m)) or (tile.block_m, block_n, tile.block_k) in seen:
            continue
        seen.add((tile.block_m, block_n, tile.block_k))
        for split in splits(output_tiles(m, n, tile.block_m, block_n), k, tile.block_k, sm_count):
            found.append((tile, config_of(tile, block_n, split, smem_per_block)))
    return found


def choose(m: int, n: int, k: int, sm_count: int, smem_per_block: int) -> GemmConfig:
    """The configuration for an M x N x K problem on a GPU of `sm_count` SMs whose blocks may use
    `smem_per_block` bytes of shared memory: the candidate of least estimated time (the first of a tie)."""
    found = candidates(m, n, k, sm_count, smem_per_block)
    if not found:
        raise ValueError(f"no tile of the sm_80 kernel fits {smem_per_block} bytes of shared memory per block")
    return min(found, key=lambda pair: estimate_us(m, n, k, pair[1], pair[0], sm_count, smem_per_block))[1]
