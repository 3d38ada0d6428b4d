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


def test_the_regret_among_offered_tilings_that_the_notes_quote_is_computed_from_the_record():
    """notes/heuristic_regret.md quotes the model's regret among what the space offers, queued and in CUDA graphs:
    those numbers come from `offered_regrets` on the autotune record, to the digit it quotes."""
    import re
    import statistics
    from pathlib import Path

    notes = Path(__file__).resolve().parents[2] / "notes" / "heuristic_regret.md"
    text = " ".join(notes.read_text().split())
    queued = re.search(r"among what it offers, the model's pick is ([\d.]+)% from the fastest on average, "
                       r"([\d.]+)% at worst, (\d+) over 10%", text)  # fmt: skip
    graphs = re.search(r"in CUDA graphs, where the record timed them and the table ranks them, ([\d.]+)% on "
                       r"average and ([\d.]+)% at worst", text)  # fmt: skip
    assert queued and graphs
    rows = results.load("autotune")["rows"]
    assert len(rows) == 102
    for found, timing in ((queued, "us"), (graphs, "graph_us")):
        regrets = fit_heuristic.offered_regrets(rows, timing)
        assert len(regrets) == len(rows), timing
        mean, worst = 100 * (statistics.fmean(regrets) - 1), 100 * (max(regrets) - 1)
        assert f"{mean:.1f}" == found.group(1) and f"{worst:.1f}" == found.group(2), (timing, mean, worst)
    assert sum(r > 1.10 for r in fit_heuristic.offered_regrets(rows, "us")) == int(queued.group(3))


def test_the_report_of_a_record_without_bf16_rows_says_so(capsys):
    """Another GPU's record (the H100's holds FP16 alone) is reported without a BF16 hold-out."""
    rows = results.load("autotune", results.gpu_directory("NVIDIA H100 80GB HBM3"))["rows"]
    assert rows and {r["dtype"] for r in rows} == {"fp16"}
    now = {name: getattr(fit_heuristic.heuristic, name) for name in [*fit_heuristic.GRID, "LAUNCH_US"]}
    fit_heuristic.report("now", rows, [], now)
    out = capsys.readouterr().out
    assert out.startswith("now: mean regret fp16 ") and "no bf16 rows" in out
