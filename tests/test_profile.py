"""The Nsight Compute command and its parsing, and the target it profiles (no GPU, no ncu needed)."""

import sys

import pytest

from tutorial import cli, profile, source_profile, target
from tutorial.stages import STAGES
from tutorial.target import profiled_stages


@pytest.fixture
def fake_ncu(monkeypatch):
    monkeypatch.setattr(profile.shutil, "which", lambda name: "/opt/ncu" if name == "ncu" else None)


def _option(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_a_stage_is_profiled_by_its_kernel_name_leaving_the_clocks_alone(fake_ncu):
    cmd = profile.ncu_command("v5_fused", 4096, 4096, 4096, "fp16")
    assert cmd[0] == "/opt/ncu"
    assert _option(cmd, "--clock-control") == "none"
    assert _option(cmd, "--kernel-name") == "gemm_kernel"
    assert (_option(cmd, "--launch-skip"), _option(cmd, "--launch-count")) == ("1", "1")
    assert "lts__t_bytes.sum" in _option(cmd, "--metrics").split(",")
    assert cmd[cmd.index("--stage") + 1] == "v5_fused"
    assert cmd[-len(target.command("v5_fused", 4096, 4096, 4096, "fp16")) :] == target.command(
        "v5_fused", 4096, 4096, 4096, "fp16"
    )  # the target is the command's tail


def test_the_target_is_its_own_module_in_this_interpreter_with_the_knobs_only_where_given():
    """`python -m tutorial.target` (what `run-once` was): the stage, the shape, the dtype, then the knobs."""
    assert target.command("library", 256, 129, 72, "bf16", "SPLIT_K=4") == [
        sys.executable, "-m", "tutorial.target", "--stage", "library", "--m", "256", "--n", "129", "--k", "72",
        "--dtype", "bf16", "--knobs", "SPLIT_K=4",
    ]  # fmt: skip
    assert "--knobs" not in target.command("v5_fused", 64, 64, 64, "fp16")
    with pytest.raises(SystemExit):  # the old subcommand is gone from the tutorial's command line
        cli.build_parser().parse_args(["run-once", "--stage", "v5"])


def test_the_target_runs_what_its_command_names(monkeypatch):
    launched = []
    monkeypatch.setattr(target, "launch_twice", lambda *args: launched.append(args))
    for stage in ("v5_fused", "library", "cublas"):
        assert target.main(target.command(stage, 129, 200, 72, "bf16", "NUM_STAGES=2")[3:]) == 0
    assert launched == [(stage, 129, 200, 72, "bf16", "NUM_STAGES=2") for stage in ("v5_fused", "library", "cublas")]
    launched.clear()
    assert target.main(["--stage", "v4,cublas", "--shapes", "256,8x16x32", "--dtype", "fp16"]) == 0
    assert [(s, m, n, k) for s, m, n, k, *_ in launched] == [
        ("v4_pipeline_swizzle", 256, 256, 256), ("v4_pipeline_swizzle", 8, 16, 32),
        ("cublas", 256, 256, 256), ("cublas", 8, 16, 32),
    ]  # fmt: skip


def test_the_source_profile_runs_the_same_target(fake_ncu, tmp_path):
    cmd = source_profile.source_command("v4_pipeline_swizzle", 512, 512, 512, "fp16", tmp_path / "r")
    assert cmd[-13:] == target.command("v4_pipeline_swizzle", 512, 512, 512, "fp16")


@pytest.mark.parametrize("command", [["profile"], ["stability"], ["timeline"], ["profile", "--source"]])
def test_commands_that_time_nothing_take_no_settle(command, capsys):
    parser = cli.build_parser()
    parser.parse_args([*command, "--shapes", "256"])
    with pytest.raises(SystemExit):
        parser.parse_args([*command, "--settle", "1"])
    assert "unrecognized arguments: --settle" in capsys.readouterr().err


def test_commands_that_time_take_settle():
    parser = cli.build_parser()
    assert parser.parse_args(["bench", "--settle", "2"]).settle == 2.0
    assert parser.parse_args(["bench"]).settle is None  # the suite's own
    assert parser.parse_args(["autotune"]).settle == 1.0


def test_cublas_is_profiled_by_cublas_kernel_names(fake_ncu):
    cmd = profile.ncu_command("cublas", 4096, 4096, 4096, "fp16")
    names = _option(cmd, "--kernel-name")
    assert names.startswith("regex:") and "nvjet" in names and "gemm" in names
    assert cmd[cmd.index("--stage") + 1] == "cublas"


def test_profile_needs_ncu(monkeypatch):
    monkeypatch.setattr(profile.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="ncu"):
        profile.ncu_command("v5_fused", 64, 64, 64, "fp16")


def test_the_profiled_list_takes_cublas_beside_the_stages():
    assert profiled_stages("v5,cublas") == ["v5_fused", "cublas"]
    assert profiled_stages("cublas") == ["cublas"]
    assert profiled_stages("all") == list(STAGES)
    with pytest.raises(ValueError, match="unknown stage"):
        profiled_stages("v9,cublas")


def test_parsed_csv_keeps_the_kernel_name_and_our_metric_names():
    header = '"ID","Kernel Name","sm__cycles_elapsed.max","lts__t_bytes.sum"'
    text = "==PROF== noise\n" + "\n".join([header, '"","","cycle","byte"', '"0","nvjet_x","288,300","1,308,130,176"'])
    row = profile.tidy(profile.parse_ncu_csv(text))
    assert row["kernel"] == "nvjet_x"
    assert (row["sm_cycles"], row["l2_bytes"]) == (288300.0, 1308130176.0)
    assert row["tensor_pipe_active_pct"] is None  # not in this output


def test_ncu_runs_from_the_repository_so_the_profiled_child_imports_this_checkout(monkeypatch):
    """A notebook runs in notebooks/, where `python -m tutorial.target` would not be found (tutorial/ is not
    installed: only deepgemm/ is in the wheel)."""
    import subprocess

    from tutorial import profile, results

    seen = {}

    def fake_run(command, **kwargs):
        seen.update(kwargs)
        return subprocess.CompletedProcess(command, 0, stdout="ok", stderr="")

    monkeypatch.setattr(profile.subprocess, "run", fake_run)
    monkeypatch.chdir(results.REPO / "notebooks")
    assert profile.run_ncu(["ncu"], 5) == "ok"
    assert seen["cwd"] == results.REPO
