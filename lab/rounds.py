"""v5 under several settings and cuBLAS, timed in rounds: each round times every one, the order rotated.

python -m lab.rounds --variants "CLUSTER_N=1;CLUSTER_N=2" --shapes 4096,8192 --rounds 6 [--record NAME]

A sweep (python -m lab sweep) times each setting once; a difference of a percent needs more than one row
on this power-capped card, so here each setting's ratio to cuBLAS is taken within a round (rows measured
seconds apart) and the median over rounds is reported. Every setting is first verified on NaN-poisoned
output at tail shapes (plain and fused epilogue). With --record the rows go to lab/results/h200/NAME.json.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import cupy

from deepgemm import results, stages
from deepgemm.bench import bench_rounds
from deepgemm.check import random_problem, reference, verify
from deepgemm.config import GemmConfig, parse_defines
from deepgemm.dtypes import input_dtype
from deepgemm.launch import KernelLaunch
from lab import RESULTS_DIR

STAGE = "v5_fused"
TAIL_SHAPES = ((129, 200, 72), (1000, 3000, 520), (2304, 2048, 200), (777, 4096, 4160))


def parse_variant(text: str) -> GemmConfig:
    """'CLUSTER_N=2,GROUP_M=8' -> the config with those knobs (BLOCK_* and NUM_STAGES go to their fields)."""
    return GemmConfig.from_defines(parse_defines(text))


def planner(config: GemmConfig) -> Callable[..., KernelLaunch]:
    v5 = stages.load(STAGE)
    return lambda a, b, **epilogue: v5.plan(a, b, config=config, **epilogue)


def check_tails(variants: dict[str, GemmConfig], log: Callable[[str], None]) -> list[dict]:
    rows = []
    for name, config in variants.items():
        for dtype_name in ("fp16", "bf16"):
            for m, n, k in TAIL_SHAPES:
                for fused in (False, True):
                    a, b = random_problem(m, n, k, input_dtype(dtype_name), seed=m + n + k)
                    epi = {}
                    if fused:
                        bias = cupy.random.default_rng(1).random(n, dtype=cupy.float32) * 2 - 1
                        epi = {"bias": bias, "activation": "gelu_tanh"}
                    launch = planner(config)(a, b, **epi)
                    stats = verify(launch, reference(a, b, **epi), launch.out)
                    rows.append({"tail_check": True, "stage": name, "dtype": dtype_name, "m": m, "n": n, "k": k,
                                 "fused": fused, "passed": stats.passed, "rel_err": stats.rel_fro})  # fmt: skip
                    if not stats.passed:
                        log(f"FAILED {name} {dtype_name} {m}x{n}x{k} fused={fused}: {stats.summary()}")
    return rows


def summary_lines(rows: list[dict]) -> list[str]:
    """The tail checks, then each setting's median ratio to cuBLAS over the rounds, with its range."""
    tails = [r for r in rows if r.get("tail_check")]
    return [
        f"tail checks: {sum(r['passed'] for r in tails)} of {len(tails)} passed",
        results.format_table(results.pair_summary(rows), results.PAIR_COLUMNS),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", required=True, help="settings separated by ';', knobs by ','")
    parser.add_argument("--shapes", default="4096,8192")
    parser.add_argument("--dtype", default="both")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--record", metavar="NAME")
    args = parser.parse_args(argv)
    variants = {f"v5 {text}": parse_variant(text) for text in args.variants.split(";")}
    log = lambda line: print(line, flush=True)  # noqa: E731
    rows = check_tails(variants, log)
    if not all(r["passed"] for r in rows):
        print("\n".join(summary_lines(rows)))
        return 1
    for size in (int(s) for s in args.shapes.split(",")):
        for dtype_name in ("fp16", "bf16") if args.dtype == "both" else (args.dtype,):
            plans = {name: planner(cfg) for name, cfg in variants.items()}
            rows += bench_rounds(plans, size, size, size, dtype_name, rounds=args.rounds, log=log)
    print("\n".join(summary_lines(rows)))
    if args.record:
        prov = results.provenance(["python", "-m", "lab.rounds", *sys.argv[1:]])
        print(f"recorded {results.save(args.record, rows, prov, RESULTS_DIR)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
