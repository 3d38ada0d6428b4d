"""v5 under settings it does not ship with, each beside v5 as it ships and cuBLAS: what each choice is worth.

Each sweep is a set of named ways to plan v5; `tutorial.bench.bench_variants` verifies and times them in one
run. The row names carry the setting ('v5_fused GROUP_M=1'), as the records and `tutorial.tables`
expect, the one v5 ships with first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial

import cupy

from deepgemm.config import GemmConfig
from deepgemm.driver import max_active_clusters
from tutorial import stages
from tutorial.ablation import v5_with_tiles
from tutorial.launch import KernelLaunch

STAGE = "v5_fused"
SWEEPS = {
    "v5_group_m": "v5 under several tile-order group sizes (GROUP_M 16, 1, 8)",
    "v5_cluster": "v5 with B multicast to clusters of two CTAs (CLUSTER_M 2) and without (1)",
    "v5_grid": "v5's persistent grid sized for full rounds of tiles (BALANCED_ROUNDS=1, as it ships) or one CTA "
    "per SM (BALANCED_ROUNDS=0)",
}
KNOB_SWEEPS = {"v5_group_m": ("GROUP_M", (16, 1, 8)), "v5_cluster": ("CLUSTER_M", (2, 1))}
RECORD_ONLY = {
    "v5_gpc": "v5 with a GPC-aware slot table (GPC_SLOTS=1) and the plain order (0), recorded when v5 had one",
}

Plan = Callable[[cupy.ndarray, cupy.ndarray], KernelLaunch]


def one_cta_per_sm(a: cupy.ndarray, b: cupy.ndarray) -> KernelLaunch:
    """v5's plan with its persistent grid widened to as many clusters as fit on the GPU at once (capped at
    the cluster tiles), instead of the fewest that finish in as many rounds."""
    launch, tiles, cluster_m = v5_with_tiles(a, b)
    slots = max_active_clusters(launch.kernel.kernel.ptr, cluster_m, launch.block[0], launch.shared_mem)
    return dataclasses.replace(launch, grid=(min(tiles, slots) * cluster_m,))


def variants(sweep: str) -> dict[str, Plan]:
    """The named plans of a sweep, the setting v5 ships with first."""
    v5 = stages.load(STAGE)
    if sweep in KNOB_SWEEPS:
        knob, settings = KNOB_SWEEPS[sweep]
        return {f"{STAGE} {knob}={v}": partial(v5.plan, config=GemmConfig(extra={knob: v})) for v in settings}
    if sweep == "v5_grid":
        return {f"{STAGE} BALANCED_ROUNDS=1": v5.plan, f"{STAGE} BALANCED_ROUNDS=0": one_cta_per_sm}
    raise ValueError(f"unknown sweep {sweep!r}; the sweeps are {', '.join(SWEEPS)}")
