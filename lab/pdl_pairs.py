"""python -m lab.pdl_pairs: the same tiles launched with programmatic dependent launch and without, in CUDA
graphs beside torch.matmul.

The heuristic asks for PDL on whole tiles whose estimate is under PDL_BELOW_US (`heuristic.pdl_pays`). The
autotune record times PDL on its finalists only, and there it splits: at 1 and 16 x 24576 x 1536 it cost a
swapped 256-row tile 11% in graphs and gained a plain 64 x 192 one 3%; at 1 x 7168 x 2048 the swapped
256-row tile gained 14%. Here, per shape, the heuristic's pick and the autotune table's entry (their tiles,
SHAPE_JIT left out) are each verified and timed queued with PDL and without, then captured in CUDA graphs
and timed there with torch.matmul's, batches alternated (`autotune.time_in_graphs`): the pairs a PDL rule
can be fitted to (`--record`: lab/results/<gpu>/pdl_pairs.json).

    python -m lab.pdl_pairs --shapes 1x24576x1536,16x24576x1536 --record
"""

from __future__ import annotations

from typing import Any

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from deepgemm.driver import device_limits
from deepgemm.model import round_up
from deepgemm.operands import device_name
from lab import shape_sweep
from tutorial.autotune import TUNED_LAYOUT, time_config, time_in_graphs
from tutorial.bench import Workload

DEFAULT_SHAPES = (
    "1x24576x1536,16x24576x1536,1x7168x2048,16x7168x2048,1x6144x4096,16x6144x4096,1x4096x4096,"
    "64x4096x4096,1x2112x7168,128x7168x2048"
)


def tiles_of(m: int, n: int, k: int, sm_count: int, gpu: str) -> list[GemmConfig]:
    """The heuristic's pick and the table's entry for the problem (where it holds one), PDL and SHAPE_JIT
    taken off: the tiles whose launch is compared, once each. Up to M = 32 also the swapped 256-row tile
    (the tokens in one tile of 8 to 32), the one whose PDL went both ways in the record."""
    picked = heuristic.choose(m, n, k, sm_count).config()
    tabled = heuristic.table(heuristic.table_path(gpu)).get((heuristic.TUNED_DTYPE, m, n, k))
    wide = heuristic.priced(heuristic.Tiling(heuristic.WIDE_BLOCK_M, round_up(m, 8), swap_ab=True), 0.0).config()
    found = {}
    for cfg in (picked, tabled, wide if m <= 32 else None):
        if cfg is not None:
            fields = {**heuristic.config_fields(cfg), "PDL": 0}
            fields.pop("SHAPE_JIT", None)
            found[heuristic.config_name(heuristic.config_from_fields(fields))] = fields
    return [heuristic.config_from_fields(fields) for fields in found.values()]


def with_pdl(cfg: GemmConfig, pdl: int) -> GemmConfig:
    return heuristic.config_from_fields({**heuristic.config_fields(cfg), "PDL": pdl})


def pairs_at(m: int, n: int, k: int, dtype_name: str, sm_count: int, gpu: str) -> dict[str, Any]:
    """One shape's tiles, each with PDL and without, verified, timed queued, then in graphs beside torch's."""
    work = Workload.make(m, n, k, dtype_name).in_layout(*TUNED_LAYOUT)
    entries = [time_config(with_pdl(cfg, pdl), work)[0] for cfg in tiles_of(m, n, k, sm_count, gpu) for pdl in (0, 1)]
    torch_graph_us = time_in_graphs([e for e in entries if e["passed"]], work)
    row = {"dtype": dtype_name, "m": m, "n": n, "k": k, "torch_graph_us": torch_graph_us, "candidates": entries}
    print("\n".join(pair_lines([row])), flush=True)
    return row


def pair_lines(rows: list[dict]) -> list[str]:
    """Each pair timed in graphs as one line: the tiles, the time without PDL and with it, torch's."""
    lines = []
    for row in rows:
        for off, on in zip(row["candidates"][::2], row["candidates"][1::2], strict=True):
            if off.get("graph_us") and on.get("graph_us"):
                gain = off["graph_us"] / on["graph_us"]
                lines.append(f"{row['dtype']} {row['m']}x{row['n']}x{row['k']} {off['name']:<28} graph "
                             f"{off['graph_us']:7.2f} us, with PDL {on['graph_us']:7.2f} (x {gain:.3f}); "
                             f"torch {row['torch_graph_us']:7.2f}")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    def gpu(device: int) -> tuple[int, str]:
        return device_limits(device).sm_count, device_name(device)

    return shape_sweep.run(argv, "lab.pdl_pairs", __doc__, DEFAULT_SHAPES,
                           lambda shape, device: [with_pdl(c, p) for c in tiles_of(*shape, *gpu(device))
                                                  for p in (0, 1)],
                           lambda shape, dtype, device: pairs_at(*shape, dtype, *gpu(device)), pair_lines)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
