"""python -m lab.gemv: a CUDA-core matrix-vector kernel for M = 1 to 4, beside the library's pick and torch.matmul.

The shapes issue asks for M = 1 at 3.5 TB/s wherever the weight is 32 MB or more. The library's swapped wgmma
tile reaches it from 56 MB on, and streams 3.2 to 3.3 TB/s at 4096 x 4096 and 6144 x 4096 (32 and 48 MB):
there a call is 10 to 16 us, and a CTA spends 0.8 to 1.3 us before its first TMA load (notes/streaming_tail.md).
Split along K over twice the SMs it ran no faster (10.94 against 10.84 us at 1 x 4096 x 4096), so the time is
not the SMs' share of HBM but what comes before and after the stream. `lab/gemv.cu` has none of that start: no
tensor map, no barrier, no cluster; each warp's first 16-byte weight loads (cp.async, STAGES - 1 in flight)
issue a few instructions in, on every SM, the grid as many CTAs as are resident.

Per shape and dtype, in CUDA graphs with batches alternated (`tutorial.shape_suite.graph_fields`, each graph's
first and last outputs verified on NaN poison against the float64 reference): the kernel at each STAGES,
the library's call (its table's pick) and torch.matmul. x (M, K) and the weight stored (N, K), as
torch.nn.functional.linear has them.

    python -m lab.gemv --record                     # M 1, 2, 4 at the shape table's layers, FP16
    python -m lab.gemv --shapes 1x4096x4096 --stages 4,8 --dtype bf16
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import cupy

from deepgemm.jit import BASE_OPTIONS, device_arch
from lab import record, recorded_dir
from tutorial.autotune import TUNED_LAYOUT
from tutorial.bench import Workload
from tutorial.call_suite import GEMM, TORCH, call_launches, operand_sets
from tutorial.runner import gpu_available, parse_shape, show_recorded
from tutorial.shape_suite import graph_fields
from tutorial.timing import device_us_per_call, require_torch

SOURCE = Path(__file__).with_name("gemv.cu")
WARPS, WARP, CHUNK = 8, 32, 8  # as gemv.cu: warps per CTA, lanes, 16-bit values per 16-byte piece
LAYERS = ((4096, 4096), (6144, 4096), (2112, 7168), (7168, 2048), (4096, 7168), (24576, 1536), (4096, 14336),
          (28672, 4096), (7168, 16384))  # fmt: skip
DEFAULT_SHAPES = ",".join(f"{m}x{n}x{k}" for m in (1, 2, 4) for n, k in LAYERS)
DTYPES = {"fp16": "__half", "bf16": "__nv_bfloat16"}
MAX_TOKENS = 8


@cache
def kernel(tokens: int, stages: int, dtype: str) -> cupy.RawKernel:
    """gemv.cu built for `tokens` rows of x, `stages` slots a lane, `dtype` (fp16 or bf16)."""
    options = (*BASE_OPTIONS, f"--gpu-architecture={device_arch()}", f"-DTOKENS={tokens}", f"-DSTAGES={stages}",
               f"-DDTYPE={DTYPES[dtype]}")  # fmt: skip
    return cupy.RawModule(code=SOURCE.read_text(), options=options).get_function("gemv_kernel")


def resident_grid(fn: cupy.RawKernel, n: int) -> int:
    """As many CTAs as the SMs hold at once, and no more than the rows' share (each warp one row at least)."""
    per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, WARPS * WARP, 0)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    return max(1, min(per_sm * sms, -(-n // WARPS)))


def check_shape(m: int, n: int, k: int) -> None:
    """ValueError unless gemv.cu can take the problem: M 1 to MAX_TOKENS, K in whole 16-byte pieces."""
    if not 1 <= m <= MAX_TOKENS or k % CHUNK or n < 1:
        raise ValueError(f"gemv takes M 1 to {MAX_TOKENS} and K a multiple of {CHUNK}, not {m}x{n}x{k}")


def gemv_launches(work: Workload, stages: int) -> tuple[list[Callable[[], Any]], int]:
    """A launch per input set, each on torch's current stream into its own output (M, N); and the grid."""
    check_shape(work.m, work.n, work.k)
    torch = require_torch()
    sets, _ = operand_sets(work, "torch", torch)
    fn = kernel(work.m, stages, work.dtype_name)
    grid = resident_grid(fn, work.n)
    launches = []
    for a, b in sets:
        if a.stride() != (work.k, 1) or b.stride() != (1, work.k):
            raise ValueError(f"gemv reads x row-major and the weight stored (N, K): strides {a.stride()}, {b.stride()}")
        out = torch.empty((work.m, work.n), dtype=a.dtype, device=a.device)

        def launch(a=a, b=b, out=out) -> Any:
            stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
            fn((grid,), (WARPS * WARP,), (a.data_ptr(), b.data_ptr(), out.data_ptr(), cupy.int32(work.n),
                                          cupy.int32(work.k)), stream=stream)  # fmt: skip
            return out

        launches.append(launch)
    return launches, grid


def probe(shape: tuple[int, int, int], dtype: str, stages: list[int]) -> dict[str, Any]:
    """The kernel at each of `stages`, the library's call and torch.matmul, graphs alternated and verified."""
    m, n, k = shape
    work = Workload.make(m, n, k, dtype).in_layout(*TUNED_LAYOUT)
    calls = call_launches(work, "torch")
    graphs = {"": (calls[GEMM], device_us_per_call(calls[GEMM]) / 1e3),
              "torch_": (calls[TORCH], device_us_per_call(calls[TORCH]) / 1e3)}  # fmt: skip
    grids = {}
    for s in stages:  # the slots a lane take shared memory: the resident grid may differ
        launches, grids[f"gemv{s}_grid"] = gemv_launches(work, s)
        graphs[f"gemv{s}_"] = (launches, device_us_per_call(launches) / 1e3)
    row = {"dtype": dtype, "m": m, "n": n, "k": k, "weight_mb": n * k * 2 / 1e6, "stages": stages, **grids,
           **graph_fields(graphs, work)}  # fmt: skip
    print("\n".join(lines([row])), flush=True)
    return row


def lines(rows: list[dict]) -> list[str]:
    out = []
    for row in rows:
        timed = [("library", "")] + [(f"gemv st{s}", f"gemv{s}_") for s in row["stages"]] + [("torch", "torch_")]
        parts = [f"{label} {row[p + 'graph_us']:.2f} us {row['weight_mb'] / row[p + 'graph_us']:.2f} TB/s"  # MB/us
                 + ("" if row[p + "graph_passed"] else " FAILED") for label, p in timed]  # fmt: skip
        grids = ", ".join(f"{row[f'gemv{s}_grid']} CTAs at st{s}" for s in row["stages"])
        out.append(f"{row['dtype']} {row['m']}x{row['n']}x{row['k']} ({row['weight_mb']:.0f} MB; {grids}): "
                   + ", ".join(parts))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.gemv", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK,... (default: M 1, 2, 4 at the layers)")
    parser.add_argument("--dtype", default="fp16", choices=tuple(DTYPES))
    parser.add_argument("--stages", default="4,8", help="slots a lane, comma-separated (default: %(default)s)")
    parser.add_argument("--record", action="store_true", help="write lab/results/<gpu>/gemv.json")
    args = parser.parse_args(argv)
    if not gpu_available():
        show_recorded("gemv", lines, directory=recorded_dir("gemv"), command="python -m lab.gemv --record")
        return 0
    stages = [int(s) for s in args.stages.split(",")]
    rows = [probe(parse_shape(s), args.dtype, stages) for s in args.shapes.split(",")]
    if args.record:
        record("gemv", "lab.gemv", None, rows)
    return 0 if all(row[f"{p}graph_passed"] for row in rows for p in ("", *(f"gemv{s}_" for s in stages))) else 1


if __name__ == "__main__":
    raise SystemExit(main())
