"""The lab's PDL pairs (no GPU): which tiles it launches with PDL and without."""

from __future__ import annotations

from deepgemm import heuristic
from deepgemm.plan import DEFAULTS, check_config
from lab import pdl_pairs, shape_sweep


def _names(m: int, n: int, k: int) -> list[str]:
    return [heuristic.config_name(c) for c in pdl_pairs.tiles_of(m, n, k, 132, "NVIDIA H200")]


def test_the_pairs_are_the_heuristics_tile_the_tables_and_at_small_m_the_swapped_256_row_one():
    """1 x 24576 x 1536: the heuristic's swapped 256-row tile and the table's plain 64 x 192 (its PDL and
    SHAPE_JIT taken off); at 1 x 4096 x 4096 both pick swap m64 n8, so it comes once, beside the 256-row tile."""
    assert _names(1, 24576, 1536) == ["swap m256 n8 c1 s1 st6", "m64 n192 c1 s1 st6"]
    assert _names(1, 4096, 4096) == ["swap m64 n8 c1 s1 st16", "swap m256 n8 c1 s1 st6"]
    # M past 32: no 256-row tile added; the heuristic's plain 64 x 64 and the table's swapped one
    assert _names(64, 4096, 4096) == ["m64 n64 c1 s1 st13", "swap m64 n64 c1 s1 st13"]


def test_every_config_launched_is_one_the_kernel_takes_with_pdl_on_and_off():
    for shape in (1, 24576, 1536), (16, 24576, 1536), (24, 7168, 2048), (128, 7168, 2048):
        for cfg in pdl_pairs.tiles_of(*shape, 132, "NVIDIA H200"):
            assert "PDL" not in cfg.extra and "SHAPE_JIT" not in cfg.extra
            for pdl in (0, 1):
                check_config(pdl_pairs.with_pdl(cfg, pdl).merged_over(DEFAULTS))


def test_without_a_gpu_the_record_prints_each_pair_timed_in_graphs(capsys, monkeypatch):
    monkeypatch.setattr(shape_sweep, "gpu_available", lambda: False)  # on a GPU too: the record, not a sweep
    pdl_pairs.main([])
    shown = capsys.readouterr().out
    assert "fp16 1x24576x1536 swap m256 n8 c1 s1 st6" in shown and "with PDL" in shown and "(x 0.883)" in shown
