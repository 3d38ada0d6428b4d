"""The GPC map and the slot order it gives: grouping, the slot permutation, the placement record."""

import random

import pytest

from deepgemm.jit import compile_file_report
from lab import RESULTS_DIR, cli, gpc


def _tiles_of_each_group(cluster_group, slots, band_rows):
    """group -> the (row, column) of the tile each of its clusters takes in a round."""
    tiles: dict[int, list[tuple[int, int]]] = {}
    for cluster, slot in enumerate(slots):
        tiles.setdefault(cluster_group[cluster], []).append((slot % band_rows, slot // band_rows))
    return tiles


@pytest.mark.parametrize("seed", range(20))
def test_slots_are_a_permutation_whatever_the_map(seed):
    rng = random.Random(seed)
    clusters = rng.randint(1, 132)
    cluster_group = [rng.randrange(rng.randint(1, 20)) for _ in range(clusters)]
    for band_rows in (1, 3, 8):
        for block_rows in (1, 2):
            slots = gpc.slot_order(cluster_group, band_rows, block_rows)
            assert sorted(slots) == list(range(clusters))


def test_without_a_map_the_slots_are_the_plain_order():
    assert gpc.slot_order(list(range(64)), band_rows=1) == list(range(64))


def test_gpc_mates_take_one_row_of_the_round():
    """This H200's 64-cluster grid: GPCs of 8 clusters interleaved in launch order, as measured."""
    cluster_group = [c % 8 for c in range(64)]
    slots = gpc.slot_order(cluster_group, band_rows=8)
    for group, tiles in _tiles_of_each_group(cluster_group, slots, 8).items():
        assert len({row for row, _ in tiles}) == 1, (group, tiles)
    blocks = _tiles_of_each_group(cluster_group, gpc.slot_order(cluster_group, 8, block_rows=2), 8)
    for tiles in blocks.values():  # 2 rows x 4 columns
        assert len({row for row, _ in tiles}) == 2 and len({col for _, col in tiles}) == 4


def test_groups_too_small_for_a_row_share_it_in_order():
    cluster_group = [5, 5, 9, 9, 9, 9, 9, 9]  # 2 + 6 clusters on a round of 2 rows x 4 columns
    slots = gpc.slot_order(cluster_group, band_rows=2)
    tiles = _tiles_of_each_group(cluster_group, slots, 2)
    assert tiles[5] == [(0, 0), (0, 1)]
    assert sorted(tiles[9]) == [(0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]


def test_the_map_kernel_compiles_for_sm_90a():
    report = compile_file_report(gpc.SOURCE, {"CLUSTER_SIZE": 16}, name="gpc")
    assert report.spill_stores == 0 and 0 < report.registers <= 32, report.log


def test_round_groups_lay_slots_out_as_the_grouped_order_does():
    grid = gpc.round_groups([7, 8, 9, 10], slots=[0, 1, 2, 3], band_rows=2)
    assert grid == [[7, 9], [8, 10]]  # slot p at row p % 2, column p // 2
    assert gpc.groups_per_row(grid) == 2.0
    assert gpc.groups_per_row(gpc.round_groups([7, 7, 8, 8], slots=[0, 2, 1, 3], band_rows=2)) == 1.0


def _placement(clusters, groups, repeatable=True, moved=()):
    slots = gpc.slot_order(groups, gpc.PLACEMENT_BAND_ROWS) if repeatable else list(range(clusters))
    return [{"grid_clusters": clusters, "cluster": c, "sms": [2 * c, 2 * c + 1],
             "sms_second_launch": [2 * c + 2, 2 * c + 3] if c in moved else [2 * c, 2 * c + 1],
             "group": groups[c], "slot": slots[c], "repeatable": repeatable} for c in range(clusters)]  # fmt: skip


def test_placement_lines_say_how_many_gpcs_share_a_row_of_tiles():
    scattered = [(c // 8) % 8 for c in range(64)]  # GPC g holds clusters 8g .. 8g+7: a column each in the plain order
    rows = _placement(64, scattered) + _placement(66, [0] * 66, repeatable=False, moved=(3, 5))
    lines = gpc.placement_lines(rows)
    assert lines[0].startswith("64 clusters: the same SMs in both launches; 8 GPC groups of [8, 8, 8, 8, 8, 8, 8, 8]")
    assert lines[0].endswith("8.00 in the plain order, 1.00 with the slots")
    assert lines[1] == "66 clusters: 2 landed elsewhere in a second launch: slots = the plain order"


def test_without_a_gpu_the_gpc_command_prints_the_recorded_placement(monkeypatch, capsys):
    monkeypatch.setattr(cli, "gpu_available", lambda: False)
    assert cli.main(["gpc"]) == 0
    out = capsys.readouterr().out
    assert "RECORDED" in out and "64 clusters:" in out and "with the slots" in out and "gpc --record" in out


def test_the_recorded_placement_is_a_permutation_per_grid_and_one_cta_per_sm():
    from tutorial import results

    rows = results.load("gpc_placement", RESULTS_DIR)["rows"]
    for clusters in gpc.PLACEMENT_GRIDS:
        grid = [r for r in rows if r["grid_clusters"] == clusters]
        assert sorted(r["slot"] for r in grid) == list(range(clusters))
        assert len({sm for r in grid for sm in r["sms"]}) == 2 * clusters


@pytest.mark.gpu
def test_the_v5_grid_at_4096_lands_the_same_way_twice_with_each_cluster_in_one_gpc():
    import cupy

    from tutorial.stages import runs_here

    if not runs_here("v5_fused"):  # the probe maps where v5's clusters land, on the GPU v5 runs on
        pytest.skip("v5_fused needs sm_90a (Hopper)")

    placed = gpc.cluster_sms(2, 64)
    assert len({sm for cluster in placed for sm in cluster}) == 128, f"two CTAs shared an SM: {placed}"
    cluster_group = gpc.cluster_groups(cupy.cuda.Device().id, 64, 2)
    assert cluster_group is not None, "the 64-cluster grid landed differently in two launches"
    slots = gpc.slot_order(cluster_group, band_rows=8)
    assert sorted(slots) == list(range(64))
