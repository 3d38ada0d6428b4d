"""The lab: hardware probes and research sweeps around the stages and the library kernel, kept out of the
installed package.

Nothing in deepgemm/, stages/ or tutorial/ imports it; it imports them. Run it as `python -m lab <command>`.
"""

from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results" / "h200"
