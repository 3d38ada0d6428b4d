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

from typing import Any

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from lab import shape_sweep
from tutorial.autotune import TUNED_LAYOUT, incumbent_of, time_config, time_in_graphs
from tutorial.bench import Workload
from tutorial.runner import Shape

CLUSTER_KS = (2, 4)
ROUNDS = 3  # queued timings per config, the median kept
DEFAULT_SHAPES = (
    "1x2112x7168,16x2112x7168,64x2112x7168,128x2112x7168,256x2112x7168,1x4096x14336,64x4096x14336,"
    "128x4096x14336,1x4096x4096,128x7168x2048,16x6144x4096,1x7168x16384"
)


def entry_of(shape: Shape) -> GemmConfig:
    """The shipped table's entry for the shape, else the heuristic's pick."""
    m, n, k = shape
    return incumbent_of(m, n, k, "fp16") or heuristic.choose(m, n, k, 132).config()


def variants(shape: Shape) -> list[GemmConfig]:
    """The entry, then each tile split in the cluster: swapped (the tokens as wgmma's N, up to 128 of them),
    and plain 64 x 64 where there are 64 tokens or more."""
    m = shape[0]
    entry = entry_of(shape)
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


def configs_at(shape: Shape, _device: int) -> list[GemmConfig]:
    return variants(shape)


def row_at(shape: Shape, dtype: str, _device: int) -> dict[str, Any]:
    m, n, k = shape
    work = Workload.make(m, n, k, dtype).in_layout(*TUNED_LAYOUT)
    timed = [time_config(cfg, work, ROUNDS)[0] for cfg in variants(shape)]
    passed = [e for e in timed if e["passed"]]
    torch_us = time_in_graphs(passed, work) if passed else None
    row = {"dtype": dtype, "m": m, "n": n, "k": k, "torch_graph_us": torch_us, "candidates": timed}
    print("\n".join(lines([row])), flush=True)
    return row


def lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for row in rows:
        torch_us = row["torch_graph_us"]
        out.append(f"{row['dtype']} {row['m']}x{row['n']}x{row['k']}: torch {torch_us or 0:.2f} us in a graph")
        for e in row["candidates"]:
            if not e["passed"]:
                out.append(f"  {e['name']:<34} FAILED {e.get('error', '')}")
                continue
            graph = e.get("graph_us")
            ratio = f"x {torch_us / graph:.3f}" if graph and torch_us else ""
            out.append(f"  {e['name']:<34} {e['us']:7.2f} us queued, {graph or 0:7.2f} in a graph {ratio}")
    return out


def main(argv: list[str] | None = None) -> int:
    return shape_sweep.run(argv, "lab.cluster_k", __doc__, DEFAULT_SHAPES, configs_at, row_at, lines)


if __name__ == "__main__":
    raise SystemExit(main())
