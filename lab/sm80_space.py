"""The sm_80 library kernel's configuration space at the shape table's shapes: for each problem, the tiles of
`TILES` that suit its M, each at up to three splits of K, verified against the float64 reference and timed
per launch on rotating input sets (`bench.measure`), beside cuBLAS and the heuristic's own pick in the same
run. The data `deepgemm.heuristic_sm80`'s tile rules are read from (issue 27: at least 0.5x cuBLAS).

    python -m lab.sm80_space [--dtype fp16] [--shapes 256x4096x4096,...] [--budget-s 400] [--record]
        --record writes lab/results/h200/sm80_space.json; shapes default to the shape table's layers
        and other shapes (`default_shapes`).

A shape that would start after `--budget-s` seconds is left out (and said), so a device call's limit never
loses what was measured.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from deepgemm import heuristic_sm80
from deepgemm.config import GemmConfig
from deepgemm.driver import device_limits
from deepgemm.heuristic_sm80 import Tile
from deepgemm.model import ceil_div, output_tiles
from lab import record
from tutorial import library_sm80
from tutorial.autotune import TUNED_LAYOUT
from tutorial.bench import Workload, cublas_launches, measure
from tutorial.shape_suite import LAYER_MS, MODEL_LAYERS, OTHERS

TIMING = {"batch_ms": 15.0, "batches": 5, "warmup_ms": 20.0}  # ranking, not the record's timing
TILES = {  # name: the tile (max_m unused here), each warp's share in the comment
    "16x64x64 1x4": Tile(None, 16, 64, 64, 1, 4, 6),  # 16 x 16
    "16x128x64 1x4": Tile(None, 16, 128, 64, 1, 4, 6),  # 16 x 32
    "32x64x64 1x4": Tile(None, 32, 64, 64, 1, 4, 6),  # 32 x 16
    "32x128x64 1x4": Tile(None, 32, 128, 64, 1, 4, 6),  # 32 x 32
    "64x64x64 2x2": Tile(None, 64, 64, 64, 2, 2, 4),  # 32 x 32
    "64x128x32 2x2": Tile(None, 64, 128, 32, 2, 2, 4),  # 32 x 64
    "64x128x64 2x2": Tile(None, 64, 128, 64, 2, 2, 4),  # 32 x 64
    "64x256x32 1x4": Tile(None, 64, 256, 32, 1, 4, 4),  # 64 x 64
    "64x256x32 2x4": Tile(None, 64, 256, 32, 2, 4, 4),  # 32 x 64, 8 warps
    "128x128x32 2x2": Tile(None, 128, 128, 32, 2, 2, 4),  # 64 x 64
    "128x128x32 2x4": Tile(None, 128, 128, 32, 2, 4, 4),  # 64 x 32, 8 warps
    "128x128x64 2x2": Tile(None, 128, 128, 64, 2, 2, 3),  # 64 x 64
    "128x256x32 2x4": Tile(None, 128, 256, 32, 2, 4, 4),  # 64 x 64, 8 warps (v2's)
    "128x256x64 2x4": Tile(None, 128, 256, 64, 2, 4, 3),  # 64 x 64, 8 warps
    "256x128x32 4x2": Tile(None, 256, 128, 32, 4, 2, 4),  # 64 x 64, 8 warps
}


def suits(tile: Tile, m: int, n: int) -> bool:
    """Whether a tile is worth timing at M x N: not wider than N needs, not taller than M's power of two, and
    not four times shorter than it while M is past 64 (a 16-row tile at M = 512 reads B 32 times)."""
    cover_m = 1 << max(0, m - 1).bit_length()
    cover_n = 1 << max(0, n - 1).bit_length()
    if tile.block_n > max(cover_n, 16 * tile.warps_n) or tile.block_m > max(16, cover_m):
        return False
    return not (m > 64 and 4 * tile.block_m < min(cover_m, 256))


def splits(tiles: int, k: int, block_k: int, sm_count: int) -> list[int]:
    """1, and the most slices (of at least 4 k-tiles, at most 16) that keep the CTAs within one and within two
    rounds of the SMs."""
    most = min(ceil_div(k, block_k) // heuristic_sm80.MIN_K_TILES_PER_SLICE, heuristic_sm80.MAX_SPLIT)
    found = {1}
    for rounds in (1, 2):
        fit = min(most, rounds * sm_count // tiles)
        if fit > 1:
            found.add(fit)
    return sorted(found)


def candidates(m: int, n: int, k: int, sm_count: int, smem: int) -> dict[str, GemmConfig]:
    """Every suiting tile at each of its splits, named "<tile> s<split>"."""
    found = {}
    for name, tile in TILES.items():
        if not suits(tile, m, n):
            continue
        stages = heuristic_sm80.stages_for(tile, tile.block_n, smem)
        for split in splits(output_tiles(m, n, tile.block_m, tile.block_n), k, tile.block_k, sm_count):
            extra = {"WARPS_M": tile.warps_m, "WARPS_N": tile.warps_n, "GROUP_M": heuristic_sm80.GROUP_M,
                     "SPLIT_K": split}  # fmt: skip
            found[f"{name} s{split}"] = GemmConfig(tile.block_m, tile.block_n, tile.block_k, stages, extra=extra)
    return found


def shape_rows(m: int, n: int, k: int, dtype_name: str, sm_count: int, smem: int) -> list[dict[str, Any]]:
    """cuBLAS, the heuristic's pick, then every candidate at one shape; each row with its ratio to cuBLAS."""
    work = Workload.make(m, n, k, dtype_name).in_layout(*TUNED_LAYOUT)
    cublas = measure("cublas", work, cublas_launches(work), settle_s=0.0, **TIMING)
    chosen = heuristic_sm80.choose(m, n, k, sm_count, smem)
    rows = [cublas]
    for name, cfg in {"heuristic": chosen, **candidates(m, n, k, sm_count, smem)}.items():
        try:
            launches = [library_sm80.plan(a, b, config=cfg) for a, b in work.problems]
            rows.append({**measure(name, work, launches, settle_s=0.0, **TIMING), "config": cfg.defines()})
        except ValueError as err:
            rows.append({**work.base_row(name), "error": str(err)})
    for row in rows:
        if "ms" in row:
            row["x_cublas"] = cublas["ms"] / row["ms"]
    return rows


def summary_line(rows: list[dict[str, Any]]) -> str:
    timed = [row for row in rows[1:] if row.get("passed")]
    best = min(timed, key=lambda row: row["ms"])
    pick = next(row for row in timed if row["stage"] == "heuristic")
    r0 = rows[0]
    return (f"{r0['m']:5d} x {r0['n']:5d} x {r0['k']:5d}  cuBLAS {r0['ms'] * 1e3:8.1f} us  heuristic "
            f"{pick['x_cublas']:.2f}x  best {best['x_cublas']:.2f}x {best['stage']}")  # fmt: skip


def default_shapes() -> list[tuple[int, int, int]]:
    """The shape table's model layers at its layer Ms, then its other shapes (the M sweep at 4096 x 4096 and
    28672 x 4096 adds Ms between those, left to `--shapes`)."""
    layers = [(m, n, k) for model in MODEL_LAYERS.values() for n, k in model for m in LAYER_MS]
    return list(dict.fromkeys([*layers, *OTHERS]))


def parse_shapes(text: str | None) -> list[tuple[int, int, int]]:
    if not text:
        return default_shapes()
    return [tuple(int(x) for x in shape.split("x")) for shape in text.split(",")]  # type: ignore[misc]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--shapes", default=None, help="MxNxK,... (default: default_shapes())")
    parser.add_argument("--budget-s", type=float, default=400.0)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    limits = device_limits(0)
    start, rows, left_out = time.monotonic(), [], []
    for m, n, k in parse_shapes(args.shapes):
        if time.monotonic() - start > args.budget_s:
            left_out.append(f"{m}x{n}x{k}")
            continue
        found = shape_rows(m, n, k, args.dtype, limits.sm_count, limits.smem_per_block_optin)
        print(summary_line(found), flush=True)
        rows += found
    if left_out:
        print(f"left out past the budget: {', '.join(left_out)}")
    if args.record:
        record("sm80_space", "lab.sm80_space", None, rows, extra={"left_out": left_out})
    return 0 if all(row.get("passed", True) for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
