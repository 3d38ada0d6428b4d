"""Which configuration of the library kernel a problem gets: the autotune table's (`pick_config`), else the
cost model's pick.

One tile does not fit every shape. 128 x 256 tiles give 4096^3 its 512 tiles in four rounds on 132 SMs;
at M = 128 and N = K = 4096 they make 16 tiles, so 16 SMs work while 116 idle, each streaming 64 k-tiles
in a row. At M = 777 the token dimension in 128-row tiles is 7 x 128 = 896 rows, 13% of them padding;
swapped (below), the tokens are wgmma's N in steps of 8: 4 x 200 = 800 rows.

**The space** (`candidates`). The kernel computes A (M', K) times B (N', K)^T. Plain, M' is the problem's M
(the tokens) and N' its N; swap AB computes C^T, so M' is N (the weight's rows) and N' is M, the tokens on
wgmma's N. A CTA's tile is BLOCK_M (64 or 128 rows: one or two consumer warpgroups; 256, two warpgroups of
two wgmma m64 each, with BLOCK_N at most 128) by BLOCK_N (wgmma's N: plain, multiples of 16 up to 256;
swapped, multiples of 8). Clusters of CLUSTER_M x CLUSTER_N CTAs (1, 2
or 4 each, 8 at most) stack tiles along M', sharing the B tile by TMA multicast, and along N', sharing A;
each CTA loads BLOCK_N / CLUSTER_M rows of B and BLOCK_M / CLUSTER_N of A, whole groups of 8 rows (of 64
where that operand is MN-major). A cluster's tiles are a *cluster tile*; sm_count // (CLUSTER_M x
CLUSTER_N) clusters fit at once (the *slots*). The schedule is data-parallel (a cluster tile per worker a
round), split-K (every tile cut into SPLIT_K slices of K, each a unit of work), or stream-K
(`model.stream_k_schedule`: STREAM_K 1 cuts the last, partial round of tiles along K over every slot;
STREAM_K 2 that round and the full one before it), or a split in the cluster (CLUSTER_K 2 or 4: the
cluster's CTAs take one tile, each a slice of K, and sum their parts in shared memory, not global memory).
With ping-pong (PINGPONG 1) the two consumer warpgroups take a worker's tiles in turn, each a whole tile, so
that one's epilogue runs under the other's main loop. Pipeline stages: as many as fit beside the epilogue's
store boxes and the split's slots (`max_stages`).

The space is pruned to what can win:

- **Tight tile widths.** For a dimension d in steps of g, the widths round_up(ceil(d / t), g) for t tiles
  (the last tile nearly full), plus the widest. 777 tokens in steps of 8: 256, 200 (4 tiles), 160 (5),
  136 (6), 112 (7), 104 (8), 88 (9), 80, 72, 64. A width below 64 only for a dimension below 64 (the
  tokens of a decode step): for a wider one, wider tiles do the same work in fewer, fuller MMAs. BLOCK_M
  64 only where 128-row tiles as wide as they come leave SMs idle; 256 where M' spans more than 128 rows.
- **Clusters** no longer than the tiles they stack (a cluster of two on one row of tiles computes padding).
- **Split-K** only while the tiles leave half the slots idle and the slices fit in one round (a second,
  partial round is what stream-K evens out), each slice at least MIN_K_TILES_PER_WORKER k-tiles long;
  **stream-K** only where the last round of tiles is partial. No split-K under BLOCK_M 256: where tiles
  are too few to fill the SMs, narrower ones are the cure. **A split in the cluster** on split-K's terms, for
  64-row tiles up to 128 wide without another cluster, all its clusters in one round. **Ping-pong** for
  whole 128-row tiles 128 or 144 wide (two m64 fragments per warpgroup) where a worker runs more than one.

That leaves at most about 1,300 candidates (1 x 4096 x 4096: 218, 4096^3: 812, 777 x 4096 x 4096: 988,
3889 x 1000 x 1000: 1,259); `choose` prices them in about 10 us each, 3 to 15 ms of pure Python
(measured on the development machine), once per new shape: a plan is built once per call key.

**The model** (`estimate_us`) prices a configuration as the persistent kernel runs it:

- **The busiest worker's k-tiles.** Data-parallel, ceil(tiles / slots) rounds of a tile's k-tiles: 288
  cluster tiles on 66 clusters take 5 rounds, the last one 24/66 full. Split-K: rounds of slices.
  Stream-K: the whole rounds, then the cut tiles' k-tiles in equal runs, one per worker: 288 tiles of 64
  k-tiles on 132 SMs take 2 rounds and 11.6 k-tiles of the last 24 tiles each, 139.6 instead of 192.
- **A k-tile's time** is the longer of its wgmma, BLOCK_M x BLOCK_N x 64 multiply-adds at 4096 FLOP per
  clock per SM (the dense FP16 rate), and the operand bytes TMA brings into the SM, (BLOCK_M / CLUSTER_N
  + BLOCK_N / CLUSTER_M) x 128 at L2_BYTES_PER_CLOCK, plus a fixed K_TILE_OVERHEAD_CLOCKS (and
  CLUSTER_SYNC_CLOCKS per CTA of a cluster past the first). Narrow tiles re-read the other operand for
  every tile, so below about 128 a k-tile is bound by its loads, not its MMAs; multicast divides the bytes
  a CTA fetches.
- **The fix-up** of a tile cut along K: its partials, fp32 BLOCK_M x BLOCK_N blocks, written and read back,
  2 x contributors x BLOCK_M x BLOCK_N x 4 bytes at PARTIAL_BYTES_PER_CLOCK for every cut tile a worker
  takes part in, and FIXUP_US for the wait on the tile's turnstile and the sum; a split in the cluster pays
  CLUSTER_SUM_US for each CTA past the first instead: nothing of it crosses global memory.
- **Ping-pong** hides PINGPONG_TILE_US for every tile a worker runs past its first: the epilogue and the
  drain of the wgmma queue that the tensor cores otherwise wait out.
- **HBM** bounds the whole: A, B and C each cross it once, at HBM_GBS, or at SM_HBM_GBS per busy SM where
  too few stream to reach it (an SM keeps only so many bytes in flight). Small M is this case: at M = 1
  the kernel only has to stream B (32 MB at N = K = 4096), and the model wants enough workers (split-K,
  stream-K, narrow tiles) that enough SMs stream part of it. Where several tilings reach HBM_GBS alike,
  the one whose busiest worker has the shorter k-tile loop goes first: its SMs each fetch less.
- **L2** bounds the whole too: every CTA's operand bytes, each multicast counted once, at L2_GBS. This is
  where a cluster pays in large problems: 128 x 256 tiles without one fetch 1.5 times the bytes. Where the
  grid is one round, every CTA walks K at about the same pace, and the L2 request coalescer merges
  identical reads in flight: a tile read by more than L2_MERGE_READERS clusters at once costs that many
  reads (Nsight Compute: 33 clusters reading one token tile at 512 x 2112 x 7168 cost about 13). The
  merge saves L2 its lookups, not the crossbar its deliveries: every cluster's fetches, merged or not, at
  XBAR_GBS bound one-round grids too, and there a cluster sharing the weight goes ahead of the same tile
  without one, as it measured.
- **Power** bounds the whole too: at its 700 W cap the H200 lowers its clock until the MMAs draw no more,
  so a long GEMM runs its work, padding included, at about POWER_TFLOPS however it is spread over the SMs
  (4096 x 4096 x 14336 and 2048 x 28672 x 4096: 676 TFLOP/s measured). Stream-K and split-K then buy no
  time, only their fix-up: without this bound the model put stream-K over two rounds first at eight of the
  shape table's large shapes, and the record measured it up to 13% slower than whole tiles there.
- **C copied back** where TMA cannot write it (`staged_us`): plain, rows of N 16-bit elements that are not
  whole 16-byte vectors (N = 4097) go to a padded buffer the call copies back; swapped, the kernel stores
  such rows of C by pointer, in place.
- **A launch**, LAUNCH_US.

The pick is the cheapest; among equals (`Price`), the one the model without the power bound prices lower (what
would be faster at the full clock), then the one that computes fewer padded outputs, then one launched with
PDL, then the smaller cluster (among tilings bound by HBM alike, 64 SMs without one ran ahead of 128 in
clusters of two at 16 to 32 tokens), then the shorter loop for its busiest worker, then keeps fewer SMs busy
(they leave power to the others), then has the wider wgmma (in the record's ties at 256 x 4096 x 4096 and 4096
x 7168 and 512 x 2112 x 7168, 64 x 128 tiles ran 2 to 6% faster than 128 x 64 ones in either orientation),
then has the larger tile, then multicasts the weight's tile before only the tokens' (in the record 120 of 167
pairs that differ only there ran faster sharing the weight), then one along M' (sharing B, the kernel's
default) before one along N'. It is launched with PDL under PDL_BELOW_US (`pdl_pays`) and compiled for the
weight's N and K under JIT_BELOW_US. The autotune table (`tutorial.autotune`) replaces the model's guess with
a measurement for every shape it holds.

The constants are the H200's: its clock under load (near 1.7 GHz at the power cap), its dense rate, HBM,
and eleven fitted to its autotune record (marked below; `python -m lab.fit_heuristic` searches nine, holds
the per-SM HBM bound, and sets the launch cost, which only shifts every estimate, to make the median
estimate the measured time).
They are fitted to this kernel's autotune record (FP16, the 102 problems of the shape table, each timing the
model's 8 cheapest candidates, the cheapest of each family and the kernel's default) and the lab's sweep of
the space, with the per-SM HBM bound held at what the record's M = 1 rows stream (SM_HBM_GBS; fitted free, it
goes to no bound at all). How far the model's first choice among a record's timed candidates is from the
fastest, and how close its estimates come to the measured times, is `model_accuracy`; notes/heuristic_regret.md
states it for the record the package's table comes from (results/h200/autotune.json; `tests/test_heuristic.py`
holds the two together) and follows the misses. The aim is 3% on average and 10% at worst.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import NamedTuple

from deepgemm.config import ELEMENT_BYTES, GemmConfig
from deepgemm.model import (
    MIN_K_TILES_PER_WORKER,
    ceil_div,
    cluster_tiles,
    round_up,
    stream_k_schedule,
)

# ---- the kernel's space ------------------------------------------------------------------------------------
BLOCK_K = 64  # one 128-byte swizzle row of 2-byte elements
BLOCK_M_STEP = 64  # the rows of one consumer warpgroup's wgmma m64
MAX_BLOCK_M = 128  # two consumer warpgroups of one wgmma m64: the kernel's default
WIDE_BLOCK_M = 256  # two consumer warpgroups of two wgmma m64 ...
WIDE_MAX_BLOCK_N = 128  # ... holding 2 x BLOCK_N / 2 fp32 accumulators per thread: 128 at most, as m64n256
BLOCK_N_STEP = {False: 16, True: 8}  # plain: the epilogue's store steps; swapped: wgmma's 8 (store boxes of 8 rows up)
MAX_BLOCK_N = 256  # wgmma's widest N
NARROW_BLOCK_N = 64  # narrower only for a dimension narrower than this: else wider tiles do the same in fewer MMAs
CLUSTER_SIDES = (1, 2, 4)  # CTAs along M' (sharing B) or N' (sharing A)
MAX_CLUSTER = 8  # the portable cluster size on Hopper
BOX_ROW_STEP = 8  # a CTA's share of a multicast tile: whole 8-row groups of the 128-byte swizzle
MN_MAJOR_BOX_ROWS = 64  # an MN-major operand arrives in boxes 64 elements (128 bytes) wide
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
STREAM_KS = (1, 2)  # stream-K over the partial round, or over it and the full round before it
CLUSTER_KS = (2, 4)  # [12] a tile's slices of K in one cluster, summed in its shared memory ...
CLUSTER_K_BLOCK_M = 64  # ... of one consumer warpgroup: in lab/results/h200/cluster_k.json every 128-row tile split
# so (its slots cost it stages) lost to the same split of 64-row tiles or to the table's entry ...
CLUSTER_K_MAX_BLOCK_N = 128  # ... and at most 128 wide (8 stages or more): in the autotune record of 170e37d the
# splits 256 wide (4 stages) ran 7 to 22% slower than the model's estimate and lost at all five shapes
SMEM_BYTES = 227 * 1024  # what one CTA may use
ALIGN_BYTES = 1024  # the 128-byte swizzle wants 1024-byte aligned tiles: slack for aligning the first
BARRIER_BYTES = 16  # per stage: its full and empty mbarriers
EPILOGUE_BYTES_PER_WARPGROUP = 16 * 1024  # plain: each consumer's store boxes, 4 warps x 2 of 2 KB
STORE_BOXES_PER_WARPGROUP = 8  # swapped: 4 warps x 2 boxes of C's rows, 32 bytes each (a warp's 16 columns) ...
SWAP_BOX_ROW_BYTES = 32
SWAP_BOX_MAX_ROWS = 64  # ... 8 to 64 rows: the largest power-of-two multiple of 8 that divides BLOCK_N
SWAP_CLUSTER_TMA_FROM = 96  # swapped tiles in clusters store C by pointer below this BLOCK_N, as fp32 C does
MAX_STAGES = 16  # the deepest pipeline offered, however small the stages
OUT_ROW_ALIGN_BYTES = 16  # TMA's row stride: C's rows in whole 16-byte vectors, else written padded (plan.py)

# ---- the H200 ----------------------------------------------------------------------------------------------
CLOCK_GHZ = 1.7  # the H200's SM clock under a long GEMM at its 700 W cap
FLOP_PER_CLOCK = 4096  # dense FP16/BF16 per SM per clock
HBM_GBS = 4000.0  # sustained HBM bandwidth, GB/s (4.8 TB/s on the datasheet)
PARTIAL_BYTES = 4  # split-K and stream-K partials are fp32
L2_BYTES_PER_CLOCK = 128  # operand bytes TMA delivers into one SM per clock (fitted)
K_TILE_OVERHEAD_CLOCKS = 128  # per k-tile besides the MMAs: barrier hand-offs, wgmma issue, drain (fitted)
CLUSTER_SYNC_CLOCKS = 16  # per k-tile and CTA of a cluster past the first: a multicast stage is refilled only
# when every CTA it feeds has released it, so a cluster keeps its slowest CTA's pace (fitted, with 2 x 2
# against 2 x 1 at 4096^3 and 8192^3 from lab/results/h200/v5_cluster_n.json)
SM_HBM_GBS = 65.0  # what one SM's loads in flight stream from HBM: stages in flight over HBM's latency. The
# record's 1 x 4096 x 4096 streams its 32 MB weight from 64 SMs (swap m64 n8 s1) in 12.7 us, 8.0 past
# LAUNCH_US: 65 GB/s each, so 64 SMs reach HBM_GBS; held at 40 the model split K to busy 128 SMs, which ran 8%
# slower (13% at K 14336); at 60, 128 SMs in clusters of two went ahead of 64 without one at 16 to 32 tokens
L2_GBS = 8000.0  # operand bytes L2 delivers to all SMs together, GB/s (fitted)
L2_MERGE_READERS = 13  # the reads of one operand tile the L2 request coalescer lets through when all its
# readers run at once: Nsight Compute counted 33 clusters' reads of one token tile merged to about 13 at
# 512 and 256 x 2112 x 7168 (swapped 64 x 128 tiles in 1 x 2 clusters), 22 to about 13 at 128 x 2112 x 7168,
# and no merge among 8 (lab/results/h200/profile_mid_m.json); lab.fit_heuristic, refitting every constant, keeps 13
XBAR_GBS = 12000.0  # what the crossbar carries from L2 to the SMs: every cluster's fetches, merged or not (the
# coalescer saves L2 its lookups, not the deliveries). 512 x 2112 x 7168 in swapped 64 x 128 tiles, 1 x 2
# clusters, fetched 303 MB in 27.5 us; the weight-sharing cluster ran 3-16% ahead of the same tile without
# one over the lab's mid-M sweeps (lab/results/h200/library_space_mid_m*.json), which this bound alone tells
# apart: their mean regret 3.6% -> 1.2%, worst 15.6% -> 5.1%; the autotune record's, timed with this model's
# candidates, 3.5% -> 2.6%, worst 32.9% -> 22.2% (lab.fit_heuristic)
PARTIAL_BYTES_PER_CLOCK = 32  # fp32 partials one SM writes to L2 or reads back per clock (fitted)
FIXUP_US = 1.5  # a cut tile's turnstile: the wait for the other contributors, then the sum (fitted)
# [13] Ping-pong: each consumer warpgroup a whole tile, its epilogue under the other's main loop, for 128-row
# tiles up to 144 wide (two m64 fragments; 64-row tiles with ping-pong lost to the table's entry at all ten
# shapes of lab/results/h200/pingpong_64.json: each B tile then feeds half the MMAs) where a worker has more
# than one tile. What it hides, per tile a worker runs past its first: in lab/results/h200/pingpong.json
# (18 shapes, each 128 x 128 and 128 x 144 tiling timed without and with it in CUDA graphs) a median 0.85 us
# for 128 x 128 tiles (0.4 to 1.6, 36 pairs), 1.8 for 128 x 144.
PINGPONG_MAX_BLOCK_N = 144  # the kernel's limit at 128 rows: two m64 fragments; wider ones spill in fused epilogues
PINGPONG_BLOCK_NS = (128, PINGPONG_MAX_BLOCK_N)  # the widths measured; narrower ones feed each tile to fewer MMAs
PINGPONG_TILE_US = 0.85
CLUSTER_SUM_US = 1.0  # [12] a split in the cluster, per CTA past the first: its part sent, summed, the cluster's
# start (fitted to the autotune record of 170e37d, whose 41 shapes timed splits in the cluster: 1.0 to 3.0 move
# the mean regret by 0.2%)
POWER_TFLOPS = 700.0  # the MMAs' sustained rate, all SMs together, at the 700 W cap: the clock falls to keep
# the power there, so it is the work computed that sets the time, not how it is spread over the SMs (fitted)
LAUNCH_US = 4.7  # a launch and its ramp: the first k-tiles' latency, the last tile's epilogue (fitted)
# Programmatic dependent launch (the kernel's prologue overlapping the end of the one before it): in the lab's
# sweep (lab/results/h200/library_space.json, FP16, back-to-back calls) it took 0.4 to 1.7 us off every
# shape whose best ran under 50 us, and added 3 to 9 us at three of the six above (1 x 28672 x 4096,
# 128 x 28672 x 4096, 4096 x 2112 x 7168): the model asks for it below this estimate. In the shape table's
# CUDA graphs (results/h200/shapes.json), the autotune table's PDL picks of 60 us and more ran a median 2.4%
# over their queued time and up to 32% (768 x 28672 x 4096), the others 0.4% and 15%: autotune tries PDL
# below this time only (the table recorded at 4b52e5b tried it everywhere).
PDL_BELOW_US = 50.0
# In the autotune record's CUDA graphs (results/h200/autotune.json, both orientations, under 50 us), PDL took
# a median 3.4% off 84 of 99 configurations of whole tiles, and added a median 1.5% to 52 of 54 that cut
# tiles along K (split-K, stream-K): the model launches those without it.
PDL_CROWDED_BELOW_M = 128
# With PDL the next call's CTAs start on the SMs a grid leaves free. In CUDA graphs (lab/results/h200/
# pdl_pairs.json and autotune.json, whole tiles under 50 us) PDL slowed none of 21 grids of 66 busy SMs or
# fewer (the next grid fits beside them), 5 of 75 of 100 or more, and 17 of 23 of 80 to 99, by up to 12%
# (1 x 24576 x 1536, 1 and 16 x 6144 x 4096); the six of those that gained have M of 192 to 512. Those runs
# let the next kernel in at the start; the kernel now does so at its last load, which at 16 x 6144 x 4096 took
# PDL from 2% slower than none to 1% faster (lab/results/h200/kernel_probe_late_trigger.json): one point, so
# the rule stands until pdl_pairs is timed again.

# [11] The weight's N and K compiled into the kernel (SHAPE_JIT: 22-25% fewer SASS instructions, the loop's
# bounds and the tile counts constants) pays most where the kernel is short and its prologue and index
# arithmetic weigh most. Autotune times every entry against itself with them compiled in, in a pair of CUDA
# graphs (results/h200/autotune.json, "shape_jit"): where the model's estimate of the entry is under this,
# compiling them in was faster at 33 of 39 shapes, by a median 1.5% (9.9% slower at worst); above it, by a
# median 0.3% (43 of 63 faster, 4.1% slower at worst). The price: a tiling compiles once per weight shape it serves.
JIT_BELOW_US = 30.0


class Tiling(NamedTuple):
    """A configuration as the model prices it: everything but the pipeline's depth (module docstring)."""

    block_m: int
    block_n: int
    cluster_m: int = 1
    cluster_n: int = 1
    split_k: int = 1
    stream_k: int = 0
    swap_ab: bool = False
    cluster_k: int = 1  # [12] CTAs of a cluster on one tile, each a slice of K, summed in shared memory
    pingpong: bool = False  # [13] the two consumer warpgroups on alternate tiles


@dataclass(frozen=True)
class Choice:
    """A configuration and what the model says of it."""

    block_m: int
    block_n: int
    cluster_m: int
    split_k: int
    num_stages: int
    estimate_us: float
    swap_ab: bool = False
    cluster_n: int = 1
    stream_k: int = 0
    pdl: bool = False
    cluster_k: int = 1
    pingpong: bool = False
    shape_jit: bool = False  # [11] the weight's N and K compiled in (JIT_BELOW_US)

    def tiling(self) -> Tiling:
        return Tiling(self.block_m, self.block_n, self.cluster_m, self.cluster_n, self.split_k, self.stream_k,
                      self.swap_ab, self.cluster_k, self.pingpong)  # fmt: skip

    def config(self) -> GemmConfig:
        extra = {"CLUSTER_M": self.cluster_m, "CLUSTER_N": self.cluster_n, "SPLIT_K": self.split_k}
        if self.stream_k:
            extra["STREAM_K"] = self.stream_k
        if self.swap_ab:
            extra["SWAP_AB"] = 1
        if self.pdl:
            extra["PDL"] = 1
        if self.cluster_k > 1:
            extra["CLUSTER_K"] = self.cluster_k
        if self.pingpong:
            extra["PINGPONG"] = 1
        if self.shape_jit:
            extra["SHAPE_JIT"] = 1
        return GemmConfig(block_m=self.block_m, block_n=self.block_n, num_stages=self.num_stages, extra=extra)

    def name(self) -> str:
        return config_name(self.config())


def tiling_of(cfg: GemmConfig) -> Tiling:
    """A config's knobs as the model reads them; a knob left out is the kernel's default of one."""
    extra = cfg.extra
    return Tiling(cfg.block_m or MAX_BLOCK_M, cfg.block_n, extra.get("CLUSTER_M", 1), extra.get("CLUSTER_N", 1),
                  extra.get("SPLIT_K", 1), extra.get("STREAM_K", 0), bool(extra.get("SWAP_AB", 0)),
                  extra.get("CLUSTER_K", 1), bool(extra.get("PINGPONG", 0)))  # fmt: skip


def config_name(cfg: GemmConfig) -> str:
    """A config as a short label: '[swap ][m64 |m256 ]n{BLOCK_N} c{CLUSTER_M}[x{CLUSTER_N}][ k{CLUSTER_K}]
    s{SPLIT_K}|sk{STREAM_K} st{NUM_STAGES}[ pdl][ jit]', e.g. 'n256 c2 s1 st4', 'swap n200 c1x4 sk1 st8' or
    'swap m64 n8 c1 k2 s1 st16' (CLUSTER_N and CLUSTER_K only when above one)."""
    t = tiling_of(cfg)
    front = ("swap " if t.swap_ab else "") + (f"m{t.block_m} " if t.block_m in NAMED_BLOCK_MS else "")
    cluster = f"c{t.cluster_m}" + (f"x{t.cluster_n}" if t.cluster_n > 1 else "") + (
        f" k{t.cluster_k}" if t.cluster_k > 1 else "")
    schedule = f"sk{t.stream_k}" if t.stream_k else f"s{t.split_k}"
    pingpong = " pp" if cfg.extra.get("PINGPONG") else ""  # [13] the consumer warpgroups on alternate tiles
    pdl = " pdl" if cfg.extra.get("PDL") else ""  # launched with programmatic dependent launch
    jit = " jit" if cfg.extra.get("SHAPE_JIT") else ""  # the weight's N and K compiled in
    return f"{front}n{t.block_n} {cluster} {schedule} st{cfg.num_stages}{pingpong}{pdl}{jit}"


NAMED_BLOCK_MS = (64, WIDE_BLOCK_M)  # the sm_90a kernel's BLOCK_M other than 128, named in a label
NAME = re.compile(
    r"(swap )?(?:m(64|256) )?n(\d+) c(\d+)(?:x(\d+))?(?: k(\d+))? (?:s(\d+)|sk(\d+)) st(\d+)( pp)?( pdl)?( jit)?"
)


def config_from_name(name: str) -> GemmConfig:
    """`config_name` read back: ValueError for a label it does not write."""
    found = NAME.fullmatch(name)
    if found is None:
        raise ValueError(f"{name!r} is not a config name such as 'n256 c2 s1 st4' or 'swap n200 c1x4 sk1 st8'")
    swap, block_m, block_n, cluster_m, cluster_n, cluster_k, split, stream, stages, pp, pdl, jit = found.groups()
    return config_from_fields({
        "block_m": int(block_m or MAX_BLOCK_M), "block_n": int(block_n), "num_stages": int(stages),
        "CLUSTER_M": int(cluster_m), "CLUSTER_N": int(cluster_n or 1), "SPLIT_K": int(split or 1),
        "STREAM_K": int(stream or 0), "SWAP_AB": int(bool(swap)), "PDL": int(bool(pdl)), "SHAPE_JIT": int(bool(jit)),
        "CLUSTER_K": int(cluster_k or 1), "PINGPONG": int(bool(pp)),
    })  # fmt: skip


def max_stages(
    block_n: int, block_m: int = 128, swap_ab: bool = False, cluster_ctas: int = 1, cluster_k: int = 1,
    pingpong: bool = False,
) -> int:
    """As many pipeline stages of a BLOCK_M x 64 A tile, a BLOCK_N x 64 B tile and their two barriers as fit
    beside the epilogue's store boxes (`store_box_bytes`), [12] the slots a split in the cluster sums in
    (`cluster_sum_bytes`) and the alignment slack; MAX_STAGES at most."""
    stage = (block_m + block_n) * BLOCK_K * ELEMENT_BYTES + BARRIER_BYTES
    epilogue = store_box_bytes(block_n, block_m, swap_ab, cluster_ctas, pingpong) + cluster_sum_bytes(
        block_n, block_m, cluster_k)
    return min(MAX_STAGES, (SMEM_BYTES - epilogue - ALIGN_BYTES) // stage)


def stages_of(t: Tiling) -> int:
    """`max_stages` for a tiling."""
    return max_stages(t.block_n, t.block_m, t.swap_ab, t.cluster_m * t.cluster_n, t.cluster_k, t.pingpong)


STRIP_ROWS = 16  # a consumer warp's rows of one wgmma m64 fragment: one split-K counter, one [12] slot each


def cluster_sum_bytes(block_n: int, block_m: int, cluster_k: int) -> int:
    """[12] What a CTA of a split in the cluster keeps in shared memory: for each strip of 16 rows it sums (one
    in cluster_k), a slot of fp32 for each other CTA's part, and the strips' barriers (one per strip sent, one
    per strip summed); 0 without the split."""
    if cluster_k == 1:
        return 0
    strips = block_m // STRIP_ROWS
    slots = strips // cluster_k * (cluster_k - 1) * STRIP_ROWS * block_n * PARTIAL_BYTES
    return slots + (strips + strips // cluster_k) * 8


def store_box_bytes(block_n: int, block_m: int, swap_ab: bool, cluster_ctas: int, pingpong: bool = False) -> int:
    """The epilogue's store boxes in shared memory, for a 16-bit C (an fp32 C^T, stored by pointer, needs
    none: it gets as many stages as a 16-bit one). Plain, 16 KB per consumer warpgroup; swapped, each warp's
    two boxes of 32-byte rows of C, as many rows as `swap_box_rows`, or none where C^T is stored by pointer
    (`c_by_pointer`)."""
    if not swap_ab:
        return consumers(block_m, pingpong) * EPILOGUE_BYTES_PER_WARPGROUP
    if c_by_pointer(block_n, cluster_ctas):
        return 0
    return consumers(block_m, pingpong) * STORE_BOXES_PER_WARPGROUP * swap_box_rows(block_n) * SWAP_BOX_ROW_BYTES


def swap_box_rows(block_n: int) -> int:
    """The rows of C in a swapped tile's store box: the largest power-of-two multiple of 8 that divides
    BLOCK_N, SWAP_BOX_MAX_ROWS at most."""
    rows = BLOCK_N_STEP[True]
    while rows < SWAP_BOX_MAX_ROWS and block_n % (2 * rows) == 0:
        rows *= 2
    return rows


def c_by_pointer(block_n: int, cluster_ctas: int) -> bool:
    """Whether a swapped tile with a 16-bit C, in rows TMA can write, stores C^T value by value from registers
    instead of through store boxes and TMA: in a cluster, under SWAP_CLUSTER_TMA_FROM (gemm_sm90.cu, [8])."""
    return cluster_ctas > 1 and block_n < SWAP_CLUSTER_TMA_FROM


def consumers(block_m: int, pingpong: bool = False) -> int:
    """The kernel's consumer warpgroups for a BLOCK_M: 64 rows each, or 128 (two m64) at WIDE_BLOCK_M; [13] two
    with ping-pong, each on its own tiles."""
    return MAX_BLOCK_M // BLOCK_M_STEP if pingpong else min(block_m // BLOCK_M_STEP, MAX_BLOCK_M // BLOCK_M_STEP)


# ---- the model ---------------------------------------------------------------------------------------------


def kernel_dims(m: int, n: int, swap_ab: bool) -> tuple[int, int]:
    """The kernel's M' and N': the problem's M and N, or swapped, N and M."""
    return (n, m) if swap_ab else (m, n)


# Clusters of each size the H200 (132 SMs) runs at once, one CTA per SM, as its driver's occupancy calculator
# gives them (`driver.max_active_clusters`, asked by every plan): a cluster lives in one GPC, and the GPCs'
# sizes leave SMs over that no cluster of 4 or 8 can use. GPUs with other SM counts: sm_count // size.
CLUSTER_SLOTS = {132: {1: 132, 2: 66, 4: 30, 8: 15}}


def slots(t: Tiling, sm_count: int) -> int:
    """Clusters that fit on the GPU at once."""
    return cluster_slots(t.cluster_m * t.cluster_n * t.cluster_k, sm_count)


def cluster_slots(size: int, sm_count: int) -> int:
    """Clusters of `size` CTAs that fit on the GPU at once."""
    return CLUSTER_SLOTS.get(sm_count, {}).get(size, sm_count // size)


def tiles_of(m: int, n: int, t: Tiling) -> int:
    """The cluster tiles that cover the kernel's M' x N'."""
    return cluster_tiles(*kernel_dims(m, n, t.swap_ab), t.block_m, t.block_n, t.cluster_m, t.cluster_n)


class Schedule(NamedTuple):
    """How a persistent launch shares the work out: its cluster tiles, the clusters launched, the k-tiles
    the busiest one runs, the tiles cut along K it takes part in, and the workers each is cut between."""

    tiles: int
    workers: int
    k_tiles: int
    cuts: int
    contributors: int


def schedule(m: int, n: int, k: int, t: Tiling, sm_count: int) -> Schedule:
    """Data-parallel, split-K or stream-K (module docstring)."""
    tiles, free, k_tiles = tiles_of(m, n, t), slots(t, sm_count), ceil_div(k, BLOCK_K)
    if t.stream_k:  # the grid is every slot; the cut tiles' k-tiles in equal runs, one per worker
        sk_tiles, sk_workers = stream_k_schedule(tiles, free, k_tiles, rounds=t.stream_k)
        whole = (tiles - sk_tiles) // free * k_tiles
        if not sk_tiles:
            return Schedule(tiles, free, whole, 0, 0)
        shared = ceil_div(sk_tiles * k_tiles, sk_workers)
        return Schedule(tiles, free, whole + shared, 1, ceil_div(sk_workers, sk_tiles) + 1)
    units = tiles * t.split_k
    rounds, cut = ceil_div(units, free), int(t.split_k > 1)
    workers = ceil_div(units, rounds)  # `balanced_workers`: as few as take the same rounds
    slice_k_tiles = ceil_div(k_tiles, t.split_k * t.cluster_k)  # [12] a cluster's CTAs each take a slice of K
    return Schedule(tiles, workers, rounds * slice_k_tiles, rounds * cut, t.split_k * cut)


def k_tile_clocks(t: Tiling) -> float:
    """One k-tile of one CTA: the longer of its wgmma and its operand loads, the fixed overhead, and the
    cluster's lockstep."""
    mma = t.block_m * t.block_n * BLOCK_K * 2 / FLOP_PER_CLOCK
    loaded_rows = t.block_m / t.cluster_n + t.block_n / t.cluster_m
    loads = loaded_rows * BLOCK_K * ELEMENT_BYTES / L2_BYTES_PER_CLOCK
    return max(mma, loads) + K_TILE_OVERHEAD_CLOCKS + CLUSTER_SYNC_CLOCKS * (t.cluster_m * t.cluster_n - 1)


def one_round(m: int, n: int, t: Tiling, sm_count: int) -> bool:
    """Whether every unit of work (tile, or split-K slice) runs at once: no stream-K, no second round."""
    return not t.stream_k and tiles_of(m, n, t) * t.split_k <= slots(t, sm_count)


def l2_bytes(m: int, n: int, k: int, t: Tiling, one_round: bool) -> float:
    """Operand bytes L2 serves all CTAs: per cluster tile and k-tile, CLUSTER_M tiles of A's rows and
    CLUSTER_N of B's, each fetched once and multicast. A cluster row's A is read by every cluster of that
    row, a cluster column's B by every cluster of that column; where all of them run at once (one round)
    and walk K in step, the coalescer merges the reads of one tile past L2_MERGE_READERS."""
    rows, columns = kernel_dims(m, n, t.swap_ab)
    cluster_rows = ceil_div(ceil_div(rows, t.block_m), t.cluster_m)
    cluster_columns = ceil_div(ceil_div(columns, t.block_n), t.cluster_n)
    readers_a, readers_b = cluster_columns, cluster_rows
    if one_round:
        readers_a, readers_b = min(readers_a, L2_MERGE_READERS), min(readers_b, L2_MERGE_READERS)
    a_rows = readers_a * cluster_rows * t.cluster_m * t.block_m
    b_rows = readers_b * cluster_columns * t.cluster_n * t.block_n
    return ceil_div(k, BLOCK_K) * (a_rows + b_rows) * BLOCK_K * ELEMENT_BYTES


class Price(NamedTuple):
    """What the model says of a tiling, in the order the pick compares it: the estimate; among equals (the power
    bound prices equal work equally), the estimate without the power bound (less overhead per k-tile, fewer
    rounds: what would be faster at the full clock), the outputs computed, padding included (fewer waste fewer
    MMAs), whether it is launched without PDL (`pdl_pays`: one launched with it overlaps its prologue with the
    kernel before; at 16 x 24576 x 1536 the 128-SM tile with PDL ran 6% ahead of the 96-SM one the crowded rule
    launches without), the cluster's CTAs (fewer to wait for: a multicast stage is refilled only when every CTA it
    feeds has let it go; among the record's tilings bound by HBM alike, 64 SMs without a cluster ran 5 to 9% ahead
    of 112 or 128 in clusters of two at 16 to 32 x 4096 x 4096, 16 x 4096 x 7168 and 128 x 7168 x 2048, and 5%
    behind at 128 x 7168 x 16384), the busiest worker's k-tile loop (among equals bound by HBM, the one that
    spreads the stream over more SMs, each with less to fetch), the SMs kept busy (fewer leave power to the
    others), the wgmma's N, negated (the wider: each m64 fragment of A it reads from shared memory feeds more
    MMAs, so 64 x 128 tiles go before 128 x 64), the tile's area, negated (the larger tile), and whether the
    cluster multicasts only the tokens' tile, not the weight's (the weight's multicast is the faster)."""

    estimate_us: float
    unpowered_us: float
    computed: int
    without_pdl: bool
    cluster_ctas: int
    loop_us: float
    busy_sms: int
    narrower_wgmma: int
    smaller_tile: int
    tokens_multicast: bool


def price(m: int, n: int, k: int, t: Tiling, sm_count: int) -> Price:
    """The model's time for one call (module docstring), and what breaks its ties."""
    work = schedule(m, n, k, t, sm_count)
    clock_mhz = CLOCK_GHZ * 1e3
    loop_us = work.k_tiles * k_tile_clocks(t) / clock_mhz
    size, area = t.cluster_m * t.cluster_n, t.block_m * t.block_n
    busy = work.workers * size * t.cluster_k
    hbm_us = (m * k + n * k + m * n) * ELEMENT_BYTES / (min(HBM_GBS, busy * SM_HBM_GBS) * 1e3)
    l2_us = l2_bytes(m, n, k, t, one_round(m, n, t, sm_count)) / (L2_GBS * 1e3)
    xbar_us = l2_bytes(m, n, k, t, one_round=False) / (XBAR_GBS * 1e3)
    k_padded = ceil_div(k, BLOCK_K) * BLOCK_K
    power_us = work.tiles * size * area * k_padded * 2 / (POWER_TFLOPS * 1e6)
    fixup_us = 0.0
    if work.cuts:
        partial_bytes = 2 * work.contributors * area * PARTIAL_BYTES
        fixup_us = work.cuts * partial_bytes / PARTIAL_BYTES_PER_CLOCK / clock_mhz + FIXUP_US
    if t.cluster_k > 1:
        fixup_us = CLUSTER_SUM_US * (t.cluster_k - 1)
    rest_us = fixup_us + staged_us(m, n, t) + LAUNCH_US
    # [13] Every tile's epilogue but a worker's first runs under the other warpgroup's main loop: time off the
    # SMs' own bounds, not HBM's (a stream from HBM goes on through an epilogue, with or without ping-pong).
    hidden_us = (work.k_tiles // ceil_div(k, BLOCK_K) - 1) * PINGPONG_TILE_US if t.pingpong else 0.0
    on_chip_us = max(loop_us, l2_us, xbar_us)
    estimate = max(hbm_us, max(on_chip_us, power_us) - hidden_us) + rest_us
    unpowered = max(hbm_us, on_chip_us - hidden_us) + rest_us
    ctas = size * t.cluster_k
    without_pdl = not pdl_pays(t, estimate, busy, m, sm_count)
    return Price(estimate, unpowered, work.tiles * size * area, without_pdl, ctas, loop_us, busy, -t.block_n, -area,
                 multicasts_tokens_only(t))


def multicasts_tokens_only(t: Tiling) -> bool:
    """Whether the cluster shares the tokens' tile and not the weight's: plain, the tokens are A (shared along
    N', CLUSTER_N); swapped, they are B (shared along M', CLUSTER_M)."""
    shares_tokens, shares_weight = (t.cluster_m, t.cluster_n) if t.swap_ab else (t.cluster_n, t.cluster_m)
    return shares_tokens > 1 and shares_weight == 1


def staged_us(m: int, n: int, t: Tiling) -> float:
    """Plain, C leaves through TMA, which cannot write rows of N 16-bit elements unless N * 2 is a whole
    number of 16-byte vectors (N = 4097): the kernel writes a row-padded buffer and the call copies it back,
    reading and writing C once more at HBM_GBS. Swapped, such rows are stored by pointer, in place."""
    if t.swap_ab or n * ELEMENT_BYTES % OUT_ROW_ALIGN_BYTES == 0:
        return 0.0
    return (m * round_up(n * ELEMENT_BYTES, OUT_ROW_ALIGN_BYTES) + m * n * ELEMENT_BYTES) / (HBM_GBS * 1e3)


def estimate_us(m: int, n: int, k: int, t: Tiling, sm_count: int) -> float:
    """The model's time for one call (module docstring)."""
    return price(m, n, k, t, sm_count).estimate_us


# ---- the candidates ----------------------------------------------------------------------------------------


def tight_widths(d: int, step: int, narrowest: int, widest: int) -> list[int]:
    """Tile widths for a dimension of d, widest first: round_up(ceil(d / t), step) for t tiles, within
    [narrowest, widest] (each the narrowest that covers d in its t tiles), plus `widest` where d exceeds it.
    A width w is one of them iff d in ceil(d / w) tiles rounds up to w."""
    found = [w for w in range(widest, narrowest - 1, -step) if round_up(ceil_div(d, ceil_div(d, w)), step) == w]
    return found if d <= widest or widest in found else [widest, *found]


def block_ms(rows: int, columns: int, sm_count: int) -> list[int]:
    """BLOCK_M for a kernel M' x N' of rows x columns: 128, and 64 (one consumer warpgroup, half the MMAs per
    B tile loaded) where it is tight and 128-row tiles as wide as they come leave SMs idle; 256 where M' is
    more than one 128-row tile (each B tile then feeds twice the MMAs)."""
    widths = tight_widths(rows, BLOCK_M_STEP, BLOCK_M_STEP, MAX_BLOCK_M)
    few = ceil_div(rows, MAX_BLOCK_M) * ceil_div(columns, MAX_BLOCK_N) < sm_count
    narrow = widths if few or widths == [BLOCK_M_STEP] else [MAX_BLOCK_M]
    return [*narrow, WIDE_BLOCK_M] if rows > MAX_BLOCK_M else narrow  # among equals, the narrower first


def block_ns(d: int, swap_ab: bool, block_m: int = MAX_BLOCK_M) -> list[int]:
    """BLOCK_N for a kernel N' of d: the tight widths, below NARROW_BLOCK_N only where d is, at most
    WIDE_MAX_BLOCK_N under a WIDE_BLOCK_M."""
    step = BLOCK_N_STEP[swap_ab]
    widest = WIDE_MAX_BLOCK_N if block_m == WIDE_BLOCK_M else MAX_BLOCK_N
    return tight_widths(d, step, step if d < NARROW_BLOCK_N else NARROW_BLOCK_N, widest)


def clusters(block_m: int, block_n: int, rows: int, columns: int) -> list[tuple[int, int]]:
    """(CLUSTER_M, CLUSTER_N) whose shares of the tiles are whole 8-row groups, at most MAX_CLUSTER CTAs, no
    longer than the `rows` x `columns` tiles they stack; along M' first (the order ties go by)."""
    return [(cm, cn) for cn in CLUSTER_SIDES for cm in CLUSTER_SIDES
            if cm * cn <= MAX_CLUSTER and cm <= rows and cn <= columns
            and (block_n // cm) % BOX_ROW_STEP == 0 and (block_m // cn) % BOX_ROW_STEP == 0]  # fmt: skip


def useful_splits(tiles: int, k: int, slots: int) -> list[int]:
    """SPLIT_K worth weighing for `tiles` cluster tiles: 1, and where the tiles leave half the slots idle,
    those of SPLITS, and the largest split, that keep the slices to one round (a second, partial round is
    what stream-K evens out), each slice at least MIN_K_TILES_PER_WORKER k-tiles to fill its pipeline."""
    most = min(slots // tiles, ceil_div(k, BLOCK_K) // MIN_K_TILES_PER_WORKER)
    return [1, *sorted({s for s in SPLITS if 1 < s <= most} | ({most} if most > 1 else set()))]


def useful_cluster_ks(tiles: int, k: int, sm_count: int) -> list[int]:
    """[12] Splits in the cluster worth weighing for `tiles` tiles without a cluster: as for split-K, only
    where the tiles leave half the SMs idle, each slice at least MIN_K_TILES_PER_WORKER k-tiles, and all the
    clusters in one round."""
    k_tiles = ceil_div(k, BLOCK_K)
    return [ck for ck in CLUSTER_KS if 2 * tiles <= sm_count and k_tiles // ck >= MIN_K_TILES_PER_WORKER
            and tiles <= cluster_slots(ck, sm_count)]  # fmt: skip


def useful_stream_ks(tiles: int, slots: int) -> list[int]:
    """Stream-K only where the last round is partial; STREAM_K 2 only where a full round comes before it."""
    if tiles % slots == 0:
        return []
    return [s for s in STREAM_KS if s == 1 or tiles > slots]


def tilings(m: int, n: int, k: int, sm_count: int, swap_ab: bool) -> list[Tiling]:
    """The space in one orientation (module docstring)."""
    rows_of_m, columns_of_n = kernel_dims(m, n, swap_ab)
    found = []
    for block_m in block_ms(rows_of_m, columns_of_n, sm_count):
        for block_n in block_ns(columns_of_n, swap_ab, block_m):
            rows, columns = ceil_div(rows_of_m, block_m), ceil_div(columns_of_n, block_n)
            for cm, cn in clusters(block_m, block_n, rows, columns):
                tiles, free = ceil_div(rows, cm) * ceil_div(columns, cn), sm_count // (cm * cn)
                splits = useful_splits(tiles, k, free) if block_m < WIDE_BLOCK_M else [1]  # (module docstring)
                found += [Tiling(block_m, block_n, cm, cn, split_k=s, swap_ab=swap_ab) for s in splits]
                if pingpong_pays(block_m, block_n, tiles, free):
                    found.append(Tiling(block_m, block_n, cm, cn, swap_ab=swap_ab, pingpong=True))
                found += [Tiling(block_m, block_n, cm, cn, stream_k=s, swap_ab=swap_ab)
                          for s in useful_stream_ks(tiles, free)]  # fmt: skip
                if cm * cn == 1 and block_m == CLUSTER_K_BLOCK_M and block_n <= CLUSTER_K_MAX_BLOCK_N:
                    found += [Tiling(block_m, block_n, swap_ab=swap_ab, cluster_k=ck)
                              for ck in useful_cluster_ks(tiles, k, sm_count)]  # fmt: skip
    return found


def pingpong_pays(block_m: int, block_n: int, tiles: int, slots: int) -> bool:
    """[13] Ping-pong is weighed for the tiles the lab measured it with (MAX_BLOCK_M rows, PINGPONG_BLOCK_NS
    wide) where a worker runs more than one of them."""
    return block_m == MAX_BLOCK_M and block_n in PINGPONG_BLOCK_NS and tiles > slots


def box_rows(t: Tiling) -> dict[str, int]:
    """The rows of each of the caller's operands one CTA loads: the kernel's A is a (b swapped), BLOCK_M /
    CLUSTER_N rows of it; its B is b (a swapped), BLOCK_N / CLUSTER_M rows."""
    kernel_a, kernel_b = t.block_m // t.cluster_n, t.block_n // t.cluster_m
    return {"a": kernel_b, "b": kernel_a} if t.swap_ab else {"a": kernel_a, "b": kernel_b}


def tiling_fits(t: Tiling, b_mn_major: bool, a_mn_major: bool) -> bool:
    """Whether each CTA's part of an MN-major operand is whole 64-wide boxes."""
    if not (a_mn_major or b_mn_major):
        return True
    mn_major = {"a": a_mn_major, "b": b_mn_major}
    return all(rows % MN_MAJOR_BOX_ROWS == 0 for operand, rows in box_rows(t).items() if mn_major[operand])


def ranked(
    m: int, n: int, k: int, sm_count: int, b_mn_major: bool = False, a_mn_major: bool = False
) -> list[tuple[Price, Tiling]]:
    """The space for this problem and layout, each tiling with its price, cheapest first."""
    found = [(price(m, n, k, t, sm_count), t) for swap in (False, True) for t in tilings(m, n, k, sm_count, swap)
             if tiling_fits(t, b_mn_major, a_mn_major)]  # fmt: skip
    if not found:  # the tight widths leave an MN-major operand no whole box of 64: widths that are whole boxes
        found = [(price(m, n, k, t, sm_count), t) for t in box_tilings() if tiling_fits(t, b_mn_major, a_mn_major)]
    found.sort(key=lambda pair: pair[0])  # stable: among exact equals, the one listed first
    return found


def box_tilings() -> list[Tiling]:
    """Tiles whose every side is whole 64-wide boxes, in either orientation, without a cluster or a cut:
    what an operand in MN-major boxes can always be read in (both operands MN-major at 200 x 136, whose
    tight widths are 144 and 208, say)."""
    return [Tiling(block_m, block_n, swap_ab=swap) for swap in (False, True) for block_m in (128, 64)
            for block_n in (256, 192, 128, 64)]  # fmt: skip


def candidates(
    m: int, n: int, k: int, sm_count: int, b_mn_major: bool = False, a_mn_major: bool = False
) -> list[Choice]:
    """Every configuration the heuristic weighs for this problem, cheapest first: about 1,000 at most (module
    docstring; `tests/test_heuristic.py` bounds the count)."""
    return [priced(t, p.estimate_us) for p, t in ranked(m, n, k, sm_count, b_mn_major, a_mn_major)]


def priced(t: Tiling, estimate: float) -> Choice:
    """A tiling with as many stages as fit, and its estimate."""
    stages = stages_of(t)
    return Choice(t.block_m, t.block_n, t.cluster_m, t.split_k, stages, estimate, t.swap_ab, t.cluster_n, t.stream_k,
                  cluster_k=t.cluster_k, pingpong=t.pingpong)


def model_accuracy(rows: list[dict], sm_count: int) -> tuple[list[float], list[float]]:
    """Against autotune rows: per row, the measured time of the model's first choice among the timed
    candidates over the fastest one's (its regret), and per timed candidate, estimate over measured time.
    Every timed candidate is priced from its recorded config, whether or not this space still offers it; a
    row where none passed has no regret. The winner timed again with PDL or SHAPE_JIT is left out: the model
    prices tiles, and PDL (a launch attribute, PDL_BELOW_US) and the shape compiled in are decided apart."""
    regrets, ratios = [], []
    for row in rows:
        m, n, k = row["m"], row["n"], row["k"]
        measured = []
        for timed in (c for c in row["candidates"] if c["passed"] and not c["config"].get("PDL")
                      and not c["config"].get("SHAPE_JIT")):
            p = price(m, n, k, tiling_of(config_from_fields(timed["config"])), sm_count)
            measured.append((p, timed["us"]))
            ratios.append(p.estimate_us / timed["us"])
        if measured:  # a row where nothing passed ranks nothing
            first = min(measured, key=lambda pair: pair[0])  # the record's order among exact equals
            regrets.append(first[1] / min(us for _, us in measured))
    return regrets, ratios


def choose(m: int, n: int, k: int, sm_count: int, b_mn_major: bool = False, a_mn_major: bool = False) -> Choice:
    """The model's pick for an M x N x K problem on `sm_count` SMs."""
    best, t = ranked(m, n, k, sm_count, b_mn_major, a_mn_major)[0]
    return replace(priced(t, best.estimate_us), pdl=not best.without_pdl, shape_jit=best.estimate_us < JIT_BELOW_US)


def pdl_pays(t: Tiling, estimate_us: float, busy_sms: int, m: int, sm_count: int) -> bool:
    """Whether the model launches a tiling with PDL: under PDL_BELOW_US, only where no tile is cut along K in
    global memory (split-K, stream-K; [12] a split in the cluster may), and not at small M on a grid that keeps
    more than half and at most three quarters of the SMs busy: in CUDA graphs PDL costs those (the notes at
    PDL_BELOW_US and PDL_CROWDED_BELOW_M)."""
    crowded = m < PDL_CROWDED_BELOW_M and sm_count // 2 < busy_sms <= sm_count * 3 // 4
    # [12] A split in the cluster has no fix-up in global memory to wait on: in the autotune record of 170e37d
    # (CUDA graphs) PDL sped up 31 of the 34 such configurations timed both ways, by a median 5.1%; the three it
    # slowed run 60 us or more, above PDL_BELOW_US.
    cut = t.split_k > 1 or t.stream_k
    return estimate_us < PDL_BELOW_US and not cut and not crowded


# ---- the table ---------------------------------------------------------------------------------------------

TABLE_NAME = "autotune"
# The dtype a table entry serves for both: in the autotune record of the previous kernel, BF16 picked FP16's
# configuration at 35 of 37 shapes, and FP16's pick ran BF16 0.1% slower on average, 3.4% at worst.
TUNED_DTYPE = "fp16"
TABLES_DIR = Path(__file__).resolve().parent / "kernels" / "tables"  # package data: tables/<gpu>/autotune.json


def gpu_slug(gpu: str) -> str:
    """A GPU's name as a folder name: 'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3'."""
    slug = re.sub(r"[^a-z0-9]+", "-", re.sub(r"^nvidia\s+", "", gpu.strip().lower())).strip("-")
    return slug or "unknown-gpu"


def table_path(gpu: str, root: Path | None = None) -> Path:
    """Where the library keeps a GPU's autotune table: under `root`, by default TABLES_DIR as it is at the
    call (a test points it elsewhere, so that nothing it records lands in the package)."""
    return (TABLES_DIR if root is None else root) / gpu_slug(gpu) / f"{TABLE_NAME}.json"


def config_fields(cfg: GemmConfig) -> dict[str, int]:
    """A config as the table stores it: its block_m, block_n, num_stages and the kernel's knobs that vary."""
    t = tiling_of(cfg)
    return {
        "block_m": t.block_m,
        "block_n": t.block_n,
        "num_stages": cfg.num_stages,
        "CLUSTER_M": t.cluster_m,
        "CLUSTER_N": t.cluster_n,
        "SPLIT_K": t.split_k,
        "STREAM_K": t.stream_k,
        "SWAP_AB": int(t.swap_ab),
        "PDL": int(cfg.extra.get("PDL", 0)),
        **({"SHAPE_JIT": 1} if cfg.extra.get("SHAPE_JIT") else {}),  # [11] only where set: older rows read alike
        **({"CLUSTER_K": t.cluster_k} if t.cluster_k > 1 else {}),  # [12] likewise
        **({"PINGPONG": 1} if cfg.extra.get("PINGPONG") else {}),  # [13] likewise
    }


def config_from_fields(fields: dict[str, int]) -> GemmConfig:
    """A table's fields as a config (STREAM_K, SWAP_AB, PDL, SHAPE_JIT and CLUSTER_K only where set, so tables
    written before them read as they were)."""
    extra = {name: int(fields.get(name, 1)) for name in ("CLUSTER_M", "CLUSTER_N", "SPLIT_K")}
    if fields.get("STREAM_K"):
        extra["STREAM_K"] = int(fields["STREAM_K"])
    if fields.get("SWAP_AB"):
        extra["SWAP_AB"] = 1
    if fields.get("PDL"):
        extra["PDL"] = 1
    if fields.get("SHAPE_JIT"):
        extra["SHAPE_JIT"] = 1
    if fields.get("CLUSTER_K", 1) > 1:
        extra["CLUSTER_K"] = int(fields["CLUSTER_K"])
    if fields.get("PINGPONG"):
        extra["PINGPONG"] = 1
    block_m = int(fields.get("block_m", 128))
    return GemmConfig(
        block_m=block_m, block_n=int(fields["block_n"]), num_stages=int(fields["num_stages"]), extra=extra
    )


@cache
def table(path: Path) -> dict[tuple[str, int, int, int], GemmConfig]:
    """The table at `path` by (dtype, m, n, k); empty where there is none."""
    if not path.is_file():
        return {}
    rows = json.loads(path.read_text())["rows"]
    return {problem_key(r): stages_that_fit(config_from_fields(tabled_fields(r))) for r in rows}


def stages_that_fit(cfg: GemmConfig) -> GemmConfig:
    """An entry with no more stages than fit beside its store boxes: a table recorded before swapped tiles had
    store boxes (up to 32 KB) names as many as fit without them, and runs with one or two fewer."""
    t = tiling_of(cfg)
    most = stages_of(t)
    return cfg if cfg.num_stages <= most else replace(cfg, num_stages=most)


def tabled_fields(row: dict) -> dict[str, int]:
    """An entry's config. Autotune ranks its finalists in CUDA graphs, PDL on and off ("ranked_by": "graph"),
    and the entry is taken as it is. A table ranked by queued time alone keeps PDL only under PDL_BELOW_US:
    on longer kernels PDL won queued and in CUDA graphs cost a median 2.4%, up to 32% (768 x 28672 x 4096:
    347 us against 270 queued)."""
    fields = dict(row["config"])
    if fields.get("PDL") and row.get("us", 0.0) >= PDL_BELOW_US and row.get("ranked_by") != "graph":
        fields["PDL"] = 0
    return fields


def problem_key(row: dict) -> tuple[str, int, int, int]:
    """What an autotune entry is looked up by: dtype, M, N, K."""
    return row["dtype"], row["m"], row["n"], row["k"]


def pick_config(
    m: int, n: int, k: int, dtype_name: str, gpu: str, sm_count: int, b_mn_major: bool, a_mn_major: bool = False
) -> tuple[GemmConfig, str]:
    """The configuration for a problem and where it came from: "table" (this GPU's autotune table) or
    "heuristic". A table entry the layout cannot use (an MN-major operand in boxes that do not divide) is
    passed over. A problem the table holds only in TUNED_DTYPE takes that entry in either dtype."""
    tuned = table(table_path(gpu))
    found = tuned.get((dtype_name, m, n, k), tuned.get((TUNED_DTYPE, m, n, k)))
    if found is not None and layout_fits(found, b_mn_major, a_mn_major):
        return found, "table"
    return choose(m, n, k, sm_count, b_mn_major, a_mn_major).config(), "heuristic"


def layout_fits(cfg: GemmConfig, b_mn_major: bool, a_mn_major: bool) -> bool:
    """Whether each CTA's part of an MN-major operand is whole 64-wide boxes (`box_rows`): plain, a arrives
    in BLOCK_M / CLUSTER_N rows and b in BLOCK_N / CLUSTER_M; swapped, the other way round."""
    return tiling_fits(tiling_of(cfg), b_mn_major, a_mn_major)
