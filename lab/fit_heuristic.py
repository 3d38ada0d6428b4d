"""Fit the cost model's three fitted constants (deepgemm/heuristic.py) to the autotune record.

Grid search over L2 bytes per clock, overhead clocks per k-tile and split-K's summing cost: for each
setting, the model ranks the timed candidates of every FP16 shape; the score is the mean regret of its
first choice (its measured time over the fastest one's). BF16 is held out and reported beside it.

    python -m lab.fit_heuristic
"""

from __future__ import annotations

import itertools
from unittest import mock

from deepgemm import heuristic
from tutorial import results


def regrets(rows: list[dict]) -> float:
    """Mean of (time of the model's first choice among the timed candidates) / (fastest time)."""
    found = heuristic.model_accuracy(rows, 132)[0]
    return sum(found) / len(found)


def main() -> None:
    rows = results.load("autotune")["rows"]
    fit = [r for r in rows if r["dtype"] == "fp16"]
    held = [r for r in rows if r["dtype"] == "bf16"]
    grid = itertools.product((32, 40, 48, 56, 64, 80, 96), (64, 96, 128, 160, 192, 256), (0.0, 1.0, 2.0, 3.0, 4.0))
    scored = []
    for l2, overhead, split_sum in grid:
        with (
            mock.patch.object(heuristic, "L2_BYTES_PER_CLOCK", l2),
            mock.patch.object(heuristic, "K_TILE_OVERHEAD_CLOCKS", overhead),
            mock.patch.object(heuristic, "SPLIT_SUM_US", split_sum),
        ):
            scored.append((regrets(fit), regrets(held), l2, overhead, split_sum))
    scored.sort()
    print("fp16 regret  bf16 regret  L2 B/clk  overhead clk  split sum us")
    for fp16, bf16, l2, overhead, split_sum in scored[:8]:
        print(f"{fp16:11.4f}  {bf16:11.4f}  {l2:8}  {overhead:12}  {split_sum:12}")
    print(f"now: fp16 {regrets(fit):.4f}, bf16 {regrets(held):.4f}")


if __name__ == "__main__":
    main()
