"""The sm_80 library kernel against v2 at one square shape: the tile v2 runs (128 x 256 x 32, 4 stages, 2 x 4
warps), then that tile with one knob changed at a time (launch order, pipeline depth, BLOCK_K, warp grid),
both B layouts, each verified against the float64 reference and timed per launch (`timing.time_launches`),
v2 timed first and last so that a drift of the clock between them shows. A research probe for issue 27's aim
(the sm_80 kernel at least as fast as v2 at 4096^3); runs on any GPU of compute capability 8.0 or newer.

    python -m lab.sm80_variants [--size 4096] [--dtype fp16] [--record]   (lab/results/h200/sm80_variants.json)
"""

from __future__ import annotations

import argparse
from typing import Any

from deepgemm.config import GemmConfig
from deepgemm.dtypes import input_dtype
from lab import record
from stages.v2_mma_sync import launch as v2
from tutorial import library_sm80
from tutorial.check import random_problem, reference, verify
from tutorial.timing import settle, tflops, time_launches

BASE = {"block_m": 128, "block_n": 256, "block_k": 32, "num_stages": 4}
BASE_EXTRA = {"WARPS_M": 2, "WARPS_N": 4, "GROUP_M": 8, "SPLIT_K": 1}
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


def timed(name: str, launch: Any, expected: Any, size: int) -> dict[str, Any]:
    stats = verify(launch, expected, launch.out)
    settle(0.5)
    timing = time_launches([launch])
    return {"name": name, "passed": stats.passed, "ms": timing.ms, "tflops": tflops(size, size, size, timing.ms),
            "sm_clock_mhz": timing.sm_clock_mhz}  # fmt: skip


def run(size: int, dtype_name: str) -> list[dict[str, Any]]:
    rows = []
    for b_k_major in (True, False):
        a, b = random_problem(size, size, size, input_dtype(dtype_name), seed=5, b_k_major=b_k_major)
        expected = reference(a, b)
        layout = "B K-major" if b_k_major else "B MN-major"
        rows.append({**timed("v2", v2.plan(a, b), expected, size), "layout": layout})
        for name, (tile, knobs) in VARIANTS.items():
            try:
                launch = library_sm80.plan(a, b, config=config(tile, knobs))
            except ValueError as err:
                rows.append({"name": name, "layout": layout, "error": str(err)})
                continue
            rows.append({**timed(name, launch, expected, size), "layout": layout})
        rows.append({**timed("v2 again", v2.plan(a, b), expected, size), "layout": layout})
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
        print(f"{row['layout']:<11} {row['name']:<24} {line}")
    if args.record:
        record("sm80_variants", "lab.sm80_variants", None, rows)
    return 0 if all(row.get("passed", True) for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
