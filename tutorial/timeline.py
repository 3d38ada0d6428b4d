"""The pipeline over time: v4's and v5's clock stamps (compiled in with TIMELINE=1) as what each role did when.

With TIMELINE=1 the first CTAS CTAs of a launch stamp the SM clock where a role (the producer thread, thread
0 of each consumer warpgroup) starts to wait on a barrier, goes on, hands a stage over (the producer: its
TMA loads issued; a consumer: its arrival on the empty barrier) and starts its epilogue. A stamp packs the
event (bits 56-63), the stage (48-55) and the clock's low 48 bits; kernel.cu's "pipeline over time" block
writes them into its global `timeline_stamps`, CTAS x ROLES x STAMPS of them, zero where nothing was
written. `spans` turns one CTA's stamps into intervals per role and per stage of the mbarrier ring, which
`figures.pipeline_timeline` draws.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any

import cupy
import numpy as np

from deepgemm import jit
from deepgemm.config import GemmConfig
from deepgemm.dtypes import input_dtype
from tutorial import results, stages
from tutorial.check import random_problem, reference, verify

STAGES = ("v4_pipeline_swizzle", "v5_fused")  # the stages with a TIMELINE knob
CTAS, ROLES, STAMPS = 2, 3, 4096  # kernel.cu's TIMELINE_CTAS, TIMELINE_ROLES, TIMELINE_STAMPS
ROLE_NAMES = ("producer", "consumer 0", "consumer 1")
EVENTS = ("wait", "go", "handoff", "epilogue")  # kernel.cu's enum class Stamp, in order
SYMBOL = "timeline_stamps"
CLOCK_BITS = 48
CLOCK_MASK = (1 << CLOCK_BITS) - 1

Row = dict[str, Any]


def pack(event: str, stage: int, clock: int) -> int:
    """A stamp as the kernel writes it (for tests and for reading the layout)."""
    return (EVENTS.index(event) << 56) | (stage << CLOCK_BITS) | (clock & CLOCK_MASK)


def decode(stamps: np.ndarray) -> list[Row]:
    """The kernel's stamps (CTAS x ROLES x STAMPS 64-bit words) as one row per CTA and role that stamped:
    `events`, a list of [event, stage, clock] with clock in cycles since that CTA's first stamp (each CTA
    runs on one SM, whose clock its stamps share; two CTAs' clocks are not comparable)."""
    words = np.asarray(stamps, dtype=np.uint64).reshape(CTAS, ROLES, STAMPS)
    rows = []
    for cta in range(CTAS):
        per_role = {}
        for role in range(ROLES):
            written = words[cta, role]
            count = int(np.argmax(written == 0)) if (written == 0).any() else STAMPS  # stamps are contiguous
            per_role[role] = [int(w) for w in written[:count]]
        clocks = [w & CLOCK_MASK for ws in per_role.values() for w in ws]
        if not clocks:
            continue
        start = min(clocks)
        for role, ws in per_role.items():
            if ws:
                events = [[EVENTS[w >> 56], (w >> CLOCK_BITS) & 0xFF, (w & CLOCK_MASK) - start] for w in ws]
                rows.append({"cta": cta, "role": ROLE_NAMES[role], "events": events})
    return rows


SPAN_OF = {"wait": "waiting", "go": "working", "handoff": "between", "epilogue": "epilogue"}


def role_spans(events: Sequence[Sequence[Any]]) -> list[Row]:
    """One role's stamps as intervals, each from a stamp to the role's next: 'waiting' (on a barrier),
    'working' (after the wait: the producer issuing its loads, a consumer its wgmma), 'between' (after a
    hand-off) and 'epilogue'. The last stamp opens no interval: nothing marks its end."""
    return [
        {"kind": SPAN_OF[event], "stage": stage, "start": clock, "end": following[2]}
        for (event, stage, clock), following in pairwise(events)
    ]


def ring_spans(rows: Iterable[Row], cta: int = 0) -> list[Row]:
    """Per stage of the ring, each fill of it: 'issued' from the producer's hand-off (TMA issued) to consumer
    0 going on (the full barrier complete), then 'in use' until the last consumer hands the stage back.
    'issued' bounds the load's time from above; where consumer 0 had to wait for the stage, it is that time."""
    by_role = {row["role"]: row["events"] for row in rows if row["cta"] == cta}
    issued = _times(by_role.get("producer", []), "handoff")
    landed = _times(by_role.get("consumer 0", []), "go")
    released = [_times(by_role.get(name, []), "handoff") for name in ROLE_NAMES[1:] if name in by_role]
    spans = []
    for stage, issue_times in issued.items():
        for i, (issue, land) in enumerate(zip(issue_times, landed.get(stage, []))):
            spans.append({"kind": "issued", "stage": stage, "start": issue, "end": land})
            backs = [times[stage][i] for times in released if i < len(times.get(stage, []))]
            if backs:
                spans.append({"kind": "in use", "stage": stage, "start": land, "end": max(backs)})
    return spans


def epilogue_starts(rows: Iterable[Row], cta: int = 0) -> list[int]:
    """The clocks at which consumer 0 of CTA `cta` starts an epilogue: where to look for a tile boundary."""
    events = next((row["events"] for row in rows if row["cta"] == cta and row["role"] == "consumer 0"), [])
    return [clock for name, _, clock in events if name == "epilogue"]


def _times(events: Sequence[Sequence[Any]], event: str) -> dict[int, list[int]]:
    """The clocks of one kind of stamp, per stage, in order."""
    found: dict[int, list[int]] = {}
    for name, stage, clock in events:
        if name == event:
            found.setdefault(stage, []).append(clock)
    return found


def summary(rows: Iterable[Row], cta: int = 0) -> list[Row]:
    """Per role of one CTA: cycles waiting, working, between hand-offs and in epilogues, the share waiting,
    and the median of one wait and of one stretch of work (a k-tile's)."""
    table = []
    for row in rows:
        if row["cta"] != cta:
            continue
        spans = role_spans(row["events"])
        totals = {kind: 0 for kind in SPAN_OF.values()}
        for span in spans:
            totals[span["kind"]] += span["end"] - span["start"]
        elapsed = sum(totals.values())
        waiting = 100.0 * totals["waiting"] / elapsed if elapsed else None
        medians = {f"median_{kind}": _median(spans, kind) for kind in ("waiting", "working")}
        table.append({"role": row["role"], **totals, "pct_waiting": waiting, **medians})
    return table


def ring_summary(rows: Iterable[Row], cta: int = 0) -> Row:
    """One CTA's ring in cycles: the first load's issue to its taking, and the medians of 'issued' and
    'in use' (`ring_spans`)."""
    ring = ring_spans(rows, cta)
    issued = [span for span in ring if span["kind"] == "issued"]
    return {
        "first_issued": issued[0]["end"] - issued[0]["start"] if issued else None,
        "median_issued": _median(ring, "issued"),
        "median_in_use": _median(ring, "in use"),
    }


def ring_line(rows: Iterable[Row], cta: int = 0) -> str:
    """`ring_summary` in words, for the CLI and the notebooks."""
    ring = ring_summary(rows, cta)
    if ring["first_issued"] is None:
        return f"CTA {cta}: no ring stamps"
    return (
        f"ring of CTA {cta}: first load taken {ring['first_issued']:,} cycles after its issue; loads taken a "
        f"median {ring['median_issued']:,.0f} after theirs; a stage in use a median {ring['median_in_use']:,.0f}"
    )


def report(recorded: Sequence[Row], live: Sequence[Row] = ()) -> str:
    """CTA 0's ring (`ring_line`) and roles (`summary`) in the recorded run, then in this GPU's where there is
    one: what the CLI and the notebooks print."""
    lines = []
    for label, run in (("Recorded:", recorded), ("This GPU:", live)):
        if run:
            lines += [f"{label} {ring_line(run)}", results.format_table(summary(run), SUMMARY_COLUMNS)]
    return "\n".join(lines)


def _median(spans: Iterable[Row], kind: str) -> float | None:
    lengths = [span["end"] - span["start"] for span in spans if span["kind"] == kind]
    return float(np.median(lengths)) if lengths else None


SUMMARY_COLUMNS = (
    ("role", "role", 0),
    ("waiting", "cycles waiting", 0),
    ("working", "working", 0),
    ("between", "between", 0),
    ("epilogue", "epilogue", 0),
    ("pct_waiting", "% waiting", 1),
    ("median_waiting", "one wait (median)", 0),
    ("median_working", "one k-tile's work (median)", 0),
)


def record(stage: str, m: int, n: int, k: int, dtype: str, knobs: dict[str, int] | None = None) -> list[Row]:
    """One launch of `stage` built with TIMELINE=1 (and `knobs`, e.g. an ablation's) on random inputs, its
    output verified first, and its stamps decoded (`decode`), each row with the stage, dtype and shape.
    Needs the GPU the stage needs."""
    if stage not in STAGES:
        raise ValueError(f"{stage} has no timeline; the stages with one are {', '.join(STAGES)}")
    a, b = random_problem(m, n, k, input_dtype(dtype), seed=0)
    launch = stages.load(stage).plan(a, b, config=GemmConfig.from_defines({**(knobs or {}), "TIMELINE": 1}))
    pointer = jit.module_of(launch.kernel).get_global(SYMBOL)
    stamps = cupy.ndarray((CTAS * ROLES * STAMPS,), dtype=cupy.uint64, memptr=pointer)
    stats = verify(launch, reference(a, b), launch.out)  # a warm launch; its stamps are replaced below
    if not stats.passed:
        raise RuntimeError(f"{stage} with TIMELINE=1 computed a wrong product: {stats.summary()}")
    stamps.fill(0)
    launch()
    cupy.cuda.Device().synchronize()
    return [{"stage": stage, "dtype": dtype, "m": m, "n": n, "k": k, **row} for row in decode(stamps.get())]
