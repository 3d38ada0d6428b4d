"""Recorded runs: JSON with provenance, written only by the project's own commands, read where no GPU is.

A record is {"provenance": {...}, "rows": [...]}; provenance names the GPU, driver, CUDA, date, git commit
and the command that produced it, so every number in the README and the notebooks can be traced.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import cupy

from deepgemm.driver import CC_ENV, capability_override
from deepgemm.heuristic import gpu_slug

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "results" / "h200"  # the reference records, what a reader without a GPU sees


def gpu_directory(gpu: str, root: Path = REPO / "results") -> Path:
    """Where a GPU's records go: 'NVIDIA H200' -> results/h200, 'NVIDIA H100 80GB HBM3' -> results/h100-80gb-hbm3."""
    return root / gpu_slug(gpu)


def git_commit() -> str:
    """The commit the code ran at; '+dirty' when the work tree had uncommitted changes.

    Where the tree was copied without its .git (the H200 machine), the caller passes the commit in
    DEEPGEMM_COMMIT and the source digest below ties the numbers to the files that actually ran.
    """
    if os.environ.get("DEEPGEMM_COMMIT"):
        return os.environ["DEEPGEMM_COMMIT"]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def source_digest() -> str:
    """SHA-256 over the library, the harness and the stages (kernels and launchers), in path order."""
    digest = hashlib.sha256()
    paths = [*REPO.glob("deepgemm/*.py"), *REPO.glob("deepgemm/kernels/*.cu"), *REPO.glob("deepgemm/csrc/*.cpp"),
             *REPO.glob("tutorial/*.py"), *REPO.glob("stages/*/*.cu"), *REPO.glob("stages/*/*.py")]  # fmt: skip
    for path in sorted(paths):
        digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _command_line() -> list[str]:
    argv = list(sys.argv)
    if argv and argv[0].endswith("__main__.py"):
        return ["python", "-m", Path(argv[0]).parent.name, *argv[1:]]
    return ["python", *argv]


def provenance(command: Sequence[str] | None = None) -> dict[str, Any]:
    """Where and how a measurement was made."""
    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(cupy.cuda.Device().id)
    driver = "unknown"
    try:
        import pynvml  # optional: without NVML the driver version is "unknown"

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # NVML missing: say so rather than guess
        pass
    cuda = runtime.runtimeGetVersion()
    return {
        "gpu": props["name"].decode(),
        "sm_count": int(props["multiProcessorCount"]),
        "driver": driver if isinstance(driver, str) else driver.decode(),
        "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}",
        "cupy": cupy.__version__,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "source_digest": source_digest(),
        "command": shlex.join(command if command is not None else _command_line()),
    }


def save(
    name: str,
    rows: Iterable[dict[str, Any]],
    prov: dict[str, Any],
    directory: Path | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write <directory>/<name>.json (by default results/<gpu>/, the GPU of `prov`) and return its path.

    `extra` adds sections beside the rows (the call suite's "first_call"); a record always has both
    "provenance" and "rows".
    """
    require_real_capability()
    record = {"provenance": prov, "rows": list(rows)}
    if record.keys() & (extra or {}).keys():
        raise ValueError(f"extra sections {sorted(extra)} may not replace 'provenance' or 'rows'")
    directory = gpu_directory(prov["gpu"]) if directory is None else directory
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps({**record, **(extra or {})}, indent=1) + "\n")
    return path


def require_real_capability() -> None:
    """RuntimeError where DEEPGEMM_CC overrides the GPU's compute capability: a run under it tests the branches
    another GPU takes, and its numbers, filed under this GPU's name, would pass for a run as itself."""
    override = capability_override()
    if override is not None:
        raise RuntimeError(f"{CC_ENV}={override[0]}.{override[1]} is set: a run under an overridden compute "
                           f"capability is not recorded (unset it to record)")  # fmt: skip


def row_key(row: dict[str, Any]) -> tuple:
    """What a row of a merged record is measured at: dtype, M, N, K (None where it has none, as a block)."""
    return row["dtype"], row["m"], row.get("n"), row.get("k")


def merge_rows(
    old: Iterable[dict[str, Any]], new: Iterable[dict[str, Any]], key: Callable[[dict[str, Any]], Any] = row_key
) -> list[dict[str, Any]]:
    """The old rows that no new row measures again (by `key`), in their order, then the new ones."""
    new = list(new)
    fresh = {key(row) for row in new}
    return [row for row in old if key(row) not in fresh] + new


def save_merged(
    name: str,
    sections: dict[str, list[dict[str, Any]]],
    prov: dict[str, Any],
    directory: Path | None = None,
    *,
    key: Callable[[dict[str, Any]], Any] = row_key,
    dated: str = "run",
) -> Path:
    """Merge a run's rows into <directory>/<name>.json, so that runs of parts (a dtype, some shapes) build
    one record: each section ("rows", and others such as the shape table's "block") keeps the old rows this
    run did not measure again (`merge_rows` by `key`); this run's rows carry its date (field `dated`),
    "runs" lists every run's provenance (an older record's own provenance first) and "provenance" is this
    run's."""
    directory = gpu_directory(prov["gpu"]) if directory is None else directory
    path = directory / f"{name}.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    runs = old.get("runs") or ([old["provenance"]] if "provenance" in old else [])
    merged = {key: value for key, value in old.items() if key not in ("provenance", "runs")}
    for section, rows in sections.items():
        merged[section] = merge_rows(old.get(section, []), ({**row, dated: prov["date"]} for row in rows), key)
    rows = merged.pop("rows", [])
    return save(name, rows, prov, directory, extra={**merged, "runs": [*runs, prov]})


COMMAND_GONE = "the command no longer exists"  # how a record's command is marked where nothing can run it again
RECORDING_COMMANDS = {  # records not written by a bench suite of their name
    "stability": "python -m tutorial stability --record",
    "timeline": "python -m tutorial timeline --record",
    "shapes_sm80": "DEEPGEMM_FORCE_SM80=1 python -m tutorial bench --suite shapes --record",  # on any GPU but Hopper
}


def recording_command(name: str) -> str:
    """The command that writes results/<gpu>/<name>.json."""
    if name in RECORDING_COMMANDS:
        return RECORDING_COMMANDS[name]
    if name.startswith("profile"):
        return f"python -m tutorial profile --record --name {name}"
    return f"python -m tutorial bench --suite {name} --record"


def load(name: str, directory: Path = RESULTS_DIR, command: str | None = None) -> dict[str, Any]:
    """A recorded run; FileNotFoundError names the file and how to make it (`command`, or the project's own
    command for a record of that name)."""
    path = directory / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no recorded results at {path}: run `{command or recording_command(name)}` on a GPU")
    record = json.loads(path.read_text())
    if "provenance" not in record or "rows" not in record:
        raise ValueError(f"{path} is not a recorded run (it needs 'provenance' and 'rows')")
    return record


def gpu_available() -> bool:
    """Whether CUDA sees a GPU here (without one, commands print the recorded results instead)."""
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except cupy.cuda.runtime.CUDARuntimeError:
        return False


def recorded_banner(prov: dict[str, Any], live: bool | None = None) -> str:
    """The first line shown above recorded numbers: where and when they were recorded, and, where no GPU
    is here to measure live (`live`, asked of CUDA when None), that it says so."""
    live = gpu_available() if live is None else live
    return (
        f"RECORDED results{'' if live else ' (no GPU here)'}: {prov['gpu']}, driver {prov['driver']}, "
        f"CUDA {prov['cuda']}, {prov['date']}, commit {prov['commit'][:12]}"
    )


def _cell(value: Any, digits: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if abs(value) >= 10**-digits or value == 0 else f"{value:.2e}"
    return str(value)


ROW_ID_COLUMNS = (  # what every table starts with: which stage, dtype and shape a row is
    ("stage", "stage", 0),
    ("dtype", "dtype", 0),
    ("shape", "M x N x K", 0),
)

COLUMNS = (
    *ROW_ID_COLUMNS,
    ("tflops", "TFLOP/s", 1),
    ("pct_peak", "% peak", 1),
    ("pct_peak_at_clock", "% peak@clk", 1),
    ("x_prev", "x prev", 2),
    ("x_cublas", "x cuBLAS", 2),
    ("max_abs_err", "max abs err", 4),
    ("sm_clock_mhz", "SM MHz", 0),
    ("power_w", "W", 0),
    ("power_capped_pct", "% power-capped", 0),
)


def _shaped(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its "shape" column ('MxNxK'), where it has M, N and K (a summary's line or a block has not)."""
    return {**row, "shape": f"{row['m']}x{row['n']}x{row['k']}"} if {"m", "n", "k"} <= row.keys() else row


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, int]] = COLUMNS) -> str:
    """A plain-text table of rows (bench rows, or any with the given columns); missing values print as '-'."""
    cells = [[title for _, title, _ in columns]]
    for row in rows:
        shaped = _shaped(row)
        cells.append([_cell(shaped.get(key), digits) for key, _, digits in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


MARKDOWN_COLUMNS = (
    *ROW_ID_COLUMNS,
    ("tflops", "TFLOP/s", 1),
    ("pct_peak", "% of 989.4", 1),
    ("pct_peak_at_clock", "% of peak at clock", 1),
    ("x_prev", "x prev", 2),
    ("x_cublas", "x cuBLAS", 2),
    ("rel_err", "rel. error", 4),
    ("sm_clock_mhz", "SM MHz", 0),
    ("power_w", "W", 0),
)
BRIEF_COLUMNS = (  # the top README's table: speed, efficiency at the measured clock, and the two ratios
    *ROW_ID_COLUMNS,
    ("tflops", "TFLOP/s", 1),
    ("pct_peak_at_clock", "% of peak at clock", 1),
    ("x_prev", "x prev", 2),
    ("x_cublas", "x cuBLAS", 2),
)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, int]] = MARKDOWN_COLUMNS) -> str:
    """The recorded rows as a Markdown table (what the README shows)."""
    lines = ["| " + " | ".join(title for _, title, _ in columns) + " |", "|" + " --- |" * len(columns)]
    for row in rows:
        shaped = _shaped(row)
        lines.append("| " + " | ".join(_cell(shaped.get(key), digits) for key, _, digits in columns) + " |")
    return "\n".join(lines)


def stage_rows(rows: Sequence[dict[str, Any]], stage: str) -> list[dict[str, Any]]:
    """One stage's rows and the cuBLAS rows measured beside them (same dtype and shape)."""
    shapes = {(r["dtype"], r["m"], r["n"], r["k"]) for r in rows if r["stage"] == stage}
    return [r for r in rows if r["stage"] in (stage, "cublas") and (r["dtype"], r["m"], r["n"], r["k"]) in shapes]


def rows_of_stages(rows: Sequence[dict[str, Any]], stages: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of `stages` and cuBLAS's beside them, in record order: in a progression the cuBLAS rows of the
    same dtype and shape, in an ablation (whose rows name their `ablated_stage`) that stage's own."""

    def owner(row: dict[str, Any]) -> str:
        return row.get("ablated_stage", row["stage"])

    shapes = {(r["dtype"], r["m"], r["n"], r["k"]) for r in rows if r["stage"] in stages}
    return [r for r in rows if owner(r) in stages
            or (owner(r) == "cublas" and (r["dtype"], r["m"], r["n"], r["k"]) in shapes)]  # fmt: skip


def pair_summary(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stage, dtype and shape of a `pairs` record, or of any record timed in rounds beside cuBLAS (a round
    is a pair of more than two; older lab records call it `round`): the median, lowest and highest x cuBLAS."""
    groups: dict[tuple, list[float]] = {}
    for row in rows:
        if ("pair" in row or "round" in row) and row["stage"] != "cublas":
            groups.setdefault((row["stage"], row["dtype"], row["m"], row["n"], row["k"]), []).append(row["x_cublas"])
    return [
        {
            "stage": stage,
            "dtype": dtype,
            "m": m,
            "n": n,
            "k": k,
            "pairs": len(ratios),
            "x_cublas_median": statistics.median(ratios),
            "x_cublas_min": min(ratios),
            "x_cublas_max": max(ratios),
        }
        for (stage, dtype, m, n, k), ratios in groups.items()
    ]


PAIR_COLUMNS = (
    *ROW_ID_COLUMNS,
    ("pairs", "pairs", 0),
    ("x_cublas_median", "x cuBLAS, median", 3),
    ("x_cublas_min", "lowest", 3),
    ("x_cublas_max", "highest", 3),
)

CALL_COLUMNS = (  # the call suite: deepgemm.gemm per call beside torch.matmul on the same operands
    ("framework", "inputs", 0),
    ("a_layout", "A", 0),
    ("b_layout", "B", 0),
    ("dtype", "dtype", 0),
    ("shape", "M x N x K", 0),
    ("host_us", "host µs", 1),
    ("torch_host_us", "torch host µs", 1),
    ("call_us", "µs per call", 1),
    ("torch_us", "torch µs", 1),
    ("x_torch", "x torch", 2),
)
FIRST_CALL_COLUMNS = (  # the call suite's first call in a fresh process, with CuPy's disk cache empty or filled
    ("mode", "cache", 0),
    ("framework", "inputs", 0),
    ("dtype", "dtype", 0),
    ("shape", "M x N x K", 0),
    ("import_s", "import deepgemm, s", 3),
    ("first_call_s", "first call, s", 3),
    ("nvrtc_compiles", "NVRTC compiles", 0),
)
SHAPE_COLUMNS = (  # the shape table: GPU time in CUDA graphs and per call, beside torch.matmul, and the heuristic's
    ("dtype", "dtype", 0),
    ("shape", "M x N x K", 0),
    ("config", "config", 0),
    ("config_source", "from", 0),
    ("graph_us", "graph µs", 1),
    ("torch_graph_us", "torch graph µs", 1),
    ("x_torch_graph", "x torch (graph)", 2),
    ("call_us", "µs per call", 1),
    ("torch_us", "torch µs", 1),
    ("x_torch", "x torch", 2),
    ("x_torch_device", "x torch (queued)", 2),
    ("heuristic_config", "heuristic's config", 0),
    ("x_torch_graph_heuristic", "x torch (graph, heuristic)", 2),
    ("x_torch_heuristic", "x torch (heuristic)", 2),
    ("graph_gbs", "graph GB/s (M = 1)", 0),
)
BLOCK_COLUMNS = (  # the shape table's decoder block: four GEMMs in one CUDA graph, beside torch.matmul's
    ("stage", "block", 0),
    ("dtype", "dtype", 0),
    ("m", "M", 0),
    ("graph_us", "graph µs", 1),
    ("torch_graph_us", "torch graph µs", 1),
    ("x_torch_graph", "x torch (graph)", 2),
    ("tflops", "TFLOP/s", 1),
    ("passed", "passed", 0),
)
ABLATION_COLUMNS = (  # the ablation suite: a stage as shipped and with one technique switched off
    ("ablated_stage", "stage", 0),
    ("ablation", "variant", 0),
    ("dtype", "dtype", 0),
    ("shape", "M x N x K", 0),
    ("us", "µs", 1),
    ("tflops", "TFLOP/s", 1),
    ("x_shipped", "x shipped", 2),
    ("x_cublas", "x cuBLAS", 2),
    ("bank_conflicts", "smem bank conflicts", 0),
    ("top_stalls", "top stalls (per issue)", 0),
)
# Records whose rows need other columns than MARKDOWN_COLUMNS.
TABLE_COLUMNS = {"call": CALL_COLUMNS, "shapes": SHAPE_COLUMNS, "ablation": ABLATION_COLUMNS}
