"""Nsight Compute: profile one launch of a stage in a subprocess and parse ncu's CSV into a tidy table.

`ncu --clock-control none` leaves the card's clocks as they are (never lock or change them here); the
numbers are therefore taken at whatever clock the card runs, like the benchmarks.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from typing import Any

from tutorial.results import REPO
from tutorial.stages import CUBLAS
from tutorial.target import command as target_command

STALL_REASONS = (
    "barrier", "branch_resolving", "dispatch_stall", "drain", "gmma", "imc_miss", "lg_throttle",
    "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction",
    "not_selected", "selected", "short_scoreboard", "sleeping", "tex_throttle", "wait",
)  # fmt: skip
SHARED_OPS = ("ld", "st", "ldgsts", "gmma")

METRICS = {
    **{f"stall_{r}": f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALL_REASONS},
    **{f"bank_conflicts_{op}": f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum" for op in SHARED_OPS},
    "bank_conflicts_ldsm": "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum",
    "wavefronts_shared_ld": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "wavefronts_shared_st": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "wavefronts_shared_gmma": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_gmma.sum",
    "tensor_pipe_active_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "gmma_instructions": "sm__inst_executed_pipe_tensor_op_gmma.sum",
    "l2_hit_rate_pct": "lts__t_sector_hit_rate.pct",
    "dram_throughput_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_read_bytes": "dram__bytes_read.sum",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "duration_ns": "gpu__time_duration.sum",
    "sm_clock_hz": "sm__cycles_elapsed.avg.per_second",
    "registers_per_thread": "launch__registers_per_thread",
    "dynamic_smem_bytes": "launch__shared_mem_per_block_dynamic",
    "sm_cycles": "sm__cycles_elapsed.max",  # clock-free: compares kernels that ran at different clocks
    "l2_bytes": "lts__t_bytes.sum",  # all traffic the L2 slices served, operands, C and DRAM fills
    "l2_sectors_from_sms": "lts__t_sectors_srcunit_tex.sum",  # of which the SMs' own requests (TMA included)
    "l2_sectors_fabric": "lts__t_sectors_srcunit_ltcfabric.sum",  # and traffic between the two L2 partitions
    "l2_read_sectors_from_sms": "lts__t_sectors_srcunit_tex_op_read.sum",  # the SMs' reads: what L2 was asked
    "smem_fill_bytes": "l1tex__m_xbar2l1tex_read_bytes.sum",  # what arrived in the SMs (a multicast counts per SM)
    # The L2 request coalescer in front of each L2 slice: the read sectors the SMs' requests name, those a
    # multicast names once for several SMs, and those it merged with an identical request still in flight
    "lrc_request_sectors": "lrc__request_sectors_op_read_coalescable.sum",
    "lrc_multicast_sectors": "lrc__request_sectors_op_read_coalescing_type_programmatic.sum",
    "lrc_merged_sectors": "lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum",
    "warp_instructions": "smsp__inst_executed.sum",  # issued work besides the tensor cores': costs power
    "grid_size": "launch__grid_size",
    "cluster_size": "launch__cluster_dim_x",
}
CUBLAS_KERNELS = "regex:nvjet|gemm|xmma|cutlass"  # cuBLAS's GEMM kernel names, not CuPy's own kernels


def ncu_binary() -> str:
    """The ncu executable, or a RuntimeError that says it is missing."""
    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) is not on the PATH")
    return ncu


def ncu_command(stage: str, m: int, n: int, k: int, dtype: str, knobs: str = "") -> list[str]:
    """ncu on one launch of `gemm_kernel`, or of cuBLAS's kernel for stage "cublas" (the second launch: the
    first may include module loading); `knobs` (e.g. "NUM_STAGES=2") over the stage's defaults."""
    ncu = ncu_binary()
    target = target_command(stage, m, n, k, dtype, knobs)
    return [
        ncu, "--clock-control", "none", "--csv", "--page", "raw",
        "--kernel-name", CUBLAS_KERNELS if stage == CUBLAS else "gemm_kernel",
        "--launch-skip", "1", "--launch-count", "1",
        "--metrics", ",".join(METRICS.values()), *target,
    ]  # fmt: skip


def parse_ncu_rows(text: str) -> list[dict[str, float | str]]:
    """Every kernel row of `ncu --csv --page raw` output, in launch order, keyed by metric name (the units
    row dropped). The program's own output may come before the table."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no CSV table in ncu's output:\n" + text[-2000:])
    header, _units, *rows = csv.reader(io.StringIO("\n".join(line for line in lines[start:] if line.startswith('"'))))
    if not rows:
        raise ValueError("ncu's table has no kernel rows:\n" + text[-2000:])
    return [{name: parse_number(value) for name, value in zip(header, row)} for row in rows]


def parse_ncu_csv(text: str) -> dict[str, float | str]:
    """The first kernel row of `ncu --csv --page raw` output, keyed by metric name (units row dropped)."""
    return parse_ncu_rows(text)[0]


def parse_number(value: str) -> float | str:
    """A number of ncu's CSV (thousands separated by commas) as a float; any other text as it is."""
    try:
        return float(value.replace(",", ""))
    except ValueError:
        return value


def tidy(raw: dict[str, float | str]) -> dict[str, Any]:
    """Our names for ncu's metrics, and the kernel's name; a metric ncu did not report is None."""
    return {"kernel": raw.get("Kernel Name"), **{ours: raw.get(theirs) for ours, theirs in METRICS.items()}}


def profile_stage(
    stage: str, m: int, n: int, k: int, dtype: str, timeout_s: float = 300, knobs: str = ""
) -> dict[str, Any]:
    """Run ncu on one launch of `stage` (with `knobs` over its defaults) and return the tidy metrics with the
    shape they were taken at."""
    output = run_ncu(ncu_command(stage, m, n, k, dtype, knobs), timeout_s)
    return {"stage": stage, "dtype": dtype, "m": m, "n": n, "k": k, **tidy(parse_ncu_csv(output))}


def run_ncu(command: list[str], timeout_s: float, env: dict[str, str] | None = None) -> str:
    """Run an ncu command line (with `env` added to this process's environment) from the repository, so that
    the profiled `python -m tutorial.target` imports this checkout wherever the caller runs (a notebook runs in
    notebooks/), and return its standard output, or a RuntimeError with the tail of both streams."""
    full_env = None if env is None else {**os.environ, **env}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=full_env, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"ncu failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout


def top_stalls(row: dict[str, Any], count: int = 4) -> list[tuple[str, float]]:
    """The largest stall reasons of a profile row, as (reason, warps stalled per issue)."""
    stalls = [(r, row.get(f"stall_{r}")) for r in STALL_REASONS if r != "selected"]
    return sorted(((r, v) for r, v in stalls if isinstance(v, float)), key=lambda rv: -rv[1])[:count]
