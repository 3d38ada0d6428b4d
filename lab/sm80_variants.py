"""The sm_80 library kernel against v2 at one square shape: the tile v2 runs (128 x 256 x 32, 4 stages, 2 x 4
warps), then that tile with one knob changed at a time (launch order, pipeline depth, BLOCK_K, warp grid), at
both B layouts, each verified against the float64 reference and timed per launch on rotating input sets
(`bench.measure`), v2 timed first and last so that a drift of the clock between them shows. A research probe
for issue 27's aim (the sm_80 kernel at least as fast as v2 at 4096^3); runs on any GPU of compute
capability 8.0 or newer. The records: sm80_variants.json (b3ad4f9, before whole k-tiles were copied without
tests; it timed one input set), sm80_variants_3650f37.txt (printed, after).

    python -m lab.sm80_variants [--size 4096] [--dtype fp16] [--record]   (lab/results/h200/sm80_variants.json)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from deepgemm.config import GemmConfig
from lab import record
from stages.v2_mma_sync import launch as v2
from tutorial import library_sm80
from tutorial.bench import Workload, measure

BASE = {"block_m": 128, "block_n": 256, "block_k": 32, "num_stages": 4}
BASE_EXTRA = {"WARPS_M": 2, "WARPS_N": 4, "GROUP_M": 8, "SPLIT_K": 1}
SETTLE_S = 0.5  # idle before each timing, so that every variant starts from a cool card
VARIANTS: dict[str, tuple[dict[str, int], dict[str, int]]] = {  # name: (tile fields, knobs) over the base
    "v2's tile": ({}, {}),
    "GROUP_M 1": ({}, {"GROUP_M": 1}),
    "3 stages": ({"num_stages": 3}, {}),
    "5 stages": ({"num_stages": 5}, {}),
    "BLOCK_K 64, 3 stages": ({"block_k": 64, "num_stages": 3}, {}),
    "256 x 128, 4 x 2 warps": ({"block_m": 256, "block_n": 128}, {"WARPS_M": 4, "WARPS_N": 2}),
}


def config(tile: dict[str, int], knobs: dict[str, int]) -> GemmConfig:
    return GemmConfig(**{**BASE, **tile}, extra={**BASE_EXTRA, **knobs})


def measured(name: str, work: Workload, plan: Callable[..., Any], **options: Any) -> dict[str, Any]:
    """One kernel planned on every input set of `work`, verified and timed by `bench.measure`."""
    launches = [plan(a, b, **options) for a, b in work.problems]
    return measure(name, work, launches, settle_s=SETTLE_S)


def run(size: int, dtype_name: str) -> list[dict[str, Any]]:
    """v2, each variant, v2 again, at both B layouts."""
    rows: list[dict[str, Any]] = []
    base = Workload.make(size, size, size, dtype_name)
    for b_layout in ("nk", "kn"):  # B K-major (a weight stored (N, K)), then MN-major (row-major (K, N))
        work = base.in_layout("mk", b_layout)
        found = [measured("v2", work, v2.plan)]
        for name, (tile, knobs) in VARIANTS.items():
            try:
                found.append(measured(name, work, library_sm80.plan, config=config(tile, knobs)))
            except ValueError as err:
                found.append({"stage": name, "error": str(err)})
        found.append(measured("v2 again", work, v2.plan))
        rows += [{**row, "layout": b_layout} for row in found]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    rows = run(args.size, args.dtype)
    for row in rows:
        line = row.get("error") or (f"{row['tflops']:7.1f} TFLOP/s  {row['sm_clock_mhz'] or 0:5.0f} MHz"
                                    f"  {'ok' if row['passed'] else 'FAILED'}")  # fmt: skip
        print(f"{row['layout']:<3} {row['stage']:<24} {line}")
    if args.record:
        record("sm80_variants", "lab.sm80_variants", None, rows)
    return 0 if all(row.get("passed", True) for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
