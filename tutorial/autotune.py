"""The autotune table: the library kernel's best configurations per GPU, dtype and shape, and the run that
measures them.

`python -m tutorial autotune --shapes ... --dtype both --record` takes, for each shape, the cost model's
cheapest candidates (`heuristic.candidates`), the best the model ranks in each family it might misjudge
(`candidate_configs`) and the kernel's default, runs each through the library call
(`deepgemm.gemm` with that config), verifies it against the float64 reference on NaN-poisoned output,
times the ones that pass (`timing.device_us_per_call`: GPU time per call with the launch queue held full,
so that the host's time per call does not hide the kernel's). The fastest few, each with programmatic
dependent launch on and off, are then captured in CUDA graphs beside torch.matmul's and timed with their
batches alternated (`timing.time_graphs`): the shape's best is the fastest in a graph, the number the shape
table judges the call by, where the queued time can rank PDL and short kernels differently (a launch's
start-up on the GPU is not the same queued as in a graph). Last, each shape's best is compiled again with
the weight's N and K in the kernel (SHAPE_JIT, the seed's per-shape JIT), and the two are timed in graphs
side by side: the faster stays (`contest_shape_jit`). The record keeps every candidate's times
(results/<gpu>/autotune.json); the package ships each shape's best (deepgemm/kernels/tables/<gpu>/
autotune.json). `deepgemm.gemm` without a config looks its problem up there first (`heuristic.pick_config`)
and falls back to the model's pick.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cupy

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from deepgemm.driver import device_limits
from deepgemm.heuristic import (
    TABLE_NAME,
    config_fields,
    config_from_fields,
    config_name,
    problem_key,
    table,
    table_path,
)
from deepgemm.operands import device_name
from deepgemm.plan import DEFAULTS
from tutorial import library, precompile, results
from tutorial.bench import Workload
from tutorial.call_suite import GEMM, TORCH, call_launches
from tutorial.check import verify
from tutorial.shape_suite import SHAPE_LAYOUT, captured_calls
from tutorial.timing import device_us_per_call, require_torch, time_graphs

CANDIDATES = 8  # the model's cheapest, timed
MAX_CANDIDATES = 20  # with the families' best and the kernel's default: device time is scarce
# One timing each can crown the wrong candidate among close ones (run-to-run spread is 1 to 3%): the
# fastest few within FINAL_MARGIN of the best are timed FINAL_ROUNDS more times, in turn, and ranked by the
# median of their timings.
FINALISTS, FINAL_MARGIN, FINAL_ROUNDS = 3, 1.03, 3
TUNED_LAYOUT = SHAPE_LAYOUT  # x (M, K) and a weight stored (N, K), as torch.nn.functional.linear has them
# Every candidate within GRAPH_MARGIN of the fastest queued, and the fastest GRAPH_FINALISTS with PDL flipped,
# are timed again in CUDA graphs, GRAPH_BATCHES batches of ~3 ms each, alternated with torch.matmul's graph
# (its time is recorded beside): queued and graph times rank 64-row tiles differently at mid M (at 512 x 2112
# x 7168 the 7th queued, 11% behind, ran fastest in the shape table's graph).
GRAPH_FINALISTS, GRAPH_MARGIN, GRAPH_BATCHES = 3, 1.25, 8


def family(choice: heuristic.Choice) -> tuple[bool, str, bool, bool]:
    """What the model may misjudge as a whole, so autotune times the best of each: the orientation (plain or
    swap AB), the schedule (data-parallel, split-K, stream-K 1 or 2, a split in the cluster, [13] ping-pong at
    each width: the model prices 128 x 144 tiles as it measured them only where 128 leaves padding),
    whether there is a cluster, and whether the tile is 256 rows (two m64 per consumer: the model prices it as
    the 128-row tile of the same area)."""
    schedule = (f"stream-k {choice.stream_k}" if choice.stream_k else "split-k" if choice.split_k > 1
                else "cluster-k" if choice.cluster_k > 1 else f"ping-pong {choice.block_n}" if choice.pingpong
                else "tiles")  # fmt: skip
    return choice.swap_ab, schedule, choice.cluster_m * choice.cluster_n > 1, choice.block_m == heuristic.WIDE_BLOCK_M


def candidate_configs(
    m: int,
    n: int,
    k: int,
    sm_count: int,
    count: int = CANDIDATES,
    most: int = MAX_CANDIDATES,
    incumbent: GemmConfig | None = None,
) -> dict[str, GemmConfig]:
    """The configurations autotune times, by name: the model's `count` cheapest; then, for diversity, the
    cheapest of each `family` not among them, cheapest first ([13] ping-pong's first of all); and the kernel's
    default; `most` in all. Then
    the `incumbent`, the shipped table's entry for the shape (its tiles: PDL and the shape compiled in are
    tried later), so that a table tuned again never loses a configuration it measured faster."""
    ranked = heuristic.candidates(m, n, k, sm_count)
    default = GemmConfig().merged_over(DEFAULTS)
    picked = {c.name(): c.config() for c in ranked[:count]}
    room = most - (config_name(default) not in picked)
    families = {family(c) for c in ranked[:count]}
    # [13] Ping-pong's families first: the model prices what ping-pong hides at the lab's median (0.4 to 1.6 us
    # a tile in lab/results/h200/pingpong.json, where one of them beat the table's entry at 15 of 18 shapes
    # with several rounds of tiles), so they may rank below the cheapest where they are worth timing.
    for choice in sorted(ranked[count:], key=lambda c: not c.pingpong):
        if len(picked) >= room:
            break
        if family(choice) not in families:
            families.add(family(choice))
            picked[choice.name()] = choice.config()
    found = {**picked, config_name(default): picked.get(config_name(default), default)}
    if incumbent is not None:
        tiles = config_from_fields({**config_fields(incumbent), "PDL": 0, "SHAPE_JIT": 0})
        found.setdefault(config_name(tiles), tiles)
    return found


def shape_candidates(m: int, n: int, k: int, dtype_name: str, sm_count: int) -> list[GemmConfig]:
    """`candidate_configs` at one shape, the shipped table's entry for it the incumbent."""
    return list(candidate_configs(m, n, k, sm_count, incumbent=incumbent_of(m, n, k, dtype_name)).values())


def incumbent_of(m: int, n: int, k: int, dtype_name: str) -> GemmConfig | None:
    """The shipped autotune table's entry for this GPU, shape and dtype (or TUNED_DTYPE's), if it holds one."""
    shipped = table(table_path(device_name(cupy.cuda.Device().id)))
    return shipped.get((dtype_name, m, n, k), shipped.get((heuristic.TUNED_DTYPE, m, n, k)))


def tune_shape(
    m: int, n: int, k: int, dtype_name: str, *, log: Callable[[str], None] = print, progress: Any = None
) -> dict[str, Any]:
    """Verify and time every candidate at one shape and dtype: the table's row, with every candidate's time."""
    sm_count = device_limits(cupy.cuda.Device().id).sm_count
    work = Workload.make(m, n, k, dtype_name).in_layout(*TUNED_LAYOUT)
    timed, plans = [], {}
    for cfg in shape_candidates(m, n, k, dtype_name, sm_count):
        entry, launches = time_config(cfg, work)
        timed.append(entry)
        if entry["passed"]:
            plans[entry["name"]] = launches
        if progress is not None and "error" not in entry:
            progress(entry["name"], entry)
    passed = [e for e in timed if e["passed"]]
    if not passed:
        raise RuntimeError(f"no candidate passed verification at {m}x{n}x{k} {dtype_name}")
    time_finalists_again(passed, plans)
    best, ranked_by, graph = rank_in_graphs(passed, timed, work)
    in_graph = f", {best['graph_us']:.1f} in a graph (torch {graph['torch_graph_us']:.1f})" if graph else ""
    log(f"  {dtype_name} {m}x{n}x{k}: {best['name']} {best['us']:.1f} us queued{in_graph} (of {len(timed)} candidates)")
    return {"dtype": dtype_name, "m": m, "n": n, "k": k, "config": best["config"], "name": best["name"],
            "us": best["us"], **graph, "ranked_by": ranked_by, "candidates": timed}  # fmt: skip


def time_config(cfg: GemmConfig, work: Workload, rounds: int = 1) -> tuple[dict[str, Any], list[Any]]:
    """One configuration through the library call at `work`'s shape: planned, verified on NaN-poisoned output
    and, where it passes, timed queued (the median of `rounds` timings). Returns its entry and its launches;
    a config this problem cannot take (too many slices of a short K) gives an entry naming the error."""
    entry: dict[str, Any] = {"name": config_name(cfg), "config": config_fields(cfg)}
    try:
        launches = [library.plan(a, b, config=cfg) for a, b in work.problems]
    except ValueError as error:
        return {**entry, "passed": False, "error": str(error)}, []
    entry["passed"] = verify(launches[0], work.expected, launches[0].out).passed
    if entry["passed"]:
        entry["us"] = statistics.median(device_us_per_call(launches) for _ in range(rounds))
    return entry, launches


def with_pdl(entry: dict[str, Any], pdl: bool, work: Workload) -> dict[str, Any]:
    """A candidate again with programmatic dependent launch on or off (its prologue overlapping the call
    before it, or not): an entry like the others (`time_config`, timed FINAL_ROUNDS times)."""
    return time_config(config_from_fields({**entry["config"], "PDL": int(pdl)}), work, FINAL_ROUNDS)[0]


def graph_contenders(
    passed: Sequence[dict[str, Any]], timed: list[dict[str, Any]], work: Workload
) -> list[dict[str, Any]]:
    """Every candidate within GRAPH_MARGIN of the fastest queued, and the GRAPH_FINALISTS fastest each with
    PDL flipped (timed queued first and appended to `timed` where no candidate was already that config),
    those that pass, each once."""
    by_name = {e["name"]: e for e in timed}
    fastest = sorted(passed, key=lambda e: e["us"])
    contenders = {e["name"]: e for e in fastest if e["us"] <= GRAPH_MARGIN * fastest[0]["us"]}
    for entry in fastest[:GRAPH_FINALISTS]:
        pdl = not entry["config"].get("PDL")
        flipped = by_name.get(config_name(config_from_fields({**entry["config"], "PDL": int(pdl)})))
        if flipped is None:
            flipped = with_pdl(entry, pdl, work)
            timed.append(flipped)
            by_name[flipped["name"]] = flipped
        for contender in (entry, flipped):
            if contender["passed"]:
                contenders[contender["name"]] = contender
    return list(contenders.values())


def rank_in_graphs(
    passed: Sequence[dict[str, Any]], timed: list[dict[str, Any]], work: Workload
) -> tuple[dict[str, Any], str, dict[str, float]]:
    """The shape's best: the fastest `graph_contenders` in CUDA graphs, each graph verified on NaN poison and
    all timed with torch.matmul's, batches alternated; each contender gets "graph_us" and "graph_passed".
    Without PyTorch (the graphs are captured through it) the fastest queued. Returns the best, how it was
    ranked ("graph" or "queued") and the row's graph fields."""
    try:
        require_torch()
    except RuntimeError:
        return min(passed, key=lambda e: e["us"]), "queued", {}
    contenders = graph_contenders(passed, timed, work)
    torch_us = time_in_graphs(contenders, work)
    if torch_us is None:
        raise RuntimeError(f"no candidate's CUDA graph passed verification at {work.m}x{work.n}x{work.k}")
    best = min((entry for entry in contenders if entry["graph_passed"]), key=lambda e: e["graph_us"])
    return best, "graph", {"graph_us": best["graph_us"], "torch_graph_us": torch_us}


def time_in_graphs(entries: Sequence[dict[str, Any]], work: Workload) -> float | None:
    """Each entry's config captured in a CUDA graph and verified on NaN poison ("graph_passed"); those that
    pass timed with torch.matmul's graph, batches alternated ("graph_us"). Returns torch's time per call in
    us, None where no entry's graph passed."""
    graphs = []
    for entry in entries:
        launches = call_launches(work, "torch", config_from_fields(entry["config"]))[GEMM]
        captured, stats = captured_calls(launches, work, entry["us"] / 1e3)
        entry["graph_passed"] = stats.passed
        if stats.passed:
            graphs.append((entry, captured))
    if not graphs:
        return None
    fastest_ms = min(entry["us"] for entry, _ in graphs) / 1e3
    torch_graph, torch_stats = captured_calls(call_launches(work, "torch")[TORCH], work, fastest_ms)
    if not torch_stats.passed:  # the baseline every entry is ranked beside
        raise RuntimeError(f"torch.matmul's CUDA graph failed verification at {work.m}x{work.n}x{work.k}: "
                           f"{torch_stats.summary()}")  # fmt: skip
    timings = time_graphs([captured for _, captured in graphs] + [torch_graph], batches=GRAPH_BATCHES)
    for (entry, _), timing in zip(graphs, timings, strict=False):  # the last timing is torch's
        entry["graph_us"] = 1e3 * timing.ms
    return 1e3 * timings[-1].ms


def finalists(passed: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fastest FINALISTS verified candidates within FINAL_MARGIN of the fastest."""
    ranked = sorted(passed, key=lambda e: e["us"])
    return [e for e in ranked[:FINALISTS] if e["us"] <= FINAL_MARGIN * ranked[0]["us"]]


def time_finalists_again(passed: Sequence[dict[str, Any]], plans: dict[str, Any]) -> None:
    """Time the finalists FINAL_ROUNDS more times, in turn; each one's "us" becomes the median of all its
    timings ("timings" keeps them)."""
    final = finalists(passed)
    if len(final) < 2:
        return
    for entry in final:
        entry["timings"] = [entry["us"]]
    for _ in range(FINAL_ROUNDS):
        for entry in final:
            entry["timings"].append(device_us_per_call(plans[entry["name"]]))
    for entry in final:
        entry["us"] = statistics.median(entry["timings"])


def tune(
    problems: Sequence[tuple[tuple[int, int, int], str]], *, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """`tune_shape` for every (shape, dtype), with a progress bar on stderr; every candidate's kernel compiled
    first, in parallel (`precompile.warm`)."""
    sm_count = device_limits(cupy.cuda.Device().id).sm_count
    for dtype in sorted({dtype for _, dtype in problems}):
        configs = [c for (m, n, k), d in problems if d == dtype for c in shape_candidates(m, n, k, d, sm_count)]
        log(f"{len(configs)} candidates ({dtype}) compiled in {precompile.warm(configs, dtype, TUNED_LAYOUT):.0f} s")
    rows = []
    total = len(problems)
    for i, ((m, n, k), dtype_name) in enumerate(problems):
        label = f"{i + 1}/{total} {m}x{n}x{k} {dtype_name}"

        def progress(name: str, entry: dict[str, Any], label: str = label, done: int = 30 * (i + 1) // total) -> None:
            verdict = f"{entry['us']:8.1f} us" if entry["passed"] else "   FAILED  "
            sys.stderr.write(f"\r[{'#' * done}{'.' * (30 - done)}] {label} {name:<16} {verdict}")
            sys.stderr.flush()

        rows.append(tune_shape(m, n, k, dtype_name, log=log, progress=progress))
    sys.stderr.write("\n")
    for dtype in sorted({row["dtype"] for row in rows}):
        mine = [row for row in rows if row["dtype"] == dtype]
        shapes = [(row["m"], row["n"], row["k"]) for row in mine]
        seconds = precompile.warm([jit_config(row) for row in mine], dtype, TUNED_LAYOUT, shapes=shapes)
        log(f"{len(mine)} bests with SHAPE_JIT ({dtype}) compiled in {seconds:.0f} s")
    for row in rows:
        contest_shape_jit(row, log=log)
    return rows


def jit_config(row: dict[str, Any]) -> GemmConfig:
    """[11] A row's best with the weight's dimensions compiled in."""
    return config_from_fields({**row["config"], "SHAPE_JIT": 1})


def contest_shape_jit(row: dict[str, Any], *, log: Callable[[str], None] = print) -> None:
    """[11] The row's best against itself with SHAPE_JIT: planned, verified and timed queued (an entry among the
    candidates), then, where PyTorch is there, both timed in graphs with torch.matmul's (`time_in_graphs`;
    "shape_jit": the three times). Where the compiled-in shape is faster in the graph, it becomes the row's
    best, with this pair's times."""
    if row["config"].get("SHAPE_JIT") or row.get("ranked_by") != "graph":
        return
    work = Workload.make(row["m"], row["n"], row["k"], row["dtype"]).in_layout(*TUNED_LAYOUT)
    entry, _ = time_config(jit_config(row), work, FINAL_ROUNDS)
    row["candidates"].append(entry)
    if not entry["passed"]:
        return
    without = {"config": row["config"], "us": row["us"]}  # timed again beside it; the row's own times stay
    torch_us = time_in_graphs([without, entry], work)
    if not (without["graph_passed"] and entry["graph_passed"]):
        raise RuntimeError(f"{row['name']}: a CUDA graph of it, or of it with SHAPE_JIT, failed verification")
    base, jit = without["graph_us"], entry["graph_us"]
    row["shape_jit"] = {"graph_us": jit, "without_graph_us": base, "torch_graph_us": torch_us}
    if jit < base:
        row.update(config=entry["config"], name=entry["name"], us=entry["us"], graph_us=jit, torch_graph_us=torch_us)
    log(f"  {row['dtype']} {row['m']}x{row['n']}x{row['k']}: SHAPE_JIT {jit:.1f} us in a graph, {base:.1f} without")


def record(rows: Sequence[dict[str, Any]], prov: dict[str, Any]) -> Path:
    """Merge `rows` into results/<gpu>/autotune.json (`results.save_merged`: a row per (dtype, m, n, k), this
    run's replacing an older one, "runs" keeping every run's provenance), then write the package's table from
    it (`write_package_table`)."""
    saved = results.save_merged(TABLE_NAME, {"rows": list(rows)}, prov)
    write_package_table(results.load(TABLE_NAME, saved.parent), table_path(prov["gpu"]))
    return saved


PACKAGE_FIELDS = ("dtype", "m", "n", "k", "config", "name", "us", "ranked_by")  # what the library reads of a row


def package_table(record: dict[str, Any]) -> dict[str, Any]:
    """The table the package ships, from an autotune record: each row's best config and its time, under the
    record's provenance (the run, its GPU and commit)."""
    rows = [{f: r[f] for f in PACKAGE_FIELDS if f in r} for r in sorted(record["rows"], key=problem_key)]
    source = results.gpu_directory(record["provenance"]["gpu"]) / f"{TABLE_NAME}.json"
    return {"provenance": record["provenance"], "record": source.relative_to(results.REPO).as_posix(), "rows": rows}


def write_package_table(record: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(package_table(record), indent=1) + "\n")
    table.cache_clear()
    return path
