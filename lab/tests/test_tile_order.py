"""lab.tile_order without a GPU: the configs it times are the named ones with only GROUP_M changed, and its
lines say each config's time against torch.matmul's, from the record."""

from __future__ import annotations

from deepgemm.plan import DEFAULTS, kernel_defines
from lab import cli, shape_sweep, tile_order


def test_a_group_m_changes_only_the_group_m_define():
    for name in tile_order.CONFIGS:
        shipped = kernel_defines(tile_order.heuristic.config_from_name(name))
        for group_m in tile_order.GROUP_MS:
            changed = kernel_defines(tile_order.with_group_m(name, group_m))
            assert changed["GROUP_M"] == group_m and shipped.get("GROUP_M", DEFAULTS.value("GROUP_M")) == 16
            assert {k: v for k, v in shipped.items() if k != "GROUP_M"} == {
                k: v for k, v in changed.items() if k != "GROUP_M"}  # fmt: skip
    assert len(tile_order.configs_at((512, 4096, 4096), 0)) == len(tile_order.CONFIGS) * len(tile_order.GROUP_MS)


def test_lines_give_the_ratio_to_torch_and_name_a_failure():
    row = {"dtype": "fp16", "m": 512, "n": 4096, "k": 4096, "torch_us": 30.0,
           "candidates": [{"name": "n128 c1 s1 st6", "group_m": 1, "passed": True, "us": 25.0},
                          {"name": "n128 c1 s1 st6", "group_m": 2, "passed": False, "us": None}]}  # fmt: skip
    assert tile_order.lines([row]) == [
        "fp16 512x4096x4096 n128 c1 s1 st6           GROUP_M  1:   25.00 us, torch   30.00 (x 1.200)",
        "fp16 512x4096x4096 n128 c1 s1 st6           GROUP_M  2: FAILED",
    ]


def test_the_record_shows_without_a_gpu(capsys, monkeypatch):
    monkeypatch.setattr(shape_sweep, "gpu_available", lambda: False)  # on a GPU too: the record, not a sweep
    monkeypatch.setattr(cli, "gpu_available", lambda: False)
    assert tile_order.main([]) == 0 and cli.main(["show", "tile_order"]) == 0
    shown = capsys.readouterr().out
    assert shown.count("GROUP_M") == 2 * len(tile_order.CONFIGS) * len(tile_order.GROUP_MS)
    assert "n128 c1 s1 st6           GROUP_M  1:   26.86 us" in shown
