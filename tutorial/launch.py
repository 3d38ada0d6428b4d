"""A stage's compiled kernel with its grid, block, shared memory and arguments: planned once, launched many times.

Stage launchers return a `KernelLaunch` from `plan(...)`: validation, copies and TMA descriptors happen
in the plan, so timing a plan's calls measures the kernel and not the Python around it. The stages launch
through CuPy; the library's plans (`deepgemm.plan`) launch through the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import cupy
import numpy as np

from deepgemm.config import GemmConfig, require_at_most, tile_smem_bytes
from deepgemm.driver import max_active_clusters
from deepgemm.dtypes import dtype_defines
from deepgemm.model import balanced_workers, cluster_tiles, output_tiles
from deepgemm.operands import VECTOR_BYTES, Problem, check_operands, leading_dim, padded_k
from deepgemm.tma import encode_tile_map, operand_map, read_in_place, tma_store_target
from tutorial.stages import get_kernel, launch_facts

MAX_THREADS_PER_BLOCK = 1024


@cache
def device_limits(device_id: int) -> dict[str, int]:
    """The limits a config is checked against, read off the GPU."""
    attrs = cupy.cuda.runtime.getDeviceProperties(device_id)
    return {
        "smem_per_block_optin": int(attrs["sharedMemPerBlockOptin"]),
        "regs_per_block": int(attrs["regsPerBlock"]),
        "sm_count": int(attrs["multiProcessorCount"]),
    }


def check_problem(a: Any, b: Any, out: Any = None, out_dtype: Any = None) -> Problem:
    """The operands' checks (`deepgemm.operands.check_operands`), with `out` allocated where the caller gave
    none: what a stage launches."""
    p = check_operands(a, b, out, out_dtype)
    return p if p.out is not None else replace(p, out=cupy.empty((p.m, p.n), dtype=p.out_dtype))


def k_major(x: cupy.ndarray, k_padded: int) -> cupy.ndarray:
    """`x` (rows, K) with unit stride along K, 16-byte aligned rows and K zero-padded to `k_padded`.

    Returns `x` itself when it already is such a view; otherwise a copy (the stages' only one).
    """
    rows, k = x.shape
    if (
        k == k_padded
        and x.strides[1] == x.itemsize
        and x.strides[0] % VECTOR_BYTES == 0
        and x.strides[0] >= k * x.itemsize
        and x.data.ptr % VECTOR_BYTES == 0
    ):
        return x
    packed = cupy.zeros((rows, k_padded), dtype=x.dtype)
    packed[:, :k] = x
    return packed


def k_major_operands(problem: Problem) -> tuple[cupy.ndarray, cupy.ndarray, int]:
    """A (M, K) and B as the K-major (N, K) matrix, rows 16-byte aligned, K padded: what v1-v4 read."""
    k = padded_k(problem.k)
    return k_major(problem.a, k), k_major(problem.b.T, k), k


@dataclass
class KernelLaunch:
    """One kernel launch, ready to run; calling it launches on the current stream and returns `out`."""

    kernel: cupy.RawKernel
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple
    out: cupy.ndarray
    shared_mem: int = 0
    keep_alive: tuple = ()  # copies the kernel reads through descriptors, kept until the plan is dropped
    written: cupy.ndarray | None = None  # where the kernel writes, when not `out` itself; copied into `out`

    def __post_init__(self) -> None:
        limits = device_limits(cupy.cuda.Device().id)
        threads = 1
        for extent in self.block:
            threads *= extent
        require_at_most("threads per block", threads, MAX_THREADS_PER_BLOCK, "thread limit per block")
        require_at_most(
            "shared memory (dynamic + static)",
            self.shared_mem + self.kernel.shared_size_bytes,
            limits["smem_per_block_optin"],
            "shared memory per block",
        )
        require_at_most(
            "registers per block (registers x threads)",
            self.kernel.num_regs * threads,
            limits["regs_per_block"],
            "register file per block",
        )
        if self.shared_mem > 48 * 1024:
            self.kernel.max_dynamic_shared_size_bytes = self.shared_mem

    def __call__(self) -> cupy.ndarray:
        self.kernel(self.grid, self.block, self.args, shared_mem=self.shared_mem)
        if self.written is not None:
            self.out[...] = self.written
        return self.out


def require_smem(dynamic_bytes: int) -> None:
    """ValueError before compiling when the shared memory a config's tiles need exceeds what one block may use."""
    limit = device_limits(cupy.cuda.Device().id)["smem_per_block_optin"]
    require_at_most("dynamic shared memory", dynamic_bytes, limit, "shared memory per block")


def persistent_grid(
    problem: Problem, block_m: int, block_n: int, kernel: cupy.RawKernel, threads: int, dynamic_smem: int,
    cluster_m: int,
) -> int:  # fmt: skip
    """CTAs of v5's persistent grid: as many whole clusters of `cluster_m` CTAs (tiles along M) as fit on the
    GPU at once (one CTA per SM without clusters), but only as many as finish the cluster tiles in that
    many rounds, so that every round is full (`balanced_workers`)."""
    tiles = cluster_tiles(problem.m, problem.n, block_m, block_n, cluster_m)
    if cluster_m == 1:
        slots = device_limits(problem.out.device.id)["sm_count"]
    else:
        slots = max_active_clusters(kernel.kernel.ptr, cluster_m, threads, dynamic_smem)
    return balanced_workers(tiles, slots) * cluster_m


def tma_operand(x: cupy.ndarray) -> cupy.ndarray:
    """An operand (M or N, K) as a TMA stage reads it, K-major: in place where TMA can describe it, else a
    K-major copy with K padded to 16-byte rows."""
    found = read_in_place(x, mn_major_ok=False)
    return found[0] if found is not None else k_major(x, padded_k(x.shape[1]))


def tma_gemm_launch(
    stage: str,
    problem: Problem,
    cfg: GemmConfig,
    *,
    swizzle_bytes: int,
    persistent: bool = False,
    epilogue_args: tuple = (),
    epilogue_defines: dict[str, int] | None = None,
    keep_alive: tuple = (),
) -> KernelLaunch:
    """What v3-v5 share: operands read K-major in place where TMA can describe them (`tma_operand`), their
    tensor maps, the kernel with the threads and dynamic shared memory it exports (`launch_facts`), and a
    1-D grid of output tiles (v5's balanced persistent grid when `persistent`, in clusters of CLUSTER_M).

    A kernel that exports no store box (v3, v4) takes C as a pointer and its leading dimension. One that
    does (v5, `LaunchFacts.store_box`) takes C's 128B-swizzled tensor map of that box, then C as a pointer
    and its leading dimension (for its ablation that stores from registers); a C that TMA cannot describe
    is written to a padded buffer and copied. `epilogue_args` follow C. A config whose pipeline stages alone
    exceed the GPU's shared memory is refused before it is compiled; the exact total is checked once the
    kernel says it."""
    require_smem(tile_smem_bytes(cfg))
    a_x, b_x = tma_operand(problem.a), tma_operand(problem.b.T)
    block_m, block_n, box_k = cfg.value("BLOCK_M"), cfg.value("BLOCK_N"), cfg.value("BOX_K")
    cluster_m = cfg.extra.get("CLUSTER_M", 1)  # [2] each CTA of a cluster loads block_n / cluster_m rows of B
    tma_a = operand_map(a_x, False, block_m, box_k, swizzle_bytes)
    tma_b = operand_map(b_x, False, block_n // cluster_m, box_k, swizzle_bytes)
    defines = {**cfg.defines(), **dtype_defines(problem.a.dtype), **(epilogue_defines or {})}
    kernel, facts = get_kernel(stage, defines), launch_facts(stage, defines)
    m, n, k = (np.int32(v) for v in (problem.m, problem.n, problem.k))
    written = None
    if facts.store_box is None:
        args = (tma_a, tma_b, problem.out, *epilogue_args, m, n, k, np.int32(leading_dim(problem.out)))
    else:
        target = tma_store_target(problem.out)
        written = None if target is problem.out else target
        tma_c = encode_tile_map(target, *facts.store_box, swizzle_bytes=128)
        args = (tma_a, tma_b, tma_c, target, *epilogue_args, m, n, k, np.int32(leading_dim(target)))
    if persistent:
        grid = persistent_grid(problem, block_m, block_n, kernel, facts.threads, facts.smem_bytes, cluster_m)
    else:
        grid = output_tiles(problem.m, problem.n, block_m, block_n)
    return KernelLaunch(
        kernel, (grid,), (facts.threads,), args, problem.out, facts.smem_bytes,
        keep_alive=(a_x, b_x, *keep_alive), written=written,
    )  # fmt: skip
