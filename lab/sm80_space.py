"""The sm_80 library kernel's configuration space at the shape table's layer shapes: for each problem, the
heuristic's candidates (`heuristic_sm80.candidates`: its tiles that suit M, each at up to three splits of K)
and the other tiles of `EXTRA_TILES`, each verified against the float64 reference and timed per launch on
rotating input sets (`bench.measure`), beside cuBLAS (through CuPy, so host-bound below about 25 µs) and the
heuristic's own pick in the same run. The record `deepgemm.heuristic_sm80`'s cost model is fitted to.

    python -m lab.sm80_space [--dtype fp16] [--shapes 256x4096x4096,...] [--budget-s 400] [--record]
        --record writes lab/results/h200/sm80_space.json; shapes default to `default_shapes`.
    python -m lab.sm80_space --regret
        the heuristic's pick now at each recorded shape against the fastest recorded there (no GPU)

A shape that would start after `--budget-s` seconds is left out (and said), so a device call's limit never
loses what was measured. The record (f795f9a) was made when the candidates were 15 named tiles at the same
splits: the 8 of `heuristic_sm80.TILES` and the 7 of EXTRA_TILES.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from deepgemm import heuristic_sm80
from deepgemm.config import GemmConfig
from deepgemm.driver import device_limits
from deepgemm.heuristic_sm80 import Tile
from deepgemm.model import output_tiles
from lab import RESULTS_DIR, record
from tutorial import library_sm80
from tutorial.autotune import TUNED_LAYOUT
from tutorial.bench import Workload, cublas_launches, measure
from tutorial.runner import parse_shape
from tutorial.shape_suite import LAYER_MS, MODEL_LAYERS, OTHERS

TIMING = {"batch_ms": 15.0, "batches": 5, "warmup_ms": 20.0}  # ranking, not the record's timing
# Beside the heuristic's tiles, their BLOCK_K 32 forms and the other 8-warp grids, so that the record shows
# what the heuristic leaves out and by how much (each slower in the record; rates unused).
EXTRA_TILES = (
    Tile(64, 128, 32, 2, 2, 4, 0.0),
    Tile(64, 256, 32, 1, 4, 4, 0.0),
    Tile(64, 256, 32, 2, 4, 4, 0.0),
    Tile(128, 128, 32, 2, 2, 4, 0.0),
    Tile(128, 128, 32, 2, 4, 4, 0.0),
    heuristic_sm80.WIDE,
    Tile(256, 128, 32, 4, 2, 4, 0.0),
)


def tile_name(cfg: GemmConfig) -> str:
    knobs = cfg.extra
    return (f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} {knobs['WARPS_M']}x{knobs['WARPS_N']} "
            f"st{cfg.num_stages} s{knobs['SPLIT_K']}")  # fmt: skip


def candidates(m: int, n: int, k: int, sm_count: int, smem: int) -> dict[str, GemmConfig]:
    """The heuristic's candidates, then EXTRA_TILES that suit M at the same splits, by name."""
    found = [cfg for _, cfg in heuristic_sm80.candidates(m, n, k, sm_count, smem)]
    for tile in EXTRA_TILES:
        if heuristic_sm80.suits(tile, m) and heuristic_sm80.narrow_block_n(tile, n) == tile.block_n:
            tiles = output_tiles(m, n, tile.block_m, tile.block_n)
            for split in heuristic_sm80.splits(tiles, k, tile.block_k, sm_count):
                found.append(heuristic_sm80.config_of(tile, tile.block_n, split, smem))
    return {tile_name(cfg): cfg for cfg in found}


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


def regret(rows: list[dict[str, Any]], sm_count: int, smem: int) -> list[dict[str, Any]]:
    """Per recorded shape: the heuristic's pick now (`choose`), its recorded time over the fastest candidate
    recorded (None where the record never timed the pick)."""
    found = []
    for (m, n, k), shape in group_by_shape(rows).items():
        timed = [row for row in shape if row.get("passed") and row["stage"] not in ("cublas", "heuristic")]
        pick = heuristic_sm80.choose(m, n, k, sm_count, smem)
        picked = next((row for row in timed if row.get("config") == pick.defines()), None)
        best = min(timed, key=lambda row: row["ms"])
        found.append({"m": m, "n": n, "k": k, "pick": tile_name(pick), "best": best["stage"],
                      "regret": picked["ms"] / best["ms"] - 1 if picked else None})  # fmt: skip
    return found


def group_by_shape(rows: list[dict[str, Any]]) -> dict[tuple[int, int, int], list[dict[str, Any]]]:
    shapes: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for row in rows:
        shapes.setdefault((row["m"], row["n"], row["k"]), []).append(row)
    return shapes


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
    return [parse_shape(shape) for shape in text.split(",")] if text else default_shapes()


RECORD = RESULTS_DIR / "sm80_space.json"
RECORD_GPU = (132, 232448)  # the H200 it was measured on: SMs, shared memory per block


def print_regret() -> int:
    """Each recorded shape's pick and regret, then the mean and the worst."""
    found = regret(json.loads(RECORD.read_text())["rows"], *RECORD_GPU)
    for row in found:
        shown = "not timed" if row["regret"] is None else f"{100 * row['regret']:5.1f}%"
        print(f"{row['m']:5d} x {row['n']:5d} x {row['k']:5d}  {row['pick']:<28} {shown}  best {row['best']}")
    timed = [row["regret"] for row in found if row["regret"] is not None]
    print(
        f"regret over {len(timed)} shapes: mean {100 * sum(timed) / len(timed):.1f}%, worst {100 * max(timed):.1f}%, "
        f"{sum(r > 0.1 for r in timed)} over 10%; picks never timed: {len(found) - len(timed)}"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--shapes", default=None, help="MxNxK,... (default: default_shapes())")
    parser.add_argument("--budget-s", type=float, default=400.0)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--regret", action="store_true", help="the heuristic's picks against the record (no GPU)")
    args = parser.parse_args()
    if args.regret:
        return print_regret()
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
