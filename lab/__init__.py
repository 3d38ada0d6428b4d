"""The lab: hardware probes and research sweeps around the stages and the library kernel, kept out of the
installed package.

Nothing in deepgemm/, stages/ or tutorial/ imports it; it imports them. Run it as `python -m lab <command>`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

RESULTS_ROOT = Path(__file__).resolve().parent / "results"  # a folder per GPU, as results/ has
RESULTS_DIR = RESULTS_ROOT / "h200"  # the reference records, what a command prints without a GPU


def recorded_dir(name: str) -> Path:
    """Where `name`'s record is read without a GPU: the H200's folder where it has one, else the first other
    GPU's that does (a probe run on an H100 only)."""
    found = (d for d in (RESULTS_DIR, *sorted(RESULTS_ROOT.iterdir())) if (d / f"{name}.json").exists())
    return next(found, RESULTS_DIR)


def records_dir(prov: dict) -> Path:
    """Where a record of this provenance goes: the folder of the GPU it ran on (lab/results/h200 on the H200)."""
    from tutorial import results  # the lab imports the tutorial, never the other way round

    return results.gpu_directory(prov["gpu"], RESULTS_ROOT)


def record(name: str, module: str, argv: Sequence[str] | None, rows: list[dict], extra: dict | None = None) -> Path:
    """A lab module's rows saved as <its GPU's folder>/<name>.json, the provenance naming the command as a
    reader types it, `python -m <module> <argv>` (argv None: this process's arguments); the path printed."""
    from tutorial import results

    prov = results.provenance(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])
    path = results.save(name, rows, prov, records_dir(prov), extra=extra)
    print(f"recorded {path}")
    return path
