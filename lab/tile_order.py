"""python -m lab.tile_order: does the order tiles are walked in change the library kernel's time?

GROUP_M (16 in every plan) sets how many tile rows the launch order walks column by column. With few tile rows
(M = 512 plain: 4 rows of 128) a group is all of them, so the CTAs that read one weight tile are neighbours in
the launch order; with GROUP_M 1 they are a whole tile row apart; swapped, the weight is the rows and a group
of 16 spaces them 16 apart. Each of CONFIGS runs at each shape with each of GROUP_MS, verified, then timed
queued as autotune times (`tutorial.autotune.time_config`, rotated operands), beside torch.matmul. A lab sweep
over chosen shapes (`lab.shape_sweep`): edit CONFIGS or GROUP_MS to ask it of other tiles.

    python -m lab.tile_order --shapes 512x4096x4096 --record
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from lab import shape_sweep
from tutorial.autotune import TUNED_LAYOUT, time_config
from tutorial.bench import Workload
from tutorial.call_suite import TORCH, call_launches
from tutorial.runner import Shape
from tutorial.timing import device_us_per_call

CONFIGS = ("n128 c1 s1 st6", "swap n128 c1 s1 st6", "n128 c2 s1 st6")  # plain, swapped, plain sharing the weight
GROUP_MS = (16, 4, 2, 1)
ROUNDS = 3  # timings per config, the median kept


def with_group_m(name: str, group_m: int) -> GemmConfig:
    base = heuristic.config_from_name(name)
    return replace(base, extra={**base.extra, "GROUP_M": group_m})


def configs_at(_shape: Shape, _device: int) -> list[GemmConfig]:
    return [with_group_m(name, group_m) for name in CONFIGS for group_m in GROUP_MS]


def row_at(shape: Shape, dtype: str, _device: int) -> dict[str, Any]:
    m, n, k = shape
    work = Workload.make(m, n, k, dtype).in_layout(*TUNED_LAYOUT)
    row: dict[str, Any] = {"dtype": dtype, "m": m, "n": n, "k": k, "candidates": [],
                           "torch_us": device_us_per_call(call_launches(work, "torch")[TORCH])}  # fmt: skip
    for name in CONFIGS:
        for group_m in GROUP_MS:
            entry, _ = time_config(with_group_m(name, group_m), work, ROUNDS)
            row["candidates"].append({"name": name, "group_m": group_m, "passed": entry["passed"],
                                      "us": entry.get("us")})  # fmt: skip
    print("\n".join(lines([row])), flush=True)
    return row


def lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for row in rows:
        for e in row["candidates"]:
            ratio = f"(x {row['torch_us'] / e['us']:.3f})" if e["us"] else ""
            timed = f"{e['us']:7.2f} us, torch {row['torch_us']:7.2f} {ratio}" if e["us"] else "FAILED"
            out.append(f"{row['dtype']} {row['m']}x{row['n']}x{row['k']} {e['name']:<24} GROUP_M {e['group_m']:>2}: "
                       f"{timed}")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    return shape_sweep.run(argv, "lab.tile_order", __doc__, "512x4096x4096", configs_at, row_at, lines)


if __name__ == "__main__":
    raise SystemExit(main())
