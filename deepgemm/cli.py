"""Command line: `python -m deepgemm bench | table | info | profile | run-once | coalescer | gpc | stability |
diff`, and `python -m stages.<stage>`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from deepgemm import results
from deepgemm.diff import kernel_diff
from deepgemm.stages import parse_stages, stage_name

DEFAULT_SHAPE = 4096


def gpu_available() -> bool:
    import cupy

    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except cupy.cuda.runtime.CUDARuntimeError:
        return False


def parse_shape(text: str) -> tuple[int, int, int]:
    """'4096' -> (4096, 4096, 4096); '129x200x72' -> (129, 200, 72)."""
    parts = [int(x) for x in text.lower().split("x")]
    if len(parts) == 1:
        return parts[0], parts[0], parts[0]
    if len(parts) != 3:
        raise ValueError(f"a shape is N or MxNxK, got {text!r}")
    return parts[0], parts[1], parts[2]


def _shapes(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    if args.shapes:
        return [parse_shape(x) for x in args.shapes.split(",")]
    return [(args.m, args.n or args.m, args.k or args.m)]


def _dtypes(spec: str) -> list[str]:
    return ["fp16", "bf16"] if spec == "both" else [spec]


def _problems(args: argparse.Namespace) -> list[tuple[tuple[int, int, int], str]]:
    """Every (shape, dtype) the arguments name, shapes outermost."""
    return [(shape, dtype) for shape in _shapes(args) for dtype in _dtypes(args.dtype)]


def _add_problem_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--m", type=int, default=DEFAULT_SHAPE)
    parser.add_argument("--n", type=int, default=None, help="default: M")
    parser.add_argument("--k", type=int, default=None, help="default: M")
    parser.add_argument("--shapes", default=None, help="shapes instead of --m/--n/--k, e.g. 4096,8192 or 129x200x72")
    parser.add_argument("--dtype", choices=("fp16", "bf16", "both"), default="both")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds idle between timed rows")


SUITES = {
    "progression": "every stage and cuBLAS",
    "raster": "v4 with and without the grouped tile order (GROUP_M 8 vs 1)",
    "epilogue": "v5 plain and with bias + GELU, beside cuBLAS and cuBLASLt's fused bias + GELU",
    "v5_group_m": "v5 under several tile-order group sizes (GROUP_M 16, 1, 8)",
    "v5_cluster": "v5 with B multicast to clusters of two CTAs (CLUSTER_M 2) and without (1)",
    "v5_grid": "v5 with the persistent grid sized for full rounds of tiles (BALANCED_ROUNDS 1) and one CTA per SM (0)",
    "v5_gpc": "v5 with clusters of one GPC on neighbouring tiles (GPC_SLOTS 1) and in the plain order (0)",
    "pairs": "v5 and cuBLAS timed alternately six times, the order swapped each pair: x cuBLAS with its spread",
    "call": "deepgemm.gemm per call (padding copies included) beside the v5 kernel alone and cuBLAS",
    "shapes": "v5 and cuBLAS at the shapes given (notebook 07 sweeps M at N = K = 4096)",
}


def _log(line: str) -> None:
    print(line, flush=True)


CONFIG_SWEEPS = {  # suite: (stage, knob, settings; the first is the stage's default)
    "raster": ("v4_pipeline_swizzle", "GROUP_M", (8, 1)),
    "v5_group_m": ("v5_fused", "GROUP_M", (16, 1, 8)),
    "v5_cluster": ("v5_fused", "CLUSTER_M", (2, 1)),
    "v5_grid": ("v5_fused", "BALANCED_ROUNDS", (1, 0)),
    "v5_gpc": ("v5_fused", "GPC_SLOTS", (1, 0)),
}


def _run_suite(suite: str, stages: Sequence[str], shape: tuple[int, int, int], dtype: str, settle: float) -> list[dict]:
    from deepgemm import bench
    from deepgemm.config import GemmConfig

    m, n, k = shape
    if suite == "progression":
        return bench.bench_shape(stages, m, n, k, dtype, settle_s=settle, log=_log)
    if suite in CONFIG_SWEEPS:
        stage, knob, settings = CONFIG_SWEEPS[suite]
        configs = {f"{knob}={v}": GemmConfig(extra={knob: v}) for v in settings}
        return bench.bench_configs(stage, configs, m, n, k, dtype, settle_s=settle, log=_log)
    if suite == "epilogue":
        return bench.bench_epilogue(m, n, k, dtype, settle_s=settle, log=_log)
    if suite == "call":
        return bench.bench_call(m, n, k, dtype, settle_s=settle, log=_log)
    if suite == "shapes":
        return bench.bench_shape(["v5_fused"], m, n, k, dtype, settle_s=settle, log=_log)
    if suite == "pairs":
        return bench.bench_pairs("v5_fused", m, n, k, dtype, settle_s=settle, log=_log)
    raise ValueError(f"unknown suite {suite!r}; the suites are {', '.join(SUITES)}")


PAIRED_STAGE = "v5_fused"  # the stage a progression run also alternates with cuBLAS (`--pairs`)


def _run_bench(stages: Sequence[str], args: argparse.Namespace, suite: str = "progression") -> list[dict]:
    rows: list[dict] = []
    for shape, dtype in _problems(args):
        _log(f"{suite} {'x'.join(map(str, shape))} {dtype}:")
        rows += _run_suite(suite, stages, shape, dtype, args.settle)
    return rows


def _run_pairs(stages: Sequence[str], args: argparse.Namespace) -> list[dict]:
    """After a progression: v5 and cuBLAS alternated `--pairs` times per shape and dtype, in the same run.

    A progression row per kernel cannot resolve v5 against cuBLAS to a percent or two (the clock drifts with
    the card's heat and power cap, and rows meet the card in different states); pairs, their order swapped
    each time, can.
    """
    pairs = getattr(args, "pairs", 0)
    if args.suite != "progression" or pairs <= 0 or PAIRED_STAGE not in stages:
        return []
    from deepgemm import bench

    rows: list[dict] = []
    for (m, n, k), dtype in _problems(args):
        _log(f"pairs {m}x{n}x{k} {dtype}, v5 and cuBLAS alternated {pairs} times:")
        rows += bench.bench_pairs(PAIRED_STAGE, m, n, k, dtype, pairs=pairs, settle_s=args.settle, log=_log)
    return rows


def print_rows(rows: Sequence[dict], rows_table: bool = True) -> None:
    """The rows as a table; for pair rows, then each pair's ratio summed up (or only that: rows_table False)."""
    if rows_table:
        print(results.format_table(rows))
    summary = results.pair_summary(rows)
    if summary:
        print(results.format_table(summary, results.PAIR_COLUMNS))


def show_recorded(name: str = "progression", summary: Callable[[list[dict]], list[str]] | None = None) -> int:
    """What a GPU-less machine prints: the recorded run, as a table or as `summary`'s lines, and how it was made.
    For the progression, then the pairs recorded in the same run, where there are some."""
    record = results.load(name)
    print(results.recorded_banner(record["provenance"]))
    if summary is None:
        print_rows(record["rows"])
    else:
        print("\n".join(summary(record["rows"])))
    print(f"(command: {record['provenance']['command']})")
    if name == "progression":
        pairs = results.load("pairs")
        if pairs["provenance"] == record["provenance"]:
            print(f"\n{PAIRED_STAGE} and cuBLAS alternated in the same run:")
            print_rows(pairs["rows"], rows_table=False)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    if not gpu_available():
        return show_recorded(args.suite)
    stages = parse_stages(args.stages)
    rows = _run_bench(stages, args, args.suite)
    pair_rows = _run_pairs(stages, args)
    print_rows(rows)
    if pair_rows:
        print(f"\n{PAIRED_STAGE} and cuBLAS alternated in this run:")
        print_rows(pair_rows, rows_table=False)
    if args.record:
        prov = results.provenance()
        print(f"recorded {len(rows)} rows in {results.save(args.suite, rows, prov)}")
        if pair_rows:
            print(f"recorded {len(pair_rows)} rows in {results.save('pairs', pair_rows, prov)}")
    rows = rows + pair_rows
    failed = [f"{r['stage']} {r['dtype']} {r['m']}x{r['n']}x{r['k']}" for r in rows if not r.get("passed")]
    if failed:
        print("FAILED verification: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    """The recorded progression as the Markdown table the README carries."""
    record = results.load(args.name)
    rows = record["rows"]
    if args.stage:
        rows = results.stage_rows(rows, stage_name(args.stage))
    print(results.markdown_table(rows))
    return 0


def cmd_info(_: argparse.Namespace) -> int:
    if not gpu_available():
        print("no CUDA GPU visible: bench and notebooks show recorded results")
        return 0
    for key, value in results.provenance().items():
        print(f"{key:>10}: {value}")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    """The lesson of a stage: its kernel.cu against the previous stage's."""
    print("\n".join(kernel_diff(args.stage, args.against)))
    return 0


def cmd_run_once(args: argparse.Namespace) -> int:
    """Two launches of one stage on random inputs: the target `profile` hands to ncu."""
    import cupy

    from deepgemm import stages
    from deepgemm.bench import cublas_launch
    from deepgemm.check import random_problem
    from deepgemm.dtypes import input_dtype
    from deepgemm.profile import CUBLAS

    for stage in _profiled(args.stage):
        for m, n, k in _shapes(args):
            a, b = random_problem(m, n, k, input_dtype(args.dtype), seed=0)
            if stage == CUBLAS:
                launch = cublas_launch(a, b, cupy.empty((m, n), dtype=a.dtype))
            else:
                launch = stages.load(stage).plan(a, b)
            launch()
            launch()
            cupy.cuda.Device().synchronize()
    return 0


def _profiled(spec: str) -> list[str]:
    """Stages as parse_stages reads them, plus "cublas" anywhere in the list (its kernel, profiled alike)."""
    from deepgemm.profile import CUBLAS

    parts = [part.strip() for part in spec.split(",") if part.strip()]
    chosen = parse_stages(",".join(p for p in parts if p != CUBLAS)) if parts != [CUBLAS] else []
    return chosen + ([CUBLAS] if CUBLAS in parts else [])


def cmd_profile(args: argparse.Namespace) -> int:
    from deepgemm.profile import profile_stage, top_stalls

    if not gpu_available():
        return show_recorded(args.name)
    rows = []
    for stage in _profiled(args.stages):
        for (m, n, k), dtype in _problems(args):
            row = profile_stage(stage, m, n, k, dtype)
            rows.append(row)
            stalls = ", ".join(f"{r} {v:.2f}" for r, v in top_stalls(row))
            print(f"{stage} {dtype} {m}x{n}x{k}: tensor pipe {row['tensor_pipe_active_pct']}%, stalls: {stalls}")
    if args.record:
        print(f"recorded in {results.save(args.name, rows, results.provenance())}")
    return 0


def cmd_coalescer(args: argparse.Namespace) -> int:
    from deepgemm import coalescer

    if args.run_plan:  # the target ncu profiles: the pairs of one plan, launched once each
        coalescer.run_pairs(json.loads(Path(args.run_plan).read_text()), warm=args.warm)
        return 0
    if not gpu_available():
        return show_recorded("coalescer", coalescer.summary_lines)
    groups, rows = coalescer.probe()
    print(f"{len(groups)} SM groups from clusters: sizes {sorted(len(g) for g in groups)}")
    print("\n".join(coalescer.summary_lines(rows)))
    if args.record:
        prov = results.provenance()
        print(f"recorded in {results.save('coalescer', rows, prov)}")
        gpcs = [{"group": i, "sms": group} for i, group in enumerate(groups)]
        print(f"recorded in {results.save('gpc_map', gpcs, prov)}")
    return 0


def cmd_gpc(args: argparse.Namespace) -> int:
    from deepgemm import gpc

    if not gpu_available():
        return show_recorded("gpc_placement", gpc.placement_lines)
    rows = [row for clusters in gpc.PLACEMENT_GRIDS for row in gpc.placement_rows(clusters)]
    print("\n".join(gpc.placement_lines(rows)))
    if args.record:
        print(f"recorded in {results.save('gpc_placement', rows, results.provenance())}")
    return 0


def cmd_stability(args: argparse.Namespace) -> int:
    """A stage for a while on one stream and then on several, every output compared bit for bit."""
    from deepgemm import stability

    if not gpu_available():
        return show_recorded("stability", stability.summary_lines)
    rows = []
    for (m, n, k), dtype in _problems(args):
        rows += stability.stability_rows(
            stage_name(args.stage), m, n, k, dtype, seconds=args.seconds, streams=args.streams, log=_log
        )
    print("\n".join(stability.summary_lines(rows)))
    if args.record:
        print(f"recorded in {results.save('stability', rows, results.provenance())}")
    return 0 if all(row["passed"] for row in rows) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m deepgemm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="verify and time the stages beside cuBLAS")
    bench.add_argument("--stages", default="all", help="comma-separated, e.g. v0,v1,v2 (default: all)")
    bench.add_argument("--record", action="store_true", help="write results/h200/<suite>.json")
    bench.add_argument("--suite", choices=tuple(SUITES), default="progression", help=str(SUITES))
    bench.add_argument(
        "--pairs", type=int, default=6, help="progression only: then v5 and cuBLAS alternated this many times (0: not)"
    )
    _add_problem_args(bench)
    bench.set_defaults(run=cmd_bench)
    table = sub.add_parser("table", help="the recorded results as a Markdown table (the README's)")
    table.add_argument("--name", default="progression")
    table.add_argument("--stage", default=None, help="only this stage's rows and cuBLAS's beside them")
    table.set_defaults(run=cmd_table)
    sub.add_parser("info", help="the GPU and software this would measure on").set_defaults(run=cmd_info)
    profile = sub.add_parser("profile", help="Nsight Compute metrics of one launch per stage")
    profile.add_argument("--stages", default="all", help='e.g. "all", "v4,v5", "v5,cublas" (cuBLAS\'s kernel)')
    profile.add_argument("--record", action="store_true", help="write results/h200/<name>.json")
    profile.add_argument("--name", default="profile", help="the record's name (default: profile)")
    _add_problem_args(profile)
    profile.set_defaults(run=cmd_profile)
    once = sub.add_parser("run-once", help="two launches of one stage (the target ncu profiles)")
    once.add_argument("--stage", required=True, help="one or more, e.g. v3,v4,v5")
    _add_problem_args(once)
    once.set_defaults(run=cmd_run_once)
    probe = sub.add_parser("coalescer", help="which SMs' identical L2 reads are merged (Nsight Compute)")
    probe.add_argument("--record", action="store_true", help="write results/h200/coalescer.json and gpc_map.json")
    probe.add_argument("--run-plan", default=None, help=argparse.SUPPRESS)  # ncu's target: pairs from a JSON file
    probe.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)  # with --run-plan: data in L2 first
    probe.set_defaults(run=cmd_coalescer)
    where = sub.add_parser("gpc", help="where v5's persistent clusters land, their GPCs and their tile slots")
    where.add_argument("--record", action="store_true", help="write results/h200/gpc_placement.json")
    where.set_defaults(run=cmd_gpc)
    steady = sub.add_parser(
        "stability", help="a stage for a while and on several streams, outputs compared bit for bit"
    )
    steady.add_argument("--stage", default="v5", help="the stage (default: v5)")
    steady.add_argument("--seconds", type=float, default=60.0, help="length of the one-stream run")
    steady.add_argument("--streams", type=int, default=4, help="streams launching at once in the second run")
    steady.add_argument("--record", action="store_true", help="write results/h200/stability.json")
    _add_problem_args(steady)
    steady.set_defaults(run=cmd_stability, dtype="fp16")
    diff = sub.add_parser("diff", help="what a stage changes in the kernel")
    diff.add_argument("stage")
    diff.add_argument("--against", default=None, help="default: the previous stage")
    diff.set_defaults(run=cmd_diff)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, TypeError, RuntimeError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def run_stage(stage: str, argv: Sequence[str] | None = None) -> None:
    """`python -m stages.<stage>`: check one stage and time it beside cuBLAS."""
    parser = argparse.ArgumentParser(prog=f"python -m stages.{stage}")
    _add_problem_args(parser)
    args = parser.parse_args(argv)
    if not gpu_available():
        sys.exit(f"{stage} needs a CUDA GPU and none is visible here")
    rows = _run_bench([stage], args)
    print(results.format_table(rows))
    sys.exit(0 if all(r["passed"] for r in rows) else 1)
