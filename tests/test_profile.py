"""The Nsight Compute command and its parsing (no GPU, no ncu needed)."""

import pytest

from deepgemm import profile
from deepgemm.cli import profiled_stages
from deepgemm.stages import STAGES


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
    """A notebook runs in notebooks/, where `python -m deepgemm` would not be found without an install."""
    import subprocess

    from deepgemm import profile, results

    seen = {}

    def fake_run(command, **kwargs):
        seen.update(kwargs)
        return subprocess.CompletedProcess(command, 0, stdout="ok", stderr="")

    monkeypatch.setattr(profile.subprocess, "run", fake_run)
    monkeypatch.chdir(results.REPO / "notebooks")
    assert profile.run_ncu(["ncu"], 5) == "ok"
    assert seen["cwd"] == results.REPO
