"""python -m lab sweep | show | coalescer | gpc: the v5 sweeps, the lab's records, and the hardware probes.

Without a GPU each command prints its record from lab/results/h200/ instead of measuring.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from lab import (
    RESULTS_DIR,
    call_regime,
    coalescer,
    gpc,
    kernel_probe,
    records_dir,
    rounds,
    shape_sweep,
    sweeps,
    tile_order,
)
from tutorial import results
from tutorial.bench import bench_variants
from tutorial.runner import add_problem_args, gpu_available, log, print_rows, problems, run_command, show_recorded

GONE = results.COMMAND_GONE  # how COMMANDS marks a record that nothing here can write again
COMMANDS = {  # record -> the command that writes it, or the one that wrote it, where and why it is gone
    **{name: f"python -m lab sweep {name} --record" for name in sweeps.SWEEPS},
    "coalescer": "python -m lab coalescer --record",
    "gpc_map": "python -m lab coalescer --record",
    "gpc_placement": "python -m lab gpc --record",
    "call_host": "python -m lab.call_host --against .old --record (.old: a checkout of the commit compared with)",
    "library_space": "python -m lab.library_space --record",
    "library_space_mid_m": "python -m lab.library_space --shapes ... --name library_space_mid_m --record (the "
    "record's provenance has the shapes)",
    "library_space_mid_m2": "python -m lab.library_space --shapes ... --name library_space_mid_m2 --record (the "
    "record's provenance has the shapes)",
    "heuristic_refit": "python -m tutorial bench --suite shapes --part table --shapes ... --record at commit 2a720c5, "
    f"whose heuristic (a refit of every constant with the L2 merge) was reverted; {GONE} (notes/heuristic_regret.md)",
    "op_host": "python -m lab.op_host --record",
    "pdl_pairs": "python -m lab.pdl_pairs --record",
    "kernel_probe": "python -m lab.kernel_probe --record",
    "kernel_probe_two_parts": "python -m lab.kernel_probe --variants two_parts,swap_tma,stamps --shapes ... --name "
    "kernel_probe_two_parts --record (the record's provenance has the shapes) at commit 86752d4, whose kernel stored "
    f"swapped tiles by pointer and whose probe had the swap_tma variant that added the store boxes; {GONE} "
    "(`--variants swap_pointer` asks it the other way round)",
    "kernel_probe_swap_tma_bf16": "python -m lab.kernel_probe --variants swap_tma --dtype bf16 --shapes ... --name "
    "kernel_probe_swap_tma_bf16 --record (the record's provenance has the shapes) at commit 86752d4, before the "
    f"kernel had the swapped store boxes; {GONE} (`--variants swap_pointer` asks it the other way round)",
    "kernel_probe_swap_tma": "python -m lab.kernel_probe --variants swap_tma --shapes S --config C --name NAME "
    "--record for each row (its `command`), the rows gathered in one record, at commit 86752d4, before the kernel "
    f"had the swapped store boxes; {GONE} (`--variants swap_pointer` asks it the other way round)",
    "kernel_probe_swap_pointer": "python -m lab.kernel_probe --variants swap_pointer --shapes ... --name "
    "kernel_probe_swap_pointer --record (the record's provenance has the shapes)",
    "kernel_probe_late_trigger": "python -m lab.kernel_probe --variants late_trigger --shapes ... --name "
    "kernel_probe_late_trigger --record (the record's provenance has the shapes) at commit 01bc00a, whose kernel "
    f"triggered PDL at its start and whose probe's variant moved the trigger to the producer's last load; {GONE} "
    "(`--variants early_trigger` asks it the other way round)",
    "kernel_probe_early_trigger_256": "python -m lab.kernel_probe --variants early_trigger --shapes 256x7168x16384 "
    "--name kernel_probe_early_trigger_256 --record",
    "kernel_probe_early_prefetch": "python -m lab.kernel_probe --variants early_prefetch --shapes "
    "1x28672x4096,1x4096x4096,16x6144x4096 --name kernel_probe_early_prefetch --record",
    "kernel_probe_stamps_512": "python -m lab.kernel_probe --variants stamps --shapes 512x4096x4096 --config "
    "'n128 c1 s1 st6,swap n128 c1 s1 st6,n128 c2 s1 st6' --name kernel_probe_stamps_512 --record",
    "kernel_probe_stamps_128": "python -m lab.kernel_probe --variants stamps --shapes 128x2112x7168 --name "
    "kernel_probe_stamps_128 --record",
    "kernel_probe_two_ctas": "python -m lab.kernel_probe --variants two_ctas --shapes 1x28672x4096,16x28672x4096,"
    "16x24576x1536 --name kernel_probe_two_ctas --record",
    "kernel_probe_l2_prefetch": "python -m lab.kernel_probe --variants l2_prefetch,l2_prefetch_2x,l2_prefetch_early "
    "--shapes 1x4096x4096,1x6144x4096,1x28672x4096,16x28672x4096,16x24576x1536 --name kernel_probe_l2_prefetch "
    "--record",
    "kernel_probe_stamps_pdl": "python -m lab.kernel_probe --variants stamps --shapes 1x28672x4096 --config "
    "'swap m256 n8 c1 s1 st6 jit,swap m256 n8 c1 s1 st6 pdl jit' --name kernel_probe_stamps_pdl --record",
    "tile_order": "python -m lab.tile_order --record",
    "cluster_k": "python -m lab.cluster_k --record",
    "pingpong": "python -m lab.pingpong --record",
    "call_regime": "python -m lab.call_regime --record",
    "pingpong_64": "python -m lab.pingpong --tiles 64 --shapes 2048x7168x2048,2048x2112x7168,1536x28672x4096,"
    "512x28672x4096,2048x7168x16384,4096x2112x7168,1024x4096x4096,4096x4096x4096,512x7168x2048,2048x4096x7168 "
    "--name pingpong_64 --record (the record's provenance has the command as it ran, before --tiles, at ba32821)",
    "dynamic_units": "python -m lab.dynamic_units --record at commit 4f7b117, whose library kernel took its units "
    f"from a counter (DYNAMIC_UNITS); it never ran faster, and was taken out; {GONE} (notes/streaming_tail.md)",
    "kernel_probe_read_wait": "python -m lab.kernel_probe --variants read_wait --shapes ... --name "
    "kernel_probe_read_wait --record (the record's provenance has the shapes)",
    "kernel_probe_swap_tma_read_wait": "python -m lab.kernel_probe --variants swap_tma,swap_tma_read_wait --shapes S "
    "--config C --name NAME --record for each row (its `command`), the rows gathered in one record, at commit "
    f"e28bf50, before the kernel had the swapped store boxes; {GONE} (`--variants swap_pointer,read_wait`)",
    "profile_mid_m": "python -m lab.profile_configs --shape ... --configs ... --record profile_mid_m (the record's "
    "provenance has the shapes and configs)",
    "train_gemms": "python -m lab.train_gemms --record",
    "sm80_variants": "python -m lab.sm80_variants --record",
    "sm80_space": "python -m lab.sm80_space --record",
    "v5_gpc": "python -m deepgemm bench --suite v5_gpc --record at commit ba931e2, while v5 took a GPC slot "
    f"table (GPC_SLOTS); {GONE} (lab/README.md)",
    "v5_hiding": "python -m lab.v5_hiding --record at commit c44a640 (git show c44a640:lab/v5_hiding.py), whose "
    f"v5 had the switches it compares; {GONE}",
    "v5_cluster_n": 'python -m lab.rounds --variants "CLUSTER_N=1;CLUSTER_N=2" --record v5_cluster_n at commit '
    f"416080e, while v5 had CLUSTER_N; {GONE} (v5 has none now): with --stage library it times the same "
    "settings of the library kernel",
}


def show(name: str, summary: Callable[[list[dict]], list[str]] | None = None) -> int:
    """A lab record, as runner.show_recorded prints a project record."""
    command = COMMANDS.get(name, f"no command is known for it: {GONE} (lab/README.md)")
    show_recorded(name, summary, directory=RESULTS_DIR, command=command)
    return 0


def save(name: str, rows: list[dict], prov: dict) -> None:
    print(f"recorded in {results.save(name, rows, prov, records_dir(prov))}")


def cmd_sweep(args: argparse.Namespace) -> int:
    if not gpu_available():
        return show(args.sweep)
    rows: list[dict] = []
    for (m, n, k), dtype in problems(args):
        log(f"{args.sweep} {m}x{n}x{k} {dtype}:")
        rows += bench_variants(sweeps.variants(args.sweep), m, n, k, dtype, settle_s=args.settle, log=log)
    print_rows(rows)
    if args.record:
        save(args.sweep, rows, results.provenance())
    return 0 if all(row.get("passed") for row in rows) else 1


def cmd_show(args: argparse.Namespace) -> int:
    summaries = {
        "coalescer": coalescer.summary_lines,
        "gpc_placement": gpc.placement_lines,
        "v5_hiding": rounds.summary_lines,
        "v5_cluster_n": rounds.summary_lines,
        "tile_order": tile_order.lines,
        "call_regime": call_regime.lines,
        "cluster_k": shape_sweep.graph_lines,
        "pingpong": shape_sweep.graph_lines,
        "pingpong_64": shape_sweep.graph_lines,
    }
    probe = kernel_probe.lines if args.name.startswith("kernel_probe") else None  # each shape's comparisons
    return show(args.name, summaries.get(args.name, probe))


def cmd_coalescer(args: argparse.Namespace) -> int:
    if args.run_plan:  # the target ncu profiles: the pairs of one plan, launched once each
        coalescer.run_pairs(json.loads(Path(args.run_plan).read_text()), warm=args.warm)
        return 0
    if not gpu_available():
        return show("coalescer", coalescer.summary_lines)
    groups, rows = coalescer.probe()
    print(f"{len(groups)} SM groups from clusters: sizes {sorted(len(g) for g in groups)}")
    print("\n".join(coalescer.summary_lines(rows)))
    if args.record:
        prov = results.provenance()
        save("coalescer", rows, prov)
        save("gpc_map", [{"group": i, "sms": group} for i, group in enumerate(groups)], prov)
    return 0


def cmd_gpc(args: argparse.Namespace) -> int:
    if not gpu_available():
        return show("gpc_placement", gpc.placement_lines)
    rows = [row for clusters in gpc.PLACEMENT_GRIDS for row in gpc.placement_rows(clusters)]
    print("\n".join(gpc.placement_lines(rows)))
    if args.record:
        save("gpc_placement", rows, results.provenance())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="v5 under settings it does not ship with, beside it and cuBLAS")
    sweep.add_argument("sweep", choices=tuple(sweeps.SWEEPS), help=str(sweeps.SWEEPS))
    sweep.add_argument("--record", action="store_true", help="write lab/results/h200/<sweep>.json")
    add_problem_args(sweep)
    sweep.set_defaults(run=cmd_sweep)
    shown = sub.add_parser("show", help="print a record of lab/results/h200/, with the command that writes it")
    shown.add_argument("name", help="a record in lab/results/h200/, without .json")
    shown.set_defaults(run=cmd_show)
    probe = sub.add_parser("coalescer", help="which SMs' identical L2 reads are merged (Nsight Compute)")
    probe.add_argument("--record", action="store_true", help="write lab/results/h200/coalescer.json and gpc_map.json")
    probe.add_argument(
        "--run-plan", default=None, help="what the probe runs under ncu: launch the pairs of this JSON plan once each"
    )
    probe.add_argument("--warm", action="store_true", help="with --run-plan: read the data into L2 first")
    probe.set_defaults(run=cmd_coalescer)
    where = sub.add_parser("gpc", help="where v5's persistent clusters land and their GPCs")
    where.add_argument("--record", action="store_true", help="write lab/results/h200/gpc_placement.json")
    where.set_defaults(run=cmd_gpc)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv)
