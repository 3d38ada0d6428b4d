"""lab.fit_heuristic's cross-validation: the record's layers dealt into two halves, no layer in both."""

from __future__ import annotations

from lab import fit_heuristic
from tutorial import results


def test_the_layers_are_dealt_into_two_halves_of_about_as_many_rows():
    rows = results.load("autotune")["rows"]
    first, second = fit_heuristic.halves(rows)
    assert first and second and not first & second
    assert first | second == {fit_heuristic.layer(r) for r in rows}
    sizes = [sum(fit_heuristic.layer(r) in side for r in rows) for side in (first, second)]
    assert abs(sizes[0] - sizes[1]) <= 8 and sum(sizes) == len(rows)  # 53 and 49: layers of 21 and 8 rows


def test_the_per_sm_hbm_bound_is_held_not_searched():
    assert "SM_HBM_GBS" in fit_heuristic.GRID and "SM_HBM_GBS" not in fit_heuristic.searched()
    assert "POWER_TFLOPS" in fit_heuristic.searched()
