"""The lab's Nsight Compute comparison of configs (no GPU): the record it shows and the lines it prints."""

from __future__ import annotations

from lab import RESULTS_DIR, profile_configs
from tutorial import results


def test_without_a_gpu_the_record_prints_a_line_per_kernel_cublas_first(capsys, monkeypatch):
    monkeypatch.setattr(profile_configs, "gpu_available", lambda: False)  # on a GPU too: the record
    assert profile_configs.main([]) == 0
    shown = capsys.readouterr().out.splitlines()
    rows = results.load(profile_configs.DEFAULT_RECORD, RESULTS_DIR)["rows"]
    assert shown[0].startswith("RECORDED results (no GPU here): NVIDIA H200")
    lines = [line for line in shown if " us tensor " in line]
    assert len(lines) == len(rows) and lines[0].startswith("torch") and "nvjet_sm90_" in lines[0]
    assert all(("gemm_kernel" in line) != line.startswith("torch") for line in lines)


def test_a_line_names_the_kernel_its_time_tensor_activity_and_bytes():
    row = {"shape": "512x2112x7168", "kernel": "gemm_kernel", "duration_ns": 26528.0, "tensor_pipe_active_pct": 71.35,
           "sm_clock_hz": 1.6459e9, "l2_bytes": 218.02e6, "smem_fill_bytes": 363.33e6, "dram_read_bytes": 37.65e6,
           "grid_size": 132.0, "cluster_size": 2.0}  # fmt: skip
    line = profile_configs.summary_line(row)
    assert "26.5 us" in line and "tensor  71.3%" in line and "clk  1646" in line and "grid  132x2" in line
    assert "L2    218 MB" in line and "dram    38 MB" in line
    assert "nan" in profile_configs.summary_line({**row, "l2_bytes": None})  # a metric ncu did not report


def test_the_profiling_run_gives_one_shape_and_its_configs_to_the_launches_in_one_range(monkeypatch):
    command = []
    monkeypatch.setattr(profile_configs, "ncu_binary", lambda: "ncu")
    monkeypatch.setattr(profile_configs, "run_ncu", lambda cmd, timeout_s: command.extend(cmd) or "")
    monkeypatch.setattr(profile_configs, "parse_ncu_rows", lambda text: [])
    profile_configs.profile("128x2112x7168", ["torch", "m64 n96 c2 s3 st10"], "fp16", 60)
    assert command[0] == "ncu" and command[command.index("--profile-from-start") + 1] == "off"
    assert command[command.index("--clock-control") + 1] == "none"  # the card's clocks left alone
    tail = command[command.index("lab.profile_configs") + 1 :]
    assert tail == ["--run", "--shape", "128x2112x7168", "--dtype", "fp16", "--configs", "torch;m64 n96 c2 s3 st10"]
