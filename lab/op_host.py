"""What the torch operator costs the host: a cached call at 64^3 FP16 (a row-major, b the transposed view of
a row-major (N, K)), host µs per call, by the way it is made, in one process, in rotated rounds.

    python -m lab.op_host [--rounds 5] [--record]     --record writes lab/results/h200/op_host.json

The ways: the planned launch alone (`deepgemm.api.launch`, the call before the operator existed);
`deepgemm.gemm` (the route: straight to the launch when nothing needs a gradient); the registered operator
`torch.ops.deepgemm.gemm.default` through the dispatcher (`torch.library.Library.define`/`impl`, with the
autograd kernel `register_autograd` adds); the same kernel registered with `torch.library.custom_op` (the
registration deepgemm does not use); each of the last three with an input that requires grad; and
`deepgemm.linear`, `torch.matmul` and `F.linear` at the same shape, for scale; a layer's forward and backward
(deepgemm.linear against F.linear, everything requiring grad). Each way is timed with deepgemm.gemm's C++
route (`deepgemm.fast`) and without it (its eager calls through Python), by `tutorial.timing.host_us_per_call`
once per round, the rounds rotating the order; the row keeps the least. The operator's CUDA kernel is C++'s
in both passes once the extension is built (the switch is deepgemm.gemm's route, not the dispatcher's).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch

import deepgemm
from deepgemm import api, torch_ops
from lab import record
from tutorial.timing import host_us_per_call

SHAPE = (64, 64, 64)
CALLS, REPEATS = 500, 9


@torch.library.custom_op("deepgemm_lab::gemm", mutates_args=())
def custom_gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, alpha: float = 1.0,
                activation: str | None = None) -> torch.Tensor:  # fmt: skip
    """The library call registered the other way, for the comparison only."""
    return api.launch(a, b, bias, alpha, activation, None, None, None)


custom_gemm.register_fake(lambda a, b, *args: a.new_empty((a.shape[0], b.shape[1])))
custom_gemm.register_autograd(torch_ops.backward, setup_context=lambda ctx, inputs, output: torch_ops.save(
    ctx, *inputs[:5], output))  # fmt: skip


def ways(m: int, n: int, k: int) -> dict[str, Callable[[], Any]]:
    a = torch.rand(m, k, device="cuda", dtype=torch.float16)
    b = torch.rand(n, k, device="cuda", dtype=torch.float16).T
    w = b.T
    grad_a = a.clone().requires_grad_()
    op = torch.ops.deepgemm.gemm.default
    return {
        "api.launch (the call before the op)": lambda: api.launch(a, b, None, 1.0, None, None, None, None),
        "deepgemm.gemm": lambda: deepgemm.gemm(a, b),
        "torch.ops.deepgemm.gemm (Library)": lambda: op(a, b),
        "custom_op": lambda: custom_gemm(a, b),
        "deepgemm.gemm, a requires grad": lambda: deepgemm.gemm(grad_a, b),
        "torch.ops.deepgemm.gemm, a requires grad": lambda: op(grad_a, b),
        "custom_op, a requires grad": lambda: custom_gemm(grad_a, b),
        "deepgemm.linear": lambda: deepgemm.linear(a, w),
        "torch.matmul": lambda: torch.matmul(a, b),
        "F.linear": lambda: torch.nn.functional.linear(a, w),
        **training_ways(m, n, k),
    }


def training_ways(m: int, n: int, k: int) -> dict[str, Callable[[], Any]]:
    """A layer's forward and backward as a training step makes it: x, W and bias require grad."""
    x = torch.rand(m, k, device="cuda", dtype=torch.float16, requires_grad=True)
    w = torch.rand(n, k, device="cuda", dtype=torch.float16, requires_grad=True)
    bias = torch.rand(n, device="cuda", dtype=torch.float16, requires_grad=True)
    dy = torch.rand(m, n, device="cuda", dtype=torch.float16)
    return {
        "deepgemm.linear forward + backward": lambda: deepgemm.linear(x, w, bias).backward(dy),
        "F.linear forward + backward": lambda: torch.nn.functional.linear(x, w, bias).backward(dy),
    }


def measure(rounds: int) -> list[dict[str, Any]]:
    """Every way, with the C++ call path (deepgemm.fast) holding the plans and with it switched off (every
    call through Python), the two alternating by round."""
    m, n, k = SHAPE
    calls = ways(m, n, k)
    for call in calls.values():  # build every plan, and so hand C++ those it can run
        call()
    with_cpp = torch_ops.FAST[0]
    paths = {"C++": with_cpp, "Python": None} if with_cpp is not None else {"Python": None}
    best = {(path, name): float("inf") for path in paths for name in calls}
    for r in range(rounds):
        names = list(calls)
        for path, extension in paths.items():
            torch_ops.FAST[0] = extension
            for name in names[r % len(names) :] + names[: r % len(names)]:
                us = host_us_per_call([calls[name]], calls=CALLS, repeats=REPEATS)
                best[path, name] = min(best[path, name], us)
    torch_ops.FAST[0] = with_cpp
    rows = []
    for (path, name), us in best.items():
        base = best[path, "api.launch (the call before the op)"]
        rows.append({"way": name, "path": path, "m": m, "n": n, "k": k, "dtype": "fp16", "host_us": us,
                     "over_launch_us": us - base})  # fmt: skip
        print(f"{path:<7} {name:<42} {us:7.2f} µs  ({us - base:+.2f} over the launch)", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    rows = measure(args.rounds)
    if args.record:
        record("op_host", "lab.op_host", argv, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
