"""The tutorial's command line: python -m tutorial bench | autotune | table | figure | info | profile |
stability | soak | timeline | diff.

The hardware probes and the v5 sweeps are `python -m lab`; a stage runs alone as `python -m stages.<stage>`;
what ncu and compute-sanitizer run is `python -m tutorial.target`.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from deepgemm.config import parse_defines
from deepgemm.operands import capability_label
from tutorial import (
    ablation,
    autotune,
    bench,
    block_suite,
    call_suite,
    figures,
    first_call,
    results,
    shape_suite,
    soak,
    source_profile,
    stability,
    tables,
    timeline,
)
from tutorial.diff import kernel_diff
from tutorial.profile import profile_stage, top_stalls
from tutorial.runner import (
    DEFAULT_SETTLE_S,
    add_problem_args,
    gpu_available,
    log,
    print_rows,
    problems,
    run_command,
    show_recorded,
)
from tutorial.stages import (
    CUBLAS,
    LIBRARY,
    LIBRARY_SM80,
    missing_here,
    parse_stages,
    runs_here,
    stage_name,
    unavailable_line,
)
from tutorial.target import profiled_stages

SUITES = {
    "progression": "every stage and cuBLAS",
    "epilogue": "v5 plain and with bias + GELU, beside cuBLAS and cuBLASLt's fused bias + GELU",
    "pairs": "v5 and cuBLAS timed alternately six times, the order swapped each pair: x cuBLAS with its spread",
    "call": "deepgemm.gemm per call beside torch.matmul: torch and CuPy inputs, four layouts, host us per call, "
    "and the first call in a fresh process (cold and warm CuPy cache)",
    "shapes": "the shape table: deepgemm.gemm beside torch.matmul in CUDA graphs and per call, the table's pick and "
    "the heuristic's, then a Llama-3-8B decoder block in one graph (--part); --record merges into shapes.json "
    "(notebook 07)",
    "ablation": "each stage with its technique switched off (swizzle, stages, GROUP_M, multicast, persistence, "
    "fusion), timed beside cuBLAS and profiled; at 4096^3 (v0 2048^3) unless shapes are given",
}
PAIRED_STAGE = "v5_fused"  # the stage a progression run also alternates with cuBLAS (`--pairs`)
# A suite's shapes where neither --shapes nor --m/--n/--k is given, and its --settle where that is not given
# (DEFAULT_SETTLE_S for the others).
SUITE_SHAPES = {"call": call_suite.DEFAULT_SHAPES, "shapes": shape_suite.SHAPE_TABLE}
SUITE_SETTLE_S = {"call": call_suite.SETTLE_S, "shapes": shape_suite.SETTLE_S}
ONE_LINE_SUITES = ("shapes",)  # suites whose rows log one line each: numbered, not headed
MERGED_SUITES = ("shapes",)  # suites whose --record merges into the record (runs of parts build one)
PARTS = ("both", "table", "block")  # what the shapes suite runs: its table of problems, the decoder block
# Suites that run one kernel whatever --stages says: where this GPU cannot run it, the suite shows its record.
# (The call suite runs deepgemm.gemm as a caller does, on whichever kernel it picks here.)
SUITE_STAGES = {"epilogue": (bench.EPILOGUE_STAGE,), "pairs": (PAIRED_STAGE,), "shapes": (LIBRARY,)}
STAGE_SUITES = ("progression", "ablation")  # suites that run the --stages list: what this GPU cannot, the record shows


def run_suite(
    suite: str,
    stage_list: Sequence[str],
    shape: tuple[int, int, int],
    dtype: str,
    settle: float,
    log: Callable[[str], None] = log,
) -> list[dict]:
    """One suite's rows at one shape and dtype, logged through `log`."""
    m, n, k = shape
    if suite == "progression":
        return bench.bench_shape(stage_list, m, n, k, dtype, settle_s=settle, log=log)
    if suite == "epilogue":
        return bench.bench_epilogue(m, n, k, dtype, settle_s=settle, log=log)
    if suite == "call":
        return call_suite.bench_call(m, n, k, dtype, settle_s=settle, log=log)
    if suite == "shapes":
        return shape_suite.bench_shape_row(m, n, k, dtype, settle_s=settle, log=log)
    if suite == "pairs":
        return bench.bench_pairs(PAIRED_STAGE, m, n, k, dtype, settle_s=settle, log=log)
    if suite == "ablation":
        if not m == n == k:
            raise ValueError(f"the ablation suite runs M = N = K, not {m}x{n}x{k}")
        return [row for stage in stage_list for row in ablation.run(stage, dtype, size=m, settle_s=settle, log=log)]
    raise ValueError(f"unknown suite {suite!r}; the suites are {', '.join(SUITES)}")


def settle_s(args: argparse.Namespace, suite: str) -> float:
    """--settle, or where it is not given the suite's own (DEFAULT_SETTLE_S for most)."""
    return args.settle if args.settle is not None else SUITE_SETTLE_S.get(suite, DEFAULT_SETTLE_S)


def run_bench(stage_list: Sequence[str], args: argparse.Namespace, suite: str = "progression") -> list[dict]:
    if suite == "ablation":
        return run_ablations(stage_list, args)
    if getattr(args, "part", "both") == "block":
        return []
    rows: list[dict] = []
    todo = problems(args, SUITE_SHAPES.get(suite))
    started = time.monotonic()
    for i, (shape, dtype) in enumerate(todo, 1):
        if suite in ONE_LINE_SUITES:
            rows += run_suite(suite, stage_list, shape, dtype, settle_s(args, suite), numbered(i, len(todo), started))
            continue
        log(f"{suite} {'x'.join(map(str, shape))} {dtype}:")
        rows += run_suite(suite, stage_list, shape, dtype, settle_s(args, suite))
    return rows


def numbered(i: int, total: int, started: float) -> Callable[[str], None]:
    """A log whose lines start with the row's number and the seconds since `started` (time.monotonic), so
    that a run's pace shows against its device call's limit: '[ 12/102,  31 s] ...'."""
    width = len(str(total))
    return lambda line: log(f"[{i:>{width}}/{total}, {time.monotonic() - started:4.0f} s] {line}")


def run_block(args: argparse.Namespace) -> dict[str, list[dict]]:
    """After the shape table (or alone, --part block): the decoder block in one graph at each of its Ms, per
    dtype, as the record's "block" section ({} for other suites or with --part table)."""
    if args.suite != "shapes" or getattr(args, "part", "both") == "table":
        return {}
    dtypes = ["fp16", "bf16"] if args.dtype == "both" else [args.dtype]
    return {"block": [block_suite.bench_block(m, dtype, log=log) for dtype in dtypes for m in block_suite.BLOCK_MS]}


def run_ablations(stage_list: Sequence[str], args: argparse.Namespace) -> list[dict]:
    """The ablation suite: per stage and dtype at the stage's size (`ablation.size_of`), unless shapes are given."""
    rows: list[dict] = []
    for stage in stage_list:
        for shape, dtype in problems(args, str(ablation.size_of(stage))):
            log(f"ablation {stage} {'x'.join(map(str, shape))} {dtype}:")
            rows += run_suite("ablation", [stage], shape, dtype, settle_s(args, "ablation"))
    return rows


def run_pairs(stage_list: Sequence[str], args: argparse.Namespace) -> list[dict]:
    """After a progression: v5 and cuBLAS alternated `--pairs` times per shape and dtype, in the same run.

    A progression row per kernel cannot resolve v5 against cuBLAS to a percent or two (the clock drifts with
    the card's heat and power cap, and rows meet the card in different states); pairs, their order swapped
    each time, can.
    """
    pairs = getattr(args, "pairs", 0)
    if args.suite != "progression" or pairs <= 0 or PAIRED_STAGE not in stage_list:
        return []
    rows: list[dict] = []
    for (m, n, k), dtype in problems(args):
        log(f"pairs {m}x{n}x{k} {dtype}, v5 and cuBLAS alternated {pairs} times:")
        rows += bench.bench_pairs(PAIRED_STAGE, m, n, k, dtype, pairs=pairs, settle_s=settle_s(args, "pairs"), log=log)
    return rows


def run_first_call(args: argparse.Namespace) -> dict[str, list[dict]]:
    """After a call suite: the first call in a fresh process, cold and warm, as the record's "first_call"
    section ({} for other suites or with --no-first-call)."""
    if args.suite != "call" or getattr(args, "no_first_call", False):
        return {}
    m, n, k = first_call.SHAPE
    log(f"first call {m}x{n}x{k} {first_call.DTYPE}, {first_call.FRAMEWORK} inputs, in fresh processes:")
    return {"first_call": first_call.first_call_rows(log=log)}


def row_label(row: dict) -> str:
    """What names a row in a failure message: stage, the call suite's inputs and layouts, dtype and shape (a
    block's M)."""
    inputs = f" {row['framework']} {row['a_layout']} x {row['b_layout']}" if "framework" in row else ""
    shape = f"{row['m']}x{row['n']}x{row['k']}" if "n" in row else f"M = {row['m']}"
    return f"{row['stage']}{inputs} {row['dtype']} {shape}"


def print_first_call(sections: dict, table: Callable = results.format_table) -> None:
    """The call suite's first-call rows, where a record (or a run's extra sections) has them."""
    if sections.get("first_call"):
        print()
        print(table(sections["first_call"], results.FIRST_CALL_COLUMNS))


def print_block(sections: dict, table: Callable = results.format_table) -> None:
    """The shape table's decoder-block rows, where a record (or a run's extra sections) has them."""
    if sections.get("block"):
        print()
        print(table(sections["block"], results.BLOCK_COLUMNS))


def print_band_summary(rows: list[dict]) -> None:
    """The shape table by M band: x torch in graphs and per call, with the table's pick and the heuristic's."""
    summary = tables.band_summary(rows)
    print()
    print(results.format_table(summary, tables.BAND_COLUMNS))
    print("\n".join(tables.below_lines(summary)))


def print_record(name: str, rows: list[dict], extra: dict[str, list[dict]]) -> None:
    """A suite's rows in its columns, then its extra sections (the call suite's first call, the shape table's
    block) and, for the shape table, its summary by M band."""
    print_rows(rows, columns=results.TABLE_COLUMNS.get(name, results.COLUMNS))
    print_first_call(extra)
    print_block(extra)
    if name == "shapes":
        print_band_summary(rows)


def show_recorded_suite(name: str) -> int:
    """A suite's record (the call suite's with its first call); for the progression, then the pairs recorded
    in the same run, where there are some."""
    columns = results.TABLE_COLUMNS.get(name)
    record = show_recorded(name, (lambda rows: [results.format_table(rows, columns)]) if columns else None)
    print_first_call(record)
    print_block(record)
    if name == "shapes":
        print_band_summary(record["rows"])
    if name == "progression":
        pairs = results.load("pairs")
        if pairs["provenance"] == record["provenance"]:
            print(f"\n{PAIRED_STAGE} and cuBLAS alternated in the same run:")
            print_rows(pairs["rows"], rows_table=False)
    return 0


def show_recorded_stages(suite: str, missing: Sequence[str], dtypes: Sequence[str]) -> None:
    """After a live run without them: one line saying why `missing` did not run, then their rows (and cuBLAS's
    beside them) from the suite's record."""
    record = results.load(suite)
    print()
    print(unavailable_line(missing, f"showing the {record['provenance']['gpu']} record"))
    print(results.recorded_banner(record["provenance"], live=True))
    rows = [r for r in results.rows_of_stages(record["rows"], missing) if r["dtype"] in dtypes]
    columns = results.TABLE_COLUMNS.get(suite)
    print(results.format_table(rows, columns) if columns else results.format_table(rows))


def record_only(stage_list: Sequence[str]) -> bool:
    """Whether a command shows its record instead of running: where there is no GPU, or where this GPU cannot
    run one of `stage_list` (said in one line)."""
    if not gpu_available():
        return True
    missing = missing_here(stage_list)
    if missing:
        print(unavailable_line(missing, "showing the record"))
    return bool(missing)


def suite_stages(suite: str) -> tuple[str, ...]:
    """The kernels a suite runs whatever --stages says: for the shape table, the library kernel deepgemm.gemm
    runs on this GPU (the sm_80 one on any GPU but Hopper, or with DEEPGEMM_FORCE_SM80=1)."""
    if suite == "shapes" and gpu_available() and not runs_here(LIBRARY):
        return (LIBRARY_SM80,)
    return SUITE_STAGES.get(suite, ())


def cmd_bench(args: argparse.Namespace) -> int:
    if record_only(suite_stages(args.suite)):
        return show_recorded_suite(args.suite)
    asked = parse_stages(args.stages)
    missing = missing_here(asked) if args.suite in STAGE_SUITES else []
    chosen = [stage for stage in asked if stage not in missing]
    rows = run_bench(chosen, args, args.suite) if chosen else []
    pair_rows = run_pairs(chosen, args)
    extra = {**run_first_call(args), **run_block(args)}
    if chosen:
        print_record(args.suite, rows, extra)
    if pair_rows:
        print(f"\n{PAIRED_STAGE} and cuBLAS alternated in this run:")
        print_rows(pair_rows, rows_table=False)
    if missing:
        show_recorded_stages(args.suite, missing, ["fp16", "bf16"] if args.dtype == "both" else [args.dtype])
    if args.record:
        prov = results.provenance()
        if args.suite in MERGED_SUITES:
            name = shape_suite.record_name() if args.suite == "shapes" else args.suite
            path = results.save_merged(name, {"rows": rows, **extra}, prov)
            print(f"merged {len(rows)} rows and {len(extra.get('block', []))} block rows into {path}")
        else:
            print(f"recorded {len(rows)} rows in {results.save(args.suite, rows, prov, extra=extra)}")
        if pair_rows:
            print(f"recorded {len(pair_rows)} rows in {results.save('pairs', pair_rows, prov)}")
    rows = rows + pair_rows + extra.get("block", [])
    failed = [row_label(r) for r in rows if not r.get("passed")]
    if failed:
        print("FAILED verification: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


def cmd_autotune(args: argparse.Namespace) -> int:
    """Time the candidate configs per shape and dtype (`tutorial.autotune`); with --record, merge the best into
    results/<gpu>/autotune.json (rows of other shapes and dtypes kept, this run's provenance added)."""
    if record_only((LIBRARY,)):
        record = results.load(autotune.TABLE_NAME, command="python -m tutorial autotune --record")
        print(results.recorded_banner(record["provenance"]))
        print(results.format_table(record["rows"], AUTOTUNE_COLUMNS))
        return 0
    rows = autotune.tune(problems(args, shape_suite.SHAPE_TABLE), log=log)
    print(results.format_table(rows, AUTOTUNE_COLUMNS))
    if args.record:
        path = autotune.record(rows, results.provenance())
        print(f"recorded {len(rows)} rows in {path}")
    return 0


AUTOTUNE_COLUMNS = (
    ("dtype", "dtype", 0),
    ("m", "M", 0),
    ("n", "N", 0),
    ("k", "K", 0),
    ("name", "config", 0),
    ("us", "GPU us per call", 1),
    ("graph_us", "us in a graph", 1),
    ("torch_graph_us", "torch.matmul's", 1),
)


def cmd_table(args: argparse.Namespace) -> int:
    """A record as a Markdown table: the stage READMEs' (all columns), or with `--brief` the top README's
    (for the call suite, `tables.call_summary`)."""
    record = results.load(args.name)
    rows = record["rows"]
    if args.stage:
        rows = results.stage_rows(rows, stage_name(args.stage))
    columns = results.BRIEF_COLUMNS if args.brief else results.MARKDOWN_COLUMNS
    columns = results.TABLE_COLUMNS.get(args.name, columns)
    if args.brief and args.name == "call":  # per dtype and shape, the 8 layouts and frameworks in one row
        rows, columns = tables.call_summary(rows), tables.CALL_SUMMARY_COLUMNS
    if args.brief and args.name == "shapes":  # by M band, and the rows below 1.0x named
        rows, columns = tables.band_summary(rows), tables.BAND_COLUMNS
    print(results.markdown_table(rows, columns))
    print_first_call(record, results.markdown_table)
    print_block(record, results.markdown_table)
    return 0


README_FIGURE = results.RESULTS_DIR / "progression.png"


def cmd_figure(args: argparse.Namespace) -> int:
    """The README's progression figure, drawn from the recorded progression and saved as a PNG whose
    metadata names the record's commit (a CPU test checks it against the record)."""
    record = results.load("progression")
    fig = figures.progression_bars(record["rows"], args.dtype, int(args.shape))
    out = Path(args.out)
    fig.savefig(out, dpi=100, metadata={"Source": figures.figure_source(record["provenance"])})
    print(f"wrote {out}")
    return 0


def cmd_info(_: argparse.Namespace) -> int:
    if not gpu_available():
        print("no CUDA GPU visible: bench and notebooks show recorded results")
        return 0
    for key, value in results.provenance().items():
        print(f"{key:>10}: {value}")
    print(f"{'capability':>10}: {capability_label()}")  # as the code reads it (DEEPGEMM_CC where set)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    """The lesson of a stage: its kernel.cu against the previous stage's."""
    print("\n".join(kernel_diff(args.stage, args.against)))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    if args.source:
        return cmd_profile_source(args)
    if not gpu_available():
        show_recorded(args.name)
        return 0
    rows = []
    for stage in profiled_stages(args.stages):
        for (m, n, k), dtype in problems(args):
            row = profile_stage(stage, m, n, k, dtype)
            rows.append(row)
            stalls = ", ".join(f"{r} {v:.2f}" for r, v in top_stalls(row))
            print(f"{stage} {dtype} {m}x{n}x{k}: tensor pipe {row['tensor_pipe_active_pct']}%, stalls: {stalls}")
    if args.record:
        print(f"recorded in {results.save(args.name, rows, results.provenance())}")
    return 0


SOURCE_RECORD = "profile_source"
SOURCE_LINES_SHOWN = 12


def cmd_profile_source(args: argparse.Namespace) -> int:
    """`profile --source`: per kernel.cu line and warp role, where each stage's stall samples sit
    (`tutorial.source_profile`); without a GPU, the recorded run's."""
    name = SOURCE_RECORD if args.name == "profile" else args.name
    if not gpu_available():
        record = results.load(name, command="python -m tutorial profile --source --record")
        print(results.recorded_banner(record["provenance"]))
        rows = record["rows"]
    else:
        if CUBLAS in profiled_stages(args.stages):
            raise ValueError("--source reads a stage's kernel.cu: cuBLAS has none here")
        rows = [source_profile.profile_source(stage, m, n, k, dtype)
                for stage in profiled_stages(args.stages) for (m, n, k), dtype in problems(args)]  # fmt: skip
    for row in rows:
        print(f"\n{row['stage']} {row['dtype']} {row['m']}x{row['n']}x{row['k']}: stall samples by kernel.cu line")
        print(results.format_table(row["lines"][:SOURCE_LINES_SHOWN], SOURCE_LINE_COLUMNS))
    if args.record and gpu_available():
        print(f"recorded in {results.save(name, rows, results.provenance())}")
    return 0


SOURCE_LINE_COLUMNS = (
    ("role", "warps", 0),
    ("line", "line", 0),
    ("pct_samples", "% samples", 1),
    ("not_issued", "not issued", 0),
    ("instructions", "SASS", 0),
    ("source", "kernel.cu", 0),
)


def cmd_stability(args: argparse.Namespace) -> int:
    """A stage (or the library call, `--stage library`) for a while on one stream and then on several, every
    output compared bit for bit."""
    if not gpu_available():
        print("\n".join(soak.record_lines(results.load(stability.RECORD))))
        return 0
    rows = []
    for (m, n, k), dtype in problems(args):
        rows += stability.stability_rows(
            stage_name(args.stage), m, n, k, dtype, seconds=args.seconds, streams=args.streams, log=log
        )
    print("\n".join(stability.summary_lines(rows)))
    if args.record:
        print(f"merged into {stability.record(rows, results.provenance())}")
    return 0 if all(row["passed"] for row in rows) else 1


def cmd_soak(args: argparse.Namespace) -> int:
    """Every configuration of this GPU's autotune table in turn, on several streams from several threads, every
    output compared bit for bit (`tutorial.soak`); where this GPU does not run the sm_90a kernel, the record."""
    if record_only((LIBRARY,)):
        print("\n".join(soak.record_lines(results.load(stability.RECORD))))
        return 0
    dtypes = list(soak.DTYPES) if args.dtype == "both" else [args.dtype]
    rows = soak.soak(soak.gpu_cases(dtypes), args.seconds, streams=args.streams, threads=args.threads, log=log)
    print("\n".join(soak.summary_lines(rows)))
    if args.record:
        print(f"merged {len(rows)} rows into {stability.record(rows, results.provenance())}")
    return 0 if all(row["passed"] for row in rows) else 1


def timeline_lines(rows: list[dict]) -> list[str]:
    """Per stage, dtype and shape of a timeline run: CTA 0's cycles per role and the share spent waiting."""
    lines = []
    for key in dict.fromkeys((r["stage"], r["dtype"], r["m"], r["n"], r["k"]) for r in rows):
        stage, dtype, m, n, k = key
        lines.append(f"{stage} {dtype} {m}x{n}x{k}, CTA 0:")
        here = [r for r in rows if (r["stage"], r["dtype"], r["m"], r["n"], r["k"]) == key]
        lines.append(results.format_table(timeline.summary(here), timeline.SUMMARY_COLUMNS))
        lines.append(timeline.ring_line(here))
    return lines


def cmd_timeline(args: argparse.Namespace) -> int:
    """v4's or v5's pipeline over time from in-kernel clock stamps (`tutorial.timeline`); without a GPU the
    recorded run's summary."""
    knobs = parse_defines(args.knobs)
    if knobs and args.record:
        raise SystemExit("timeline.json holds the stages as shipped: a run with --knobs is printed, not recorded")
    if record_only(parse_stages(args.stages)):
        show_recorded("timeline", timeline_lines)
        return 0
    if knobs:
        print(f"built with {args.knobs} beside TIMELINE=1")
    rows = []
    for stage in parse_stages(args.stages):
        for (m, n, k), dtype in problems(args):
            rows += timeline.record(stage, m, n, k, dtype, knobs)
    print("\n".join(timeline_lines(rows)))
    if args.record:
        print(f"recorded in {results.save('timeline', rows, results.provenance())}")
    return 0


def suites_help() -> str:
    """The bench command's list of suites, one entry per suite, wrapped."""
    lines = ["suites:"]
    for name, what in SUITES.items():
        lines += textwrap.wrap(what, 96, initial_indent=f"  {name:<12}", subsequent_indent=" " * 14)
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tutorial", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    bench_cmd = sub.add_parser("bench", help="verify and time the stages beside cuBLAS", epilog=suites_help(),
                               formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    bench_cmd.add_argument("--stages", default="all", help="comma-separated, e.g. v0,v1,v2 (default: all)")
    bench_cmd.add_argument("--record", action="store_true", help="write results/<gpu>/<suite>.json (h200 on an H200)")
    bench_cmd.add_argument("--suite", choices=tuple(SUITES), default="progression", help="what to run (below)")
    bench_cmd.add_argument(
        "--pairs", type=int, default=6, help="progression only: then v5 and cuBLAS alternated this many times (0: not)"
    )
    bench_cmd.add_argument(
        "--no-first-call", action="store_true", help="call suite only: leave out the first call in fresh processes"
    )
    bench_cmd.add_argument(
        "--part", choices=PARTS, default="both", help="shapes suite only: its problems, the decoder block, or both"
    )
    add_problem_args(bench_cmd, settle=None)
    bench_cmd.set_defaults(run=cmd_bench)
    tune = sub.add_parser("autotune", help="time the library kernel's candidate configs per shape: its table")
    tune.add_argument("--record", action="store_true", help="merge into results/<gpu>/autotune.json and the package")
    add_problem_args(tune)
    tune.set_defaults(run=cmd_autotune)
    table = sub.add_parser("table", help="the recorded results as a Markdown table (the README's)")
    table.add_argument("--name", default="progression")
    table.add_argument("--stage", default=None, help="only this stage's rows and cuBLAS's beside them")
    table.add_argument("--brief", action="store_true", help="the top README's columns")
    table.set_defaults(run=cmd_table)
    figure = sub.add_parser("figure", help="the README's progression figure, from the record")
    figure.add_argument("--dtype", default="fp16")
    figure.add_argument("--shape", default="4096", help="M = N = K of the recorded rows to draw")
    figure.add_argument("--out", default=str(README_FIGURE))
    figure.set_defaults(run=cmd_figure)
    sub.add_parser("info", help="the GPU and software this would measure on").set_defaults(run=cmd_info)
    profile = sub.add_parser("profile", help="Nsight Compute metrics of one launch per stage")
    profile.add_argument("--stages", default="all", help='e.g. "all", "v4,v5", "v5,cublas" (cuBLAS\'s kernel)')
    profile.add_argument("--record", action="store_true", help="write results/<gpu>/<name>.json")
    profile.add_argument("--name", default="profile", help="the record's name (default: profile, or profile_source)")
    profile.add_argument(
        "--source", action="store_true", help="stall samples per SASS instruction and kernel.cu line, by warp role"
    )
    add_problem_args(profile, settle=False)
    profile.set_defaults(run=cmd_profile)
    steady = sub.add_parser(
        "stability", help="a stage or the library call for a while and on several streams, compared bit for bit"
    )
    steady.add_argument(
        "--stage", default="v5", help="v0 ... v5 (default: v5), or library: deepgemm.gemm through tutorial.library"
    )
    steady.add_argument("--seconds", type=float, default=60.0, help="length of the one-stream run")
    steady.add_argument("--streams", type=int, default=4, help="streams launching at once in the second run")
    steady.add_argument("--record", action="store_true", help="write results/<gpu>/stability.json")
    add_problem_args(steady, settle=False)
    steady.set_defaults(run=cmd_stability, dtype="fp16")
    soaker = sub.add_parser(
        "soak", help="deepgemm.gemm with every config of the autotune table, on streams from threads, bit for bit"
    )
    soaker.add_argument("--seconds", type=float, default=600.0, help="the whole soak, shared by its cases (each 1 s+)")
    soaker.add_argument("--streams", type=int, default=soak.STREAMS, help="streams launching at once")
    soaker.add_argument("--threads", type=int, default=soak.THREADS, help="threads driving them, each its share")
    soaker.add_argument("--dtype", choices=("fp16", "bf16", "both"), default="both")
    soaker.add_argument("--record", action="store_true", help="merge into results/<gpu>/stability.json")
    soaker.set_defaults(run=cmd_soak)
    line = sub.add_parser("timeline", help="v4's or v5's pipeline over time, from clock stamps in the kernel")
    line.add_argument("--stages", default="v4,v5", help="v4, v5 or both (default)")
    line.add_argument("--knobs", default="", help="NAME=VALUE,... built in beside TIMELINE=1, e.g. BOX_K=8")
    line.add_argument("--record", action="store_true", help="write results/<gpu>/timeline.json")
    add_problem_args(line, settle=False)
    line.set_defaults(run=cmd_timeline, dtype="fp16")
    diff = sub.add_parser(
        "diff",
        help="what a stage changes in the kernel (library: the library's kernel against v5; library_sm80: "
        "its kernel for GPUs without wgmma against v2)",
    )
    diff.add_argument("stage", help="v1 ... v5, library or library_sm80")
    diff.add_argument(
        "--against", default=None, help="default: the previous stage (v5 for library, v2 for library_sm80)"
    )
    diff.set_defaults(run=cmd_diff)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv)
