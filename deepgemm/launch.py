"""A compiled kernel with its grid, block, shared memory and arguments: planned once, launched many times.

Stage launchers return a `KernelLaunch` from `plan(...)`: validation, copies and TMA descriptors happen
in the plan, so timing a plan's calls measures the kernel and not the Python around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import cupy

from deepgemm.config import require_at_most

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

    def __post_init__(self) -> None:
        limits = device_limits(cupy.cuda.Device().id)
        threads = 1
        for extent in self.block:
            threads *= extent
        require_at_most("threads per block", threads, MAX_THREADS_PER_BLOCK, "thread limit per block")
        require_at_most(
            "dynamic shared memory", self.shared_mem, limits["smem_per_block_optin"], "shared memory per block"
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
        return self.out


def require_smem(dynamic_bytes: int, static_bytes: int = 0) -> None:
    """ValueError before compiling when a config's shared memory exceeds what one block may use."""
    limit = device_limits(cupy.cuda.Device().id)["smem_per_block_optin"]
    require_at_most("shared memory (dynamic + static)", dynamic_bytes + static_bytes, limit, "shared memory per block")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
