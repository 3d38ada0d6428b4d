"""Which SMs share a GPC, where a persistent grid's clusters land, and the tile slots that would follow.

An H200's 132 SMs sit in 8 GPCs (graphics processing clusters). Identical reads from SMs of one GPC that
arrive close together are merged by the L2 request coalescer before they reach a slice (the coalescer
probe, `lab/coalescer.py`, measures it); reads from different GPCs are not. CUDA does not say which
SMs share a GPC, but a CTA cluster never spans two, so launching clusters that fill the GPU (one CTA per
SM) and recording `%smid` tells. SMs that no cluster placed together stay groups of their own: a map
that is too fine only costs merges, never correctness.

A tile order can use the map. v5's persistent clusters take the tiles of a round in launch order, so
GPC-mates take tiles scattered over the round; with a slot table (cluster c takes slot `slot[c]` of every
round) `slot_order` gives them neighbouring tiles instead, a run along one row of tiles, so that their reads
of that row's A block meet in their GPC's coalescer. The slots are a permutation of the clusters, so every
tile would be computed exactly once even where the hardware placed the clusters elsewhere. The record
`v5_gpc.json` measured such a table in v5 (0.3 to 1.8%); v5 does not carry one (see lab/README.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import cupy

from deepgemm.jit import BASE_OPTIONS, define_options, device_arch
from deepgemm.model import ceil_div
from tutorial.launch import device_limits

SOURCE = Path(__file__).with_name("gpc.cu")
HOLD_SMEM_BYTES = 200 * 1024  # more than half an SM's shared memory: at most one CTA per SM
PORTABLE_CLUSTER = 8  # larger clusters need the non-portable attribute (Hopper allows 16)
MAP_CLUSTER_SIZES = (16, 8, 4)  # the cluster sizes whose placements map the GPCs
SLOT_BLOCK_ROWS = 1  # GPC-mates take a run of one row of tiles (measured best of 1, 2 and 4 rows)


def union_groups(groups: Iterable[Sequence[int]], sm_count: int) -> list[list[int]]:
    """SMs that ever ran in one cluster, joined transitively, as sorted groups sorted by their first SM;
    an SM no cluster covered is a group of its own."""
    parent = list(range(sm_count))

    def root(sm: int) -> int:
        while parent[sm] != sm:
            parent[sm] = parent[parent[sm]]
            sm = parent[sm]
        return sm

    for group in groups:
        members = [sm for sm in group if 0 <= sm < sm_count]
        for sm in members[1:]:
            parent[root(sm)] = root(members[0])
    joined: dict[int, list[int]] = {}
    for sm in range(sm_count):
        joined.setdefault(root(sm), []).append(sm)
    return sorted(joined.values())


def group_index(groups: Sequence[Sequence[int]]) -> dict[int, int]:
    """SM -> the index of its group."""
    return {sm: i for i, group in enumerate(groups) for sm in group}


def slot_order(cluster_group: Sequence[int], band_rows: int, block_rows: int = SLOT_BLOCK_ROWS) -> list[int]:
    """slot[c] for each cluster c, given the group (GPC) of each cluster: a permutation of the clusters
    in which each group holds consecutive positions of a walk over the round's tiles that goes
    `block_rows` rows at a time, column by column.

    In v5's grouped order a round's slot p is the tile at row p % band_rows, column p // band_rows of the
    current band (exactly so when the cluster count is a multiple of band_rows and divides the band). With
    one row at a time, a group of 8 clusters gets 8 tiles of one row: one A row-block that all 8 read at
    about the same time from SMs of one GPC; with 2, a block of 2 rows x 4 columns."""
    clusters = len(cluster_group)
    rows = max(1, min(band_rows, clusters))

    def walk_position(slot: int) -> tuple[int, int, int]:
        row, col = slot % rows, slot // rows
        return row // block_rows, col, row % block_rows

    positions = sorted(range(clusters), key=walk_position)
    first_cluster: dict[int, int] = {}
    for cluster, group in enumerate(cluster_group):
        first_cluster.setdefault(group, cluster)
    members = sorted(range(clusters), key=lambda c: (first_cluster[cluster_group[c]], c))
    slot = [0] * clusters
    for cluster, position in zip(members, positions):
        slot[cluster] = position
    return slot


# ---- on the GPU ---------------------------------------------------------------------------------------


def sm_count() -> int:
    return device_limits(cupy.cuda.Device().id)["sm_count"]


@cache
def _where_am_i(cluster_size: int) -> Any:
    options = (f"-arch={device_arch()}", *BASE_OPTIONS, *define_options({"CLUSTER_SIZE": cluster_size}))
    kernel = cupy.RawModule(code=SOURCE.read_text(), options=options, backend="nvrtc").get_function("where_am_i")
    kernel.max_dynamic_shared_size_bytes = HOLD_SMEM_BYTES
    if cluster_size > PORTABLE_CLUSTER:
        from cuda.bindings import driver  # the driver API, needed only for clusters over the portable 8

        attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        (err,) = driver.cuFuncSetAttribute(driver.CUfunction(kernel.kernel.ptr), attribute, 1)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"clusters of {cluster_size} are not allowed here ({err.name})")
    return kernel


def cluster_sms(cluster_size: int, clusters: int) -> list[list[int]]:
    """The SMs each of `clusters` clusters of `cluster_size` CTAs lands on, one CTA per SM, all at once."""
    kernel = _where_am_i(cluster_size)
    grid = clusters * cluster_size
    sm_of_block = cupy.full(grid, -1, dtype=cupy.int32)
    kernel((grid,), (32,), (sm_of_block,), shared_mem=HOLD_SMEM_BYTES)
    cupy.cuda.Device().synchronize()
    blocks = sm_of_block.get().tolist()
    return [blocks[i : i + cluster_size] for i in range(0, grid, cluster_size)]


@cache
def _map_placements(device_id: int, cluster_sizes: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Where two waves of clusters of each size land on this GPU; sizes it does not allow are skipped."""
    del device_id  # the cache key: one answer per GPU
    count = sm_count()
    placed: list[tuple[int, ...]] = []
    for size in cluster_sizes:
        try:
            placed += [tuple(cluster) for cluster in cluster_sms(size, 2 * (count // size))]
        except RuntimeError:
            continue  # a size this GPU does not allow; the smaller ones still map it
    return tuple(placed)


def gpc_groups(
    cluster_sizes: Sequence[int] = MAP_CLUSTER_SIZES, placed: Iterable[Sequence[int]] = ()
) -> list[list[int]]:
    """Groups of SMs that share a GPC, from where two waves of clusters of each size land (probed once
    per GPU) and any `placed` clusters already seen."""
    seen = [*_map_placements(cupy.cuda.Device().id, tuple(cluster_sizes)), *placed]
    if not seen:
        raise RuntimeError("no cluster size could be launched: the GPC map is unknown")
    return union_groups(seen, sm_count())


def probe_placement(clusters: int, cluster_size: int) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """Where a persistent grid of `clusters` clusters (one CTA per SM) lands in two launches, and the GPC
    group of each cluster where it landed first."""
    first, second = (cluster_sms(cluster_size, clusters) for _ in range(2))
    where = group_index(gpc_groups(placed=first))
    return first, second, [where[sms[0]] for sms in first]


@cache
def cluster_groups(device_id: int, clusters: int, cluster_size: int) -> tuple[int, ...] | None:
    """The GPC group of each cluster of a persistent grid, or None when two launches placed the clusters
    differently: then no order can count on the placement. On the H200 a grid of 64 clusters of two
    landed the same way in every probe; one of 66 did in one probe and not in another."""
    del device_id  # the cache key: one answer per GPU
    first, second, groups = probe_placement(clusters, cluster_size)
    return tuple(groups) if first == second else None


# ---- where the clusters landed, as a record -----------------------------------------------------------

PLACEMENT_GRIDS = (64, 66)  # v5's persistent grids on the H200: full rounds (the default) and one CTA per SM
PLACEMENT_BAND_ROWS = 8  # v5's default band: GROUP_M 16 tile rows = 8 cluster rows


def round_groups(cluster_group: Sequence[int], slots: Sequence[int], band_rows: int) -> list[list[int]]:
    """The group of the cluster that computes each tile of one round: rows of tiles, in the grouped order's
    layout (slot p at row p % band_rows, column p // band_rows)."""
    columns = ceil_div(len(slots), band_rows)
    grid = [[-1] * columns for _ in range(band_rows)]
    for cluster, slot in enumerate(slots):
        grid[slot % band_rows][slot // band_rows] = cluster_group[cluster]
    return grid


def groups_per_row(grid: Sequence[Sequence[int]]) -> float:
    """How many groups, on average, compute the tiles of one row of a round (one A row-block): 1 when each
    row is one group's."""
    return sum(len({g for g in row if g >= 0}) for row in grid) / len(grid)


def placement_rows(clusters: int, cluster_size: int = 2, band_rows: int = PLACEMENT_BAND_ROWS) -> list[dict[str, Any]]:
    """One row per cluster of a persistent grid of `clusters`: the SMs it landed on in two launches, its
    GPC group and the slot `slot_order` gives it (the identity when the two launches differ)."""
    first, second, groups = probe_placement(clusters, cluster_size)
    repeatable = first == second
    slots = slot_order(groups, band_rows) if repeatable else list(range(clusters))
    return [
        {"grid_clusters": clusters, "cluster": c, "sms": first[c], "sms_second_launch": second[c],
         "group": groups[c], "slot": slots[c], "repeatable": repeatable}
        for c in range(clusters)
    ]  # fmt: skip


def placement_lines(rows: Sequence[dict[str, Any]], band_rows: int = PLACEMENT_BAND_ROWS) -> list[str]:
    """What a placement record says, per grid: repeatable or not, the groups, and how many groups share an
    A row-block of a round in the plain order and with the slots."""
    lines = []
    for clusters in sorted({row["grid_clusters"] for row in rows}):
        grid = sorted((r for r in rows if r["grid_clusters"] == clusters), key=lambda r: r["cluster"])
        groups = [r["group"] for r in grid]
        sizes = sorted((groups.count(g) for g in set(groups)), reverse=True)
        if not grid[0]["repeatable"]:
            moved = sum(r["sms"] != r["sms_second_launch"] for r in grid)
            lines.append(f"{clusters} clusters: {moved} landed elsewhere in a second launch: slots = the plain order")
            continue
        plain = groups_per_row(round_groups(groups, list(range(clusters)), band_rows))
        slotted = groups_per_row(round_groups(groups, [r["slot"] for r in grid], band_rows))
        lines.append(
            f"{clusters} clusters: the same SMs in both launches; {len(sizes)} GPC groups of {sizes} clusters; "
            f"GPC groups per row of a round: {plain:.2f} in the plain order, {slotted:.2f} with the slots"
        )
    return lines
