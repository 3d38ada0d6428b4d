"""Fit the cost model's fitted constants (deepgemm/heuristic.py) to what the H200 measured.

Coordinate descent over a grid per constant: each pass tries every value of one constant with the others
held, keeps the best, and moves on, until a pass changes nothing; from the module's values and from a few
random points of the grid (one descent stops in the first valley it finds), the best of them. The rows are
the autotune record's; the lab's 2 x 2 against 2 x 1 (lab/results/h200/v5_cluster_n.json, `python -m
lab.rounds`), since that record holds no cluster of more than two CTAs; and the lab's sweep of the whole
space (lab/results/h200/library_space*.json, `python -m lab.library_space`) where it is recorded. The score is
the mean regret of the model's first choice over the FP16 rows (its measured time over the fastest
candidate's) plus ERROR_WEIGHT x the mean |log(estimate / measured)| of every timed candidate: the record
times only the old space's candidates, and the new space's picks rest on estimates that compare across
families. BF16 is held out and reported beside it. LAUNCH_US only shifts every estimate, so it does not
rank; for each trial it is the value that makes the median estimate - measured 0.

The fit is checked against shapes it did not see (`--cross`): the record's layers (N, K) are dealt into two
halves, the constants fitted on each half, and each half's regret reported under the other half's fit; a
change to the model that lowers the regret in sample but raises it held out is overfitting.

    python -m lab.fit_heuristic            # fit on every FP16 row, report before and after
    python -m lab.fit_heuristic --cross    # the same in sample, and each half of the layers held out
    python -m lab.fit_heuristic --gpu "NVIDIA H100 80GB HBM3"   # fitted to another GPU's record
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
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
    "SM_HBM_GBS": (25.0, 30.0, 35.0, 40.0, 45.0, 50.0, 60.0, 65.0, 80.0, 1e9),
    "PARTIAL_BYTES_PER_CLOCK": (32, 64, 128, 256, 512, 1e9),
    "FIXUP_US": (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0),
    "CLUSTER_SYNC_CLOCKS": (0, 16, 32, 48, 64, 96, 128, 160),
    "POWER_TFLOPS": (600.0, 650.0, 680.0, 700.0, 720.0, 750.0, 800.0, 1e9),
    "L2_MERGE_READERS": (4, 6, 8, 10, 13, 16, 20, 1e9),
    "XBAR_GBS": (9000.0, 10000.0, 11000.0, 12000.0, 13000.0, 14000.0, 16000.0, 1e9),
}
HELD = {"SM_HBM_GBS": heuristic.SM_HBM_GBS}  # not searched (fitted free it goes to 1e9, no bound): what M = 1 streams
CLUSTER_RECORD = "v5_cluster_n"  # lab.rounds: v5 (128 x 256, 4 stages) in clusters of 2 x 1 and 2 x 2
SPACE_RECORDS = ("library_space", "library_space_mid_m", "library_space_mid_m2")  # lab.library_space sweeps


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


def searched() -> dict[str, tuple[float, ...]]:
    """GRID less the constants HELD."""
    return {name: values for name, values in GRID.items() if name not in HELD}


def descend(rows: list[dict], start: dict[str, float]) -> tuple[float, dict[str, float]]:
    """Coordinate descent over GRID from `start` (module docstring): (its score, the values)."""
    best = dict(start)
    with constants(best):
        best_score = score(rows)
    changed = True
    while changed:
        changed = False
        for name, values in searched().items():
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
    starts = [now] + [{**now, **{name: draw.choice(values) for name, values in searched().items()}}
                      for _ in range(STARTS)]  # fmt: skip
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
    held_out = f"bf16 {statistics.fmean(bf16):.4f} (worst {max(bf16):.3f})" if bf16 else "no bf16 rows"
    print(
        f"{label}: mean regret fp16 {statistics.fmean(fp16):.4f} (worst {max(fp16):.3f}), {held_out}; "
        f"estimates {middle} x measured for 80%"
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
    """The lab's sweeps of the library's space (autotune rows, many candidates each), where recorded."""
    found = [name for name in SPACE_RECORDS if (RESULTS_DIR / f"{name}.json").is_file()]
    return [row for name in found for row in results.load(name, RESULTS_DIR)["rows"]]


def layer(row: dict) -> tuple[int, int]:
    """A row's layer: its weight's N x K (the shape table sweeps M, the tokens, over each)."""
    return row["n"], row["k"]


def halves(rows: list[dict]) -> tuple[set, set]:
    """The rows' layers dealt into two halves of about as many rows each: the largest layer first, each to
    the half with fewer rows so far (ties to the first)."""
    sizes: dict[tuple[int, int], int] = {}
    for row in rows:
        sizes[layer(row)] = sizes.get(layer(row), 0) + 1
    first, second, counts = set(), set(), [0, 0]
    for name, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        side = int(counts[1] < counts[0])
        (second if side else first).add(name)
        counts[side] += size
    return first, second


def fitted(rows: list[dict], now: dict[str, float]) -> dict[str, float]:
    """`fit`, then LAUNCH_US for those values (a process pool's unit of work)."""
    found = fit(rows, now)
    with constants(found):
        found["LAUNCH_US"] = launch_us(rows)
    return found


def regret_line(label: str, rows: list[dict], values: dict[str, float]) -> str:
    """Mean and worst regret of the model's first choice over autotune rows, and how many over 10%."""
    with constants(values):
        regrets, _ = heuristic.model_accuracy(rows, SM_COUNT)
    return f"{label}: {regrets_text(regrets)}"


def regrets_text(regrets: list[float]) -> str:
    over = sum(r > 1.10 for r in regrets)
    mean, worst = 100 * (statistics.fmean(regrets) - 1), 100 * (max(regrets) - 1)
    return f"mean regret {mean:.2f}%, worst {worst:.1f}%, {over} of {len(regrets)} over 10%"


def offered_regrets(rows: list[dict], timing: str) -> list[float]:
    """Per autotune row, the regret of the model's tile among the tilings the space offers today (a tiling the
    record timed that the space no longer offers is left out), by `timing`: "us" queued, without PDL or the
    shape compiled in, as `heuristic.model_accuracy` ranks them; or "graph_us" in CUDA graphs, as the table
    ranks them, each tiling at the fastest of its variants (with PDL, the shape compiled in, neither), so the
    choice of tile is scored apart from those two."""
    regrets = []
    for row in rows:
        m, n, k = row["m"], row["n"], row["k"]
        offered = {choice.tiling() for choice in heuristic.candidates(m, n, k, SM_COUNT)}
        fastest: dict[heuristic.Tiling, float] = {}
        for timed in row["candidates"]:
            variant = timed["config"].get("PDL") or timed["config"].get("SHAPE_JIT")
            if timing == "us" and (variant or not timed["passed"]):
                continue
            if timing == "graph_us" and not (timed["passed"] and timed.get("graph_passed") and timed.get("graph_us")):
                continue
            t = heuristic.tiling_of(heuristic.config_from_fields(timed["config"]))
            if t in offered:
                fastest[t] = min(fastest.get(t, math.inf), timed[timing])
        if fastest:
            first = min(fastest, key=lambda t: heuristic.price(m, n, k, t, SM_COUNT))
            regrets.append(fastest[first] / min(fastest.values()))
    return regrets


def cross(tuned: list[dict], extra: list[dict], now: dict[str, float]) -> None:
    """Fit on all of them, and on each half of the layers (`halves`) with the other half's regret reported:
    `tuned` (the autotune rows) are what is scored, `extra` (the lab's records) go with their layer's half."""
    first, second = halves(tuned)
    part = [[r for r in tuned + extra if layer(r) in side] for side in (first, second)]
    with ProcessPoolExecutor(max_workers=3) as pool:
        every, fit_first, fit_second = pool.map(fitted, [tuned + extra, *part], [now] * 3)
    print(regret_line("in sample (fitted on every layer)", tuned, every))
    held_out = []
    for values, side in ((fit_second, first), (fit_first, second)):
        with constants(values):
            regrets, _ = heuristic.model_accuracy([r for r in tuned if layer(r) in side], SM_COUNT)
        held_out += regrets
    print(f"held out (each half under the other half's fit): {regrets_text(held_out)}")
    print(f"  halves: {sorted(first)} / {sorted(second)}")
    for label, values in (("every layer", every), ("first half", fit_first), ("second half", fit_second)):
        print(f"  fitted on {label}: " + ", ".join(f"{name} {value:g}" for name, value in values.items()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.fit_heuristic", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cross", action="store_true", help="also fit on each half of the layers, report the other")
    parser.add_argument("--hold", action="append", default=[], metavar="NAME=VALUE",
                        help="hold a constant of deepgemm.heuristic at VALUE instead of searching it")  # fmt: skip
    parser.add_argument("--gpu", default="NVIDIA H200",
                        help="fit to this GPU's autotune record, results/<gpu>/autotune.json (the lab's records, "
                             "all of the H200, join only the H200's; default: %(default)s)")  # fmt: skip
    args = parser.parse_args(argv)
    for held in args.hold:
        name, value = held.split("=")
        HELD[name] = float(value)
    directory = results.gpu_directory(args.gpu)
    tuned = results.load("autotune", directory)["rows"]
    rows = tuned + (cluster_rows() + space_rows() if directory == results.RESULTS_DIR else [])
    fp16 = [r for r in rows if r["dtype"] == "fp16"]
    held = [r for r in rows if r["dtype"] == "bf16"]
    now = {name: getattr(heuristic, name) for name in [*GRID, "LAUNCH_US"]} | HELD
    report("now", fp16, held, now)
    print(regret_line("now, the autotune record", [r for r in tuned if r["dtype"] == "fp16"], now))
    for timing, label in (("us", "queued"), ("graph_us", "in CUDA graphs")):
        print(f"  among the tilings offered now, {label}: {regrets_text(offered_regrets(tuned, timing))}")
    if args.cross:
        fp16_tuned = [r for r in tuned if r["dtype"] == "fp16"]
        cross(fp16_tuned, [r for r in fp16 if r not in fp16_tuned], now)
        return
    found = fitted(fp16, now)
    report("fitted", fp16, held, found)
    for name, value in found.items():
        print(f"  {name} = {value:g}" + ("" if value == now[name] else f"  (now {now[name]:g})"))


if __name__ == "__main__":
    main()
