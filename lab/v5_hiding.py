"""How v5 hides its epilogue: nothing, the head, the head with a GPC slot table, or ping-pong consumers.

The record lab/results/h200/v5_hiding.json compares these four ways, each verified at four tail shapes
(plain and fused epilogue) and then timed beside cuBLAS in six rounds, the order rotated each round. They
were compile-time switches and a launcher path of v5 at commit c44a640 (PINGPONG, HEAD_KTILES, GPC_SLOTS),
and v5 kept none of them (stages/v5_fused/README.md says why). The script that measured them is this
file at that commit: `git show c44a640:lab/v5_hiding.py`, run there as
`python -m lab.v5_hiding --shapes 4096,8192 --rounds 6 --record`. Here it only reads the record:
`python -m lab show v5_hiding`.
"""

from __future__ import annotations

import statistics

VARIANTS = {  # the record's names, in the order of the table
    "plain": "v5 as it ships: cooperative consumers, the epilogue not hidden",
    "head": "the next tile's first k-tile issued under the right half of the epilogue",
    "head+gpc": "the head, and clusters of one GPC on neighbouring tiles (a slot table from run-time probes)",
    "pingpong": "each consumer warpgroup takes whole 64 x 256 tiles, alternately (GROUP_M 32)",
    "pingpong_g16": "ping-pong with GROUP_M 16",
}


def median_ratios(rows: list[dict]) -> dict[tuple[int, str], dict[str, float]]:
    """(M, dtype) -> variant -> the median over rounds of its TFLOP/s over cuBLAS's in the same round."""
    out: dict[tuple[int, str], dict[str, float]] = {}
    for key in sorted({(r["m"], r["dtype"]) for r in rows if "round" in r}):
        timed = [r for r in rows if "round" in r and (r["m"], r["dtype"]) == key]
        out[key] = {
            name: statistics.median(r["x_cublas"] for r in timed if r["stage"] == name)
            for name in VARIANTS
            if any(r["stage"] == name for r in timed)
        }
    return out


def summary_lines(rows: list[dict]) -> list[str]:
    """The tail checks, then the median ratio to cuBLAS per variant, shape and dtype."""
    tails = [r for r in rows if r.get("tail_check")]
    table = median_ratios(rows)
    names = [n for n in VARIANTS if any(n in ratios for ratios in table.values())]
    lines = [
        f"tail checks: {sum(r['passed'] for r in tails)} of {len(tails)} passed",
        "median x cuBLAS over six rounds (M = N = K)",
        f"{'M':>5s} {'dtype':5s} " + " ".join(f"{n:>13s}" for n in names),
    ]
    for (m, dtype), ratios in table.items():
        lines.append(f"{m:5d} {dtype:5s} " + " ".join(f"{ratios[n]:13.3f}" for n in names))
    return lines
