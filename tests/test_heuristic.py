"""The config a call gets: the cost model's pick, the autotune table, and the records they made (no GPU)."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from deepgemm.heuristic import config_from_fields, config_from_name, config_name
from tutorial import autotune, cli, results, shape_suite

H200 = ("NVIDIA H200", 132)
SHIPPED = heuristic.TABLES_DIR  # the package's tables, before any test points TABLES_DIR elsewhere


SHAPES = ((1, 4096, 4096), (16, 4096, 4096), (48, 28672, 4096), (96, 2112, 7168), (128, 4096, 14336),
          (777, 4096, 4096), (777, 28672, 4096), (3000, 5000, 700), (4096, 4096, 4096), (4097, 4097, 4097),
          (5, 3, 7), (129, 200, 72))  # fmt: skip
LAYOUTS = ((False, False), (True, False), (False, True), (True, True))  # (b_mn_major, a_mn_major)
SMEM_BYTES = 232_448  # what one H200 CTA may use: 227 KB


def _kernel_dims(m: int, n: int, swap: bool) -> tuple[int, int]:
    return (n, m) if swap else (m, n)


def _cluster_tiles(m: int, n: int, c: heuristic.Choice) -> int:
    rows, columns = _kernel_dims(m, n, c.swap_ab)
    tiles_m, tiles_n = math.ceil(rows / c.block_m), math.ceil(columns / c.block_n)
    return math.ceil(tiles_m / c.cluster_m) * math.ceil(tiles_n / c.cluster_n)


def _stages_fit(block_m: int, block_n: int, swap: bool, stages: int, cluster_ctas: int = 1, cluster_k: int = 1) -> bool:
    """The kernel's shared memory: stages of A and B tiles and two 8-byte barriers each, the epilogue's store
    boxes per consumer warpgroup (two at most: BLOCK_M 256 is two of 128 rows) and 1024 bytes of alignment
    slack. Plain, 16 KB of boxes; swapped, 4 warps x 2 boxes of 32-byte rows, 8 rows for BLOCK_N 8 x odd, 16
    for 16 x odd, 32, else 64; none where a cluster's tiles are under 96 wide (C by pointer). [12] A split in
    the cluster adds, per 16-row strip a CTA sums (one in cluster_k), an fp32 slot for each other CTA, and an
    8-byte barrier per strip and per strip summed."""
    rows = 64 if block_n % 64 == 0 else 32 if block_n % 32 == 0 else 16 if block_n % 16 == 0 else 8
    box = 16 * 128 if not swap else 0 if cluster_ctas > 1 and block_n < 96 else rows * 32
    epilogue = min(block_m // 64, 2) * 4 * 2 * box
    strips = block_m // 16
    sums = strips // cluster_k * ((cluster_k - 1) * 16 * block_n * 4 + 8) + strips * 8 if cluster_k > 1 else 0
    return stages * ((block_m + block_n) * 64 * 2 + 16) + epilogue + sums + 1024 <= SMEM_BYTES


@pytest.mark.parametrize(
    ("block_n", "block_m", "swap", "cluster", "stages"),
    [(256, 128, False, 1, 4), (192, 128, False, 1, 4), (128, 128, False, 1, 6), (64, 128, False, 1, 8),
     (64, 64, False, 1, 13), (256, 64, False, 1, 5), (200, 128, True, 1, 5), (8, 64, True, 1, 16),
     (128, 256, False, 1, 4), (128, 256, True, 1, 4), (64, 256, False, 1, 4), (192, 128, True, 1, 4),
     (96, 64, True, 1, 10), (96, 64, True, 2, 10), (64, 64, True, 1, 13), (64, 64, True, 2, 14)],
)  # fmt: skip
def test_as_many_stages_as_fit_beside_the_epilogue(block_n, block_m, swap, cluster, stages):
    """Swapped tiles' store boxes cost a stage where they are wide (64-row boxes at BLOCK_N 64 and 192), and
    nothing in a cluster of tiles under 96 wide, whose C goes by pointer."""
    assert heuristic.max_stages(block_n, block_m, swap, cluster) == stages
    assert _stages_fit(block_m, block_n, swap, stages, cluster)
    assert stages == heuristic.MAX_STAGES or not _stages_fit(block_m, block_n, swap, stages + 1, cluster)


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_the_space_obeys_every_constraint_of_the_kernel(m, n, k):
    """Tile widths in the orientation's steps, each CTA's share of a multicast tile whole 8-row groups (64-row
    boxes for an MN-major operand), clusters of 1, 2 or 4 a side and 8 at most, no longer than the tiles
    they stack, the pipeline as deep as fits, split-K within K and never with stream-K."""
    k_tiles = -(-k // 64)
    for b_mn_major, a_mn_major in LAYOUTS:
        for c in heuristic.candidates(m, n, k, 132, b_mn_major, a_mn_major):
            step = 8 if c.swap_ab else 16
            assert c.block_m in (64, 128, 256) and c.block_n % step == 0 and step <= c.block_n <= 256, c
            assert c.block_m < 256 or c.block_n <= 128, c  # two m64 fragments: 128 accumulators at most
            assert c.cluster_m in (1, 2, 4) and c.cluster_n in (1, 2, 4) and c.cluster_m * c.cluster_n <= 8, c
            assert (c.block_n // c.cluster_m) % 8 == 0 and c.block_n % c.cluster_m == 0, c
            assert (c.block_m // c.cluster_n) % 8 == 0, c
            rows, columns = _kernel_dims(m, n, c.swap_ab)
            assert c.cluster_m <= -(-rows // c.block_m) and c.cluster_n <= -(-columns // c.block_n), c
            size, ck = c.cluster_m * c.cluster_n, c.cluster_k
            assert c.num_stages == heuristic.max_stages(c.block_n, c.block_m, c.swap_ab, size, ck), c
            assert _stages_fit(c.block_m, c.block_n, c.swap_ab, c.num_stages, size, ck), c
            assert c.num_stages == heuristic.MAX_STAGES or not _stages_fit(
                c.block_m, c.block_n, c.swap_ab, c.num_stages + 1, size, ck), c  # fmt: skip
            # [12] a split in the cluster: 2 or 4 slices, no other cluster or cut, one wgmma m64 per consumer
            assert ck in (1, 2, 4) and (ck == 1 or (size == 1 and c.split_k == 1 and not c.stream_k)), c
            assert ck == 1 or (c.block_m <= 128 and k_tiles // ck >= heuristic.MIN_K_TILES_PER_WORKER), c
            assert 1 <= c.split_k <= k_tiles and c.stream_k in (0, 1, 2) and (c.split_k == 1 or not c.stream_k), c
            a_rows, b_rows = c.block_m // c.cluster_n, c.block_n // c.cluster_m  # the kernel's A and B
            if c.swap_ab:
                a_rows, b_rows = b_rows, a_rows  # the caller's a is the kernel's B
            assert not (a_mn_major and a_rows % 64) and not (b_mn_major and b_rows % 64), (c, b_mn_major, a_mn_major)
            assert heuristic.layout_fits(c.config(), b_mn_major, a_mn_major), c


def test_swap_ab_is_weighed_at_every_m_and_puts_the_tokens_on_wgmmas_n():
    """Swapped, the tokens are wgmma's N in steps of 8: 777 rows are 4 x 200 (or 5 x 160, 9 x 88 ...), not
    7 x 128; plain, they stay in tiles of 64 or 128 rows."""
    for m in (1, 48, 777, 4096):
        assert any(c.swap_ab for c in heuristic.candidates(m, 4096, 4096, 132)), m
    widths = {c.block_n for c in heuristic.candidates(777, 4096, 4096, 132) if c.swap_ab and c.block_m < 256}
    # under BLOCK_M 256 the widest is 128 (two m64 fragments), taken as the widest is everywhere
    assert {200, 160, 136, 112, 104, 88} <= widths and 128 not in widths  # 7 x 112 covers 777, not 7 x 128
    assert heuristic.choose(777, 4096, 4096, 132).swap_ab and heuristic.choose(777, 4096, 4096, 132).block_n == 200
    assert heuristic.tight_widths(777, 8, 64, 256) == [256, 200, 160, 136, 112, 104, 88, 80, 72, 64]
    assert heuristic.block_ns(1, swap_ab=True) == [8] and heuristic.block_ns(48, swap_ab=True) == [48, 24, 16, 8]
    assert min(heuristic.block_ns(4096, swap_ab=True)) == 64  # below 64 only for a dimension below 64


def test_swap_with_an_mn_major_a_only_where_its_boxes_are_whole():
    """Swapped, a is the kernel's B, BLOCK_N / CLUSTER_M rows a CTA: MN-major only in whole 64-row boxes."""
    swapped = [c for c in heuristic.candidates(777, 4096, 4096, 132, a_mn_major=True) if c.swap_ab]
    assert swapped and all((c.block_n // c.cluster_m) % 64 == 0 for c in swapped)
    assert not any(c.swap_ab for c in heuristic.candidates(1, 4096, 4096, 132, a_mn_major=True))  # 8 rows


def test_stream_k_only_where_the_last_round_is_partial():
    for m, n, k in SHAPES:
        for c in heuristic.candidates(m, n, k, 132):
            if c.stream_k:
                tiles, slots = _cluster_tiles(m, n, c), 132 // (c.cluster_m * c.cluster_n)
                assert tiles % slots and (c.stream_k == 1 or tiles > slots), (m, n, k, c)
    # 1536 x 2816 in 128 x 256 tiles: 12 x 11 = 132 tiles, one full round on 132 SMs
    alone = [c for c in heuristic.candidates(1536, 2816, 4096, 132)
             if (c.block_m, c.block_n, c.swap_ab, c.cluster_m * c.cluster_n) == (128, 256, False, 1)]  # fmt: skip
    assert alone and not any(c.stream_k for c in alone)
    assert {c.stream_k for c in heuristic.candidates(4096, 4096, 4096, 132)} == {0, 1, 2}


def test_stream_k_shares_the_last_rounds_k_tiles_equally():
    """288 tiles of 64 k-tiles on 132 SMs: data-parallel, 3 rounds of 64; stream-K 1, two whole rounds and
    ceil(24 x 64 / 132) = 12 more, each tile of the last 24 cut between 132 / 24 + 1 = 7 workers; stream-K 2,
    one whole round and ceil(156 x 64 / 132) = 76."""
    m, n, k = 128 * 18, 256 * 16, 4096  # 18 x 16 = 288 tiles of 128 x 256
    data_parallel = heuristic.schedule(m, n, k, heuristic.Tiling(128, 256), 132)
    assert (data_parallel.tiles, data_parallel.workers, data_parallel.k_tiles) == (288, 96, 192)
    assert (data_parallel.cuts, data_parallel.contributors) == (0, 0)
    one = heuristic.schedule(m, n, k, heuristic.Tiling(128, 256, stream_k=1), 132)
    assert (one.workers, one.k_tiles, one.cuts, one.contributors) == (132, 140, 1, 7)
    two = heuristic.schedule(m, n, k, heuristic.Tiling(128, 256, stream_k=2), 132)
    assert two.k_tiles == 64 + 76
    split = heuristic.schedule(1, 4096, 4096, heuristic.Tiling(64, 8, split_k=2, swap_ab=True), 132)
    assert (split.tiles, split.workers, split.k_tiles, split.cuts, split.contributors) == (64, 128, 32, 1, 2)


def test_split_k_only_while_tiles_leave_sms_idle_and_slices_fill_the_pipeline():
    for m, n, k in SHAPES:
        for c in heuristic.candidates(m, n, k, 132):
            if c.split_k > 1:
                tiles, slots = _cluster_tiles(m, n, c), 132 // (c.cluster_m * c.cluster_n)
                assert tiles * c.split_k <= slots and c.split_k * 4 <= -(-k // 64), (m, n, k, c)
    assert heuristic.useful_splits(17, 4096, 132) == [1, 2, 3, 4, 6, 7]  # 7 x 17 = 119: the fullest round


def test_the_number_of_candidates_is_bounded():
    """A plan prices the space once per new shape: about 1,300 candidates at most (1,259 over this sweep),
    up to about 15 ms of pure Python for `choose` (the module docstring)."""
    layers = ((4096, 4096), (28672, 4096), (2112, 7168), (24576, 1536), (7168, 16384), (5000, 700), (1000, 1000))
    counts = [len(heuristic.candidates(m, n, k, 132)) for n, k in layers for m in (1, 7, 64, 96, 200, 777, 3889)]
    assert max(counts) < 1300 and min(counts) > 0


def test_pingpong_wins_where_a_worker_runs_several_tiles_and_hbm_does_not_bound():
    """4096^3: 128 x 128 ping-pong tiles in clusters of two (about 16 tiles per CTA, every epilogue but the
    first under the other warpgroup's main loop) before the 128 x 256 tiles that fill four rounds; where HBM
    bounds the call (128 x 28672 x 4096, a 235 MB weight), the epilogues are hidden with or without it, and
    one round of whole 128 x 224 tiles goes first."""
    assert heuristic.choose(4096, 4096, 4096, 132).name() == "n128 c2 s1 st6 pp"
    best, t = heuristic.ranked(4096, 4096, 4096, 132)[0]
    without = heuristic.price(4096, 4096, 4096, t._replace(pingpong=False), 132)
    tiles_per_cta = 32 * 32 // 132 + 1
    assert without.estimate_us - best.estimate_us == pytest.approx((tiles_per_cta - 1) * heuristic.PINGPONG_TILE_US)
    assert heuristic.choose(128, 28672, 4096, 132).name() == "n224 c1 s1 st4"


def test_small_m_streams_the_weight_from_enough_sms_to_reach_hbm():
    """M = 1: the tokens as wgmma's N (8 wide), and enough workers that their streams add up to nearly HBM's rate:
    K cut where the weight's tiles alone are too few (2112 x 7168: 33 tiles of 64 rows; [12] in clusters of
    two, which lab/results/h200/cluster_k.json timed 14% faster than split-K over 132 SMs), not where they are
    enough (4096 x 4096: 64 tiles, which the record timed 8% faster than split-K over 128 SMs)."""
    for n, k, cut in ((4096, 4096, False), (2112, 7168, True), (28672, 4096, False)):
        pick = heuristic.choose(1, n, k, 132)
        work = heuristic.schedule(1, n, k, pick.tiling(), 132)
        busy = work.workers * pick.cluster_m * pick.cluster_n * pick.cluster_k
        assert pick.swap_ab and pick.block_n == 8 and (pick.split_k * pick.cluster_k > 1) == cut, (n, pick)
        assert busy * heuristic.SM_HBM_GBS >= heuristic.HBM_GBS, (n, pick)  # 64 x 65 GB/s: 4.16 TB/s


def test_among_equals_one_launched_with_pdl_goes_first():
    """16 x 24576 x 1536 streams its weight at HBM_GBS from 96 SMs (256-row tiles) or 128 (8-wide token tiles in
    clusters of two); at 96 busy SMs and M under 128 the crowded rule launches without PDL, so the 128 go first
    (the record's graphs: 20.7 us with PDL against 22.0 for the 96-SM tile without)."""
    ranked = heuristic.ranked(16, 24576, 1536, 132)
    best, crowded = ranked[0][0], [p for p, _ in ranked if p.busy_sms == 96]
    assert not best.without_pdl and best.busy_sms == 128 and heuristic.choose(16, 24576, 1536, 132).pdl
    assert crowded and crowded[0].estimate_us == best.estimate_us and crowded[0].without_pdl


@pytest.mark.parametrize("m", [16, 24, 32])
def test_among_tilings_bound_by_hbm_alike_the_one_without_a_cluster_goes_first(m):
    """16 to 32 tokens at 4096 x 4096 stream the weight at HBM_GBS from 64 SMs, each with all M tokens, or from
    128 in clusters of two sharing the weight's tile, each with half of them (in steps of 8); the 64 SMs, whose
    stages wait for no other CTA, go first (the record: 12.9 to 13.2 us queued against 13.5 to 14.1)."""
    ranked, half = heuristic.ranked(m, 4096, 4096, 132), -(-m // 16) * 8
    (best, t), paired = ranked[0], [p for p, other in ranked if other.cluster_n == 2 and other.block_n == half]
    assert (t.swap_ab, t.block_n, t.cluster_m * t.cluster_n, best.busy_sms) == (True, m, 1, 64)
    assert paired and paired[0].estimate_us == best.estimate_us and paired[0].loop_us < best.loop_us


def test_ties_go_to_less_padding_then_fewer_sms_then_the_larger_tile():
    """1 x 28672 x 4096 is HBM-bound in 8-wide swapped tiles and in 64 x 256 plain ones alike: the swapped
    tiles compute 8 rows of C^T's columns for each weight row, the plain ones 64, so they win the tie."""
    ranked = heuristic.ranked(1, 28672, 4096, 132)
    best, t = ranked[0]
    plain = next(p for p, other in ranked if not other.swap_ab)
    assert t.swap_ab and t.block_n == 8 and plain.estimate_us == best.estimate_us and plain.computed > best.computed
    assert [p for p, _ in ranked] == sorted(p for p, _ in ranked)
    assert heuristic.Price._fields == ("estimate_us", "unpowered_us", "computed", "without_pdl", "cluster_ctas",
                                       "loop_us", "busy_sms", "narrower_wgmma", "smaller_tile",
                                       "tokens_multicast")  # fmt: skip


def test_among_equals_the_wider_wgmma_goes_first():
    """256 x 4096 x 4096: 128 x 64 and 64 x 128 tiles (plain or swapped) price alike, 128 tiles on 128 SMs; the
    64 x 128 tile's one m64n128 wgmma per k16 step reads its A fragment once for 128 columns, where the 128 x 64
    tile's two m64n64 read two (the record: 64 x 128 tiles 18.2 and 18.3 us in graphs, 128 x 64 19.4 and 19.8)."""
    ranked = heuristic.ranked(256, 4096, 4096, 132)
    best, t = ranked[0]
    narrow = next(p for p, other in ranked if (other.block_m, other.block_n) == (128, 64))
    assert (t.block_m, t.block_n) == (64, 128) and narrow.estimate_us == best.estimate_us
    before = heuristic.Price._fields.index("narrower_wgmma")
    assert narrow[:before] == best[:before] and narrow.narrower_wgmma > best.narrower_wgmma


def test_among_tilings_bound_by_hbm_alike_the_shorter_loop_goes_first():
    """128 x 24576 x 1536 streams its 75 MB weight at HBM_GBS whether 96 SMs hold 128 x 256 tiles or 128 SMs
    hold 128 x 192: the 128 SMs, each with a quarter less to fetch, go first (the record: 128 x 192 25.4 us in
    graphs; the 96-SM swapped 256 x 128 tile 31.0). Fewer busy SMs then only break what is still equal."""
    ranked = heuristic.ranked(128, 24576, 1536, 132)
    (best, t), fewer = ranked[0], [p for p, _ in ranked if p.busy_sms == 96]
    assert (t.block_m, t.block_n, best.busy_sms) == (128, 192, 128)
    assert fewer and fewer[0].estimate_us == best.estimate_us and fewer[0].loop_us > best.loop_us


def test_long_gemms_are_power_bound_so_cutting_tiles_along_k_buys_nothing():
    """At the power cap the work sets the time: 4096 x 4096 x 14336 in whole 128 x 256 tiles (four rounds of
    64 clusters, measured 711 us) prices the same as stream-K over all 66 clusters, which only adds its
    fix-up (measured 761 and 802 us), so the pick is data-parallel; without the bound it was stream-K."""
    m, n, k = 4096, 4096, 14336
    whole, cut = heuristic.Tiling(128, 256, cluster_m=2), heuristic.Tiling(128, 256, cluster_m=2, stream_k=2)
    assert heuristic.estimate_us(m, n, k, whole, 132) < heuristic.estimate_us(m, n, k, cut, 132)
    assert heuristic.choose(m, n, k, 132).name() == "n256 c2 s1 st4"
    power_us = 2 * m * n * k / (heuristic.POWER_TFLOPS * 1e6)
    assert heuristic.estimate_us(m, n, k, whole, 132) == pytest.approx(power_us + heuristic.LAUNCH_US)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(heuristic, "POWER_TFLOPS", 1e9)
        assert heuristic.choose(m, n, k, 132).stream_k


def test_the_power_bounds_ties_go_to_what_is_faster_at_the_full_clock():
    """2048 x 28672 x 4096 without ping-pong: clusters of 2 and of 4 do the same work, so the power bound ties
    them; the cluster of 2 waits for fewer CTAs every k-tile and wins."""
    ranked = [(p, t) for p, t in heuristic.ranked(2048, 28672, 4096, 132) if not t.pingpong]
    best, t = ranked[0]
    four = next(p for p, other in ranked if other.cluster_m * other.cluster_n == 4)
    assert four.estimate_us == best.estimate_us and four.unpowered_us > best.unpowered_us
    assert (t.cluster_m, t.cluster_n, t.stream_k, t.split_k) == (2, 1, 0, 1)


def test_c_copied_back_where_tma_cannot_write_its_rows_favours_swap():
    """N = 4097: plain, C goes to a padded buffer and is copied back; swapped, C^T is stored in place."""
    plain, swapped = heuristic.Tiling(128, 208, cluster_n=2), heuristic.Tiling(128, 208, cluster_n=2, swap_ab=True)
    assert heuristic.staged_us(4097, 4097, plain) > 0 == heuristic.staged_us(4097, 4097, swapped)
    assert heuristic.staged_us(4096, 4096, plain) == 0  # whole 16-byte rows: TMA writes C in place
    assert heuristic.choose(4097, 4097, 4097, 132).swap_ab


def test_the_model_prices_every_recorded_candidate_and_ranks_the_pdl_winner_apart():
    """Over the H200's autotune record every candidate that passed is priced; the winner timed again with
    PDL or SHAPE_JIT (a launch attribute and a compile option, not tiles) is left out of the ranking, so no
    regret is below 1."""
    rows = results.load("autotune")["rows"]
    regrets, ratios = heuristic.model_accuracy(rows, 132)
    tiles = [c for r in rows for c in r["candidates"]
             if c["passed"] and not c["config"].get("PDL") and not c["config"].get("SHAPE_JIT")]  # fmt: skip
    assert len(regrets) == len(rows) and len(ratios) == len(tiles)
    assert min(regrets) >= 1.0 and all(r > 0 for r in ratios)


def test_the_accuracy_the_module_states_is_the_records():
    """The numbers notes/heuristic_regret.md states for the current record (mean and worst regret, the
    middle 80% of estimate / measured) are what `model_accuracy` gives on it: a new record must say so there."""
    text = " ".join((Path(__file__).parents[1] / "notes" / "heuristic_regret.md").read_text().split())
    stated = re.search(r"on average ([\d.]+)% slower than the fastest \(at worst ([\d.]+)%; (\d+) of the (\d+) "
                       r"over 10%\); its estimates are within ([\d.]+) to ([\d.]+) times the measured time for 80%",
                       text)  # fmt: skip
    assert stated, "notes/heuristic_regret.md no longer states the model's accuracy"
    rows = results.load("autotune")["rows"]
    assert {r["dtype"] for r in rows} == {heuristic.TUNED_DTYPE}  # the table serves BF16 from FP16's entries
    regrets, ratios = heuristic.model_accuracy(rows, 132)
    assert f"{100 * (sum(regrets) / len(regrets) - 1):.1f}" == stated[1]
    assert f"{100 * (max(regrets) - 1):.1f}" == stated[2]
    assert (sum(r > 1.10 for r in regrets), len(regrets)) == (int(stated[3]), int(stated[4]))
    ratios.sort()
    assert (f"{ratios[len(ratios) // 10]:.2f}", f"{ratios[9 * len(ratios) // 10]:.2f}") == (stated[5], stated[6])


def test_the_model_prices_the_recorded_candidates_by_their_config_not_this_spaces_names():
    """The record's 'm64 n64 c1 s2 st12' has 13 stages in this space (16 KB of epilogue per warpgroup): it
    is priced from its fields all the same, and its name still reads back."""
    cfg = config_from_name("m64 n64 c1 s2 st12")
    assert heuristic.max_stages(64, 64) == 13 and cfg.num_stages == 12
    assert heuristic.estimate_us(64, 4096, 4096, heuristic.tiling_of(cfg), 132) == heuristic.estimate_us(
        64, 4096, 4096, heuristic.Tiling(64, 64, split_k=2), 132)  # fmt: skip


NAMES = ("n256 c2 s1 st4", "m64 n128 c1 s4 st8", "swap m64 n16 c1 s2 st16", "swap n200 c1x4 sk1 st8",
         "m64 n96 c2x2 sk2 st10", "swap m64 n8 c4x2 s3 st16", "swap m64 n16 c1 s1 st16 pdl",
         "swap m64 n128 c1 k2 s1 st8 jit", "n128 c2 s1 st6 pp pdl jit", "swap n144 c1x2 s1 st6 pp")  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_names_round_trip_through_configs_and_fields(name):
    cfg = config_from_name(name)
    assert config_name(cfg) == name
    assert config_from_fields(heuristic.config_fields(cfg)) == cfg


def test_fields_round_trip_and_name_a_config():
    cfg = GemmConfig(block_m=128, block_n=192, num_stages=4, extra={"CLUSTER_M": 2, "CLUSTER_N": 1, "SPLIT_K": 3})
    assert config_from_fields(heuristic.config_fields(cfg)) == cfg
    assert config_name(cfg) == "n192 c2 s3 st4"
    swapped = GemmConfig(block_m=128, block_n=200, num_stages=8,
                         extra={"CLUSTER_M": 1, "CLUSTER_N": 4, "SPLIT_K": 1, "STREAM_K": 1, "SWAP_AB": 1})  # fmt: skip
    assert config_name(swapped) == "swap n200 c1x4 sk1 st8"
    assert heuristic.config_fields(swapped) == {"block_m": 128, "block_n": 200, "num_stages": 8, "CLUSTER_M": 1,
                                                "CLUSTER_N": 4, "SPLIT_K": 1, "STREAM_K": 1, "SWAP_AB": 1,
                                                "PDL": 0}  # fmt: skip
    assert config_from_fields(heuristic.config_fields(swapped)) == swapped
    old = {"block_n": 256, "num_stages": 4, "CLUSTER_M": 2, "CLUSTER_N": 1, "SPLIT_K": 1}  # a table before STREAM_K
    assert config_from_fields(old) == GemmConfig(block_m=128, block_n=256, num_stages=4,
                                                 extra={"CLUSTER_M": 2, "CLUSTER_N": 1, "SPLIT_K": 1})  # fmt: skip
    with pytest.raises(ValueError, match="not a config name"):
        config_from_name("n256 c2 st4")


@pytest.mark.parametrize(("m", "n", "k"), SHAPES[:6])
def test_every_candidate_round_trips_through_its_name_and_fields(m, n, k):
    for c in heuristic.candidates(m, n, k, 132):
        cfg = c.config()
        assert config_from_name(c.name()) == cfg == config_from_fields(heuristic.config_fields(cfg)), c
        assert heuristic.tiling_of(cfg) == c.tiling()


def test_64_row_tiles_only_where_128_row_tiles_leave_sms_idle_256_where_more_than_128_rows():
    assert any(c.block_m == 64 for c in heuristic.candidates(64, 4096, 4096, 132))
    assert all(c.block_m == 64 for c in heuristic.candidates(64, 4096, 4096, 132) if not c.swap_ab)  # 64 rows
    assert all(c.block_m in (128, 256) for c in heuristic.candidates(4096, 4096, 4096, 132))  # 512 tiles of 128 x 256
    assert any(c.block_m == 64 and c.swap_ab for c in heuristic.candidates(777, 2112, 7168, 132))  # 17 x 4 tiles
    assert any(c.block_m == 256 and c.block_n <= 128 for c in heuristic.candidates(4096, 4096, 4096, 132))
    assert all(c.block_m < 256 for c in heuristic.candidates(128, 4096, 4096, 132) if not c.swap_ab)  # one tile row


def test_autotune_times_the_cheapest_each_familys_best_and_the_default_within_budget():
    """Device time is scarce: at most MAX_CANDIDATES per shape, the model's cheapest CANDIDATES first, then
    the cheapest of each family (orientation x schedule x cluster) not among them, [13] ping-pong's first, then
    the default."""
    default = "n256 c2 s1 st4"
    for m, n, k in ((1, 4096, 4096), (777, 4096, 4096), (4096, 4096, 4096), (128, 2112, 7168)):
        ranked = heuristic.candidates(m, n, k, 132)
        timed = list(autotune.candidate_configs(m, n, k, 132))
        top = [c.name() for c in ranked[: autotune.CANDIDATES]]
        assert len(timed) <= autotune.MAX_CANDIDATES and timed[: len(top)] == top and default in timed
        best = {}
        for c in ranked:
            best.setdefault(autotune.family(c), c)
        seen = {autotune.family(c) for c in ranked[: autotune.CANDIDATES]}
        added = [c for c in ranked if c.name() in timed[len(top) :] and c.name() != default]
        assert all(best[autotune.family(c)] == c for c in added)  # each the cheapest of its family
        assert len({autotune.family(c) for c in added}) == len(added) and not seen & {autotune.family(c) for c in added}
        assert len(timed) == autotune.MAX_CANDIDATES or seen | {autotune.family(c) for c in added} == set(best)
        by_name = {c.name(): c for c in ranked}
        order = [by_name[name].pingpong for name in timed[len(top) :] if name in by_name and name != default]
        assert order == sorted(order, reverse=True)  # ping-pong's families before any other's


def test_pingpong_is_weighed_for_whole_128_row_tiles_where_a_worker_runs_several():
    """[13] Ping-pong is offered for 128-row tiles 128 or 144 wide, whole (no split of any kind), where the
    tiles take more than one round; it is priced as its twin without it less PINGPONG_TILE_US for every tile
    a worker runs past its first, off the SMs' own bounds (the loop, L2, the crossbar, power), not HBM's: at
    128 x 28672 x 4096 the weight's stream bounds both alike."""
    for m, n, k in ((4096, 4096, 4096), (2048, 7168, 2048), (512, 24576, 1536), (128, 4096, 4096)):
        offered = [c for c in heuristic.candidates(m, n, k, 132) if c.pingpong]
        assert all(c.block_m == 128 and c.block_n in (128, 144) and c.split_k == 1 and not c.stream_k
                   and c.cluster_k == 1 for c in offered)  # fmt: skip
        for c in offered:
            t = c.tiling()
            assert heuristic.tiles_of(m, n, t) > heuristic.slots(t, 132)
            twin = t._replace(pingpong=False)
            rounds = -(-heuristic.tiles_of(m, n, t) // heuristic.slots(t, 132))
            p, q = heuristic.price(m, n, k, t, 132), heuristic.price(m, n, k, twin, 132)
            assert p.loop_us == q.loop_us
            assert p.estimate_us == pytest.approx(q.estimate_us - (rounds - 1) * heuristic.PINGPONG_TILE_US)
        assert bool(offered) == (m > 128)  # one tile row of 128 x 4096: one round
    t = heuristic.Tiling(128, 128, pingpong=True)
    streamed, twin = (heuristic.price(128, 28672, 4096, tiling, 132) for tiling in (t, t._replace(pingpong=False)))
    assert streamed.estimate_us == twin.estimate_us


def test_autotune_times_the_shipped_entry_too_without_its_launch_and_jit_flags():
    """A table tuned again keeps the chance to measure its incumbent: its tiles join the candidates."""
    incumbent = config_from_name("m64 n160 c2 s1 st7 pdl jit")
    timed = autotune.candidate_configs(512, 2112, 7168, 132, incumbent=incumbent)
    assert "m64 n160 c2 s1 st7" in timed and not any(name.endswith(("pdl", "jit")) for name in timed)
    assert len(timed) <= autotune.MAX_CANDIDATES + 1
    assert list(autotune.candidate_configs(512, 2112, 7168, 132)) == list(timed)[: len(timed) - 1]


def test_the_table_comes_first_then_the_model():
    rows = results.load("autotune")["rows"]
    assert len(rows) >= 6
    for row in rows[:6]:
        found, source = heuristic.pick_config(row["m"], row["n"], row["k"], row["dtype"], *H200, False)
        assert (config_name(found), source) == (row["name"], "table")
    found, source = heuristic.pick_config(3, 5, 7, "fp16", *H200, False)
    assert source == "heuristic" and found == heuristic.choose(3, 5, 7, 132).config()
    assert heuristic.pick_config(1, 4096, 4096, "fp16", "NVIDIA H100 PCIe", 114, False)[1] == "heuristic"


def _table(root, gpu_folder: str, rows: list[dict]) -> None:
    folder = root / gpu_folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "autotune.json").write_text(json.dumps({"provenance": {}, "rows": rows}))
    heuristic.table.cache_clear()


@pytest.fixture
def tables_dir(tmp_path, monkeypatch):
    """An empty folder of autotune tables in place of the package's (`heuristic.TABLES_DIR`)."""
    monkeypatch.setattr(heuristic, "TABLES_DIR", tmp_path / "tables")
    heuristic.table.cache_clear()
    yield tmp_path / "tables"
    heuristic.table.cache_clear()


def test_the_table_is_package_data_found_by_the_gpus_name(tables_dir):
    assert heuristic.table_path("NVIDIA H200") == tables_dir / "h200" / "autotune.json"
    assert heuristic.table_path("NVIDIA H100 80GB HBM3", tables_dir / "x").parent.name == "h100-80gb-hbm3"
    assert heuristic.gpu_slug("  ") == "unknown-gpu"
    assert heuristic.table_path("NVIDIA H200", SHIPPED).is_file()  # shipped with the library
    assert heuristic.Path(heuristic.__file__).resolve().parent / "kernels" / "tables" == SHIPPED


@pytest.mark.parametrize("gpu", ["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
def test_the_shipped_table_is_the_records_best_of_every_shape(gpu):
    """deepgemm/kernels/tables/<gpu>/autotune.json is results/<gpu>/autotune.json's best per shape (what
    `tutorial.autotune.package_table` writes), so the library needs no repository to find it."""
    shipped = json.loads(heuristic.table_path(gpu, SHIPPED).read_text())
    assert shipped == autotune.package_table(results.load("autotune", results.gpu_directory(gpu)))
    assert shipped["provenance"]["gpu"] == gpu
    heuristic.table.cache_clear()
    try:
        assert heuristic.table(heuristic.table_path(gpu, SHIPPED)) == {
            heuristic.problem_key(r): heuristic.stages_that_fit(config_from_fields(heuristic.tabled_fields(r)))
            for r in shipped["rows"]
        }
    finally:
        heuristic.table.cache_clear()


def test_a_table_entry_runs_with_no_more_stages_than_fit_beside_its_store_boxes(tables_dir):
    """[8] A table recorded when swapped tiles had no store boxes names as many stages as fitted then: the
    entry runs with as many as fit now (one fewer for 64 x 96 swapped), the rest of it as recorded."""
    rows = [{"dtype": "fp16", "m": 96, "n": 4096, "k": 4096, "name": name, "us": 9.0, "ranked_by": "graph",
             "config": heuristic.config_fields(config_from_name(name))}
            for name in ("swap m64 n96 c1 s1 st11 pdl", "swap m64 n64 c2 s1 st14")]  # fmt: skip
    for row in rows:
        _table(tables_dir, "h200", [row])
        found, source = heuristic.pick_config(96, 4096, 4096, "fp16", *H200, False)
        assert source == "table"
        assert found.num_stages == heuristic.max_stages(found.block_n, found.block_m, True, found.value("CLUSTER_M")
                                                        * found.value("CLUSTER_N"))  # fmt: skip
        assert found.num_stages == (10 if "n96" in row["name"] else 14)
        assert {**found.extra} == {**config_from_name(row["name"]).extra}


def test_a_table_entry_keeps_pdl_only_under_the_pdl_bound(tables_dir):
    fields = {"block_n": 256, "num_stages": 4, "CLUSTER_M": 2, "CLUSTER_N": 1, "SPLIT_K": 1, "PDL": 1}
    rows = [{"dtype": "fp16", "m": m, "n": 4096, "k": 4096, "config": fields, "us": us}
            for m, us in ((128, heuristic.PDL_BELOW_US - 1), (2048, heuristic.PDL_BELOW_US))]  # fmt: skip
    _table(tables_dir, "h200", rows)
    assert heuristic.pick_config(128, 4096, 4096, "fp16", *H200, False)[0].extra["PDL"] == 1
    assert "PDL" not in heuristic.pick_config(2048, 4096, 4096, "fp16", *H200, False)[0].extra
    _table(tables_dir, "h200", [{**row, "ranked_by": "graph"} for row in rows])  # chosen in CUDA graphs: as is
    assert heuristic.pick_config(2048, 4096, 4096, "fp16", *H200, False)[0].extra["PDL"] == 1


def test_a_table_entry_the_layout_cannot_take_is_passed_over(tables_dir):
    fields = {"block_n": 64, "num_stages": 8, "CLUSTER_M": 2, "CLUSTER_N": 1, "SPLIT_K": 1}
    _table(tables_dir, "h200", [{"dtype": "fp16", "m": 512, "n": 512, "k": 512, "config": fields}])
    found, source = heuristic.pick_config(512, 512, 512, "fp16", *H200, False)
    assert source == "table" and found == config_from_fields(fields)
    assert heuristic.pick_config(512, 512, 512, "fp16", *H200, True)[1] == "heuristic"  # 64 / 2: half a box
    assert heuristic.pick_config(512, 512, 512, "bf16", *H200, False) == (found, "table")  # FP16's entry serves
    bf16 = {**fields, "block_n": 128, "num_stages": 6}
    _table(tables_dir, "h200", [{"dtype": d, "m": 512, "n": 512, "k": 512, "config": f}
                                for d, f in (("fp16", fields), ("bf16", bf16))])  # fmt: skip
    assert heuristic.pick_config(512, 512, 512, "bf16", *H200, False) == (config_from_fields(bf16), "table")
    assert heuristic.pick_config(512, 512, 512, "fp16", "NVIDIA H100", 132, False)[1] == "heuristic"  # no table


def test_without_a_table_every_problem_gets_the_models_pick(tables_dir):
    for m, n, k in ((1, 4096, 4096), (4096, 4096, 4096)):
        assert heuristic.pick_config(m, n, k, "fp16", *H200, False) == (heuristic.choose(m, n, k, 132).config(),
                                                                        "heuristic")  # fmt: skip


def test_recording_merges_by_shape_keeps_every_run_and_writes_the_package_table(tmp_path, monkeypatch, tables_dir):
    """`tutorial.autotune.record` writes the record under results/<gpu>/ and the table the package ships;
    here both go to tmp_path (results.REPO and heuristic.TABLES_DIR), never into the checkout."""
    monkeypatch.setattr(results, "REPO", tmp_path)
    monkeypatch.setattr(results, "gpu_directory", lambda gpu: tmp_path / "results" / heuristic.gpu_slug(gpu))
    fields = heuristic.config_fields(heuristic.choose(64, 64, 64, 132).config())
    rows = [{"dtype": d, "m": 64, "n": 64, "k": 64, "config": fields, "name": "x", "us": 1.0, "ranked_by": "graph"}
            for d in ("fp16", "bf16")]  # fmt: skip
    assert autotune.table_path("NVIDIA H200").is_relative_to(tables_dir)  # never the checkout's package table
    autotune.record(rows, {"gpu": "NVIDIA H200", "date": "first"})
    autotune.record([{**rows[0], "us": 2.0}], {"gpu": "NVIDIA H200", "date": "second"})
    record = json.loads((tmp_path / "results" / "h200" / "autotune.json").read_text())
    kept = sorted((r["dtype"], r["us"], r["run"]) for r in record["rows"])
    assert kept == [("bf16", 1.0, "first"), ("fp16", 2.0, "second")]
    assert [run["date"] for run in record["runs"]] == ["first", "second"] and record["provenance"]["date"] == "second"
    shipped = json.loads((tables_dir / "h200" / "autotune.json").read_text())
    assert shipped["record"] == "results/h200/autotune.json" and shipped["provenance"]["date"] == "second"
    assert [(r["dtype"], r["us"]) for r in shipped["rows"]] == [("bf16", 1.0), ("fp16", 2.0)]
    assert set(shipped["rows"][0]) == set(autotune.PACKAGE_FIELDS)
    assert heuristic.pick_config(64, 64, 64, "fp16", *H200, False) == (config_from_fields(fields), "table")


def test_the_recorded_table_holds_the_fastest_verified_candidate_of_every_shape():
    rows = results.load("autotune")["rows"]
    assert len(rows) == len(shape_suite.shape_table())  # one dtype's entry per shape of the table
    # every recorded shape is the shape table's (the table grew to the 102 shapes; the record has 37
    # of them until autotune runs again)
    assert {heuristic.problem_key(r) for r in rows} <= {
        (d, *s) for d in ("fp16", "bf16") for s in shape_suite.shape_table()
    }
    for row in rows:
        timed = [c for c in row["candidates"] if c["passed"]]
        if row.get("ranked_by") == "graph":  # the fastest in CUDA graphs among those timed there ...
            ranked = [c for c in timed if c.get("graph_passed") and not c["config"].get("SHAPE_JIT")]
            best = min(ranked, key=lambda c: c["graph_us"])
            assert len(ranked) >= 2
            contest = row.get("shape_jit")  # ... then against itself with SHAPE_JIT, in a pair of its own
            if contest is None or contest["graph_us"] >= contest["without_graph_us"]:
                assert row["name"] == best["name"] and row["graph_us"] == best["graph_us"]
            else:
                assert row["name"] == f"{best['name']} jit" and row["graph_us"] == contest["graph_us"]
        else:
            assert row["name"] == min(timed, key=lambda c: c["us"])["name"]
        assert row["us"] == next(c["us"] for c in timed if c["name"] == row["name"])
        assert config_name(config_from_fields(row["config"])) == row["name"]


def test_autotune_without_a_gpu_prints_the_recorded_table(capsys, monkeypatch):
    monkeypatch.setattr(cli, "gpu_available", lambda: False)  # on a GPU machine too: no tuning run here
    assert cli.main(["autotune"]) == 0
    shown = capsys.readouterr().out
    assert "recorded" in shown.lower()
    assert all(row["name"] in shown for row in results.load("autotune")["rows"])  # every entry, by its name


def test_close_candidates_are_timed_again_in_turn_and_ranked_by_their_median(monkeypatch):
    """One timing each put a 2%-slower config first at times; the finalists (within 3% of the fastest) are
    timed three more times, alternating, and the median decides. One far behind is not timed again."""
    again = {"a": iter([10.5, 10.6, 10.7]), "b": iter([10.1, 10.1, 10.1])}
    order = []

    def fake_timing(plan):
        order.append(plan)
        return next(again[plan])

    monkeypatch.setattr(autotune, "device_us_per_call", fake_timing)
    passed = [{"name": "a", "us": 10.0}, {"name": "b", "us": 10.2}, {"name": "c", "us": 11.0}]
    autotune.time_finalists_again(passed, {"a": "a", "b": "b", "c": "c"})
    assert order == ["a", "b"] * 3
    assert [e["us"] for e in passed] == [10.55, 10.1, 11.0] and "timings" not in passed[2]
    assert min(passed, key=lambda e: e["us"])["name"] == "b"


@pytest.mark.parametrize(("m", "n", "k"), [(200, 136, 96), (17, 3, 40), (129, 520, 200), (1, 8, 64), (1000, 384, 1000)])
def test_every_layout_gets_a_choice_whose_boxes_the_layout_can_read(m, n, k):
    """Both operands MN-major at 200 x 136 leave the tight widths (144, 208) no whole 64-wide box: the
    model falls back to tiles of whole boxes rather than to nothing (the H200's call tests found it)."""
    for b_mn_major in (False, True):
        for a_mn_major in (False, True):
            choice = heuristic.choose(m, n, k, 132, b_mn_major, a_mn_major)
            assert heuristic.layout_fits(choice.config(), b_mn_major, a_mn_major), (b_mn_major, a_mn_major)


def _entry(name: str, us: float, pdl: int = 0) -> dict:
    return {"name": name, "config": {"block_n": 128, "PDL": pdl}, "passed": True, "us": us}


def _tile(block_n: int, us: float, pdl: int = 0) -> dict:
    """A timed candidate as autotune records it: a real config (128 x block_n tiles), its name and time."""
    fields = {"block_m": 128, "block_n": block_n, "num_stages": 4, "CLUSTER_M": 1, "CLUSTER_N": 1, "SPLIT_K": 1,
              "STREAM_K": 0, "SWAP_AB": 0, "PDL": pdl}  # fmt: skip
    return {"name": config_name(config_from_fields(fields)), "config": fields, "passed": True, "us": us}


def test_graph_contenders_are_those_near_the_fastest_queued_and_the_fastest_with_pdl_flipped(monkeypatch):
    """Every candidate within GRAPH_MARGIN of the fastest queued, and the GRAPH_FINALISTS fastest with PDL on
    and off: a flipped config already timed is reused, one not yet timed is timed (and recorded among the
    candidates), one that fails is left out."""
    flipped = []

    def fake_with_pdl(entry, pdl, work):
        flipped.append((entry["config"]["block_n"], pdl))
        timed = _tile(entry["config"]["block_n"], entry["us"] - 0.5, int(pdl))
        return {**timed, "passed": entry["config"]["block_n"] != 96}

    monkeypatch.setattr(autotune, "with_pdl", fake_with_pdl)
    timed = [_tile(64, 10.0), _tile(80, 9.0), _tile(96, 11.0), _tile(112, 12.0), _tile(80, 13.0, pdl=1),
             _tile(128, 11.2)]  # fmt: skip
    contenders = autotune.graph_contenders(list(timed), timed, work=None)
    assert (autotune.GRAPH_FINALISTS, autotune.GRAPH_MARGIN) == (3, 1.25) and flipped == [(64, True), (96, True)]
    names = [c["name"] for c in contenders]
    # within 1.25 x 9 us: n80, n64, n96, n128 (not n112); then n80 pdl (timed already), n64 pdl (timed now)
    assert names == [timed[i]["name"] for i in (1, 0, 2, 5, 4, 6)]
    assert [(c["config"]["block_n"], c["config"]["PDL"]) for c in timed[6:]] == [(64, 1), (96, 1)]  # recorded


def test_the_best_is_the_fastest_verified_graph_and_torchs_time_is_kept(monkeypatch):
    """Each contender's graph is verified; those that pass are timed with torch.matmul's (last), and the best
    is the fastest there, though another was faster queued."""
    entries = [_entry("a", 10.0), _entry("b", 11.0), _entry("c", 12.0)]
    verdicts = {"a": True, "b": True, "c": False, "torch": True}
    monkeypatch.setattr(autotune, "require_torch", lambda: None)
    monkeypatch.setattr(autotune, "graph_contenders", lambda passed, timed, work: entries)
    monkeypatch.setattr(autotune, "config_from_fields", lambda fields: next(e["name"] for e in entries
                                                                            if e["config"] is fields))  # fmt: skip
    monkeypatch.setattr(autotune, "call_launches", lambda work, framework, config="torch": {
        autotune.GEMM: config, autotune.TORCH: config})  # fmt: skip
    monkeypatch.setattr(autotune, "captured_calls", lambda name, work, ms: (name, SimpleNamespace(
        passed=verdicts[name])))  # fmt: skip

    def fake_time_graphs(graphs, batches):
        assert graphs == ["a", "b", "torch"] and batches == autotune.GRAPH_BATCHES  # c failed: not timed
        return [SimpleNamespace(ms=ms) for ms in (0.0105, 0.0099, 0.0101)]

    monkeypatch.setattr(autotune, "time_graphs", fake_time_graphs)
    best, ranked_by, fields = autotune.rank_in_graphs(entries, entries, work=SimpleNamespace(m=1, n=2, k=3))
    assert best["name"] == "b" and ranked_by == "graph" and entries[2]["graph_passed"] is False
    assert fields == {"graph_us": pytest.approx(9.9), "torch_graph_us": pytest.approx(10.1)}
    assert entries[0]["graph_us"] == pytest.approx(10.5) and "graph_us" not in entries[2]
    verdicts["torch"] = False  # the baseline's own graph wrong: nothing is ranked beside it
    monkeypatch.setattr(autotune, "captured_calls", lambda name, work, ms: (name, SimpleNamespace(
        passed=verdicts[name], summary=lambda: "max abs 1")))  # fmt: skip
    with pytest.raises(RuntimeError, match=r"torch\.matmul's CUDA graph failed verification at 1x2x3: max abs 1"):
        autotune.rank_in_graphs(entries, entries, work=SimpleNamespace(m=1, n=2, k=3))


def test_without_torch_the_best_is_the_fastest_queued(monkeypatch):
    def no_torch():
        raise RuntimeError("no torch")

    monkeypatch.setattr(autotune, "require_torch", no_torch)
    entries = [_entry("a", 10.0), _entry("b", 9.0)]
    assert autotune.rank_in_graphs(entries, entries, work=None) == (entries[1], "queued", {})


def test_one_config_is_planned_verified_and_timed_or_names_why_not(monkeypatch):
    """`autotune.time_config`, what autotune, its PDL variants and the lab's sweep time a config with: a config
    the problem cannot take gives an entry naming the error; one that fails verification is not timed."""
    work = SimpleNamespace(problems=[("a0", "b0"), ("a1", "b1")], expected="ref")
    cfg = heuristic.choose(512, 2112, 7168, 132).config()
    launch = SimpleNamespace(out="out")
    timings = iter([3.0, 1.0, 2.0])
    monkeypatch.setattr(autotune, "device_us_per_call", lambda launches: next(timings))
    monkeypatch.setattr(autotune.library, "plan", lambda a, b, config: launch)
    monkeypatch.setattr(autotune, "verify", lambda run, expected, out: SimpleNamespace(passed=True))
    entry, launches = autotune.time_config(cfg, work, rounds=3)
    assert entry == {"name": config_name(cfg), "config": heuristic.config_fields(cfg), "passed": True, "us": 2.0}
    assert launches == [launch, launch]
    monkeypatch.setattr(autotune, "verify", lambda run, expected, out: SimpleNamespace(passed=False))
    assert "us" not in autotune.time_config(cfg, work)[0]

    def refuse(a, b, config):
        raise ValueError("too many slices")

    monkeypatch.setattr(autotune.library, "plan", refuse)
    refused = {"name": entry["name"], "config": entry["config"], "passed": False, "error": "too many slices"}
    assert autotune.time_config(cfg, work) == (refused, [])


@pytest.mark.parametrize(("jit_us", "kept"), [(9.5, "jit"), (10.5, "without")])
def test_shape_jit_contest_keeps_the_faster_in_a_graph_and_records_both(monkeypatch, jit_us, kept):
    """[11] The row's best against itself with SHAPE_JIT: the jit entry joins the candidates; both graphs are
    timed with torch.matmul's; the compiled-in shape becomes the best only where its graph is faster."""
    row = {"dtype": "fp16", "m": 64, "n": 4096, "k": 4096, "us": 11.0, "graph_us": 10.2, "ranked_by": "graph",
           **{key: value for key, value in _tile(128, 11.0).items() if key in ("name", "config")}, "candidates": []}
    monkeypatch.setattr(autotune.Workload, "make", lambda *args: SimpleNamespace(in_layout=lambda *layout: "work"))

    def fake_time_config(cfg, work, rounds=1):
        assert cfg.extra.get("SHAPE_JIT") == 1 and work == "work" and rounds == autotune.FINAL_ROUNDS
        fields = heuristic.config_fields(cfg)
        return {"name": config_name(cfg), "config": fields, "passed": True, "us": 10.8}, []

    monkeypatch.setattr(autotune, "time_config", fake_time_config)
    monkeypatch.setattr(autotune, "call_launches", lambda work, framework, config=None: {
        autotune.GEMM: config, autotune.TORCH: "torch"})  # fmt: skip
    monkeypatch.setattr(autotune, "captured_calls", lambda launches, work, ms: (launches, SimpleNamespace(passed=True)))
    monkeypatch.setattr(autotune, "time_graphs", lambda graphs, batches: [
        SimpleNamespace(ms=ms / 1e3) for ms in (10.0, jit_us, 10.4)])  # fmt: skip
    autotune.contest_shape_jit(row, log=lambda line: None)
    jit = row["candidates"][0]
    assert jit["config"]["SHAPE_JIT"] == 1 and jit["graph_us"] == pytest.approx(jit_us)
    assert row["shape_jit"] == pytest.approx({"graph_us": jit_us, "without_graph_us": 10.0, "torch_graph_us": 10.4})
    if kept == "jit":
        assert row["name"].endswith(" jit") and row["graph_us"] == pytest.approx(9.5) and row["us"] == 10.8
    else:
        assert row["name"] == "n128 c1 s1 st4" and row["graph_us"] == 10.2 and row["us"] == 11.0


def test_short_kernels_are_compiled_for_the_weights_shape():
    """[11] SHAPE_JIT where the pick's estimate is under JIT_BELOW_US: a decode step's 16 x 4096 x 4096, not
    4096^3; the name says so and the config carries the flag the plan compiles N and K in by."""
    short, long = heuristic.choose(16, 4096, 4096, 132), heuristic.choose(4096, 4096, 4096, 132)
    assert short.estimate_us < heuristic.JIT_BELOW_US <= long.estimate_us
    assert short.config().extra.get("SHAPE_JIT") == 1 and short.name().endswith(" jit")
    assert "SHAPE_JIT" not in long.config().extra and not long.name().endswith(" jit")


def test_the_shape_jit_threshold_is_the_records():
    """The numbers at JIT_BELOW_US are what autotune's pairs of graphs (each entry against itself with N and
    K compiled in) give, split by the model's estimate of the entry's tiles."""
    pairs = {True: [], False: []}
    for row in results.load("autotune")["rows"]:
        tiles = heuristic.tiling_of(config_from_fields({**row["config"], "PDL": 0, "SHAPE_JIT": 0}))
        short = heuristic.estimate_us(row["m"], row["n"], row["k"], tiles, 132) < heuristic.JIT_BELOW_US
        pairs[short].append(row["shape_jit"]["without_graph_us"] / row["shape_jit"]["graph_us"])
    said = " ".join(Path(heuristic.__file__).read_text().replace("\n#", " ").split())
    for short, text in ((True, "faster at {wins} of {n} shapes, by a median {gain}% ({worst}% slower at worst)"),
                        (False, "median {gain}% ({wins} of {n} faster, {worst}% slower at worst)")):
        gains = pairs[short]
        median, worst = 100 * (statistics.median(gains) - 1), 100 * (1 - min(gains))
        wins = sum(g > 1 for g in gains)
        assert text.format(wins=wins, n=len(gains), gain=f"{median:.1f}", worst=f"{worst:.1f}") in said
    assert statistics.median(pairs[True]) > statistics.median(pairs[False]) > 1.0


def test_the_model_launches_cut_tiles_without_pdl():
    """PDL under PDL_BELOW_US, but not where tiles are cut along K: in the record's CUDA graphs it cost 52 of
    54 split-K and stream-K configurations a median 1.5% (the note at PDL_BELOW_US)."""

    def pays(t: heuristic.Tiling, estimate_us: float = 12.0, busy: int = 64, m: int = 1) -> bool:
        return heuristic.pdl_pays(t, estimate_us, busy, m, 132)

    assert pays(heuristic.Tiling(64, 8, swap_ab=True))
    assert not pays(heuristic.Tiling(64, 8, split_k=2, swap_ab=True))
    assert not pays(heuristic.Tiling(64, 8, stream_k=1, swap_ab=True))
    assert not pays(heuristic.Tiling(128, 256), heuristic.PDL_BELOW_US)
    assert pays(heuristic.Tiling(64, 8, swap_ab=True, cluster_k=2))  # [12] no fix-up in global memory
    cut = heuristic.choose(1, 1024, 8192, 132)  # 16 weight tiles: split-K in global memory
    assert cut.split_k > 1 and not cut.pdl


@pytest.mark.parametrize(("busy", "m", "pays"), [(66, 1, True), (67, 1, False), (96, 16, False), (99, 127, False),
                                                 (100, 1, True), (96, 128, True), (132, 1, True)])  # fmt: skip
def test_no_pdl_at_small_m_where_the_grid_leaves_a_third_of_the_next_one_room(busy, m, pays):
    """PDL_CROWDED_BELOW_M: at M under 128, a grid keeping 67 to 99 of 132 SMs busy runs without PDL."""
    assert heuristic.pdl_pays(heuristic.Tiling(64, 8, swap_ab=True), 12.0, busy, m, 132) is pays


def test_one_round_reads_of_a_tile_past_the_coalescers_count_are_merged():
    """L2_MERGE_READERS: in a grid of one round, the reads of one operand tile past 13 concurrent readers are
    merged. Swapped 64 x 128 tiles in 1 x 2 clusters at 512 x 2112 x 7168: 33 clusters read each token tile."""
    t = heuristic.Tiling(64, 128, cluster_n=2, swap_ab=True)
    k_tile_row_bytes = 112 * 64 * 2  # a row of one operand across K
    weight_rows = 2 * 33 * 64  # read by the 2 clusters of its cluster row, multicast inside each
    token_rows = 2 * 2 * 128  # the cluster column's two token tiles, each read by each of the 33 cluster rows
    assert heuristic.l2_bytes(512, 2112, 7168, t, one_round=False) == k_tile_row_bytes * (weight_rows + 33 * token_rows)
    assert heuristic.l2_bytes(512, 2112, 7168, t, one_round=True) == k_tile_row_bytes * (weight_rows + 13 * token_rows)


def test_merged_l2_reads_match_what_nsight_compute_counted_in_one_round_grids():
    """The L2 read bytes the model counts for the library kernel's one-round grids in the profile record
    (lab/results/h200/profile_mid_m.json: the SMs' read sectors, 32 bytes each), merged and not."""
    from lab import RESULTS_DIR

    errors = {True: [], False: []}
    for row in results.load("profile_mid_m", RESULTS_DIR)["rows"]:
        if row["config"] == "torch":
            continue
        m, n, k = (int(v) for v in row["shape"].split("x"))
        t = heuristic.tiling_of(heuristic.config_from_name(row["config"]))
        if not heuristic.one_round(m, n, t, 132):
            continue
        measured = row["l2_read_sectors_from_sms"] * 32
        for merged in errors:
            errors[merged].append(abs(math.log(heuristic.l2_bytes(m, n, k, t, merged) / measured)))
    assert len(errors[True]) == 8
    assert statistics.median(errors[True]) < 0.1 and max(errors[True]) < 0.4  # within 10% mostly, 43% at worst
    assert statistics.median(errors[False]) > 0.3


def test_the_crossbar_carries_every_clusters_fetches_so_weight_sharing_clusters_go_first(monkeypatch):
    """XBAR_GBS: merged or not, every cluster's fetches cross from L2 to its SMs. In the lab's sweeps of the
    space at mid M (lab/results/h200/library_space*.json) the weight-sharing cluster ran 3-16% ahead of the
    same tile without one; with the bound the model's first choice is within 6% of the fastest at every swept
    shape, without it 15% behind at worst."""
    from lab.fit_heuristic import space_rows

    rows = space_rows()
    regrets, _ = heuristic.model_accuracy(rows, 132)
    assert len(regrets) >= 20 and max(regrets) < 1.06 and statistics.fmean(regrets) < 1.02
    t = heuristic.Tiling(128, 64)
    assert heuristic.estimate_us(256, 4096, 7168, t._replace(cluster_m=2), 132) < heuristic.estimate_us(
        256, 4096, 7168, t, 132)  # fmt: skip
    monkeypatch.setattr(heuristic, "XBAR_GBS", math.inf)
    regrets, _ = heuristic.model_accuracy(rows, 132)
    assert max(regrets) > 1.10
