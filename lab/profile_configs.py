"""python -m lab.profile_configs: Nsight Compute on the library kernel's configs and torch.matmul at a shape.

One ncu run per shape profiles one launch of each: torch.matmul (whatever cuBLAS runs there, by name) and
each named config of the library kernel, all inside one profiler range after warm-up, with the metrics of
`tutorial.profile` (tensor-pipe activity, L2 and DRAM bytes, what reached the SMs, stalls). Where a config
runs near torch in time but not in tensor-pipe activity, the counters say which limit it meets first.

    python -m lab.profile_configs --shape 512x2112x7168 --configs "m64 n160 c2 s1 st7;swap m64 n176 c1 s1 st7" \\
        --record profile_mid_m
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lab import RESULTS_DIR, record
from tutorial.profile import METRICS, ncu_binary, parse_ncu_rows, run_ncu, tidy
from tutorial.runner import gpu_available, parse_shape, show_recorded

TORCH = "torch"
DEFAULT_RECORD = "profile_mid_m"
COMMAND = 'python -m lab.profile_configs --shape MxNxK --configs "NAME;NAME" --record {name}'
WARMUP = 3
KERNELS = "regex:nvjet|gemm|xmma|cutlass"  # the library's gemm_kernel and cuBLAS's GEMM kernels


def launch_all(shape: str, names: list[str], dtype: str) -> None:
    """Warm every config up outside the profiler range, then launch each once inside it."""
    import torch

    import deepgemm
    from deepgemm.heuristic import config_from_name

    m, n, k = parse_shape(shape)
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch_dtype, generator=gen)
    weight = torch.randn(n, k, device="cuda", dtype=torch_dtype, generator=gen)

    def call_of(name: str):
        if name == TORCH:
            return lambda: torch.matmul(a, weight.t())
        cfg = config_from_name(name)
        return lambda: deepgemm.gemm(a, weight.t(), config=cfg)

    calls = {name: call_of(name) for name in names}
    expected = torch.matmul(a.float(), weight.float().t())
    for name, call in calls.items():
        for _ in range(WARMUP):
            out = call()
        err = (out.float() - expected).abs().max().item() / expected.abs().max().item()
        if not err < 1e-2:
            raise RuntimeError(f"{name} at {shape}: relative max error {err:.3g}")
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for call in calls.values():
        call()
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def profile(shape: str, names: list[str], dtype: str, timeout_s: float) -> list[dict[str, Any]]:
    """ncu over `launch_all` in a subprocess: one tidy row per kernel launched in the range, in order."""
    command = [
        ncu_binary(), "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
        "--kernel-name", KERNELS, "--metrics", ",".join(METRICS.values()),
        sys.executable, "-m", "lab.profile_configs", "--run", "--shape", shape, "--dtype", dtype,
        "--configs", ";".join(names),
    ]  # fmt: skip
    rows = [tidy(raw) for raw in parse_ncu_rows(run_ncu(command, timeout_s))]
    return [{"shape": shape, "dtype": dtype, **row} for row in rows]


def summary_line(row: dict[str, Any]) -> str:
    def num(key: str, scale: float = 1.0) -> float:
        value = row.get(key)
        return value / scale if isinstance(value, float) else float("nan")

    return (
        f"{row['shape']:>14} {str(row['kernel'])[:60]:60} {num('duration_ns', 1e3):7.1f} us"
        f" tensor {num('tensor_pipe_active_pct'):5.1f}% clk {num('sm_clock_hz', 1e6):5.0f}"
        f" L2 {num('l2_bytes', 1e6):6.0f} MB fill {num('smem_fill_bytes', 1e6):6.0f} MB"
        f" dram {num('dram_read_bytes', 1e6):5.0f} MB grid {num('grid_size'):4.0f}x{num('cluster_size'):.0f}"
    )


def summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    """A line per profiled kernel: the config (or torch) it ran for, then `summary_line`."""
    return [f"{row.get('config', '?'):28} {summary_line(row)}" for row in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.profile_configs", description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", help="MxNxK; repeat for more shapes")
    parser.add_argument("--configs", action="append", help="config names separated by ';', one --configs per --shape")
    parser.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    parser.add_argument("--run", action="store_true", help="(internal) the launches ncu profiles")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--record", default=None, metavar="NAME", help="write lab/results/<gpu>/NAME.json")
    args = parser.parse_args(argv)
    if not gpu_available():
        name = args.record or DEFAULT_RECORD
        show_recorded(name, summary_lines, directory=RESULTS_DIR, command=COMMAND.format(name=name))
        return 0
    if not args.shape or len(args.configs or []) != len(args.shape):
        parser.error("give one --configs per --shape")
    if args.run:
        launch_all(args.shape[0], args.configs[0].split(";"), args.dtype)
        return 0
    rows = []
    for shape, configs in zip(args.shape, args.configs):
        names = [TORCH, *[c.strip() for c in configs.split(";") if c.strip() and c.strip() != TORCH]]
        found = profile(shape, names, args.dtype, args.timeout)
        for name, row in zip(names, found):  # one kernel per call unless cuBLAS adds a reduction
            row["config"] = name
        rows += found
        print("\n".join(summary_lines(found)), flush=True)
    if args.record:
        record(args.record, "lab.profile_configs", argv, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
