"""The library soak: every configuration this GPU's autotune table picks, in fp16 and bf16, run for minutes on
four streams driven by two threads, every output compared bit for bit with its stream's first, verified one.

The stability run (`tutorial.stability`) holds one kernel at one shape; a model's calls run the table's
configurations (swap AB, split-K, stream-K, clusters, PDL) at many shapes, from several threads and streams at
once. Those share what a single stream never does: the plan cache and its tensor maps across threads, the
split-K scratch per stream, kernels of different streams on the SMs together. A race there shows as a launch
whose bits differ from the verified output, so each case runs a slice of the soak's time with every launch
checked on the GPU, as the stability run checks its own (`stability.enqueue_checked`), and its rows join
that run's in results/<gpu>/stability.json.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import cupy

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from deepgemm.operands import device_name
from tutorial import precompile, results, stability
from tutorial.autotune import TUNED_LAYOUT
from tutorial.bench import Workload
from tutorial.runner import command_lines
from tutorial.stability import BUFFERS, InputSet, enqueue_checked, input_sets
from tutorial.stages import LIBRARY, current_device

RECORD = stability.RECORD  # the soak's rows join the stability run's (`stability.record`)
COMMAND = "python -m tutorial soak --seconds 600 --streams 4 --threads 2 --dtype both --record"
STAGE = "deepgemm.gemm"
RUN = "soak"
DTYPES = ("fp16", "bf16")
STREAMS, THREADS = 4, 2
MIN_CASE_S = 1.0  # below this a case is mostly its setup: verifying, planning, the streams' first passes
PASSES_AHEAD = 2  # passes over the buffers a thread queues before waiting on the oldest: the GPU never idles
POLL_S = 0.001  # a thread waits by polling its events, sleeping meanwhile, so the other thread keeps queueing


@dataclass(frozen=True)
class Case:
    """One problem of the table in one dtype, with the table's config."""

    dtype: str
    m: int
    n: int
    k: int
    config: GemmConfig

    def row(self, streams: int, threads: int) -> dict[str, Any]:
        return {"stage": STAGE, "run": RUN, "dtype": self.dtype, "m": self.m, "n": self.n, "k": self.k,
                "config": heuristic.config_name(self.config), "config_source": "table",
                "streams": streams, "threads": threads}  # fmt: skip


def table_cases(tuned: dict[tuple[str, int, int, int], GemmConfig], dtypes: Sequence[str] = DTYPES) -> list[Case]:
    """Every problem of the table in each of `dtypes`, dtype by dtype, in the table's order (so the next case is
    another shape and config); a dtype the table has no entry of takes TUNED_DTYPE's, as `deepgemm.gemm` does."""
    shapes = list(dict.fromkeys((m, n, k) for _, m, n, k in tuned))
    entries = [(dtype, shape, tuned.get((dtype, *shape)) or tuned.get((heuristic.TUNED_DTYPE, *shape)))
               for dtype in dtypes for shape in shapes]  # fmt: skip
    return [Case(dtype, *shape, config) for dtype, shape, config in entries if config is not None]


def gpu_cases(dtypes: Sequence[str] = DTYPES) -> list[Case]:
    """`table_cases` of the current GPU's table; RuntimeError where it has none."""
    path = heuristic.table_path(device_name(current_device()))
    cases = table_cases(heuristic.table(path), dtypes)
    if not cases:
        raise RuntimeError(f"no autotune table at {path}: run `python -m tutorial autotune --record` first")
    return cases


def case_seconds(seconds: float, cases: int) -> float:
    """Each case's share of the soak, at least MIN_CASE_S."""
    return max(MIN_CASE_S, seconds / max(cases, 1))


@dataclass
class Lane:
    """One stream's part of a case: its input set, a counter on the GPU of launches whose bits differed from
    the set's verified output, and how many launches were queued."""

    stream: cupy.cuda.Stream
    input_set: InputSet
    differing: cupy.ndarray
    launches: int = 0


def _wait(events: Sequence[cupy.cuda.Event]) -> None:
    while not all(event.done for event in events):
        time.sleep(POLL_S)


def drive(lanes: Sequence[Lane], deadline: float, stop: threading.Event) -> None:
    """One thread's launches until `deadline` (time.monotonic) or `stop`: buffer by buffer, alternating between
    its lanes' streams launch by launch, each launch checked on the GPU. No host sync per launch: a pass over
    the buffers waits only for the pass PASSES_AHEAD before it. Then its streams are synchronised."""
    queued: list[list[cupy.cuda.Event]] = []
    while time.monotonic() < deadline and not stop.is_set():
        for i in range(BUFFERS):
            for lane in lanes:
                with lane.stream:  # CuPy's current stream is the thread's own
                    enqueue_checked(lane.input_set.plans[i], lane.input_set.outs[i], lane.input_set.golden,
                                    lane.differing)  # fmt: skip
                lane.launches += 1
        queued.append([lane.stream.record() for lane in lanes])
        if len(queued) > PASSES_AHEAD:
            _wait(queued.pop(0))
    for lane in lanes:
        lane.stream.synchronize()


def _drive_or_stop(lanes: Sequence[Lane], deadline: float, stop: threading.Event, errors: list[Exception]) -> None:
    try:
        drive(lanes, deadline, stop)
    except Exception as error:  # a launch error: the case fails naming it, and the other thread stops too
        errors.append(error)
        stop.set()


def run_case(case: Case, seconds: float, streams: Sequence[cupy.cuda.Stream], threads: int) -> dict[str, Any]:
    """One case: an input set per stream, its first output verified, then `threads` threads each driving its
    share of the streams for `seconds`; what they queued and how many launches differed."""
    work = Workload.make(case.m, case.n, case.k, case.dtype, min_sets=len(streams)).in_layout(*TUNED_LAYOUT)
    sets = input_sets(LIBRARY, replace(work, problems=work.problems[: len(streams)]), config=case.config)
    lanes = [Lane(stream, s, cupy.zeros((), dtype=cupy.int64)) for stream, s in zip(streams, sets)]
    cupy.cuda.Device().synchronize()  # the golden copies and counters, made on the default stream, are ready
    stop, errors = threading.Event(), []
    start = time.monotonic()
    workers = [threading.Thread(target=_drive_or_stop, args=(lanes[t::threads], start + seconds, stop, errors))
               for t in range(threads)]  # fmt: skip
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        with contextlib.suppress(cupy.cuda.runtime.CUDARuntimeError):  # an error of the GPU's own raises again
            cupy.cuda.Device().synchronize()  # the failed thread's streams: nothing may write into the next case
        raise errors[0]
    return {
        "seconds": time.monotonic() - start,
        "launches": sum(lane.launches for lane in lanes),
        "mismatched": sum(int(lane.differing.get()) for lane in lanes),
        "verified": all(s.passed for s in sets),
    }


def soak_case(case: Case, seconds: float, streams: Sequence[cupy.cuda.Stream], threads: int) -> dict[str, Any]:
    """`run_case` as a row; an exception in it (a launch error) makes a failed row naming it."""
    row = case.row(len(streams), threads)
    try:
        row.update(run_case(case, seconds, streams, threads))
    except Exception as error:  # recorded, not raised: the soak goes on to the next case
        row.update(seconds=0.0, launches=0, mismatched=0, verified=False, error=f"{type(error).__name__}: {error}")
    row["passed"] = row["verified"] and row["mismatched"] == 0
    return row


def soak(
    cases: Sequence[Case],
    seconds: float,
    *,
    streams: int = STREAMS,
    threads: int = THREADS,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Every case for its share of `seconds` (`case_seconds`) on `streams` streams from `threads` threads; a row
    each. The cases' kernels are compiled first, in parallel (`precompile.warm`)."""
    if not 1 <= threads <= streams:
        raise ValueError(f"{threads} threads cannot each drive a stream of {streams}")
    for dtype in dict.fromkeys(case.dtype for case in cases):
        mine = [case for case in cases if case.dtype == dtype]
        configs, shapes = [case.config for case in mine], [(case.m, case.n, case.k) for case in mine]
        seconds_taken = precompile.warm(configs, dtype, TUNED_LAYOUT, shapes=shapes)
        log(f"{len(configs)} configs ({dtype}) compiled in {seconds_taken:.0f} s")
    each = case_seconds(seconds, len(cases))
    queues = [cupy.cuda.Stream(non_blocking=True) for _ in range(streams)]  # one set for all: one scratch each
    rows = []
    for i, case in enumerate(cases):
        rows.append(soak_case(case, each, queues, threads))
        log(f"{i + 1}/{len(cases)} {case_line(rows[-1])}")
        cupy.get_default_memory_pool().free_all_blocks()  # the next case's sizes differ: let it have the memory
    return rows


def case_line(row: dict[str, Any]) -> str:
    """One case's row in a line: what ran, what it found."""
    where = f"{row['dtype']} {row['m']}x{row['n']}x{row['k']} {row['config']}"
    if "error" in row:
        return f"{where}: FAILED, {row['error']}"
    verdict = "" if row["passed"] else (" FAILED" if row["verified"] else " FAILED verification")
    return f"{where}: {row['launches']} launches in {row['seconds']:.1f} s, {row['mismatched']} differing{verdict}"


def summary_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The soak as a whole in a line (its rows among others of the record), then a line per failed case."""
    soaked = [row for row in rows if row.get("run") == RUN]
    if not soaked:
        return [f"no library soak in this record: run `{COMMAND}` on an H100 or H200"]
    dtypes = "/".join(dict.fromkeys(row["dtype"] for row in soaked))
    failed = [row for row in soaked if not row["passed"]]
    lines = [
        f"{STAGE} soak: {len(soaked)} cases (the autotune table's configs, {dtypes}), {soaked[0]['streams']} streams "
        f"from {soaked[0]['threads']} threads for {sum(row['seconds'] for row in soaked):.0f} s: "
        f"{sum(row['launches'] for row in soaked)} launches, {sum(row['mismatched'] for row in soaked)} not "
        f"bit-identical to the verified output; {len(failed)} cases failed"
    ]
    return lines + [f"  {case_line(row)}" for row in failed]


def record_lines(record: dict[str, Any]) -> list[str]:
    """The stability record run by run, each under its own banner and command: the stability run's rows (no
    "run_date": the first of "runs") summed up by `stability.summary_lines`, a soak's (`record` dates them) by
    `summary_lines`. The record's "provenance" is its latest run's alone."""
    runs = record.get("runs") or [record["provenance"]]
    dated = {prov["date"]: prov for prov in runs}
    by_run: dict[str, list[dict[str, Any]]] = {}
    for row in record["rows"]:
        by_run.setdefault(row.get("run_date", runs[0]["date"]), []).append(row)
    lines = []
    for date, rows in by_run.items():
        soaked = rows[0]["run"] == RUN
        summary = summary_lines(rows) if soaked else stability.summary_lines(rows)
        today = COMMAND if soaked else results.recording_command(RECORD)
        lines += [results.recorded_banner(dated[date]), *summary, *command_lines(dated[date]["command"], today)]
    return lines
