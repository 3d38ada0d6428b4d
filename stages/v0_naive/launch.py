"""v0_naive: one thread per C element, FP32 accumulation; the regression reference.

Reads a and b through their strides exactly as given (any layout, no copy); C writes are coalesced
along N, and so are the B reads when b is row-major (K, N).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deepgemm.config import GemmConfig
from deepgemm.dtypes import dtype_defines
from deepgemm.model import ceil_div
from deepgemm.operands import leading_dim, require_gpu
from tutorial.launch import KernelLaunch, check_problem
from tutorial.stages import get_kernel

STAGE = "v0_naive"
MIN_CC = (8, 0)
DEFAULTS = GemmConfig(extra={"BLOCK_X": 32, "BLOCK_Y": 8})  # a warp along N, 256 threads


def threads(cfg: GemmConfig) -> int:
    """Threads per block: a BLOCK_X x BLOCK_Y block, one thread per element of C."""
    return cfg.value("BLOCK_X") * cfg.value("BLOCK_Y")


def plan(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> KernelLaunch:
    require_gpu(MIN_CC, STAGE)
    p = check_problem(a, b, out)
    cfg = (config or GemmConfig()).merged_over(DEFAULTS)
    block_x, block_y = cfg.value("BLOCK_X"), cfg.value("BLOCK_Y")
    kernel = get_kernel(STAGE, {**cfg.defines(), **dtype_defines(p.a.dtype)})
    (stride_am, stride_ak), (stride_bk, stride_bn) = ((s // x.itemsize for s in x.strides) for x in (p.a, p.b))
    args = (
        p.a, p.b, p.out,
        *(np.int32(v) for v in (p.m, p.n, p.k)),
        *(np.int64(v) for v in (stride_am, stride_ak, stride_bk, stride_bn)),
        np.int32(leading_dim(p.out)),
    )  # fmt: skip
    grid = (ceil_div(p.n, block_x), ceil_div(p.m, block_y))
    return KernelLaunch(kernel, grid, (block_x, block_y), args, p.out)


def gemm(a: Any, b: Any, out: Any = None, *, config: GemmConfig | None = None) -> Any:
    """a @ b on CUDA cores, one thread per output element."""
    return plan(a, b, out, config=config)()
