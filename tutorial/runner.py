"""What every command line shares: the problem arguments, printing rows or a record, and a stage's runner.

`python -m stages.<stage>` runs `run_stage`; `python -m tutorial` (tutorial.cli) and `python -m lab` build
their commands from the same pieces.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from tutorial import results
from tutorial.bench import bench_shape
from tutorial.results import gpu_available
from tutorial.stages import missing_here, unavailable_line

DEFAULT_SHAPE = 4096
DEFAULT_SETTLE_S = 1.0
Shape = tuple[int, int, int]


def parse_shape(text: str) -> Shape:
    """'4096' -> (4096, 4096, 4096); '129x200x72' -> (129, 200, 72)."""
    parts = [int(x) for x in text.lower().split("x")]
    if len(parts) == 1:
        return parts[0], parts[0], parts[0]
    if len(parts) != 3:
        raise ValueError(f"a shape is N or MxNxK, got {text!r}")
    return parts[0], parts[1], parts[2]


def add_problem_args(parser: argparse.ArgumentParser, settle: float | bool | None = DEFAULT_SETTLE_S) -> None:
    """--m/--n/--k or --shapes, --dtype and --settle: the problems a command runs (see `problems`).

    `settle` is --settle's default; None where the command picks one per suite; False where the command times
    nothing (no --settle).
    """
    parser.add_argument("--m", type=int, default=None, help=f"default: {DEFAULT_SHAPE} (or the suite's shapes)")
    parser.add_argument("--n", type=int, default=None, help="default: M")
    parser.add_argument("--k", type=int, default=None, help="default: M")
    parser.add_argument("--shapes", default=None, help="shapes instead of --m/--n/--k, e.g. 4096,8192 or 129x200x72")
    parser.add_argument("--dtype", choices=("fp16", "bf16", "both"), default="both")
    if settle is False:
        return
    shown = f"{settle}" if settle is not None else f"{DEFAULT_SETTLE_S}, or the suite's"
    parser.add_argument("--settle", type=float, default=settle, help=f"seconds idle between timed rows ({shown})")


def shapes(args: argparse.Namespace, default: str | None = None) -> list[Shape]:
    """--shapes, else --m/--n/--k; where neither is given, `default` (shapes as --shapes spells them) or
    DEFAULT_SHAPE cubed."""
    given = args.m is not None or args.n is not None or args.k is not None
    spec = args.shapes or (None if given else default)
    if spec:
        return [parse_shape(x) for x in spec.split(",")]
    m = args.m or DEFAULT_SHAPE
    return [(m, args.n or m, args.k or m)]


def problems(args: argparse.Namespace, default_shapes: str | None = None) -> list[tuple[Shape, str]]:
    """Every (shape, dtype) the arguments name (`shapes`), shapes outermost."""
    dtypes = ["fp16", "bf16"] if args.dtype == "both" else [args.dtype]
    return [(shape, dtype) for shape in shapes(args, default_shapes) for dtype in dtypes]


def live_for(*stage_list: str) -> bool:
    """A notebook's LIVE: whether its `if LIVE:` cells re-measure here, where there is a GPU that runs every
    stage of `stage_list` (`tutorial.stages.runs_here`). A GPU that cannot is told in one line; without a GPU
    nothing is printed (the record's banner says so)."""
    if not gpu_available():
        return False
    missing = missing_here(stage_list)
    if missing:
        print(unavailable_line(missing, "the `if LIVE:` cells do not run, and every table shows the record"))
    return not missing


def log(line: str) -> None:
    print(line, flush=True)


def print_rows(
    rows: Sequence[dict], rows_table: bool = True, columns: Sequence[tuple[str, str, int]] = results.COLUMNS
) -> None:
    """The rows as a table of `columns`; for pair rows, then each pair's ratio summed up (or only that:
    rows_table False)."""
    if rows_table:
        print(results.format_table(rows, columns))
    summary = results.pair_summary(rows)
    if summary:
        print(results.format_table(summary, results.PAIR_COLUMNS))


def show_recorded(
    name: str,
    summary: Callable[[list[dict]], list[str]] | None = None,
    directory: Path = results.RESULTS_DIR,
    command: str | None = None,
) -> dict:
    """What a GPU-less machine prints: the recorded run, as a table or as `summary`'s lines, and how it was
    made (`command_lines`). Returns the record. `command` is the one that writes it today (by default the
    project's own for a record of that name, `results.recording_command`), also named where it is missing."""
    today = command or results.recording_command(name)
    record = results.load(name, directory, command=today)
    print(results.recorded_banner(record["provenance"]))
    if summary is None:
        print_rows(record["rows"])
    else:
        print("\n".join(summary(record["rows"])))
    print("\n".join(command_lines(record["provenance"]["command"], today)))
    return record


def program(command: str) -> str:
    """What runs a command line: 'python -m tutorial bench --record' -> 'python -m tutorial'."""
    return " ".join(command.split()[:3])


def command_lines(recorded: str, today: str) -> list[str]:
    """The command a record was made with and, where that program no longer writes it (the harness was
    `python -m deepgemm` before it moved to `tutorial/`) or no command can any more, what stands today."""
    lines = [f"(command: {recorded})"]
    if results.COMMAND_GONE in today:
        lines.append(f"(note: {today})")
    elif program(recorded) != program(today):
        lines.append(f"(today: {today})")
    return lines


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse `argv` and run the command chosen (its `run` default); a bad value, a missing GPU or record
    prints as one line of error and exit status 2, not a traceback."""
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, TypeError, RuntimeError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def run_stage(stage: str, argv: Sequence[str] | None = None) -> None:
    """`python -m stages.<stage>`: check one stage and time it beside cuBLAS."""
    parser = argparse.ArgumentParser(prog=f"python -m stages.{stage}")
    add_problem_args(parser)
    args = parser.parse_args(argv)
    if not gpu_available():
        sys.exit(f"{stage} needs a CUDA GPU and none is visible here")
    rows = []
    for (m, n, k), dtype in problems(args):
        log(f"{stage} {m}x{n}x{k} {dtype}:")
        rows += bench_shape([stage], m, n, k, dtype, settle_s=args.settle, log=log)
    print(results.format_table(rows))
    sys.exit(0 if all(r["passed"] for r in rows) else 1)
