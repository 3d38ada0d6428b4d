"""Fit the cost model's fitted constants (deepgemm/heuristic.py) to what the H200 measured.

Coordinate descent over a grid per constant: each pass tries every value of one constant with the others
held, keeps the best, and moves on, until a pass changes nothing; from the module's values and from a few
random points of the grid (one descent stops in the first valley it finds), the best of them. The rows are
the autotune record's; the lab's 2 x 2 against 2 x 1 (lab/results/h200/v5_cluster_n.json, `python -m
lab.rounds`), since that record holds no cluster of more than two CTAs; and the lab's sweep of the whole
space (lab/results/h200/library_space.json, `python -m lab.library_space`) where it is recorded. The score is
the mean regret of the model's first choice over the FP16 rows (its measured time over the fastest
candidate's) plus ERROR_WEIGHT x the mean |log(estimate / measured)| of every timed candidate: the record
times only the old space's candidates, and the new space's picks rest on estimates that compare across
families. BF16 is held out and reported beside it. LAUNCH_US only shifts every estimate, so it does not
rank; for each trial it is the value that makes the median estimate - measured 0.

    python -m lab.fit_heuristic
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterator
from contextlib import contextmanager

from deepgemm import heuristic
from lab import RESULTS_DIR
from tutorial import results

SM_COUNT = 132  # the record's H200
ERROR_WEIGHT = 0.2  # a mean 10% misestimate costs as much as a mean 2% regret: the estimates must compare too
STARTS, SEED = 12, 25  # coordinate descent from the module's values and from STARTS random points of GRID
MIN_LAUNCH_US = 2.0  # a launch, its prologue and its last epilogue take at least this on the GPU
GRID = {  # the values each fitted constant may take
    "L2_BYTES_PER_CLOCK": (32, 40, 48, 56, 64, 80, 96, 112, 128),
    "K_TILE_OVERHEAD_CLOCKS": (64, 96, 128, 160, 192, 224, 256),
    "L2_GBS": (5000.0, 6000.0, 7000.0, 8000.0, 9000.0, 10000.0, 12000.0, 15000.0, 1e9),
    "SM_HBM_GBS": (25.0, 30.0, 35.0, 40.0, 45.0, 50.0, 60.0, 80.0, 1e9),
    "PARTIAL_BYTES_PER_CLOCK": (32, 64, 128, 256, 512, 1e9),
    "FIXUP_US": (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0),
    "CLUSTER_SYNC_CLOCKS": (0, 16, 32, 48, 64, 96, 128, 160),
}
CLUSTER_RECORD = "v5_cluster_n"  # lab.rounds: v5 (128 x 256, 4 stages) in clusters of 2 x 1 and 2 x 2
SPACE_RECORD = "library_space"  # lab.library_space: the library's whole space at chosen shapes, where recorded


@contextmanager
def constants(values: dict[str, float]) -> Iterator[None]:
    """The heuristic's module constants set to `values` for the block's duration."""
    saved = {name: getattr(heuristic, name) for name in values}
    try:
        for name, value in values.items():
            setattr(heuristic, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(heuristic, name, value)


def score(rows: list[dict]) -> float:
    """Mean regret - 1, plus ERROR_WEIGHT x the mean |log(estimate / measured)| with LAUNCH_US at its best."""
    with constants({"LAUNCH_US": launch_us(rows)}):
        regrets, ratios = heuristic.model_accuracy(rows, SM_COUNT)
    return sum(regrets) / len(regrets) - 1 + ERROR_WEIGHT * statistics.fmean(abs(math.log(r)) for r in ratios)


def descend(rows: list[dict], start: dict[str, float]) -> tuple[float, dict[str, float]]:
    """Coordinate descent over GRID from `start` (module docstring): (its score, the values)."""
    best = dict(start)
    with constants(best):
        best_score = score(rows)
    changed = True
    while changed:
        changed = False
        for name, values in GRID.items():
            for value in values:
                trial = {**best, name: value}
                with constants(trial):
                    found = score(rows)
                if found < best_score:
                    best, best_score, changed = trial, found, True
    return best_score, best


def fit(rows: list[dict], now: dict[str, float]) -> dict[str, float]:
    """The best of coordinate descents from the module's values and from STARTS random points of GRID."""
    draw = random.Random(SEED)
    starts = [now] + [{name: draw.choice(values) for name, values in GRID.items()} for _ in range(STARTS)]
    return min((descend(rows, start) for start in starts), key=lambda found: found[0])[1]


def launch_us(rows: list[dict]) -> float:
    """LAUNCH_US that makes the median estimate / measured 1 (it is added to every estimate), at least
    MIN_LAUNCH_US."""
    with constants({"LAUNCH_US": 0.0}):
        gaps = []
        for row in rows:
            for timed in (c for c in row["candidates"] if c["passed"]):
                t = heuristic.tiling_of(heuristic.config_from_fields(timed["config"]))
                gaps.append(timed["us"] - heuristic.estimate_us(row["m"], row["n"], row["k"], t, SM_COUNT))
    return max(MIN_LAUNCH_US, round(statistics.median(gaps), 1))


def report(label: str, fit: list[dict], held: list[dict], values: dict[str, float]) -> None:
    with constants(values):
        (fp16, _), (bf16, _) = (heuristic.model_accuracy(rows, SM_COUNT) for rows in (fit, held))
        _, ratios = heuristic.model_accuracy(fit + held, SM_COUNT)
    ratios.sort()
    middle = f"{ratios[len(ratios) // 10]:.2f} to {ratios[9 * len(ratios) // 10]:.2f}"
    print(
        f"{label}: mean regret fp16 {statistics.fmean(fp16):.4f} (worst {max(fp16):.3f}), bf16 "
        f"{statistics.fmean(bf16):.4f} (worst {max(bf16):.3f}); estimates {middle} x measured for 80%"
    )


def cluster_rows() -> list[dict]:
    """The lab's 2 x 2 against 2 x 1 record as autotune rows (a row per shape and dtype, each setting's
    median time over its rounds): the autotune record holds no cluster of more than two."""
    timed: dict[tuple, list[float]] = {}
    for row in results.load(CLUSTER_RECORD, RESULTS_DIR)["rows"]:
        if row["stage"].startswith("v5 CLUSTER_N=") and not row.get("tail_check"):
            key = (row["dtype"], row["m"], row["n"], row["k"], int(row["stage"].rsplit("=", 1)[1]))
            timed.setdefault(key, []).append(row["ms"] * 1e3)
    found: dict[tuple, dict] = {}
    for (dtype, m, n, k, cluster_n), times in sorted(timed.items()):
        fields = {"block_m": 128, "block_n": 256, "num_stages": 4, "CLUSTER_M": 2, "CLUSTER_N": cluster_n,
                  "SPLIT_K": 1}  # fmt: skip
        row = found.setdefault((dtype, m, n, k), {"dtype": dtype, "m": m, "n": n, "k": k, "candidates": []})
        row["candidates"].append({"config": fields, "us": statistics.median(times), "passed": True})
    return list(found.values())


def space_rows() -> list[dict]:
    """The lab's sweep of the library's space (autotune rows, many candidates each), where it is recorded."""
    found = (RESULTS_DIR / f"{SPACE_RECORD}.json").is_file()
    return results.load(SPACE_RECORD, RESULTS_DIR)["rows"] if found else []


def main() -> None:
    rows = results.load("autotune")["rows"] + cluster_rows() + space_rows()
    fp16 = [r for r in rows if r["dtype"] == "fp16"]
    held = [r for r in rows if r["dtype"] == "bf16"]
    now = {name: getattr(heuristic, name) for name in [*GRID, "LAUNCH_US"]}
    report("now", fp16, held, now)
    found = fit(fp16, now)
    with constants(found):
        found["LAUNCH_US"] = launch_us(fp16)
    report("fitted", fp16, held, found)
    for name, value in found.items():
        print(f"  {name} = {value:g}" + ("" if value == now[name] else f"  (now {now[name]:g})"))


if __name__ == "__main__":
    main()
