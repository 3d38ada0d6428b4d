"""Where tutorial.train's deepgemm step loses its time: every GEMM of a training step alone, in the layouts
autograd hands the library (forward x @ W^T, dgrad dz @ W, wgrad dz^T @ x, all read in place), timed in CUDA
graphs beside torch.matmul on the same views; then the whole step of each model under torch.profiler, its
GPU kernel time by kernel against its wall time; the host's time to issue a step (a few steps queued with
no wait: the GPU is still behind when the host is done); and with --cprofile, where the deepgemm model's
host time goes, by Python function.

    python -m lab.train_gemms [--width 1024] [--record]     --record writes lab/results/<gpu>/train_gemms.json
                                                           (train_gemms_<width>.json at another width)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from deepgemm import api, torch_ops
from deepgemm.heuristic import config_name
from lab import record
from tutorial import train
from tutorial.timing import capture_graph, graph_calls, time_graph

RECORD = "train_gemms"
PROFILED_STEPS = 5
QUEUED_STEPS = 3  # a step issues about 150 launches: three stay well inside the GPU's launch queue


def layer_shapes(setup: train.Setup) -> dict[str, tuple[int, int]]:
    """(N, K) of each distinct linear layer of the model."""
    w = setup.width
    return {"qkv": (3 * w, w), "proj": (w, w), "fc1": (4 * w, w), "fc2": (w, 4 * w)}


def operands(rows: int, n: int, k: int, role: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, b) of one role as autograd hands them to the library: views of row-major tensors."""

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    x, weight, dz = rand(rows, k), rand(n, k), rand(rows, n)
    return {"fwd": (x, weight.T), "dgrad": (dz, weight), "wgrad": (dz.T, x)}[role]  # wgrad: dW = dz^T x


def graph_us(launch: Any) -> float:
    launch()
    torch.cuda.synchronize()
    start = time.perf_counter()
    launch()
    torch.cuda.synchronize()
    calls = graph_calls((time.perf_counter() - start) * 1e3, 1)
    return 1e3 * time_graph(capture_graph([launch], calls)).ms


def gemm_row(layer: str, role: str, rows: int, n: int, k: int) -> dict[str, Any]:
    a, b = operands(rows, n, k, role)
    ours, theirs = (lambda: torch_ops.gemm(a, b, None, 1.0, None, None, None, None)), (lambda: a @ b)
    err = ((ours().float() - theirs().float()).norm() / theirs().float().norm()).item()
    config, source = api.config_of(a, b)
    m_, n_ = a.shape[0], b.shape[1]
    row = {"layer": layer, "role": role, "m": m_, "n": n_, "k": a.shape[1], "config": config_name(config),
           "source": source, "rel_err_vs_torch": err, "us": graph_us(ours), "torch_us": graph_us(theirs)}  # fmt: skip
    row["x_torch"] = row["torch_us"] / row["us"]
    return row


def gemm_rows(setup: train.Setup) -> list[dict[str, Any]]:
    rows = setup.batch * setup.tokens
    return [gemm_row(layer, role, rows, n, k) for layer, (n, k) in layer_shapes(setup).items()
            for role in ("fwd", "dgrad", "wgrad")]  # fmt: skip


def warm_step(setup: train.Setup, linear: str) -> Callable[[], Any]:
    """One forward and backward of the model with `linear`, run once (plans built, kernels loaded)."""
    model = train.build(setup, linear)
    x, target = next(train.batches(setup))

    def step() -> Any:
        return train.forward_backward(model, x, target)

    step()
    torch.cuda.synchronize()
    return step


def profiled_step(setup: train.Setup, linear: str) -> dict[str, Any]:
    """GPU kernel time per forward and backward by kernel name, and the wall time, over PROFILED_STEPS."""
    step = warm_step(setup, linear)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(PROFILED_STEPS):
            step()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - start) * 1e3 / PROFILED_STEPS
    kernels: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.name[:80]] += event.device_time / 1e3 / PROFILED_STEPS
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:12]
    return {"linear": linear, "wall_ms": wall_ms, "kernel_ms": sum(kernels.values()),
            "top_kernels_ms": dict(top)}  # fmt: skip


def host_step_ms(setup: train.Setup, linear: str) -> float:
    """Host milliseconds to issue one forward and backward: QUEUED_STEPS steps issued after a sync, timed
    before the next sync, the median of five tries."""
    step = warm_step(setup, linear)
    tries = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(QUEUED_STEPS):
            step()
        tries.append((time.perf_counter() - start) * 1e3 / QUEUED_STEPS)
    torch.cuda.synchronize()
    return statistics.median(tries)


def print_cprofile(setup: train.Setup, linear: str) -> None:
    import cProfile
    import pstats

    step = warm_step(setup, linear)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(22)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.train_gemms", description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--cprofile", action="store_true", help="the deepgemm step's host time by function")
    parser.add_argument("--width", type=int, default=train.Setup.width, help="the model's width (tutorial.train)")
    args = parser.parse_args(argv)
    setup = replace(train.Setup(), width=args.width)
    rows = gemm_rows(setup)
    print(f"{'layer':6} {'role':6} {'m x n x k':>18} {'config':34} {'us':>7} {'torch':>7} {'x torch':>7}")
    for r in rows:
        shape = f"{r['m']}x{r['n']}x{r['k']}"
        print(f"{r['layer']:6} {r['role']:6} {shape:>18} {r['config']:34} {r['us']:7.1f} {r['torch_us']:7.1f} "
              f"{r['x_torch']:7.3f}")  # fmt: skip
    print(f"median x torch {statistics.median(r['x_torch'] for r in rows):.3f}")
    steps = [profiled_step(setup, linear) for linear in ("torch", "deepgemm")]
    for step in steps:
        step["host_ms"] = host_step_ms(setup, step["linear"])
    for s in steps:
        print(
            f"{s['linear']:9} wall {s['wall_ms']:.3f} ms, kernels {s['kernel_ms']:.3f} ms, host {s['host_ms']:.3f} ms"
        )
        for name, ms in s["top_kernels_ms"].items():
            print(f"    {ms:7.3f}  {name}")
    if args.cprofile:
        print_cprofile(setup, "deepgemm")
    if args.record:
        name = RECORD if args.width == train.Setup.width else f"{RECORD}_{args.width}"
        record(name, "lab.train_gemms", argv, rows, extra={"steps": steps, "width": args.width})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
