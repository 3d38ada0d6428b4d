"""Settings of v5 (or of the library kernel) and cuBLAS timed in rounds, the order rotated from round to round.

Each round times every setting and cuBLAS.

python -m lab.rounds --stage library --variants "CLUSTER_N=1;CLUSTER_N=2" --shapes 4096,8192 --rounds 6 [--record NAME]

A sweep (python -m lab sweep) times each setting once; a difference of a percent needs more than one row
on this power-capped card, so here each setting's ratio to cuBLAS is taken within a round (rows measured
seconds apart) and the median over rounds is reported. Every setting is first verified on NaN-poisoned
output at tail shapes (plain and fused epilogue). With --record the rows go to lab/results/h200/NAME.json.

`--stage v5_fused` (the default) plans v5's lesson kernel (`stages/v5_fused/launch.py`), whose knobs are
CLUSTER_M, GROUP_M, WGMMA_IN_FLIGHT, TMA_STORE, NUM_STAGES and BOX_K; `--stage library` plans the library
call (`tutorial.library`: `deepgemm.gemm` with the config), whose kernel also has CLUSTER_N, SPLIT_K,
SWAP_AB and the other BLOCK_N.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import cupy

from deepgemm.config import GemmConfig, parse_defines
from deepgemm.dtypes import input_dtype
from lab import record
from tutorial import results, stages
from tutorial.bench import bench_rounds
from tutorial.check import random_problem, reference, verify
from tutorial.stages import LIBRARY, stage_name

STAGE = "v5_fused"  # the default --stage
ROW_PREFIX = {"v5_fused": "v5", LIBRARY: LIBRARY}  # a row is '<prefix> <setting>', e.g. 'v5 GROUP_M=8'
TAIL_SHAPES = ((129, 200, 72), (1000, 3000, 520), (2304, 2048, 200), (777, 4096, 4160))


def parse_variant(text: str) -> GemmConfig:
    """'CLUSTER_N=2,GROUP_M=8' -> the config with those knobs (BLOCK_* and NUM_STAGES go to their fields)."""
    return GemmConfig.from_defines(parse_defines(text))


def variants_of(stage: str, texts: str) -> dict[str, GemmConfig]:
    """The settings of `--variants` (';' between settings) by row name, each checked against the stage's
    knobs before anything runs: ValueError names a knob the stage does not have."""
    name = stage_name(stage)
    defaults = stages.load(name).DEFAULTS
    found = {}
    for text in (t.strip() for t in texts.split(";")):
        config = parse_variant(text)
        try:
            config.merged_over(defaults)
        except ValueError as err:
            hint = "" if name == LIBRARY else f" (--stage {LIBRARY} runs the library kernel, which has more knobs)"
            raise ValueError(f"{text!r} for {name}: {err}{hint}") from None
        found[f"{ROW_PREFIX.get(name, name)} {text}"] = config
    return found


def planner(config: GemmConfig, stage: str = STAGE) -> Callable[..., Callable[[], object]]:
    """plan(a, b, **epilogue) with `config`: the stage's launch, or the library call; either has `.out`."""
    launcher = stages.load(stage)
    return lambda a, b, **epilogue: launcher.plan(a, b, config=config, **epilogue)


def check_tails(variants: dict[str, GemmConfig], log: Callable[[str], None], stage: str = STAGE) -> list[dict]:
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
                    launch = planner(config, stage)(a, b, **epi)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab.rounds", description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default=STAGE, help=f"whose settings: {STAGE} (default) or {LIBRARY}")
    parser.add_argument("--variants", required=True, help="settings separated by ';', knobs by ','")
    parser.add_argument("--shapes", default="4096,8192")
    parser.add_argument("--dtype", default="both")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--record", metavar="NAME")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        stage = stage_name(args.stage)
        variants = variants_of(stage, args.variants)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    log = lambda line: print(line, flush=True)  # noqa: E731
    rows = check_tails(variants, log, stage)
    if not all(r["passed"] for r in rows):
        print("\n".join(summary_lines(rows)))
        return 1
    for size in (int(s) for s in args.shapes.split(",")):
        for dtype_name in ("fp16", "bf16") if args.dtype == "both" else (args.dtype,):
            plans = {name: planner(cfg, stage) for name, cfg in variants.items()}
            rows += bench_rounds(plans, size, size, size, dtype_name, rounds=args.rounds, log=log)
    print("\n".join(summary_lines(rows)))
    if args.record:
        record(args.record, "lab.rounds", argv, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
