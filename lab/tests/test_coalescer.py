"""The L2 coalescer probe: the GPC grouping, the pair plan, the rows it records, its ncu command and its
kernels (compiled for sm_90a without a GPU); on a GPU, that the map covers every SM and the readers run."""

import json
from pathlib import Path

import pytest

from deepgemm.jit import compile_file_report
from lab import cli, coalescer, gpc
from tutorial import profile, results

LRC = coalescer.METRICS


def test_clusters_that_share_an_sm_are_one_gpc_and_unplaced_sms_stand_alone():
    groups = gpc.union_groups([[0, 1, 16, 17], [16, 40], [2, 3], [99, 7]], sm_count=42)
    assert [0, 1, 16, 17, 40] in groups and [2, 3] in groups
    assert [5] in groups  # never placed
    assert sorted(sm for g in groups for sm in g) == list(range(42))  # 99 is not an SM of this GPU


def test_the_plan_pairs_the_anchor_with_every_sm_then_sweeps_one_near_and_one_far_partner():
    plan = coalescer.pair_plan([[0, 1, 2, 3], [4, 5, 6, 7]])
    together = [p for p in plan if p["delay"] == 0]
    assert [p["sm_b"] for p in together] == list(range(1, 8)) and all(p["sm_a"] == 0 for p in plan)
    late = [p for p in plan if p["delay"] > 0]
    assert {p["sm_b"] for p in late} == {1, 4}
    assert sorted({p["delay"] for p in late}) == sorted(d for d in coalescer.DELAYS if d > 0)


def test_an_anchor_alone_in_its_group_gets_only_the_far_sweep():
    plan = coalescer.pair_plan([[0], [1, 2]])
    assert {p["sm_b"] for p in plan if p["delay"] > 0} == {1}


def test_rows_give_the_share_of_the_second_readers_sectors_that_merged():
    plan = [{"sm_a": 0, "sm_b": 1, "delay": 0}, {"sm_a": 0, "sm_b": 4, "delay": 0}]
    measured = [{LRC["request_sectors"]: 131072.0, LRC["merged_sectors"]: 65536.0},
                {LRC["request_sectors"]: 131072.0, LRC["merged_sectors"]: 0.0}]  # fmt: skip
    rows = coalescer.pair_rows(plan, measured, [[0, 1], [4]], "L2")
    assert [(r["same_gpc"], r["second_reader_merged"]) for r in rows] == [(True, 1.0), (False, 0.0)]
    assert {r["data"] for r in rows} == {"L2"}


def test_rows_refuse_a_profile_that_does_not_match_the_plan():
    plan = [{"sm_a": 0, "sm_b": 1, "delay": 0}]
    with pytest.raises(ValueError, match="1 pairs planned but 0"):
        coalescer.pair_rows(plan, [], [[0, 1]], "L2")
    with pytest.raises(ValueError, match="no coalescer counts"):
        coalescer.pair_rows(plan, [{"Kernel Name": "twin_reads"}], [[0, 1]], "L2")


def test_ncu_tables_with_several_launches_parse_in_launch_order():
    header = '"ID","Kernel Name","lrc__request_sectors_op_read_coalescable.sum"'
    lines = ["pairs done", header, '"","","sector"', '"0","twin_reads","131,072"', '"1","twin_reads","65,536"']
    rows = profile.parse_ncu_rows("\n".join([*lines, "==PROF== Disconnected"]))
    assert [r[LRC["request_sectors"]] for r in rows] == [131072.0, 65536.0]
    with pytest.raises(ValueError, match="no kernel rows"):
        profile.parse_ncu_rows("\n".join(lines[1:3]))


def test_the_probe_profiles_only_the_readers_and_flushes_the_caches_for_dram(monkeypatch, tmp_path):
    seen = {}

    class Done:
        returncode, stderr = 0, ""
        stdout = '"ID","Kernel Name","x"\n"","",""\n"0","twin_reads","1"'

    def fake_run(command, **_):
        seen["command"] = command
        seen["plan"] = json.loads(Path(command[command.index("--run-plan") + 1]).read_text())
        return Done()

    monkeypatch.setattr(profile.shutil, "which", lambda name: "/opt/ncu")
    monkeypatch.setattr(profile.subprocess, "run", fake_run)
    plan = [{"sm_a": 0, "sm_b": 3, "delay": 200}]
    coalescer.profile_pairs(plan, "DRAM")
    command = seen["command"]
    assert command[command.index("--cache-control") + 1] == "all" and "--warm" not in command
    assert command[command.index("--kernel-name") + 1] == "twin_reads"
    assert command[command.index("--clock-control") + 1] == "none"
    assert seen["plan"] == plan
    coalescer.profile_pairs(plan, "L2")
    assert seen["command"][seen["command"].index("--cache-control") + 1] == "none" and "--warm" in seen["command"]


def test_the_probe_kernels_compile_for_sm_90a():
    report = compile_file_report(coalescer.SOURCE, {}, name="coalescer")
    assert report.spill_stores == 0 and 0 < report.registers <= 32, report.log


@pytest.mark.gpu
def test_the_gpc_map_covers_every_sm_and_both_readers_run():
    from tutorial.stages import runs_here

    if not runs_here("v5_fused"):  # the probes map where v5's clusters land, on the GPU v5 runs on
        pytest.skip("v5_fused needs sm_90a (Hopper)")
    sm_count = gpc.sm_count()
    groups = gpc.gpc_groups()
    assert sorted(sm for g in groups for sm in g) == list(range(sm_count))
    assert max(len(g) for g in groups) >= gpc.PORTABLE_CLUSTER
    near = next(g for g in groups if 0 in g)
    partner = next((sm for sm in near if sm != 0), 1)
    (done,) = coalescer.run_pairs([{"sm_a": 0, "sm_b": partner, "delay": 100}], warm=True)
    assert done["cycles_a"] > 0 and done["cycles_b"] > 0


def _recorded_like_rows() -> list[dict]:
    rows = []
    for data in ("L2", "DRAM"):
        rows += [{"sm_a": 0, "sm_b": sm, "delay": 0, "data": data, "same_gpc": sm < 4,
                  "second_reader_merged": 1.0 if sm < 4 or sm == 7 else 0.0} for sm in range(1, 8)]  # fmt: skip
        rows.append({"sm_a": 0, "sm_b": 1, "delay": 200, "data": data, "same_gpc": True,
                     "second_reader_merged": 0.0 if data == "L2" else 0.9})  # fmt: skip
    return rows


def test_the_summary_names_the_sweeps_and_which_partners_merged():
    lines = coalescer.summary_lines(_recorded_like_rows())
    assert any("DRAM" in line and "200 cycles late: 0.90" in line for line in lines)
    together = [line for line in lines if "same start" in line]
    assert len(together) == 4  # two data sources x placed with the anchor or not
    assert any("never placed with SM 0" in line and "SMs [7]" in line for line in together)


def test_without_a_gpu_the_command_prints_the_record(monkeypatch, capsys):
    monkeypatch.setattr(cli, "gpu_available", lambda: False)
    command = "python -m lab coalescer --record"
    provenance = {"gpu": "H200", "driver": "d", "cuda": "c", "date": "2026", "commit": "0" * 40, "command": command}
    record = {"provenance": provenance, "rows": _recorded_like_rows()}
    monkeypatch.setattr(results, "load", lambda name, *_, **__: record)
    assert cli.main(["coalescer"]) == 0
    out = capsys.readouterr().out
    assert "RECORDED" in out and "same start" in out and "coalescer --record" in out


def coalescer_rows() -> list[dict]:
    """As the probe plans them: every partner at delay 0, then a delay sweep for SM 1; in L2 and DRAM."""
    rows = []
    for data, late_share in (("L2", 0.0), ("DRAM", 0.8)):
        for sm, same in ((1, True), (2, False), (16, True)):
            rows.append({"sm_a": 0, "sm_b": sm, "delay": 0, "data": data, "same_gpc": same,
                         "second_reader_merged": (1.0 if same else 0.0) if data == "DRAM" else 0.5})  # fmt: skip
        rows.append({"sm_a": 0, "sm_b": 1, "delay": 200, "data": data, "same_gpc": True,
                     "second_reader_merged": late_share})  # fmt: skip
    return rows


def test_coalescer_plot_shows_every_partner_and_the_delay_sweeps(lab_figures):
    fig = lab_figures.coalescer_plot(coalescer_rows())
    partner_ax, delay_ax = fig.axes
    from matplotlib.patches import Rectangle

    heights = sorted(p.get_height() for p in partner_ax.patches if isinstance(p, Rectangle))
    assert heights == [0.0, 1.0, 1.0]
    assert sorted(tuple(line.get_ydata()) for line in delay_ax.lines) == [(0.5, 0.0), (1.0, 0.8)]


def test_coalescer_plot_without_a_record_says_so(lab_figures):
    assert any("no recorded coalescer" in t.get_text() for t in lab_figures.coalescer_plot([]).axes[0].texts)


@pytest.fixture
def lab_figures():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from lab import figures

    return figures
