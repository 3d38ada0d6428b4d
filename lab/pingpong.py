"""python -m lab.pingpong: do the two consumer warpgroups on alternate tiles beat both on one tile?

With both consumer warpgroups on one tile (the kernel's default), the tensor cores wait out every epilogue
and every drain of the wgmma queue at a tile's end. With PINGPONG 1 ([13]) each warpgroup takes every other
tile of its CTA and their main loops take turns, so one's epilogue runs under the other's wgmma; each holds a
whole tile, 64 rows, or 128 as two m64 (so at most 144 wide). Each shape runs its table entry, then each of
128 x 128 and 128 x 144 tiles in the entry's orientation, in clusters of two along either
side, without and with ping-pong: each verified, timed queued as autotune times, then every config in CUDA
graphs alternated with torch.matmul's (`tutorial.autotune.time_in_graphs`). The record of 64-row tiles
(`--tiles 64`, pingpong_64.json): the entry's width, 256, 192 and 128, with ping-pong only.

    python -m lab.pingpong --shapes 2048x7168x2048 --record
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from functools import partial

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from lab import shape_sweep
from tutorial.runner import Shape

ROUNDS = 3  # queued timings per config, the median kept
CLUSTERS = ((2, 1), (1, 2))  # (CLUSTER_M, CLUSTER_N): two CTAs sharing the weight's tile or the tokens'
WIDTHS = (256, 192, 128)  # 64-row tiles: beside the entry's own
WIDE_WIDTHS = (128, 144)  # 128-row tiles: two m64 fragments of 72 accumulators at most
DEFAULT_SHAPES = (
    "2048x2048x2048,2048x2112x7168,4096x2112x7168,1024x4096x4096,2048x4096x4096,4096x4096x4096,2048x4096x7168,"
    "2048x4096x14336,3000x5000x700,2048x6144x4096,2048x7168x2048,4096x7168x2048,2048x7168x16384,512x24576x1536,"
    "2048x24576x1536,512x28672x4096,1536x28672x4096,2048x28672x4096"
)


def tile(block_m: int, block_n: int, swap: bool, cluster: tuple[int, int], jit: dict, pingpong: int) -> GemmConfig:
    cm, cn = cluster
    stages = heuristic.max_stages(block_n, block_m, swap, cm * cn, pingpong=bool(pingpong))
    extra = {"CLUSTER_M": cm, "CLUSTER_N": cn, "SWAP_AB": int(swap), "PINGPONG": pingpong, **jit}
    return GemmConfig(block_m=block_m, block_n=block_n, num_stages=stages, extra=extra)


def variants(shape: Shape, tiles: str = "128") -> list[GemmConfig]:
    """The entry, then tiles in its orientation: 128 rows (`WIDE_WIDTHS`) without and with ping-pong, or with
    tiles "64", 64 rows at the entry's width, 256, 192 and 128, and 128 x 128, with ping-pong; each in
    clusters of two either way."""
    entry = shape_sweep.entry_of(shape)
    swap = bool(entry.extra.get("SWAP_AB"))
    jit = {"SHAPE_JIT": 1} if entry.extra.get("SHAPE_JIT") else {}
    if tiles == "64":
        sizes = [(64, w) for w in dict.fromkeys((entry.block_n, *WIDTHS))] + [(128, 128)]
        return [entry] + [tile(bm, bn, swap, c, jit, 1) for bm, bn in sizes for c in CLUSTERS]
    return [entry] + [tile(128, bn, swap, c, jit, pp) for bn in WIDE_WIDTHS for c in CLUSTERS for pp in (0, 1)]


def main(argv: Sequence[str] | None = None) -> int:
    tiles = argparse.ArgumentParser(add_help=False)
    tiles.add_argument("--tiles", choices=("128", "64"), default="128")
    known, rest = tiles.parse_known_args(argv)
    return shape_sweep.run_timed(rest, "lab.pingpong", __doc__, DEFAULT_SHAPES, partial(variants, tiles=known.tiles),
                                 ROUNDS)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
