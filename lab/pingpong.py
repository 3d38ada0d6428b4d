"""python -m lab.pingpong: do the two consumer warpgroups on alternate tiles beat both on one tile?

With both consumer warpgroups on one tile (the kernel's default), the tensor cores wait out every epilogue:
at 2048 x 7168 x 2048 a 128 x 224 tile's main loop is 32 k-tiles of about 900 clocks, and its epilogue (the
sums rounded, written to the store boxes, stored by TMA) runs while no wgmma does. With PINGPONG 1 ([13])
each warpgroup takes every other tile of its CTA, and their main loops take turns on the tensor cores, so
one's epilogue runs under the other's main loop; each holds a whole tile, 64 rows (or 128 as two m64). Each
shape runs its table entry, then 64-row tiles (the entry's width, 256, 192 and 128) and 128 x 128 tiles, in
clusters of two along either side, with ping-pong: each verified, timed queued as autotune times, then every
config in CUDA graphs alternated with torch.matmul's (`tutorial.autotune.time_in_graphs`).

    python -m lab.pingpong --shapes 2048x7168x2048 --record
"""

from __future__ import annotations

from typing import Any

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from lab import cluster_k, shape_sweep
from tutorial.autotune import TUNED_LAYOUT, time_config, time_in_graphs
from tutorial.bench import Workload
from tutorial.runner import Shape

ROUNDS = 3  # queued timings per config, the median kept
CLUSTERS = ((2, 1), (1, 2))  # (CLUSTER_M, CLUSTER_N): two CTAs sharing the weight's tile or the tokens'
WIDTHS = (256, 192, 128)  # beside the entry's own
DEFAULT_SHAPES = (
    "2048x7168x2048,2048x2112x7168,1536x28672x4096,512x28672x4096,2048x7168x16384,4096x2112x7168,"
    "1024x4096x4096,4096x4096x4096,512x7168x2048,2048x4096x7168"
)


def pingpong(block_m: int, block_n: int, swap: bool, cluster: tuple[int, int], jit: dict) -> GemmConfig:
    cm, cn = cluster
    stages = heuristic.max_stages(block_n, block_m, swap, cm * cn, pingpong=True)
    extra = {"CLUSTER_M": cm, "CLUSTER_N": cn, "SWAP_AB": int(swap), "PINGPONG": 1, **jit}
    return GemmConfig(block_m=block_m, block_n=block_n, num_stages=stages, extra=extra)


def variants(shape: Shape) -> list[GemmConfig]:
    """The entry, then ping-pong tiles in its orientation: 64 rows at the entry's width, 256, 192 and 128, and
    128 x 128; each in clusters of two either way."""
    entry = cluster_k.entry_of(shape)
    swap = bool(entry.extra.get("SWAP_AB"))
    jit = {"SHAPE_JIT": 1} if entry.extra.get("SHAPE_JIT") else {}
    widths = dict.fromkeys((entry.block_n, *WIDTHS))
    tiles = [(64, w) for w in widths] + [(128, 128)]
    return [entry] + [pingpong(bm, bn, swap, c, jit) for bm, bn in tiles for c in CLUSTERS]


def configs_at(shape: Shape, _device: int) -> list[GemmConfig]:
    return variants(shape)


def row_at(shape: Shape, dtype: str, _device: int) -> dict[str, Any]:
    m, n, k = shape
    work = Workload.make(m, n, k, dtype).in_layout(*TUNED_LAYOUT)
    timed = [time_config(cfg, work, ROUNDS)[0] for cfg in variants(shape)]
    passed = [e for e in timed if e["passed"]]
    torch_us = time_in_graphs(passed, work) if passed else None
    row = {"dtype": dtype, "m": m, "n": n, "k": k, "torch_graph_us": torch_us, "candidates": timed}
    print("\n".join(cluster_k.lines([row])), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    return shape_sweep.run(argv, "lab.pingpong", __doc__, DEFAULT_SHAPES, configs_at, row_at, cluster_k.lines)


if __name__ == "__main__":
    raise SystemExit(main())
