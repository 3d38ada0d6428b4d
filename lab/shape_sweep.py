"""What a lab sweep over chosen shapes shares (`lab.library_space`, `lab.pdl_pairs`, `lab.tile_order`): its
arguments (--shapes, --dtype, --record), the record shown where there is no GPU, every config compiled at once
before anything is timed, a row per shape, and the rows recorded."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import cupy

from deepgemm.config import GemmConfig
from lab import RESULTS_DIR, record
from tutorial import precompile
from tutorial.autotune import TUNED_LAYOUT
from tutorial.runner import Shape, gpu_available, parse_shape, show_recorded


def run(
    argv: Sequence[str] | None,
    module: str,
    doc: str,
    default_shapes: str,
    configs_at: Callable[[Shape, int], list[GemmConfig]],
    row_at: Callable[[Shape, str, int], dict],
    summary: Callable[[list[dict]], list[str]] | None = None,
) -> int:
    """`python -m <module>`, recording as `<module>`'s last name: on a GPU, each shape's `configs_at(shape,
    device)` compiled, then `row_at(shape, dtype, device)` for each shape; without one, the record shown (as
    `summary`'s lines, else as a table). 1 where a config the problem could take failed verification."""
    name = module.rsplit(".", 1)[-1]
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    parser.add_argument("--shapes", default=default_shapes, help="MxNxK,... (default: %(default)s)")
    parser.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    parser.add_argument("--record", action="store_true", help=f"write lab/results/<gpu>/{name}.json")
    parser.add_argument("--name", default=name, help="the record's name, for a sweep kept beside the default's")
    args = parser.parse_args(argv)
    name = args.name
    if not gpu_available():
        named = "" if name == module.rsplit(".", 1)[-1] else f" --name {name}"
        show_recorded(name, summary, directory=RESULTS_DIR, command=f"python -m {module}{named} --record")
        return 0
    shapes, device = [parse_shape(s) for s in args.shapes.split(",")], cupy.cuda.Device().id
    every = [c for shape in shapes for c in configs_at(shape, device)]
    print(f"{len(every)} configs; compiled in {precompile.warm(every, args.dtype, TUNED_LAYOUT):.0f} s", flush=True)
    rows = [row_at(shape, args.dtype, device) for shape in shapes]
    if args.record:
        record(name, module, None, rows)
    return 0 if all(e["passed"] for row in rows for e in row["candidates"] if "error" not in e) else 1
