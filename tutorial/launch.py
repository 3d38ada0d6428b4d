"""A compiled kernel with its grid, block, shared memory and arguments: planned once, launched many times.

Stage launchers return a `KernelLaunch` from `plan(...)`: validation, copies and TMA descriptors happen
in the plan, so timing a plan's calls measures the kernel and not the Python around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import cupy
import numpy as np

from deepgemm.config import GemmConfig, require_at_most, tile_smem_bytes
from deepgemm.dtypes import dtype_defines
from deepgemm.jit import get_kernel, launch_facts
from deepgemm.model import balanced_workers, cluster_tiles, output_tiles
from deepgemm.operands import Problem, k_major, leading_dim, padded_k
from deepgemm.tma import encode_tile_map, operand_map, read_in_place, tma_store_target

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
    in_place: bool = False  # the kernel reads the caller's operands and writes `out` itself: nothing copied
    # The arguments a library call changes, by name ("a", "b", "out", "bias", "alpha", "partials", "counters"): their
    # position in `args` and kind ("map": a tensor map to re-point, "ptr": a pointer, "f32": a float).
    slots: dict[str, tuple[int, str]] = field(default_factory=dict)
    # The copies TMA reads or writes instead of the caller's arrays, by name ("a", "b", "out"): the shape
    # of the buffer each is a view of (rows, padded columns), so that a library call can make its own.
    staged: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Split-K's scratch: fp32 partials and zeroed counters, how many of each; a library call passes its
    # own per stream through the slots "partials" and "counters".
    scratch: tuple[int, int] = (0, 0)

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


_ACTIVE_CLUSTERS: dict[tuple[int, int, int, int], int] = {}  # (CUfunction, threads, smem, cluster) -> count


def max_active_clusters(kernel: cupy.RawKernel, threads: int, dynamic_smem: int, cluster_size: int) -> int:
    """How many clusters of `kernel` (its compile-time cluster size) the GPU runs at once, from the
    driver's occupancy calculator: SMs come in GPCs, and a cluster must fit in one. Asked once per kernel."""
    key = (kernel.kernel.ptr, threads, dynamic_smem, cluster_size)
    if key not in _ACTIVE_CLUSTERS:
        _ACTIVE_CLUSTERS[key] = _query_active_clusters(kernel, threads, dynamic_smem, cluster_size)
    return _ACTIVE_CLUSTERS[key]


def _query_active_clusters(kernel: cupy.RawKernel, threads: int, dynamic_smem: int, cluster_size: int) -> int:
    from cuda.bindings import driver  # the driver API: heavy, and only the clustered stage asks it

    if dynamic_smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = dynamic_smem
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = cluster_size, 1, 1  # one cluster: the grid must divide
    config.blockDimX, config.blockDimY, config.blockDimZ = threads, 1, 1
    config.sharedMemBytes = dynamic_smem
    config.numAttrs = 0
    err, clusters = driver.cuOccupancyMaxActiveClusters(driver.CUfunction(kernel.kernel.ptr), config)
    if err != driver.CUresult.CUDA_SUCCESS or clusters < 1:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters gave {err.name}, {clusters} clusters, for {kernel.name}")
    return clusters


def persistent_grid(
    problem: Problem,
    block_m: int,
    block_n: int,
    kernel: cupy.RawKernel,
    threads: int,
    dynamic_smem: int,
    cluster_m: int,
    cluster_n: int = 1,
    units_per_tile: int = 1,
) -> int:
    """CTAs of a persistent grid: as many whole clusters of `cluster_m` x `cluster_n` CTAs (tiles along M
    and N) as fit on the GPU at once (one CTA per SM without clusters), but only as many as finish the
    work units (`units_per_tile` per cluster tile: split-K's slices) in that many rounds, so that every
    round is full (`balanced_workers`)."""
    size = cluster_m * cluster_n
    tiles = cluster_tiles(problem.m, problem.n, block_m, block_n, cluster_m, cluster_n) * units_per_tile
    if size == 1:
        slots = device_limits(problem.out.device.id)["sm_count"]
    else:
        slots = max_active_clusters(kernel, threads, dynamic_smem, size)
    return balanced_workers(tiles, slots) * size


def tma_operand(x: cupy.ndarray, mn_major_ok: bool) -> tuple[cupy.ndarray, bool, bool]:
    """An operand (M or N, K) as a TMA stage reads it: (array, MN-major, copied). In place where TMA can
    describe it (MN-major only where the stage reads that layout); else a K-major copy with K padded to
    16-byte rows, the one case that copies."""
    found = read_in_place(x, mn_major_ok)
    if found is not None:
        return (*found, False)
    return k_major(x, padded_k(x.shape[1])), False, True


def tma_gemm_launch(
    stage: str,
    problem: Problem,
    cfg: GemmConfig,
    *,
    swizzle_bytes: int,
    persistent: bool = False,
    mn_major_ok: bool = False,
    epilogue_args: tuple = (),
    epilogue_defines: dict[str, int] | None = None,
    keep_alive: tuple = (),
    tail_args: tuple = (),
    units_per_tile: int = 1,
) -> KernelLaunch:
    """What v3-v5 share: operands read in place where TMA can describe them (`tma_operand`; a stage that
    reads MN-major operands, `mn_major_ok`, is told which are through A_MN_MAJOR and B_MN_MAJOR), their
    tensor maps, the kernel with the threads and dynamic shared memory it exports (`jit.launch_facts`),
    and a 1-D grid of output tiles (a balanced persistent grid when `persistent`, in clusters of the
    config's CLUSTER_M x CLUSTER_N).

    A kernel that exports no store box takes C as a pointer and its leading dimension. One that does
    (`LaunchFacts.store_box`) stores C through a 128B-swizzled tensor map of that box; a C that TMA cannot
    describe is written to a padded buffer and copied. `tail_args` follow M, N and K; a persistent grid
    counts `units_per_tile` work units per tile (split-K's slices). A config whose pipeline stages alone
    exceed the GPU's shared memory is refused before it is compiled; the exact total is checked once the
    kernel says it."""
    require_smem(tile_smem_bytes(cfg))
    a_x, a_mn, a_copied = tma_operand(problem.a, mn_major_ok)
    b_x, b_mn, b_copied = tma_operand(problem.b.T, mn_major_ok)
    block_m, block_n, box_k = cfg.value("BLOCK_M"), cfg.value("BLOCK_N"), cfg.value("BOX_K")
    # A cluster's CTAs each load block_m / cluster_n rows of A and block_n / cluster_m rows of B.
    cluster_m, cluster_n = cfg.extra.get("CLUSTER_M", 1), cfg.extra.get("CLUSTER_N", 1)
    span = swizzle_bytes // problem.a.itemsize
    for name, mn_major, rows, ratio in (
        ("A", a_mn, block_m // cluster_n, "BLOCK_M / CLUSTER_N"),
        ("B", b_mn, block_n // cluster_m, "BLOCK_N / CLUSTER_M"),
    ):
        if mn_major and rows % span:
            raise ValueError(
                f"an MN-major {name} arrives in {span}-wide boxes, and each CTA loads {rows} of its rows: "
                f"pass it K-major, or make {ratio} a multiple of {span}"
            )
    tma_a = operand_map(a_x, a_mn, block_m // cluster_n, box_k, swizzle_bytes)
    tma_b = operand_map(b_x, b_mn, block_n // cluster_m, box_k, swizzle_bytes)
    layout = {"A_MN_MAJOR": int(a_mn), "B_MN_MAJOR": int(b_mn)} if mn_major_ok else {}
    defines = {**cfg.defines(), **dtype_defines(problem.a.dtype), **layout, **(epilogue_defines or {})}
    kernel, facts = get_kernel(stage, defines), launch_facts(stage, defines)
    m, n, k = (np.int32(v) for v in (problem.m, problem.n, problem.k))
    written = None
    if facts.store_box is None:
        args = (tma_a, tma_b, problem.out, *epilogue_args, m, n, k, np.int32(leading_dim(problem.out)), *tail_args)
    else:
        target = tma_store_target(problem.out)
        written = None if target is problem.out else target
        tma_c = encode_tile_map(target, *facts.store_box, swizzle_bytes=128)
        args = (tma_a, tma_b, tma_c, *epilogue_args, m, n, k, *tail_args)
    if persistent:
        grid = persistent_grid(
            problem, block_m, block_n, kernel, facts.threads, facts.smem_bytes, cluster_m, cluster_n, units_per_tile
        )
    else:
        grid = output_tiles(problem.m, problem.n, block_m, block_n)
    return KernelLaunch(
        kernel,
        (grid,),
        (facts.threads,),
        args,
        problem.out,
        facts.smem_bytes,
        keep_alive=(a_x, b_x, *keep_alive),
        written=written,
        in_place=not (a_copied or b_copied or written is not None),
        staged=staged_buffers({"a": a_x if a_copied else None, "b": b_x if b_copied else None, "out": written}),
    )


def staged_buffers(copies: dict[str, cupy.ndarray | None]) -> dict[str, tuple[int, int]]:
    """The buffer shape (rows, padded columns) behind each row-padded copy a launch reads or writes."""
    return {name: (x.shape[0], x.strides[0] // x.itemsize) for name, x in copies.items() if x is not None}
