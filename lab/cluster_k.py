"""python -m lab.cluster_k: does split-K summed inside the cluster beat split-K summed in global memory?

Where a shape has too few tiles to fill the SMs, the library cuts them along K (split-K, stream-K) and the part
that finishes last adds the others' fp32 partials from global memory: its partial stored, a fence and an atomic
each waited on, the others read back, 1.9 to 2.2 us after the main loop at 128 and 256 x 2112 x 7168 against
0.35 for a whole tile's epilogue (lab/results/h200/kernel_probe.json). With CLUSTER_K the cluster's CTAs each
take a slice of K of one tile and send their parts through distributed shared memory to the strip's owner.
Each shape runs its table entry, then swapped (and from 64 rows of tokens plain) tiles of 64 and 128 rows,
as wide as the tokens, in slices of 2 and 4: each verified, timed queued as autotune times, then every config
in CUDA graphs alternated with torch.matmul's (`tutorial.autotune.time_in_graphs`).

    python -m lab.cluster_k --shapes 128x2112x7168 --record
"""

from __future__ import annotations

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from lab import shape_sweep
from tutorial.runner import Shape

CLUSTER_KS = (2, 4)
ROUNDS = 3  # queued timings per config, the median kept
DEFAULT_SHAPES = (
    "1x2112x7168,16x2112x7168,64x2112x7168,128x2112x7168,256x2112x7168,1x4096x14336,64x4096x14336,"
    "128x4096x14336,1x4096x4096,128x7168x2048,16x6144x4096,1x7168x16384"
)


def variants(shape: Shape) -> list[GemmConfig]:
    """The entry, then each tile split in the cluster: swapped (the tokens as wgmma's N, up to 128 of them),
    and plain 64 x 64 where there are 64 tokens or more."""
    m = shape[0]
    entry = shape_sweep.entry_of(shape)
    jit = {"SHAPE_JIT": 1} if entry.extra.get("SHAPE_JIT") else {}
    width = min(heuristic.round_up(m, 8), 128)
    tiles = [(64, width, 1), (128, width, 1)] + ([(64, 64, 0)] if m >= 64 else [])
    found = [entry]
    for block_m, block_n, swap in tiles:
        for cluster_k in CLUSTER_KS:
            stages = heuristic.max_stages(block_n, block_m, bool(swap), 1, cluster_k)
            extra = {"CLUSTER_M": 1, "CLUSTER_N": 1, "CLUSTER_K": cluster_k, "SWAP_AB": swap, **jit}
            found.append(GemmConfig(block_m=block_m, block_n=block_n, num_stages=stages, extra=extra))
    return found


def main(argv: list[str] | None = None) -> int:
    return shape_sweep.run_timed(argv, "lab.cluster_k", __doc__, DEFAULT_SHAPES, variants, ROUNDS)


if __name__ == "__main__":
    raise SystemExit(main())
