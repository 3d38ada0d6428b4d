"""The lab's sweeps and records: every sweep names its rows as its record does, every record has provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab import RESULTS_DIR, RESULTS_ROOT, cli, recorded_dir, sweeps
from tutorial import results


@pytest.mark.parametrize("sweep", sorted(sweeps.SWEEPS))
def test_each_sweep_names_its_rows_as_its_record_does_shipped_setting_first(sweep):
    names = list(sweeps.variants(sweep))
    recorded = {row["stage"] for row in results.load(sweep, RESULTS_DIR)["rows"]} - {"cublas"}
    assert set(names) == recorded
    shipped = "BALANCED_ROUNDS=1" if sweep == "v5_grid" else None
    if shipped is None:
        knob, _ = sweeps.KNOB_SWEEPS[sweep]
        from tutorial import stages

        shipped = f"{knob}={stages.load(sweeps.STAGE).DEFAULTS.value(knob)}"
    assert names[0] == f"{sweeps.STAGE} {shipped}"


def test_an_unknown_sweep_is_refused():
    with pytest.raises(ValueError, match="unknown sweep 'v5_gpc'"):
        sweeps.variants("v5_gpc")


def test_every_lab_record_has_provenance_and_a_way_to_show_it():
    paths = list(RESULTS_DIR.glob("*.json"))
    assert {"library_space", "kernel_probe_late_trigger", "pingpong"} <= {path.stem for path in paths}
    for path in paths:
        record = json.loads(path.read_text())
        assert {"gpu", "driver", "cuda", "date", "commit", "command"} <= set(record["provenance"]), path.name
        assert record["rows"], path.name
        assert path.stem in cli.COMMANDS, path.stem


GONE = {  # record -> the commit it ran at
    "v5_gpc": "ba931e2", "v5_hiding": "c44a640", "v5_cluster_n": "416080e", "heuristic_refit": "2a720c5",
    "kernel_probe_two_parts": "86752d4", "kernel_probe_swap_tma_bf16": "86752d4", "kernel_probe_swap_tma": "86752d4",
    "kernel_probe_swap_tma_read_wait": "e28bf50", "dynamic_units": "4f7b117", "kernel_probe_late_trigger": "01bc00a",
}  # fmt: skip


def test_a_record_whose_command_is_gone_says_so_and_names_the_commit_it_ran_at():
    for name, commit in GONE.items():
        recorded = results.load(name, RESULTS_DIR)["provenance"]["commit"]
        assert recorded.startswith(commit), name
        assert f"at commit {commit}" in cli.COMMANDS[name] and cli.GONE in cli.COMMANDS[name], name
    for name, command in cli.COMMANDS.items():  # the others name a command that runs today
        if name in GONE:
            continue
        assert cli.GONE not in command, name
        if command.startswith("python -m lab."):  # a module of its own, e.g. lab.call_host: it exists and records
            module = command.split()[2].split(".", 1)[1]
            assert (Path(RESULTS_DIR).parents[1] / f"{module}.py").is_file() and "--record" in command, name
        else:
            assert command.startswith("python -m lab "), name
            assert cli.build_parser().parse_args(command.split()[3:]).record, name  # it parses, and records


def test_show_prints_the_recorded_command_then_today_s(capsys):
    assert cli.main(["show", "v5_cluster_n"]) == 0
    out = capsys.readouterr().out
    assert "(command: python -m lab.rounds --variants 'CLUSTER_N=1;CLUSTER_N=2'" in out
    assert f"(note: {cli.COMMANDS['v5_cluster_n']})" in out
    assert cli.main(["show", "gpc_placement"]) == 0  # recorded as `python -m deepgemm gpc`, now the lab's
    out = capsys.readouterr().out
    assert "(command: python -m deepgemm gpc --record)" in out and "(today: python -m lab gpc --record)" in out


def test_without_a_gpu_a_sweep_prints_its_record(monkeypatch, capsys):
    monkeypatch.setattr(cli, "gpu_available", lambda: False)
    assert cli.main(["sweep", "v5_grid"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("RECORDED") and "v5_fused BALANCED_ROUNDS=0" in out
    assert cli.main(["show", "v5_gpc"]) == 0
    assert "v5_fused GPC_SLOTS=1" in capsys.readouterr().out


def test_the_epilogue_hiding_record_shows_every_variant_checked_and_timed(capsys):
    assert cli.main(["show", "v5_hiding"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("RECORDED") and "tail checks: 80 of 80 passed" in out
    for variant in ("plain", "head", "head+gpc", "pingpong"):
        assert variant in out
    rows = json.loads((RESULTS_DIR / "v5_hiding.json").read_text())["rows"]
    medians = {(s["stage"], s["dtype"], s["m"]): s["x_cublas_median"] for s in results.pair_summary(rows)}
    cases = {(dtype, m) for _, dtype, m in medians}
    assert cases == {("fp16", 4096), ("bf16", 4096), ("fp16", 8192), ("bf16", 8192)}
    assert all(medians["pingpong", d, m] < medians["plain", d, m] for d, m in cases)  # what the v5 README says


def test_a_rounds_setting_parses_into_its_config():
    from lab.rounds import parse_variant

    config = parse_variant("CLUSTER_N=2,BLOCK_N=128")
    assert config.block_n == 128 and dict(config.extra) == {"CLUSTER_N": 2}


def test_rounds_time_v5_s_settings_by_default_and_the_library_kernel_s_with_stage_library():
    from lab import rounds

    assert rounds.build_parser().parse_args(["--variants", "GROUP_M=8"]).stage == "v5_fused"
    assert list(rounds.variants_of("v5", "GROUP_M=16; GROUP_M=8")) == ["v5 GROUP_M=16", "v5 GROUP_M=8"]
    found = rounds.variants_of("library", "CLUSTER_N=1;CLUSTER_N=2,SPLIT_K=2")
    assert list(found) == ["library CLUSTER_N=1", "library CLUSTER_N=2,SPLIT_K=2"]
    assert dict(found["library CLUSTER_N=2,SPLIT_K=2"].extra) == {"CLUSTER_N": 2, "SPLIT_K": 2}
    with pytest.raises(ValueError, match=r"'CLUSTER_N=1' for v5_fused: .*--stage library"):
        rounds.variants_of("v5_fused", "CLUSTER_N=1;CLUSTER_N=2")


def test_rounds_refuse_a_knob_of_another_kernel_before_anything_runs(capsys):
    from lab import rounds

    assert rounds.main(["--variants", "CLUSTER_N=1;CLUSTER_N=2"]) == 2
    assert "CLUSTER_N" in capsys.readouterr().err
    assert rounds.main(["--stage", "library", "--variants", "WGMMA_IN_FLIGHT=0"]) == 2  # v5's, not the library's
    assert rounds.main(["--stage", "v9", "--variants", "GROUP_M=8"]) == 2


def test_one_cta_per_sm_widens_v5_s_grid_to_the_clusters_that_fit(monkeypatch):
    """v5_grid's second row: as many clusters as the occupancy calculator allows (asked of the driver with
    the kernel's function, cluster size, threads and shared memory), capped at the cluster tiles."""
    import dataclasses
    import types

    @dataclasses.dataclass(frozen=True)
    class Launch:
        kernel: object
        block: tuple[int, ...]
        shared_mem: int
        grid: tuple[int, ...]

    kernel = types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=0xF00))
    asked = []
    monkeypatch.setattr(sweeps, "max_active_clusters", lambda *args: asked.append(args) or 66)
    for tiles, grid in ((256, 132), (40, 80)):
        launch = Launch(kernel, (384,), 200_000, (128,))
        monkeypatch.setattr(sweeps, "v5_with_tiles", lambda a, b, launch=launch, tiles=tiles: (launch, tiles, 2))
        assert sweeps.one_cta_per_sm(None, None).grid == (grid,)
    assert asked == [(0xF00, 2, 384, 200_000)] * 2


def test_a_lab_record_names_the_command_as_a_reader_types_it(monkeypatch, tmp_path):
    import lab

    seen = []
    monkeypatch.setattr(lab, "RESULTS_ROOT", tmp_path)
    prov = {"gpu": "NVIDIA H100 80GB HBM3"}  # each GPU's records in its own folder, as results/ keeps them
    monkeypatch.setattr(results, "provenance", lambda command: seen.append(command) or {**prov, "command": command})
    path = lab.record("probe", "lab.probe", ["--size", "64"], [{"x": 1}], extra={"steps": []})
    assert seen == [["python", "-m", "lab.probe", "--size", "64"]] and path == tmp_path / "h100-80gb-hbm3/probe.json"
    saved = results.load("probe", tmp_path / "h100-80gb-hbm3")
    assert saved["rows"] == [{"x": 1}] and saved["steps"] == [] and saved["provenance"]["command"][2] == "lab.probe"
    assert lab.records_dir({"gpu": "NVIDIA H200"}) == tmp_path / "h200"


def test_the_record_is_read_from_the_h200s_folder_first():
    names = {p.stem for folder in RESULTS_ROOT.iterdir() if folder.is_dir() for p in folder.glob("*.json")}
    for name in names:
        folder = recorded_dir(name)
        assert (folder / f"{name}.json").exists()
        assert folder == RESULTS_DIR or not (RESULTS_DIR / f"{name}.json").exists()


def test_the_sm80_probe_brackets_every_variant_with_v2_at_both_b_layouts(monkeypatch):
    from types import SimpleNamespace

    from lab import sm80_variants

    work = SimpleNamespace(problems=[("a0", "b0"), ("a1", "b1")])
    monkeypatch.setattr(sm80_variants.Workload, "make", lambda *args: SimpleNamespace(in_layout=lambda a, b: work))
    seen = []

    def fake_measure(name, w, launches, settle_s):
        seen.append((name, len(launches)))
        return {"stage": name, "passed": True}

    monkeypatch.setattr(sm80_variants, "measure", fake_measure)
    monkeypatch.setattr(sm80_variants.v2, "plan", lambda a, b: (a, b))
    monkeypatch.setattr(sm80_variants.library_sm80, "plan", lambda a, b, config: (a, b, config))
    rows = sm80_variants.run(64, "fp16")
    names = ["v2", *sm80_variants.VARIANTS, "v2 again"]
    assert [row["stage"] for row in rows] == names * 2 and {len for _, len in seen} == {2}  # every input set
    assert [row["layout"] for row in rows] == ["nk"] * len(names) + ["kn"] * len(names)
