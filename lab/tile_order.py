"""python -m lab.tile_order: does the order tiles are walked in change the library kernel's time?

GROUP_M (16 in every plan) sets how many tile rows the launch order walks column by column. With few tile rows
(M = 512 plain: 4 rows of 128) a group is all of them, so the CTAs that read one weight tile are neighbours in
the launch order; with GROUP_M 1 they are a whole tile row apart; swapped, the weight is the rows and a group
of 16 spaces them 16 apart. Each named config runs at each shape with each GROUP_M, verified, then timed
queued as autotune times (`tutorial.autotune.time_config`, rotated operands), beside torch.matmul.

    python -m lab.tile_order --shapes 512x4096x4096 --configs 'n128 c1 s1 st6,swap n128 c1 s1 st6' --record
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from deepgemm import heuristic
from lab import RESULTS_DIR, record
from tutorial.autotune import TUNED_LAYOUT, time_config
from tutorial.bench import Workload
from tutorial.call_suite import TORCH, call_launches
from tutorial.runner import gpu_available, parse_shape, show_recorded
from tutorial.timing import device_us_per_call

GROUP_MS = (16, 4, 2, 1)
ROUNDS = 3  # timings per config, the median kept


def rows_at(shape: tuple[int, int, int], dtype: str, names: list[str], group_ms: list[int]) -> list[dict[str, Any]]:
    m, n, k = shape
    work = Workload.make(m, n, k, dtype).in_layout(*TUNED_LAYOUT)
    torch_us = device_us_per_call(call_launches(work, "torch")[TORCH])
    rows = []
    for name in names:
        base = heuristic.config_from_name(name)
        for group_m in group_ms:
            cfg = replace(base, extra={**base.extra, "GROUP_M": group_m})
            entry, _ = time_config(cfg, work, ROUNDS)
            rows.append({"dtype": dtype, "m": m, "n": n, "k": k, "config": name, "group_m": group_m,
                         "passed": entry["passed"], "us": entry.get("us"), "torch_us": torch_us})  # fmt: skip
            print("\n".join(lines(rows[-1:])), flush=True)
    return rows


def lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        ratio = f"(x {r['torch_us'] / r['us']:.3f})" if r["us"] else ""
        timed = f"{r['us']:7.2f} us, torch {r['torch_us']:7.2f} {ratio}" if r["us"] else "FAILED"
        out.append(f"{r['dtype']} {r['m']}x{r['n']}x{r['k']} {r['config']:<24} GROUP_M {r['group_m']:>2}: {timed}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.tile_order", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="512x4096x4096", help="MxNxK,... (default: %(default)s)")
    parser.add_argument("--configs", default="n128 c1 s1 st6,swap n128 c1 s1 st6,n128 c2 s1 st6",
                        help="config names, comma-separated (default: %(default)s)")
    parser.add_argument("--group-m", default=",".join(map(str, GROUP_MS)), help="GROUP_M values (default: %(default)s)")
    parser.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    parser.add_argument("--name", default="tile_order", help="the record's name (default: %(default)s)")
    parser.add_argument("--record", action="store_true", help="write lab/results/<gpu>/<name>.json")
    args = parser.parse_args(argv)
    if not gpu_available():
        show_recorded(args.name, lines, directory=RESULTS_DIR, command="python -m lab.tile_order --record")
        return 0
    names, group_ms = args.configs.split(","), [int(g) for g in args.group_m.split(",")]
    rows = [row for s in args.shapes.split(",") for row in rows_at(parse_shape(s), args.dtype, names, group_ms)]
    if args.record:
        record(args.name, "lab.tile_order", None, rows)
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
