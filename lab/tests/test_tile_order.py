"""lab.tile_order without a GPU: the configs it times are the named ones with only GROUP_M changed, and its
lines say each config's time against torch.matmul's."""

from __future__ import annotations

from dataclasses import replace

from deepgemm import heuristic
from deepgemm.plan import DEFAULTS, kernel_defines
from lab import tile_order


def test_a_group_m_changes_only_the_group_m_define():
    base = heuristic.config_from_name("n128 c1 s1 st6")
    changed = replace(base, extra={**base.extra, "GROUP_M": 1})
    before, after = kernel_defines(base), kernel_defines(changed)
    assert before.get("GROUP_M", DEFAULTS.value("GROUP_M")) == 16 and after["GROUP_M"] == 1
    assert {k: v for k, v in before.items() if k != "GROUP_M"} == {k: v for k, v in after.items() if k != "GROUP_M"}


def test_lines_give_the_ratio_to_torch_and_name_a_failure():
    row = {"dtype": "fp16", "m": 512, "n": 4096, "k": 4096, "config": "n128 c1 s1 st6", "group_m": 1,
           "passed": True, "us": 25.0, "torch_us": 30.0}  # fmt: skip
    assert tile_order.lines([row]) == ["fp16 512x4096x4096 n128 c1 s1 st6           GROUP_M  1:   25.00 us, "
                                       "torch   30.00 (x 1.200)"]  # fmt: skip
    assert tile_order.lines([{**row, "passed": False, "us": None}])[0].endswith("GROUP_M  1: FAILED")
