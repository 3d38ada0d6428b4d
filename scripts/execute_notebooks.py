"""Execute the notebooks in order and save each with its outputs: what a GPU runner keeps as an artifact.

    python3 scripts/execute_notebooks.py [--out out/notebooks] [notebooks/06_v5_fused.ipynb ...]

nbval checks the cells but keeps no outputs; this runs every cell (those nbval skips too: on a GPU they
re-measure) in the notebooks' folder, with the current Python as the kernel, and writes the executed
copies. A cell that raises stops that notebook, is saved with its traceback, and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

REPO = Path(__file__).resolve().parent.parent
CELL_TIMEOUT_S = 600


def execute(path: Path, out_dir: Path) -> bool:
    """Run one notebook top to bottom and write it to out_dir; False when a cell raised."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})  # fmt: skip
    try:
        client.execute()
        passed = True
    except CellExecutionError as err:
        print(f"{path.name}: {str(err).splitlines()[0]}", file=sys.stderr)
        passed = False
    nbformat.write(notebook, out_dir / path.name)
    return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook, in order")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "notebooks")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((REPO / "notebooks").glob("*.ipynb"))
    args.out.mkdir(parents=True, exist_ok=True)
    failed = [path.name for path in paths if not execute(path, args.out)]
    print(f"executed {len(paths) - len(failed)} of {len(paths)} notebooks into {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
