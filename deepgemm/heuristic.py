"""Which configuration of the library kernel a problem gets: the autotune table's (`pick_config`), else the
cost model's pick.

One tile does not fit every shape. The default, 128 x 256 tiles in clusters of two, gives 4096^3 its 256
cluster tiles in four full rounds on 132 SMs; at M = 128 and N = K = 4096 it makes 16 cluster tiles, so 32
SMs work (half of them on rows past M) while 100 idle, and each of the 32 streams 64 k-tiles in a row.

The model (`estimate_us`) prices a configuration as a persistent kernel runs it:

- **Rounds of work units.** A unit is a cluster tile, or with split-K one slice of K of it; the grid runs
  `slots` units at once (one per SM, or per cluster of two), so the kernel takes ceil(units / slots)
  rounds, each as long as one unit. This is where waves and the last wave's utilisation come in: 288
  cluster tiles on 66 clusters take 5 rounds, the last one 24/66 full.
- **A unit's time** is its k-tiles times the longer of two per-k-tile costs, plus a small fixed one: the
  wgmma, BLOCK_M x BLOCK_N x 64 multiply-adds at 4096 FLOP per clock per SM (the dense FP16 rate), and
  the operand bytes TMA brings into the SM, (BLOCK_M + BLOCK_N / CLUSTER_M) x 128 bytes at
  L2_BYTES_PER_CLOCK.
  Narrow tiles re-read A for every column of tiles, so below 128 columns a k-tile is bound by its loads,
  not its MMAs, and they pay the fixed cost more often per FLOP.
- **HBM** bounds the whole: A, B and C each cross it once, at `HBM_GBS`. Small M is this case: at M = 1
  the kernel only has to stream B (32 MB at N = K = 4096), and the model asks for enough units (split-K)
  that every SM streams part of it.
- **Fixed costs**: a launch, and for split-K the fp32 partials written and read back and the last slice's
  sum before its epilogue, in the same kernel.

`candidates` lists the configurations considered: BLOCK_M 128 or 64 (one consumer warpgroup: half the
rows of A per k-tile, for M <= 64), BLOCK_N 64 to 256, for M <= 32 swap AB (the tile's 64 or 128 rows over
N, its 16 or 32 columns over M, priced as the swapped problem), clusters of two along M only where
there is more than one round of tiles to share B across (DeepGEMM's rule: multicast only with more than one
wave), split-K only while the tiles alone leave SMs idle, and as many pipeline stages as fit. The pick is
the cheapest by the model; ties go to the larger tile. The autotune table (`tutorial.autotune`) replaces
the model's guess with a measurement for every shape it holds.

The constants are the H200's: its clock under load (near 1.7 GHz at the power cap), its dense rate, HBM,
and four fitted to its autotune record (marked below; `python -m lab.fit_heuristic` searches three on the
FP16 rows, the launch cost only scales every estimate). Among the candidates the record timed, the model's
first choice is on average 1.6% slower than the fastest in FP16 and 1.0% in BF16; its estimates of those
candidates are within 0.87 to 1.20 times the measured time for 80% of them (`model_accuracy`;
`tests/test_heuristic.py` checks both against the record).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from deepgemm.config import ELEMENT_BYTES, GemmConfig
from deepgemm.model import ceil_div

BLOCK_MS = (64, 128)  # one consumer warpgroup of 64 rows (listed first: it wins ties), or two
BLOCK_K = 64
BLOCK_NS = (256, 192, 128, 64)  # the wgmma N the kernel issues, widest first (ties go to the first)
SWAP_BLOCK_NS = (16, 32)  # swapped: C's rows as wgmma's N (ties go to the narrower)
MAX_STAGES = 16  # the deepest pipeline offered, however small the stages
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
MIN_K_TILES_PER_UNIT = 4  # a slice of K shorter than this cannot fill the pipeline it runs through
SMEM_BYTES = 227 * 1024  # what one CTA may use
EPILOGUE_BYTES = 32 * 1024 + 1024  # the store boxes and alignment slack
ALIGN_BYTES = 1024  # the alignment slack alone
CLOCK_GHZ = 1.7  # the H200's SM clock under a long GEMM at its 700 W cap
FLOP_PER_CLOCK = 4096  # dense FP16/BF16 per SM per clock
L2_BYTES_PER_CLOCK = 56  # operand bytes TMA delivers into one SM per clock (fitted, see above)
K_TILE_OVERHEAD_CLOCKS = 192  # per k-tile besides the MMAs: barrier hand-offs, wgmma issue, drain (fitted)
HBM_GBS = 4000.0  # sustained HBM bandwidth, GB/s (4.8 TB/s on the datasheet)
LAUNCH_US = 5.5  # a launch and its ramp: the first k-tiles' latency, the last tile's epilogue (fitted)
SPLIT_SUM_US = 2.0  # split-K: the last slice reads every partial back before its epilogue (fitted)


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

    def config(self) -> GemmConfig:
        extra = {"CLUSTER_M": self.cluster_m, "CLUSTER_N": 1, "SPLIT_K": self.split_k}
        if self.swap_ab:
            extra["SWAP_AB"] = 1
        return GemmConfig(block_m=self.block_m, block_n=self.block_n, num_stages=self.num_stages, extra=extra)

    def name(self) -> str:
        return config_name(self.config())


def config_name(cfg: GemmConfig) -> str:
    """A config as a short label: 'n256 c2 s1 st4' (BLOCK_N, CLUSTER_M, SPLIT_K, NUM_STAGES), with 'm64 '
    in front for BLOCK_M 64 and 'swap ' for swap AB."""
    extra = cfg.extra
    front = ("swap " if extra.get("SWAP_AB") else "") + ("m64 " if cfg.block_m == 64 else "")
    return f"{front}n{cfg.block_n} c{extra.get('CLUSTER_M', 1)} s{extra.get('SPLIT_K', 1)} st{cfg.num_stages}"


def max_stages(block_n: int, block_m: int = 128, swap_ab: bool = False) -> int:
    """As many pipeline stages of a BLOCK_M x 64 A tile and a BLOCK_N x 64 B tile as fit beside the epilogue
    (swapped, the epilogue stores from registers and takes no shared memory), MAX_STAGES at most."""
    stage_bytes = (block_m + block_n) * BLOCK_K * ELEMENT_BYTES
    epilogue = ALIGN_BYTES if swap_ab else EPILOGUE_BYTES
    return min(MAX_STAGES, (SMEM_BYTES - epilogue) // stage_bytes)


def estimate_us(
    m: int, n: int, k: int, block_n: int, cluster_m: int, split_k: int, sm_count: int, block_m: int = 128
) -> float:
    """The model's time for one call (module docstring)."""
    tiles_m, tiles_n = ceil_div(m, block_m), ceil_div(n, block_n)
    units = ceil_div(tiles_m, cluster_m) * tiles_n * split_k
    slots = sm_count // cluster_m
    k_tiles = ceil_div(ceil_div(k, BLOCK_K), split_k)
    mma_clocks = block_m * block_n * BLOCK_K * 2 / FLOP_PER_CLOCK
    load_clocks = (block_m + block_n / cluster_m) * BLOCK_K * ELEMENT_BYTES / L2_BYTES_PER_CLOCK
    unit_us = k_tiles * (max(mma_clocks, load_clocks) + K_TILE_OVERHEAD_CLOCKS) / (CLOCK_GHZ * 1e3)
    hbm_bytes = (m * k + n * k + m * n) * ELEMENT_BYTES
    fixed = LAUNCH_US
    if split_k > 1:
        hbm_bytes += 2 * 4 * m * n * split_k  # fp32 partials written, then read back
        fixed += SPLIT_SUM_US
    return max(ceil_div(units, slots) * unit_us, hbm_bytes / (HBM_GBS * 1e3)) + fixed


def candidates(
    m: int, n: int, k: int, sm_count: int, b_mn_major: bool = False, a_mn_major: bool = False
) -> list[Choice]:
    """Every configuration the heuristic weighs for this problem, cheapest first (module docstring)."""
    found = [] if a_mn_major else swapped_candidates(m, n, k, sm_count)
    for block_m in BLOCK_MS:
        if block_m < 128 and m > block_m:
            continue  # 64-row tiles only where they hold all of M: beyond, two consumers share each B tile
        for block_n in BLOCK_NS:
            tiles = ceil_div(m, block_m) * ceil_div(n, block_n)
            for cluster_m in (2, 1):
                if cluster_m > 1 and (ceil_div(m, block_m) < 2 or tiles <= sm_count):
                    continue  # nothing to share B with, or one round: multicast only pays across rounds
                if b_mn_major and (block_n // cluster_m) % 64:
                    continue  # an MN-major B arrives in 64-wide boxes: each CTA's part must be whole boxes
                for split in useful_splits(tiles, k, sm_count):
                    estimate = estimate_us(m, n, k, block_n, cluster_m, split, sm_count, block_m)
                    found.append(Choice(block_m, block_n, cluster_m, split, max_stages(block_n, block_m), estimate))
    return sorted(found, key=lambda c: c.estimate_us)  # stable: among equals the one listed first


def swapped_candidates(m: int, n: int, k: int, sm_count: int) -> list[Choice]:
    """Swap AB for M <= 32: the swapped problem (N x M x K) in tiles of 64 or 128 rows of N and 16 or 32
    columns of M (one column of tiles), without a cluster, with split-K while the tiles leave SMs idle."""
    found = []
    for block_n in (b for b in SWAP_BLOCK_NS if m <= b):
        for block_m in (128, 64):
            for split in useful_splits(ceil_div(n, block_m), k, sm_count):
                estimate = estimate_us(n, m, k, block_n, 1, split, sm_count, block_m)
                stages = max_stages(block_n, block_m, swap_ab=True)
                found.append(Choice(block_m, block_n, 1, split, stages, estimate, swap_ab=True))
    return found


def useful_splits(tiles: int, k: int, sm_count: int) -> list[int]:
    """SPLITS worth weighing for `tiles` tiles: 1, and more only while the tiles leave half the SMs idle and
    each slice keeps MIN_K_TILES_PER_UNIT k-tiles to fill its pipeline."""
    k_tiles = ceil_div(k, BLOCK_K)
    return [s for s in SPLITS if s == 1 or (tiles * 2 <= sm_count and k_tiles >= s * MIN_K_TILES_PER_UNIT)]


def model_accuracy(rows: list[dict], sm_count: int) -> tuple[list[float], list[float]]:
    """Against autotune rows: per row, the measured time of the model's first choice among the timed
    candidates over the fastest one's (its regret), and per timed candidate, estimate over measured time."""
    regrets, ratios = [], []
    for row in rows:
        timed = {c["name"]: c["us"] for c in row["candidates"] if c["passed"]}
        ranked = [c for c in candidates(row["m"], row["n"], row["k"], sm_count) if c.name() in timed]
        regrets.append(timed[ranked[0].name()] / min(timed.values()))
        ratios += [c.estimate_us / timed[c.name()] for c in ranked]
    return regrets, ratios


def choose(m: int, n: int, k: int, sm_count: int, b_mn_major: bool = False, a_mn_major: bool = False) -> Choice:
    """The model's pick for an M x N x K problem on `sm_count` SMs."""
    return candidates(m, n, k, sm_count, b_mn_major, a_mn_major)[0]


TABLE_NAME = "autotune"
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
    """A config as the table stores it: its block_n, num_stages and the kernel's knobs that vary."""
    extra = cfg.extra
    return {
        "block_m": cfg.block_m or 128,
        "block_n": cfg.block_n,
        "num_stages": cfg.num_stages,
        "CLUSTER_M": extra.get("CLUSTER_M", 1),
        "CLUSTER_N": extra.get("CLUSTER_N", 1),
        "SPLIT_K": extra.get("SPLIT_K", 1),
        "SWAP_AB": extra.get("SWAP_AB", 0),
    }


def config_from_fields(fields: dict[str, int]) -> GemmConfig:
    extra = {name: int(fields[name]) for name in ("CLUSTER_M", "CLUSTER_N", "SPLIT_K")}
    if fields.get("SWAP_AB"):
        extra["SWAP_AB"] = 1
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
    return {problem_key(r): config_from_fields(r["config"]) for r in rows}


def problem_key(row: dict) -> tuple[str, int, int, int]:
    """What an autotune entry is looked up by: dtype, M, N, K."""
    return row["dtype"], row["m"], row["n"], row["k"]


def pick_config(
    m: int, n: int, k: int, dtype_name: str, gpu: str, sm_count: int, b_mn_major: bool, a_mn_major: bool = False
) -> tuple[GemmConfig, str]:
    """The configuration for a problem and where it came from: "table" (this GPU's autotune table) or
    "heuristic". A table entry the layout cannot use (an MN-major operand in boxes that do not divide) is
    passed over."""
    found = table(table_path(gpu)).get((dtype_name, m, n, k))
    if found is not None and layout_fits(found, b_mn_major, a_mn_major):
        return found, "table"
    return choose(m, n, k, sm_count, b_mn_major, a_mn_major).config(), "heuristic"


def layout_fits(cfg: GemmConfig, b_mn_major: bool, a_mn_major: bool) -> bool:
    """Whether each CTA's part of an MN-major operand is whole 64-wide boxes: swapped, a arrives in BLOCK_N
    rows (16 or 32, never whole boxes) and b in BLOCK_M; else b in BLOCK_N / CLUSTER_M."""
    if cfg.extra.get("SWAP_AB"):
        return not a_mn_major
    return not (b_mn_major and (cfg.block_n // cfg.extra["CLUSTER_M"]) % 64)
