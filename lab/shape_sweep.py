"""What a lab sweep over chosen shapes shares (`lab.library_space`, `lab.pdl_pairs`, `lab.tile_order`,
`lab.cluster_k`, `lab.pingpong`): its arguments (--shapes, --dtype, --record), the record shown where there is
no GPU, every config compiled at once before anything is timed, a row per shape, and the rows recorded; and
for a sweep of configs beside a shape's table entry (`run_timed`), each config timed queued and in CUDA graphs
beside torch.matmul's."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import cupy

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from lab import record, recorded_dir
from tutorial import precompile
from tutorial.autotune import TUNED_LAYOUT, incumbent_of, time_config, time_in_graphs
from tutorial.bench import Workload
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
        show_recorded(name, summary, directory=recorded_dir(name), command=f"python -m {module}{named} --record")
        return 0
    shapes, device = [parse_shape(s) for s in args.shapes.split(",")], cupy.cuda.Device().id
    every = [c for shape in shapes for c in configs_at(shape, device)]
    print(f"{len(every)} configs; compiled in {precompile.warm(every, args.dtype, TUNED_LAYOUT):.0f} s", flush=True)
    rows = [row_at(shape, args.dtype, device) for shape in shapes]
    if args.record:
        record(name, module, None, rows)
    return 0 if all(e["passed"] for row in rows for e in row["candidates"] if "error" not in e) else 1


def entry_of(shape: Shape) -> GemmConfig:
    """The shipped table's entry for the shape (FP16's), else the heuristic's pick."""
    m, n, k = shape
    return incumbent_of(m, n, k, "fp16") or heuristic.choose(m, n, k, 132).config()


def timed_row(shape: Shape, dtype: str, configs: Sequence[GemmConfig], rounds: int) -> dict[str, Any]:
    """Each config verified and timed queued as autotune times it (the median of `rounds`), then every one that
    passed in CUDA graphs alternated with torch.matmul's (`tutorial.autotune.time_in_graphs`); the row printed."""
    m, n, k = shape
    work = Workload.make(m, n, k, dtype).in_layout(*TUNED_LAYOUT)
    timed = [time_config(cfg, work, rounds)[0] for cfg in configs]
    passed = [e for e in timed if e["passed"]]
    torch_us = time_in_graphs(passed, work) if passed else None
    row = {"dtype": dtype, "m": m, "n": n, "k": k, "torch_graph_us": torch_us, "candidates": timed}
    print("\n".join(graph_lines([row])), flush=True)
    return row


def graph_lines(rows: list[dict[str, Any]]) -> list[str]:
    """`timed_row`'s rows: torch's time in a graph, then each config's queued and graph times and its ratio."""
    out = []
    for row in rows:
        torch_us = row["torch_graph_us"]
        out.append(f"{row['dtype']} {row['m']}x{row['n']}x{row['k']}: torch {torch_us or 0:.2f} us in a graph")
        for e in row["candidates"]:
            if not e["passed"]:
                out.append(f"  {e['name']:<34} FAILED {e.get('error', '')}")
                continue
            graph = e.get("graph_us")
            ratio = f"x {torch_us / graph:.3f}" if graph and torch_us else ""
            out.append(f"  {e['name']:<34} {e['us']:7.2f} us queued, {graph or 0:7.2f} in a graph {ratio}")
    return out


def run_timed(
    argv: Sequence[str] | None,
    module: str,
    doc: str,
    default_shapes: str,
    variants: Callable[[Shape], list[GemmConfig]],
    rounds: int,
) -> int:
    """`run` for a sweep of `variants(shape)`, each row a `timed_row`, shown as `graph_lines`."""
    return run(argv, module, doc, default_shapes, lambda shape, _device: variants(shape),
               lambda shape, dtype, _device: timed_row(shape, dtype, variants(shape), rounds), graph_lines)  # fmt: skip
