"""The lab: hardware probes and research sweeps around the stages and the library kernel, kept out of the
installed package.

Nothing in deepgemm/, stages/ or tutorial/ imports it; it imports them. Run it as `python -m lab <command>`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results" / "h200"


def record(name: str, module: str, argv: Sequence[str] | None, rows: list[dict], extra: dict | None = None) -> Path:
    """A lab module's rows saved as RESULTS_DIR/<name>.json, the provenance naming the command as a reader
    types it, `python -m <module> <argv>` (argv None: this process's arguments); the path printed."""
    from tutorial import results  # the lab imports the tutorial, never the other way round

    prov = results.provenance(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])
    path = results.save(name, rows, prov, RESULTS_DIR, extra=extra)
    print(f"recorded {path}")
    return path
