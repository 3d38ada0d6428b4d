"""python -m lab.kernel_probe: the library kernel patched for a question, beside itself and torch.matmul.

Two questions about the shapes where the library trails cuBLAS, each asked of a patched copy of
deepgemm/kernels/gemm_sm90.cu (the shipped file is not touched; every patch must apply exactly once):

- `hints`: do L2 eviction hints on the TMA loads pay? The weight (B, or A when swapped) is loaded
  evict-first, since each of its bytes is read by one cluster, the tokens evict-last, since every tile
  column reads them again. The patched kernel is timed beside the shipped one and torch.matmul, their
  CUDA graphs' batches alternated, and must give the shipped kernel's output bit for bit.
- `two_parts`: does the split-K fix-up gain where a tile has two parts and the last adds the other's partial
  to its own registers (the same bits whichever finished last: fp32 addition commutes) instead of reading
  both back in worker order? Timed as `hints` is.
- `swap_pointer`: what do swapped tiles gain from storing a 16-bit C through store boxes (stmatrix .trans)
  and TMA? The variant stores every swapped tile's C by pointer, one 2-byte store per value, as the kernel did
  before; both run with as many stages as the shipped kernel fits beside its boxes. (The records
  kernel_probe_swap_tma*.json asked it the other way round, of the kernel before the boxes: lab/cli.py.)
- `early_trigger`: where should programmatic dependent launch let the next kernel in? The shipped kernel
  triggers it when the producer has issued its last load, the variant at the start (as the kernel did before:
  its record, asked the other way round, is kernel_probe_late_trigger.json); timed with PDL beside the
  shipped kernel with PDL and without, in CUDA graphs, batches alternated.
- `early_prefetch`: does fetching the tensor maps at the kernel's start, before the barriers, the cluster's sync
  and griddepcontrol.wait, shorten the 0.8 to 1.3 us before a CTA's first TMA (notes/streaming_tail.md)? The
  shipped kernel prefetches them in the producer thread just before its first load. Timed as `hints` is.
- `two_ctas`: do two CTAs an SM, the grid one CTA per tile, shorten the streaming tail at small M? At 1 x 28672
  x 4096 the table's 112 CTAs of 256 weight rows finish between 47 and 56 us (notes/streaming_tail.md): DRAM
  serves the SMs unevenly, and a static split cannot follow it. The variant launches at most 128 registers a
  thread (the producer's 40 and the consumer's 216 are two CTAs' 65536), fits its stages in half an SM's shared
  memory, and the plan's grid becomes one CTA per tile, so that the hardware hands the next tile to whichever
  SM frees a slot first, while the CTA beside it keeps streaming through the new one's prologue. The entry's
  tiling at 64 rows, timed shipped (persistent, one CTA an SM) and patched, beside the table's entry and torch.
- `l2_prefetch`, `l2_prefetch_2x`: does reading a CTA's first k-tiles from HBM into L2 before griddepcontrol.wait
  pay where one call streams the weight after another? Launched with PDL, the next kernel's CTAs start on the SMs
  the one before frees while its last loads are still landing; the shipped kernel then waits, and HBM idles from
  the last byte of one call to the first of the next (about 2 of 1 x 4096 x 4096's 10 us are not streaming). The
  variant's thread 0 first issues L2 prefetches of its first unit's first NUM_STAGES (2x: twice that) k-tiles, its
  own parts of A and B, as its producer will load them. A prefetch is a hint, not a read: L2 is where every SM's
  writes land, so the loads after the wait still see what the kernel before wrote. Timed with PDL beside the
  shipped kernel with PDL and without, in CUDA graphs, batches alternated, as `early_trigger` is, and beside
  itself without PDL (what the prefetch costs where nothing runs before it to overlap).
  `l2_prefetch_early` also triggers at the start (as `early_trigger`), so that the next kernel's CTAs start, and
  prefetch, as soon as every CTA of this one has started.
- `stamps`: where does a one-round grid's time go? Every CTA stamps %globaltimer (ns) at its start, at its
  first TMA issue, at its first full stage, at the end of its first and its last tile's main loop, after
  its epilogue's stores are issued and when they have landed. One launch on an idle GPU, read back per CTA.

`--against FILE` times another version of the kernel (an earlier commit's gemm_sm90.cu) beside the shipped one
the same way. Each shape runs with its autotune-table entry (else the heuristic's pick), or with each config
that `--config NAME,NAME...` names.

    python -m lab.kernel_probe --shapes 512x2112x7168,1x28672x4096 --record
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache, partial
from pathlib import Path
from typing import Any

import cupy

from deepgemm import heuristic
from deepgemm import plan as library_plan
from deepgemm.api import config_of
from deepgemm.config import GemmConfig
from deepgemm.driver import max_active_clusters
from deepgemm.frameworks import Torch
from deepgemm.jit import LIBRARY_KERNEL, module_of
from deepgemm.model import cluster_tiles
from lab import record, recorded_dir
from tutorial.autotune import TUNED_LAYOUT
from tutorial.bench import Workload
from tutorial.call_suite import TORCH, call_launches, operand_sets
from tutorial.runner import gpu_available, parse_shape, show_recorded
from tutorial.shape_suite import graph_fields
from tutorial.timing import device_us_per_call, require_torch

DEFAULT_SHAPES = (
    "1x4096x4096,1x28672x4096,8x28672x4096,1x4096x14336,128x2112x7168,256x2112x7168,512x2112x7168,"
    "256x4096x7168,384x4096x4096,512x28672x4096,2048x7168x2048"
)
STAMP_SLOTS = 8  # per CTA: the events below, in this order
STAMPS = ("start", "first_load", "first_full", "first_loop_end", "last_loop_end", "stores_issued", "stores_done")
MAX_CTAS = 1024

# (anchor, replacement) pairs: each anchor must occur exactly once in the shipped kernel.
HINT_PATCHES = (
    (
        'mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"\n'
        '        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(bar)\n',
        'mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;"\n'
        '        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(bar), '
        '"l"(policy)\n',
    ),
    (
        "void tma_load_2d(unsigned dst, const TmaDesc* map, unsigned bar, int k, int row) {",
        "void tma_load_2d(unsigned dst, const TmaDesc* map, unsigned bar, int k, int row,\n"
        "                                            unsigned long long policy) {",
    ),
    (
        '"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"\n'
        '        " [%0], [%1, {%2, %3}], [%4], %5;"\n'
        '        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(bar), '
        '"h"(cta_mask)\n',
        '"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster'
        '.L2::cache_hint"\n'
        '        " [%0], [%1, {%2, %3}], [%4], %5, %6;"\n'
        '        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(bar), '
        '"h"(cta_mask),\n'
        '           "l"(policy)\n',
    ),
    (
        "                                                      unsigned short cta_mask) {\n    asm volatile(",
        "                                                      unsigned short cta_mask, unsigned long long policy) {\n"
        "    asm volatile(",
    ),
    (
        "                                                 unsigned short cta_mask) {\n"
        "    static_assert(!MN_MAJOR",
        "                                                 unsigned short cta_mask, unsigned long long policy) {\n"
        "    static_assert(!MN_MAJOR",
    ),
    (
        "        if constexpr (MULTICAST) tma_load_2d_multicast(dst, map, bar, k, row, cta_mask);\n"
        "        else tma_load_2d(dst, map, bar, k, row);",
        "        if constexpr (MULTICAST) tma_load_2d_multicast(dst, map, bar, k, row, cta_mask, policy);\n"
        "        else tma_load_2d(dst, map, bar, k, row, policy);",
    ),
    (
        "            if constexpr (MULTICAST) tma_load_2d_multicast(box, map, bar, row + i * MN_BOX_COLS, k, "
        "cta_mask);\n"
        "            else tma_load_2d(box, map, bar, row + i * MN_BOX_COLS, k);",
        "            if constexpr (MULTICAST) tma_load_2d_multicast(box, map, bar, row + i * MN_BOX_COLS, k, "
        "cta_mask, policy);\n"
        "            else tma_load_2d(box, map, bar, row + i * MN_BOX_COLS, k, policy);",
    ),
    (
        "            prefetch_tensormap(&tma_a);\n",
        "            unsigned long long evict_first, evict_last;\n"
        '            asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(evict_first));\n'
        '            asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(evict_last));\n'
        "            const unsigned long long policy_a = SWAP_AB ? evict_first : evict_last;  // A: weight if swapped\n"
        "            const unsigned long long policy_b = SWAP_AB ? evict_last : evict_first;\n"
        "            prefetch_tensormap(&tma_a);\n",
    ),
    ("A_BOX_ROWS, row_mask);", "A_BOX_ROWS, row_mask, policy_a);"),
    ("B_BOX_ROWS, column_mask);", "B_BOX_ROWS, column_mask, policy_b);"),
)

# A tile cut in two parts, summed by the last from the other's partial and its own registers (fp32 addition
# commutes: the same bits whichever part finished last) instead of reading both back in worker order.
TWO_PARTS_PATCHES = (
    (
        "    if (lane == 0) *counter = 0u;\n#pragma unroll\n    for (int i = 0; i < N_ACC; ++i) acc[i] = 0.0f;\n",
        "    if (lane == 0) *counter = 0u;\n"
        "    if (last - first == 1) {\n"
        "        const float2* const other = slot0 + (worker == first ? last : first) * SLOT_STRIDE;\n"
        "#pragma unroll\n"
        "        for (int p = 0; p < PAIRS; ++p) {\n"
        "            if (p % 2 ? row_hi : row_lo) {\n"
        "                const float2 v = __ldcg(other + p * 32);\n"
        "                acc[2 * p] += v.x;\n"
        "                acc[2 * p + 1] += v.y;\n"
        "            }\n"
        "        }\n"
        "        return true;\n"
        "    }\n"
        "#pragma unroll\n    for (int i = 0; i < N_ACC; ++i) acc[i] = 0.0f;\n",
    ),
)

# Every swapped tile's C stored by pointer, one 2-byte store per value in 16-byte runs, as before the store boxes.
SWAP_POINTER_PATCHES = (
    ("#define C_BY_POINTER (SWAP_AB && (OUT_DTYPE == 2 || C_UNALIGNED || (CLUSTER_M * CLUSTER_N > 1 && BLOCK_N < 96)))",
     "#define C_BY_POINTER SWAP_AB"),
)

# The kernel's last wait on its TMA stores for their reads of shared memory only (what the boxes' reuse and the
# CTA's exit need), not for the writes to land: the grid's completion makes them visible to what runs next.
READ_WAIT_PATCHES = (
    ("        if (lane == 0) bulk_wait_group<0>();\n", "        if (lane == 0) bulk_wait_group_read<0>();\n"),
)

# The tensor maps fetched into the TMA unit's cache at the kernel's start, before the barriers, the cluster's sync
# and griddepcontrol.wait (they are parameters, which no kernel before writes), not just before the first load.
EARLY_PREFETCH_PATCHES = (
    ("    if (threadIdx.x == 0) {\n        for (int s = 0; s < NUM_STAGES; ++s) {\n",
     "    if (threadIdx.x == 0) {\n        prefetch_tensormap(&tma_a);\n        prefetch_tensormap(&tma_b);\n"
     "#if !C_BY_POINTER\n        prefetch_tensormap(&tma_c);\n#endif\n"
     "        for (int s = 0; s < NUM_STAGES; ++s) {\n"),
    ("            prefetch_tensormap(&tma_a);\n            prefetch_tensormap(&tma_b);\n#if !C_BY_POINTER\n"
     "            prefetch_tensormap(&tma_c);\n#endif\n", ""),
)

# PDL's trigger at the kernel's start, where the kernel had it before it moved to the producer's last load: the
# next kernel in the stream is scheduled as soon as every CTA of this one has started.
EARLY_TRIGGER_PATCHES = (
    ("    griddepcontrol_wait();\n", "    griddepcontrol_wait();\n    griddepcontrol_launch_dependents();\n"),
    ("            griddepcontrol_launch_dependents();\n        }\n    } else {\n", "        }\n    } else {\n"),
)

# Two CTAs an SM: 128 registers a thread at launch (two CTAs of 256 threads fill the 65536), given out as the
# producer's 40 and the consumer's 216; the stages in half of the SM's 228 KB less a CTA's 1 KB reserve.
TWO_CTAS_PATCHES = (
    ("constexpr int CONSUMER_REGS = 232;",
     "static_assert(NUM_CONSUMERS == 1 && CLUSTER_SIZE == 1 && !PARTIAL_TILES,\n"
     "              \"lab two_ctas: one consumer warpgroup, no cluster, whole tiles\");\n"
     "constexpr int CONSUMER_REGS = 216;"),
    ("constexpr int DYNAMIC_SMEM_BYTES = NUM_STAGES * STAGE_BYTES + EPI_BYTES + SUM_BYTES + ALIGN_SLACK_BYTES;\n",
     "constexpr int DYNAMIC_SMEM_BYTES = NUM_STAGES * STAGE_BYTES + EPI_BYTES + SUM_BYTES + ALIGN_SLACK_BYTES;\n"
     "static_assert(DYNAMIC_SMEM_BYTES + 2 * NUM_STAGES * 8 <= 113 * 1024, \"lab two_ctas: two CTAs fit an SM\");\n"),
    ("__launch_bounds__(NUM_THREADS, 1)\ngemm_kernel(const __grid_constant__ TmaDesc tma_a, const __grid_constant__ "
     "TmaDesc tma_b, out_t*",
     "__launch_bounds__(NUM_THREADS, 2)\ngemm_kernel(const __grid_constant__ TmaDesc tma_a, const __grid_constant__ "
     "TmaDesc tma_b, out_t*"),
    ("__launch_bounds__(NUM_THREADS, 1)\ngemm_kernel(const __grid_constant__ TmaDesc tma_a, const __grid_constant__ "
     "TmaDesc tma_b,\n",
     "__launch_bounds__(NUM_THREADS, 2)\ngemm_kernel(const __grid_constant__ TmaDesc tma_a, const __grid_constant__ "
     "TmaDesc tma_b,\n"),
)

# An L2 prefetch of a tensor map's box: the TMA unit reads it from HBM into L2 and completes on nothing.
L2_PREFETCH_HELPERS = """\
// lab l2_prefetch: the box of the map at (c0, c1) from HBM into L2, completing on nothing. A hint, not a read: L2
// is where every SM's writes land, so a line brought in early holds whatever the kernel before writes there later.
__device__ __forceinline__ void tma_prefetch_l2_2d(const TmaDesc* map, int c0, int c1) {
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
                 :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1) : "memory");
}

// lab l2_prefetch: the boxes tma_load_operand loads at (k, row), prefetched into L2.
template <bool MN_MAJOR, int ROWS>
__device__ __forceinline__ void tma_prefetch_operand(const TmaDesc* map, int k, int row) {
    if constexpr (!MN_MAJOR) {
        tma_prefetch_l2_2d(map, k, row);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS / MN_BOX_COLS; ++i) tma_prefetch_l2_2d(map, row + i * MN_BOX_COLS, k);
    }
}

"""

# Thread 0, before it initialises the barriers (and so before the cluster's sync and griddepcontrol.wait): the
# first k-tiles of this CTA's first unit, its parts of A and B at the coordinates its producer loads them at.
L2_PREFETCH_BLOCK = """\
    if (threadIdx.x == 0) {
        // lab l2_prefetch: this CTA's first LAB_PREFETCH_K_TILES k-tiles into L2 while the kernel before may run on.
        const SegmentWalk first(sched, cluster_id, num_clusters, rank_k);
        if (first.valid()) {
            int cluster_m, cluster_n;
            grouped_tile(first.seg.tile, cluster_rows, cluster_cols, cluster_m, cluster_n);
            const int tile_m = cluster_m * CLUSTER_M + rank_m, tile_n = cluster_n * CLUSTER_N + rank_n;
            const int k_end = min(first.seg.k_end, first.seg.k_begin + LAB_PREFETCH_K_TILES);
            for (int k_tile = first.seg.k_begin; k_tile < k_end; ++k_tile) {
                tma_prefetch_operand<A_MN_MAJOR, A_BOX_ROWS>(&tma_a, k_tile * BLOCK_K,
                                                             tile_m * BLOCK_M + rank_n * A_BOX_ROWS);
                tma_prefetch_operand<B_MN_MAJOR, B_BOX_ROWS>(&tma_b, k_tile * BLOCK_K,
                                                             tile_n * BLOCK_N + rank_m * B_BOX_ROWS);
            }
        }
        for (int s = 0; s < NUM_STAGES; ++s) {
"""


def l2_prefetch_patches(k_tiles: str) -> tuple[tuple[str, str], ...]:
    """The l2_prefetch variant, prefetching `k_tiles` (a C++ expression) k-tiles of the first unit."""
    return (
        ("// atomicAdd with acquire-release semantics at GPU scope:",
         f"#define LAB_PREFETCH_K_TILES ({k_tiles})\n" + L2_PREFETCH_HELPERS
         + "// atomicAdd with acquire-release semantics at GPU scope:"),
        ("    if (threadIdx.x == 0) {\n        for (int s = 0; s < NUM_STAGES; ++s) {\n", L2_PREFETCH_BLOCK),
    )  # fmt: skip


STAMP_HELPERS = f"""
extern "C" __device__ unsigned long long lab_stamps[{MAX_CTAS} * {STAMP_SLOTS}];
__device__ __forceinline__ void lab_stamp(int slot) {{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (blockIdx.x < {MAX_CTAS}) lab_stamps[blockIdx.x * {STAMP_SLOTS} + slot] = t;
}}
"""

STAMP_PATCHES = (
    ("struct __align__(64) TmaDesc { unsigned long long data[16]; };\n",
     "struct __align__(64) TmaDesc { unsigned long long data[16]; };\n" + STAMP_HELPERS),
    (
        "    __shared__ __align__(8) unsigned long long empty_bar[NUM_STAGES];\n",
        "    __shared__ __align__(8) unsigned long long empty_bar[NUM_STAGES];\n"
        "    if (threadIdx.x == 0) lab_stamp(0);\n",
    ),
    (
        "tile_n * BLOCK_N + rank_m * B_BOX_ROWS, column_mask);\n",
        "tile_n * BLOCK_N + rank_m * B_BOX_ROWS, column_mask);\n"
        "                    if (lab_loads++ == 0) lab_stamp(1);\n",
    ),
    ("            prefetch_tensormap(&tma_a);\n",
     "            int lab_loads = 0;\n            prefetch_tensormap(&tma_a);\n"),
    (
        "                mbarrier_wait_parity(full_bar0 + stage * 8, phase);\n",
        "                mbarrier_wait_parity(full_bar0 + stage * 8, phase);\n"
        "                if (threadIdx.x == 128 && lab_fulls++ == 0) lab_stamp(2);\n",
    ),
    (
        "        [[maybe_unused]] int turn = 0;  // [13] this CTA's tiles so far: tile t is consumer t % 2's\n",
        "        int lab_fulls = 0, lab_loops = 0;\n"
        "        [[maybe_unused]] int turn = 0;  // [13] this CTA's tiles so far: tile t is consumer t % 2's\n",
    ),
    (
        "            wgmma_wait_group<0>();  // the tile's last batch: acc is final, its stage can go back\n",
        "            wgmma_wait_group<0>();  // the tile's last batch: acc is final, its stage can go back\n"
        "            if (threadIdx.x == 128) lab_stamp(lab_loops++ == 0 ? 3 : 4);\n",
    ),
    (
        "        if (lane == 0) bulk_wait_group<0>();\n",
        "        if (threadIdx.x == 128) lab_stamp(5);\n"
        "        if (lane == 0) bulk_wait_group<0>();\n"
        "        if (threadIdx.x == 128) lab_stamp(6);\n",
    ),
)

VARIANTS = {"hints": HINT_PATCHES, "two_parts": TWO_PARTS_PATCHES, "swap_pointer": SWAP_POINTER_PATCHES,
            "read_wait": READ_WAIT_PATCHES, "stamps": STAMP_PATCHES, "early_trigger": EARLY_TRIGGER_PATCHES,
            "early_prefetch": EARLY_PREFETCH_PATCHES, "two_ctas": TWO_CTAS_PATCHES,
            "l2_prefetch": l2_prefetch_patches("NUM_STAGES"), "l2_prefetch_2x": l2_prefetch_patches("2 * NUM_STAGES"),
            "l2_prefetch_early": l2_prefetch_patches("NUM_STAGES") + EARLY_TRIGGER_PATCHES}
# Rows timed beside the shipped kernel (swap_tma, swap_tma_read_wait: the records of the kernel before the boxes;
# late_trigger: the record of the kernel that triggered at the start).
COMPARED = ("hints", "two_parts", "read_wait", "early_prefetch", "swap_pointer", "swap_tma", "swap_tma_read_wait",
            "early_trigger", "late_trigger", "two_ctas", "l2_prefetch", "l2_prefetch_2x", "l2_prefetch_early",
            "against")


def patched(source: str, patches: tuple[tuple[str, str], ...]) -> str:
    """`source` with every (anchor, replacement) applied; ValueError names an anchor not found exactly once."""
    for anchor, replacement in patches:
        count = source.count(anchor)
        if count != 1:
            raise ValueError(f"a patch's anchor occurs {count} times, not once: {anchor[:80]!r}")
        source = source.replace(anchor, replacement)
    return source


@cache
def variant_kernel(variant: str) -> Path:
    """The shipped kernel with `variant`'s patches, written once per process to a file of its own."""
    folder = Path(tempfile.mkdtemp(prefix="kernel_probe_"))
    path = folder / f"gemm_sm90_{variant}.cu"
    path.write_text(patched(LIBRARY_KERNEL.read_text(), VARIANTS[variant]))
    return path


RESIDENT: dict[Path, int] = {}  # a two_ctas kernel -> the CTAs of it the GPU holds at once (the driver's count)


def one_tile_per_cta(
    path: Path, device: int, m: int, n: int, k: int, cfg: GemmConfig, function: int, threads: int, smem: int
) -> tuple[int, tuple[int, int]]:
    """`plan.persistent_grid` for the two_ctas variant: a CTA per tile, every tile whole (the hardware schedules
    the CTAs past the first two an SM as slots free); the driver's count of resident CTAs kept in RESIDENT."""
    if cfg.value("SPLIT_K") != 1 or cfg.value("STREAM_K") or cfg.value("CLUSTER_M") * cfg.value("CLUSTER_N") != 1:
        raise ValueError("two_ctas runs whole tiles without a cluster: SPLIT_K 1, STREAM_K 0, a cluster of one")
    RESIDENT[path] = max_active_clusters(function, 1, threads, smem)
    return cluster_tiles(m, n, cfg.value("BLOCK_M"), cfg.value("BLOCK_N"), 1, 1), (0, 0)


GRIDS = {"two_ctas": one_tile_per_cta}  # variants whose plan launches another grid than the persistent one


@contextmanager
def kernel_file(path: Path, built: list[Any]) -> Iterator[None]:
    """Plans built inside compile `path` in place of the shipped kernel (and, for a variant of GRIDS, launch its
    grid); each kernel compiled is appended to `built`."""
    shipped_path, shipped_get = library_plan.LIBRARY_KERNEL, library_plan.get_kernel
    shipped_grid = library_plan.persistent_grid
    grid = GRIDS.get(path.stem.removeprefix("gemm_sm90_"))

    def get_kernel(_: Path, defines: Any, *args: Any) -> Any:
        kernel = shipped_get(path, defines, *args)
        built.append(kernel)
        return kernel

    library_plan.LIBRARY_KERNEL, library_plan.get_kernel = path, get_kernel
    if grid is not None:
        library_plan.persistent_grid = partial(grid, path)
    try:
        yield
    finally:
        library_plan.LIBRARY_KERNEL, library_plan.get_kernel = shipped_path, shipped_get
        library_plan.persistent_grid = shipped_grid


def launches_of(work: Workload, cfg: GemmConfig, path: Path) -> tuple[list[Callable[[], Any]], Any]:
    """A launch per input set of the library's plan with `cfg`, its kernel compiled from `path`; and that kernel."""
    torch = require_torch()
    sets, _ = operand_sets(work, "torch", torch)
    framework, built = Torch(), []
    with kernel_file(path, built):
        plans = [library_plan.build(framework, a, b, None, None, activation=None, out_dtype=None, config=cfg)
                 for a, b in sets]  # fmt: skip
    return [lambda p=p, a=a, b=b: p(a, b, None, 1.0, None) for p, (a, b) in zip(plans, sets, strict=True)], built[-1]


def stages_that_fit(work: Workload, cfg: GemmConfig, path: Path) -> GemmConfig:
    """`cfg` with as many of its stages as the kernel at `path` fits beside its store boxes (the swapped tiles'
    boxes take shared memory that their stores by pointer do not): both kernels are then timed with it."""
    fields = heuristic.config_fields(cfg)
    for stages in range(fields["num_stages"], 1, -1):
        fitted = heuristic.config_from_fields({**fields, "num_stages": stages})
        try:
            launches_of(work, fitted, path)
        except (ValueError, cupy.cuda.compiler.CompileException):  # the plan's check, or the kernel's static_assert
            continue
        return fitted
    raise ValueError(f"{heuristic.config_name(cfg)}: no number of stages fits {path.name}")


def compare_row(
    work: Workload, cfg: GemmConfig, other: Path, beside: dict[str, list[Callable[[], Any]]] | None = None
) -> dict[str, Any]:
    """The shipped kernel and the kernel at `other` with the same config: their outputs compared bit for bit,
    their graphs timed with torch.matmul's (and `beside`'s launches, by field prefix), batches alternated."""
    torch = require_torch()
    shipped, _ = launches_of(work, cfg, LIBRARY_KERNEL)
    others, _ = launches_of(work, cfg, other)
    same = bool(torch.equal(shipped[0](), others[0]()))
    call_ms = device_us_per_call(shipped) / 1e3
    torch_launches = call_launches(work, "torch")[TORCH]
    launches = {"": shipped, "other_": others, **(beside or {}), "torch_": torch_launches}
    fields = graph_fields({prefix: (runs, call_ms) for prefix, runs in launches.items()}, work)
    return {"other": other.name, "identical": same, **fields,
            "other_over_shipped": fields["graph_us"] / fields["other_graph_us"]}  # fmt: skip


# Variants that only differ where PDL overlaps one call with the next: timed with it, beside the shipped kernel
# with it and without. early_trigger: the trigger at the start, not at the producer's last load.
PDL_VARIANTS = {"early_trigger": "early trigger", "l2_prefetch": "L2 prefetch", "l2_prefetch_2x": "L2 prefetch 2x",
                "l2_prefetch_early": "L2 prefetch, early trigger"}
# Those that change a launch without PDL too, timed so as well. A trigger does nothing without PDL: early_trigger
# launches then as the shipped kernel does, l2_prefetch_early as l2_prefetch does.
CHANGED_WITHOUT_PDL = ("l2_prefetch", "l2_prefetch_2x")


def pdl_row(work: Workload, cfg: GemmConfig, variant: str) -> dict[str, Any]:
    """`cfg` with PDL, shipped and as `variant` (`compare_row`), beside `cfg` without PDL, shipped (its graph
    "no_pdl_") and, for CHANGED_WITHOUT_PDL, as the variant ("other_no_pdl_": what it costs a launch it cannot
    overlap)."""
    fields = heuristic.config_fields(cfg)
    with_pdl, without = (heuristic.config_from_fields({**fields, "PDL": pdl}) for pdl in (1, 0))
    beside = {"no_pdl_": launches_of(work, without, LIBRARY_KERNEL)[0]}
    if variant in CHANGED_WITHOUT_PDL:
        beside["other_no_pdl_"] = launches_of(work, without, variant_kernel(variant))[0]
    row = compare_row(work, with_pdl, variant_kernel(variant), beside=beside)
    return {**row, "other": PDL_VARIANTS[variant], "config": heuristic.config_name(with_pdl)}


def two_ctas_row(work: Workload, entry: GemmConfig) -> dict[str, Any]:
    """The entry's orientation, width, PDL and JIT at 64 rows, whole tiles, no cluster, as many stages as two
    CTAs an SM fit: shipped (persistent) and as the two_ctas variant (`compare_row`), the entry itself beside
    them ("entry_"); with the resident CTAs."""
    fields = heuristic.config_fields(entry)
    most = heuristic.max_stages(entry.block_n, 64, bool(fields["SWAP_AB"]))
    alone = {"CLUSTER_M": 1, "CLUSTER_N": 1, "CLUSTER_K": 1, "SPLIT_K": 1, "STREAM_K": 0, "PINGPONG": 0}
    tile = heuristic.config_from_fields({**fields, **alone, "block_m": 64, "num_stages": most})
    path = variant_kernel("two_ctas")
    fitted = stages_that_fit(work, tile, path)
    beside, _ = launches_of(work, entry, LIBRARY_KERNEL)
    row = compare_row(work, fitted, path, beside={"entry_": beside})
    return {**row, "config": heuristic.config_name(fitted), "entry": heuristic.config_name(entry),
            "resident_ctas": RESIDENT.get(path)}  # fmt: skip


def stamps_row(work: Workload, cfg: GemmConfig, launches_in_a_row: int = 1) -> dict[str, Any]:
    """The stamping kernel launched `launches_in_a_row` times back to back on an idle GPU, the last launch's
    stamps read: per CTA, the us from the first CTA's start to each event. One launch meets a cold SM (its
    instruction cache and the maps not yet fetched there); a later one of a row meets what a stream of calls
    meets, the one before it still draining."""
    torch = require_torch()
    launches, kernel = launches_of(work, cfg, variant_kernel("stamps"))
    launches[0]()  # warm: the module loaded, the maps fetched once
    torch.cuda.synchronize()
    stamps = cupy.ndarray((MAX_CTAS, STAMP_SLOTS), cupy.uint64, module_of(kernel).get_global("lab_stamps"))
    stamps.fill(0)
    torch.cuda.synchronize()
    for _ in range(launches_in_a_row):
        launches[0]()
    torch.cuda.synchronize()
    got = stamps.get().astype("int64")
    ctas = got[got[:, 0] > 0]
    t0 = int(ctas[:, 0].min())
    spans: dict[str, Any] = {"launches_in_a_row": launches_in_a_row, "ctas": len(ctas),
                             "span_us": (int(ctas[:, 6].max()) - t0) / 1e3}  # fmt: skip
    for slot, name in enumerate(STAMPS):
        values = [(int(v) - t0) / 1e3 for v in ctas[:, slot] if v > 0]
        if values:
            spans[name] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
    return spans


def probe(
    shape: tuple[int, int, int], dtype: str, named: str | None, variants: list[str], against: Path | None
) -> dict[str, Any]:
    m, n, k = shape
    work = Workload.make(m, n, k, dtype).in_layout(*TUNED_LAYOUT)
    cfg = heuristic.config_from_name(named) if named else config_of(*work.problems[0])[0]  # else the library's pick
    row: dict[str, Any] = {"dtype": dtype, "m": m, "n": n, "k": k, "config": heuristic.config_name(cfg)}
    for variant in ("hints", "two_parts", "read_wait", "early_prefetch"):
        if variant in variants:
            row[variant] = compare_row(work, cfg, variant_kernel(variant))
    if "swap_pointer" in variants and heuristic.config_fields(cfg)["SWAP_AB"]:
        fitted = stages_that_fit(work, cfg, LIBRARY_KERNEL)
        row["swap_pointer"] = {**compare_row(work, fitted, variant_kernel("swap_pointer")),
                               "config": heuristic.config_name(fitted)}  # fmt: skip
    for variant in PDL_VARIANTS:
        if variant in variants:
            row[variant] = pdl_row(work, cfg, variant)
    if "two_ctas" in variants:
        row["two_ctas"] = two_ctas_row(work, cfg)
    if against is not None:
        row["against"] = compare_row(work, cfg, against)
    if "stamps" in variants:
        row["stamps"] = stamps_row(work, cfg)
        row["stamps_in_a_row"] = stamps_row(work, cfg, launches_in_a_row=3)
    print("\n".join(lines([row])), flush=True)
    return row


def lines(rows: list[dict]) -> list[str]:
    out = []
    for row in rows:
        head = f"{row['dtype']} {row['m']}x{row['n']}x{row['k']} {row['config']:<28}"
        for key in COMPARED:
            if key in row:
                h = row[key]
                said = f" (as {h['config']})" if "config" in h else ""
                off = f", no PDL {h['no_pdl_graph_us']:8.2f}" if "no_pdl_graph_us" in h else ""
                if "other_no_pdl_graph_us" in h:
                    off += f" ({h['other']} {h['other_no_pdl_graph_us']:8.2f})"
                if "entry_graph_us" in h:
                    off = f", entry {h['entry']} {h['entry_graph_us']:8.2f}, {h['resident_ctas']} CTAs resident"
                out.append(f"{head}{said} graph {h['graph_us']:8.2f} us, {h['other']} {h['other_graph_us']:8.2f} "
                           f"(x {h['other_over_shipped']:.3f}){off}, torch {h['torch_graph_us']:8.2f}, "
                           f"identical {h['identical']}")  # fmt: skip
        for key in ("stamps", "stamps_in_a_row"):
            if key not in row:
                continue
            st = row[key]
            med = {name: st[name]["median"] for name in STAMPS if name in st}
            said = "one launch" if st.get("launches_in_a_row", 1) == 1 else f"last of {st['launches_in_a_row']}"
            out.append(f"{head} {said}: CTAs {st['ctas']}, span {st['span_us']:.2f} us; median us from the first "
                       "start: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))  # fmt: skip
            if "stores_done" in st:
                out.append(f"{'':>{len(head)}} start max {st['start']['max']:.2f}, first_full max "
                           f"{st['first_full']['max']:.2f}, stores_done min {st['stores_done']['min']:.2f} max "
                           f"{st['stores_done']['max']:.2f}")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.kernel_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK,... (default: %(default)s)")
    parser.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    parser.add_argument("--config", default=None,
                        help="config names, comma-separated, each run at every shape (default: the library's pick)")
    parser.add_argument("--variants", default="hints,stamps",
                        help="of hints, two_parts, read_wait, early_prefetch, swap_pointer, early_trigger, two_ctas, "
                        "l2_prefetch, l2_prefetch_2x, l2_prefetch_early, stamps (default: %(default)s)")
    parser.add_argument("--against", type=Path, default=None,
                        help="another gemm_sm90.cu (an earlier commit's) to time beside the shipped one")
    parser.add_argument("--name", default="kernel_probe", help="the record's name (default: %(default)s)")
    parser.add_argument("--record", action="store_true", help="write lab/results/<gpu>/<name>.json")
    args = parser.parse_args(argv)
    if not gpu_available():
        command = "python -m lab.kernel_probe --record"
        show_recorded(args.name, lines, directory=recorded_dir(args.name), command=command)
        return 0
    variants = [v for v in args.variants.split(",") if v]
    configs = args.config.split(",") if args.config else [None]
    rows = [probe(parse_shape(s), args.dtype, named, variants, args.against)
            for s in args.shapes.split(",") for named in configs]  # fmt: skip
    if args.record:
        record(args.name, "lab.kernel_probe", None, rows)
    return 0 if all(r[key]["identical"] for r in rows for key in COMPARED if key in r) else 1


if __name__ == "__main__":
    raise SystemExit(main())
