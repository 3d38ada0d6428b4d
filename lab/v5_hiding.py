"""How v5 hides its epilogue: the head, the GPC slot table and ping-pong consumers, timed beside cuBLAS.

python -m lab.v5_hiding --shapes 4096,8192 --rounds 6 [--record]

The variants are compile-time switches and a launcher path of v5 as it stood at commit c44a640 (PINGPONG,
HEAD_KTILES, GPC_SLOTS and the slot table); v5 kept none of them, so this runs from a checkout of that
commit, where it wrote lab/results/h200/v5_hiding.json.

Every variant is first verified against float64 on NaN-poisoned output at tail shapes (plain and fused
epilogue), then the variants and cuBLAS are timed in rounds, each round in a rotated order, so that each
variant's ratio to cuBLAS compares rows measured seconds apart (the progression's pairs method, for more
than two). Rows go to lab/results/h200/v5_hiding.json with their provenance when --record is given.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import cupy
import numpy as np

from deepgemm import results
from deepgemm.bench import Workload, cublas_launches, measure
from deepgemm.check import random_problem, verify
from deepgemm.config import GemmConfig
from deepgemm.dtypes import input_dtype
from deepgemm.jit import kernel_path
from deepgemm.launch import KernelLaunch, cluster_rows, tma_gemm_launch
from deepgemm.operands import bias_vector, check_problem
from stages.v5_fused import launch as v5

BASE = {"BOX_K": 64, "GROUP_M": 16, "CLUSTER_M": 2, "BALANCED_ROUNDS": 1, "GPC_SLOTS": 1}
VARIANTS: dict[str, tuple[int, dict[str, int]]] = {  # name: (BLOCK_M, knobs over BASE)
    "head+gpc": (128, {}),
    "head": (128, {"GPC_SLOTS": 0}),
    "plain": (128, {"GPC_SLOTS": 0, "HEAD_KTILES": 0}),
    "pingpong": (64, {"GPC_SLOTS": 0, "PINGPONG": 1, "GROUP_M": 32}),
    "pingpong_g16": (64, {"GPC_SLOTS": 0, "PINGPONG": 1}),
}
TAIL_SHAPES = ((129, 200, 72), (1000, 3000, 520), (2304, 2048, 200), (777, 4096, 4160))
OUT_DIR = Path(__file__).resolve().parent / "results" / "h200"


def variant_config(name: str) -> GemmConfig:
    block_m, knobs = VARIANTS[name]
    return GemmConfig(block_m=block_m, block_n=256, block_k=64, num_stages=4, extra={**BASE, **knobs})


def plan_variant(
    name: str, a: Any, b: Any, out: Any = None, *, bias: Any = None, activation: str | None = None
) -> KernelLaunch:
    """v5's plan with a variant's knobs, past the launcher's checks (which know only the shipped knobs)."""
    cfg = variant_config(name)
    p = check_problem(a, b, out)
    bias_f32 = bias_vector(bias, p.n) if bias is not None else None
    return tma_gemm_launch(
        v5.STAGE, p, cfg, swizzle_bytes=v5.SWIZZLE_BYTES, threads=v5.THREADS, persistent=True, balance_rounds=True,
        epilogue_args=(bias_f32 if bias_f32 is not None else np.uint64(0), np.float32(1.0)),
        epilogue_defines=v5.epilogue_defines(bias is not None, activation, p.out.dtype),
        store_box=(v5.STORE_ROWS, v5.STORE_BYTES // p.out.itemsize), store_smem_bytes=v5.STORE_SMEM_BYTES,
        cluster_slots=v5.slot_tables(cfg, cluster_rows(p.m, cfg.value("BLOCK_M"), cfg.value("CLUSTER_M"))),
        keep_alive=(bias_f32,),
    )  # fmt: skip


def check_tails(names: list[str], log: Any) -> list[dict]:
    rows = []
    for name in names:
        for dtype_name in ("fp16", "bf16"):
            dtype = input_dtype(dtype_name)
            for m, n, k in TAIL_SHAPES:
                for fused in (False, True):
                    a, b = random_problem(m, n, k, dtype, seed=m + n + k)
                    epi: dict[str, Any] = {}
                    if fused:
                        epi = {"bias": cupy.random.default_rng(1).random(n, dtype=cupy.float32) * 2 - 1,
                               "activation": "gelu_tanh"}  # fmt: skip
                    plan = plan_variant(name, a, b, **epi)
                    stats = verify(plan, plan.out, a, b, **epi)
                    rows.append({"variant": name, "dtype": dtype_name, "m": m, "n": n, "k": k, "fused": fused,
                                 "passed": stats.passed, "rel_err": stats.rel_fro})  # fmt: skip
                    if not stats.passed:
                        log(f"FAILED {name} {dtype_name} {m}x{n}x{k} fused={fused}: {stats.summary()}")
    return rows


def timed_rounds(names: list[str], shape: tuple[int, int, int], dtype_name: str, rounds: int, log: Any) -> list[dict]:
    work = Workload.make(*shape, dtype_name)
    launchers = {"cublas": cublas_launches(work)}
    launchers.update({name: [plan_variant(name, a, b) for a, b in work.problems] for name in names})
    order = list(launchers)
    rows = []
    for r in range(rounds):
        shift = r % len(order)
        this_round = order[shift:] + order[:shift]
        measured = {name: measure(name, work, launchers[name], settle_s=1.0) for name in this_round}
        for name in this_round:
            row = measured[name]
            row.update(round=r, x_cublas=row["tflops"] / measured["cublas"]["tflops"])
            rows.append(row)
            log(f"{dtype_name} {shape} r{r} {name:14s} {row['tflops']:7.1f} TFLOP/s x{row['x_cublas']:.3f} "
                f"{row['sm_clock_mhz']} MHz passed={row.get('passed')}")  # fmt: skip
    return rows


def summary(rows: list[dict], names: list[str]) -> list[str]:
    lines = [f"{'shape':>16s} {'dtype':5s} " + " ".join(f"{n:>13s}" for n in names)]
    keys = sorted({(r["m"], r["n"], r["k"], r["dtype"]) for r in rows})
    for m, n, k, dtype_name in keys:
        cells = []
        for name in names:
            ratios = [
                r["x_cublas"]
                for r in rows
                if (r["m"], r["n"], r["k"], r["dtype"], r["stage"]) == (m, n, k, dtype_name, name)
            ]
            cells.append(f"{statistics.median(ratios):13.3f}")
        lines.append(f"{m}x{n}x{k:>6} {dtype_name:5s} " + " ".join(cells))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="4096,8192")
    parser.add_argument("--dtype", default="both")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    if "PINGPONG" not in kernel_path(v5.STAGE).read_text():
        raise SystemExit("this comparison runs from a checkout of commit c44a640, where v5 still had its variants")
    names = args.variants.split(",")
    dtypes = ["fp16", "bf16"] if args.dtype == "both" else [args.dtype]
    log = lambda line: print(line, flush=True)  # noqa: E731
    tails = check_tails(names, log)
    log(f"tail checks: {sum(r['passed'] for r in tails)} of {len(tails)} passed")
    if not all(r["passed"] for r in tails):
        return 1
    rows = []
    for size in (int(s) for s in args.shapes.split(",")):
        for dtype_name in dtypes:
            rows += timed_rounds(names, (size, size, size), dtype_name, args.rounds, log)
    print("\nmedian v5 / cuBLAS over rounds")
    print("\n".join(summary(rows, names)))
    if args.record:
        prov = results.provenance(["python", "-m", "lab.v5_hiding", *sys.argv[1:]])
        path = results.save("v5_hiding", [*rows, *({"tail_check": True, **r} for r in tails)], prov, OUT_DIR)
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
