"""python -m lab.dynamic_units: do split-K's units taken from a counter shorten the streaming tail?

At 1 x 28672 x 4096 the table's tile (swapped 256 x 8, 112 CTAs streaming 2 MB of the weight each) ends with
CTAs finishing 47 to 56 us after the start (kernel_probe_stamps.json): DRAM does not share its bandwidth
evenly, and the static order leaves the slow ones a tail to stream alone. With DYNAMIC_UNITS every slot takes
units (whole tiles, or split-K's runs of k-tiles) from a counter until none is left, so a fast CTA takes more.
Each shape runs its table entry, then swapped tiles of 64, 128 and 256 rows with its token width, whole or
split SPLITS ways, with dynamic units and (as the control) without; each verified, timed queued as autotune
times, then every config in CUDA graphs alternated with torch.matmul's (`tutorial.autotune.time_in_graphs`).

    python -m lab.dynamic_units --shapes 1x28672x4096 --record
"""

from __future__ import annotations

from typing import Any

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from lab import shape_sweep
from tutorial.autotune import TUNED_LAYOUT, incumbent_of, time_config, time_in_graphs
from tutorial.bench import Workload
from tutorial.runner import Shape

SPLITS = (1, 2, 4, 8)
BLOCK_MS = (64, 128, 256)
ROUNDS = 3  # queued timings per config, the median kept
DEFAULT_SHAPES = (
    "1x28672x4096,8x28672x4096,16x28672x4096,32x28672x4096,1x4096x14336,1x7168x16384,1x2112x7168,16x6144x4096"
)


def entry_of(shape: Shape) -> GemmConfig:
    m, n, k = shape
    found = incumbent_of(m, n, k, "fp16")
    if found is None:
        return heuristic.choose(m, n, k, 132).config()
    return found


def variants(shape: Shape) -> list[GemmConfig]:
    """The table's entry, then swapped tiles as wide as the tokens (8 at least), each split and dynamic or not."""
    m = shape[0]
    entry = entry_of(shape)
    width = heuristic.round_up(m, 8)
    jit = {"SHAPE_JIT": 1} if entry.extra.get("SHAPE_JIT") else {}
    found = [entry]
    for block_m in BLOCK_MS:
        stages = heuristic.max_stages(width, block_m, True)
        for split in SPLITS:
            for dynamic in (1, 0):
                extra = {"CLUSTER_M": 1, "CLUSTER_N": 1, "SPLIT_K": split, "SWAP_AB": 1, **jit}
                if dynamic:
                    extra["DYNAMIC_UNITS"] = 1
                found.append(GemmConfig(block_m=block_m, block_n=width, num_stages=stages, extra=extra))
    return found


def configs_at(shape: Shape, _device: int) -> list[GemmConfig]:
    return variants(shape)


def row_at(shape: Shape, dtype: str, _device: int) -> dict[str, Any]:
    m, n, k = shape
    work = Workload.make(m, n, k, dtype).in_layout(*TUNED_LAYOUT)
    timed = []
    for cfg in variants(shape):
        entry, _ = time_config(cfg, work, ROUNDS)
        entry["dynamic"] = bool(cfg.extra.get("DYNAMIC_UNITS"))
        timed.append(entry)
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
                out.append(f"  {e['name']:<32} FAILED {e.get('error', '')}")
                continue
            graph = e.get("graph_us")
            ratio = f"x {torch_us / graph:.3f}" if graph and torch_us else ""
            out.append(f"  {e['name']:<32} {e['us']:7.2f} us queued, {graph or 0:7.2f} in a graph {ratio}")
    return out


def main(argv: list[str] | None = None) -> int:
    return shape_sweep.run(argv, "lab.dynamic_units", __doc__, DEFAULT_SHAPES, configs_at, row_at, lines)


if __name__ == "__main__":
    raise SystemExit(main())
