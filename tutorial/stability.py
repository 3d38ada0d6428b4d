"""Stability: a stage run for a minute, and on several streams at once, every output compared bit for bit.

`stage` is any of the stages (v5 by default on the command line) or "library": the library call,
`deepgemm.gemm` into a given output through `tutorial.library`, planned once per buffer by the library's own
plan cache and launched on CuPy's current stream, as a caller's calls are.

The tensor-core stages sum in a fixed order and use no atomics (the library kernel's split-K adds its
slices in index order, whichever finished last), so the same inputs give the same bits on every launch. A
race (a stage refilled before the wgmma read it, a box stored before its `stmatrix` landed, a barrier phase
confused across tiles) shows as a launch whose bits differ from the others, perhaps once in thousands of
launches and only under load: the first seed's "wrong once in ten runs". So the first launch on each input
set is verified against the float64 reference, and from then on every launch writes its own poisoned
buffer, which is compared with that first output bit for bit: a long run on one stream, queued without gaps
so that the card heats and its clock falls as under any sustained load, NVML sampling it; then launches of
the same kernel interleaved on several streams.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cupy

from tutorial import results, stages
from tutorial.bench import Workload
from tutorial.check import poison, reference, verify
from tutorial.timing import PowerSampler, gemm_flops

BUFFERS = 16  # outputs per input set: each launch writes the next one, which is then checked
WINDOW_S = 5.0  # the long run's throughput, clock and power are summed up per window of this length


@dataclass
class InputSet:
    """One input set's launches (each writing its own output) and the verified output they must match."""

    plans: list[Callable[[], object]]
    outs: list[cupy.ndarray]
    golden: cupy.ndarray
    passed: bool


def _same_bits(x: cupy.ndarray, y: cupy.ndarray) -> bool:
    return bool(cupy.array_equal(x.view(cupy.uint8), y.view(cupy.uint8)))


def input_sets(stage: str, work: Workload, buffers: int = BUFFERS, **options: Any) -> list[InputSet]:
    """Plans for every input set of `work` (the stage's `plan(a, b, out, **options)`, or the library call's,
    `options` such as its config), and each set's first output verified against float64."""
    launcher = stages.load(stage)
    sets = []
    for a, b in work.problems:
        outs = [cupy.empty((work.m, work.n), dtype=a.dtype) for _ in range(buffers)]
        plans = [launcher.plan(a, b, out, **options) for out in outs]
        stats = verify(plans[0], reference(a, b), outs[0])
        sets.append(InputSet(plans, outs, outs[0].copy(), stats.passed))
    return sets


def _mismatches(input_set: InputSet) -> int:
    return sum(not _same_bits(out, input_set.golden) for out in input_set.outs)


# Words that differ between two outputs, counted on the GPU: no host round trip per launch.
_count_differing = cupy.ReductionKernel("T x, T y", "int64 n", "x != y", "a + b", "n = a", "0", "count_differing")


def _words(x: cupy.ndarray) -> cupy.ndarray:
    """The output's rows as the widest unsigned words that tile them: 8 bytes read per element, not 1."""
    for word in (cupy.uint64, cupy.uint32, cupy.uint16):
        if (x.shape[-1] * x.itemsize) % cupy.dtype(word).itemsize == 0:
            return x.view(word)
    return x.view(cupy.uint8)


def enqueue_checked(
    plan: Callable[[], object], out: cupy.ndarray, golden: cupy.ndarray, differing: cupy.ndarray
) -> None:
    """One launch into its freshly poisoned `out`, then a count of its words that differ from `golden` (the
    verified output); a launch with any adds one to `differing`. Queued on the current stream, not waited on."""
    poison(out)
    plan()
    # Per row first: one block per output element, and one element would leave a single block for 32 MB.
    differing += _count_differing(_words(out), _words(golden), axis=1).any()


def _enqueue_checked(input_set: InputSet, differing_launches: cupy.ndarray) -> None:
    """Each launch of the set into its own buffer, checked (`enqueue_checked`). All queued, nothing waited on."""
    for plan, out in zip(input_set.plans, input_set.outs):
        enqueue_checked(plan, out, input_set.golden, differing_launches)


@dataclass
class _Mark:
    """An event in the stream and how many launches had been queued before it."""

    event: cupy.cuda.Event
    launches: int


def _mark(launches: int) -> _Mark:
    event = cupy.cuda.Event()
    event.record()
    return _Mark(event, launches)


def long_run(sets: Sequence[InputSet], seconds: float, flops: int, log: Callable[[str], None]) -> dict:
    """Launches rotating over the input sets for `seconds`, each one checked on the GPU as it is queued.

    The host stays a chunk (one pass over the sets) ahead of the GPU, so the card runs without gaps and
    heats as under any sustained load; NVML is sampled while it waits. Per window of about WINDOW_S seconds:
    TFLOP/s with the poisoning and checking included (each adds a pass over the output), SM clock, power.
    """
    sampler = PowerSampler()
    differing = cupy.zeros((), dtype=cupy.int64)
    windows: list[dict] = []
    for input_set in sets:  # a first, unwindowed pass: it also compiles the check's kernel
        _enqueue_checked(input_set, differing)
    launches = sum(len(input_set.outs) for input_set in sets)
    cupy.cuda.Device().synchronize()
    start = time.monotonic()
    window_mark = _mark(launches)
    window_start = start
    queued: _Mark | None = None
    while time.monotonic() - start < seconds:
        for input_set in sets:
            _enqueue_checked(input_set, differing)
        launches += sum(len(input_set.outs) for input_set in sets)
        done, queued = queued, _mark(launches)
        if done is None:
            continue
        while not done.event.done:  # the previous chunk; the one just queued keeps the GPU busy meanwhile
            sampler.sample()
            time.sleep(0.002)
        if time.monotonic() - window_start >= WINDOW_S:
            windows.append(_window(window_start - start, window_mark, done, flops, sampler))
            log(f"  {windows[-1]['t_s']:5.1f} s: {windows[-1]['checked_tflops']:.1f} TFLOP/s with the checks, "
                f"{windows[-1]['sm_clock_mhz']} MHz, {windows[-1]['power_w']} W, {done.launches} launches")  # fmt: skip
            window_mark, window_start = done, time.monotonic()
            sampler.reset()
    if queued is not None:
        queued.event.synchronize()
        if queued.launches > window_mark.launches:
            windows.append(_window(window_start - start, window_mark, queued, flops, sampler))
    return {
        "seconds": time.monotonic() - start,
        "launches": launches,
        "mismatched": int(differing.get()),
        "windows": windows,
    }


def _window(t_s: float, first: _Mark, last: _Mark, flops: int, sampler: PowerSampler) -> dict:
    ms = cupy.cuda.get_elapsed_time(first.event, last.event)
    return {
        "t_s": round(t_s, 1),
        "launches": last.launches - first.launches,
        "checked_tflops": (last.launches - first.launches) * flops / (ms * 1e-3) / 1e12,
        "sm_clock_mhz": sampler.median_clock(),
        "power_w": sampler.median_power(),
        "power_capped_pct": sampler.capped_pct(),
    }


def multi_stream(sets: Sequence[InputSet], streams: int, rounds: int) -> dict:
    """Each stream takes its own input set's launches; launches are issued round-robin across the streams,
    so the kernels of different streams may overlap; every output is compared after each round."""
    queues = [cupy.cuda.Stream(non_blocking=True) for _ in range(streams)]
    mine = [sets[i % len(sets)] for i in range(streams)]
    if len({id(s) for s in mine}) < streams:
        raise ValueError(f"{streams} streams need {streams} input sets, the workload has {len(sets)}")
    launches = mismatched = 0
    for _ in range(rounds):
        for queue, input_set in zip(queues, mine):
            with queue:
                for out in input_set.outs:
                    poison(out)
        for i in range(min(len(input_set.plans) for input_set in mine)):
            for queue, input_set in zip(queues, mine):
                with queue:
                    input_set.plans[i]()
        cupy.cuda.Device().synchronize()
        for input_set in mine:
            launches += len(input_set.outs)
            mismatched += _mismatches(input_set)
    return {"streams": streams, "launches": launches, "mismatched": mismatched}


def stability_rows(
    stage: str,
    m: int,
    n: int,
    k: int,
    dtype_name: str,
    *,
    seconds: float,
    streams: int,
    log: Callable[[str], None] = print,
) -> list[dict]:
    """A long run and a multi-stream run of one stage at one shape; one row each."""
    work = Workload.make(m, n, k, dtype_name, min_sets=streams)
    sets = input_sets(stage, work)
    base = {**work.base_row(stage), "input_sets": len(sets), "passed": all(s.passed for s in sets)}
    log(f"{stage} {m}x{n}x{k} {dtype_name}: {len(sets)} input sets verified: {base['passed']}")
    long = {**base, "run": "long", **long_run(sets, seconds, gemm_flops(m, n, k), log)}
    log(f"  {streams} streams ...")
    many = {**base, "run": "streams", **multi_stream(sets, streams, rounds=max(1, int(seconds // 10)))}
    for row in (long, many):
        row["passed"] = row["passed"] and row["mismatched"] == 0
    return [long, many]


def _mhz(window: dict) -> str:
    return f"{window['sm_clock_mhz']:.0f} MHz" if window.get("sm_clock_mhz") else "an unknown clock"


def summary_lines(rows: Sequence[dict]) -> list[str]:
    """What each long and multi-stream run did and found, in a sentence each. The record also holds the library
    soak's rows (run "soak", `tutorial.soak`), which sum themselves up."""
    lines = []
    for row in rows:
        if row["run"] not in ("long", "streams"):
            continue
        where = f"{row['stage']} {row['dtype']} {row['m']}x{row['n']}x{row['k']}"
        found = f"{row['launches']} launches, {row['mismatched']} not bit-identical to the verified output"
        if row["run"] == "long":
            first, last = row["windows"][0], row["windows"][-1]
            lines.append(
                f"{where}, one stream for {row['seconds']:.0f} s: {found}; "
                f"{first['checked_tflops']:.0f} TFLOP/s (checks included) at {_mhz(first)} in the first "
                f"{WINDOW_S:.0f} s, {last['checked_tflops']:.0f} at {_mhz(last)} in the last"
            )
        else:
            lines.append(f"{where}, {row['streams']} streams interleaved: {found}")
    return lines


RECORD = "stability"


def record(rows: Sequence[dict[str, Any]], prov: dict[str, Any], directory: Path | None = None) -> Path:
    """Merge `rows` into results/<gpu>/stability.json (`results.save_merged`): an earlier run's rows of the same
    stage and kind ("run": "long", "streams", or the library soak's "soak") replaced, the others kept. Each
    new row names its run's date in "run_date" (rows without one are the first run's)."""
    return results.save_merged(RECORD, {"rows": list(rows)}, prov, directory, key=_stage_and_kind, dated="run_date")


def _stage_and_kind(row: dict[str, Any]) -> tuple[Any, Any]:
    return row.get("stage"), row.get("run")
