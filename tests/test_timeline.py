"""The pipeline timeline: v4 and v5 built with TIMELINE=1 stamp the SM clock (and the shipped build does
not), the stamps decode into spans per role and per stage of the ring, and the figure draws them."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gpu import stage_or_skip
from kernels import compiled, kernel_knobs, launcher_defines, sass

from tutorial import timeline
from tutorial.stages import kernel_path


@pytest.mark.parametrize("stage", timeline.STAGES)
def test_only_the_timeline_build_reads_the_clock(stage):
    shipped = sass(stage, launcher_defines(stage, False))
    stamped = sass(stage, launcher_defines(stage, False, TIMELINE=1))
    assert "SR_CLOCK" not in shipped
    assert "SR_CLOCK" in stamped
    report = compiled(stage, launcher_defines(stage, False, TIMELINE=1))
    assert report.spill_stores == 0 and report.spill_loads == 0, report.log


@pytest.mark.parametrize("stage", timeline.STAGES)
def test_the_kernel_lays_out_its_stamps_as_the_decoder_reads_them(stage):
    source = kernel_path(stage).read_text()
    for name, value in (("TIMELINE_CTAS", timeline.CTAS), ("TIMELINE_ROLES", timeline.ROLES),
                        ("TIMELINE_STAMPS", timeline.STAMPS)):  # fmt: skip
        assert re.search(rf"constexpr int {name} = {value};", source), name
    enum = re.search(r"enum class Stamp : unsigned \{([^}]*)\}", source).group(1)
    assert [part.split("=")[0].strip() for part in enum.split(",")] == list(timeline.EVENTS)
    assert f'extern "C" __device__ unsigned long long {timeline.SYMBOL}[' in source


def _two_stage_run() -> np.ndarray:
    """A producer and two consumers passing two k-tiles through a 2-stage ring, then the epilogue."""
    words = np.zeros((timeline.CTAS, timeline.ROLES, timeline.STAMPS), dtype=np.uint64)
    base = 1 << 40  # clocks are relative to the first stamp
    producer = [("wait", 0, 0), ("go", 0, 2), ("handoff", 0, 10), ("wait", 1, 11), ("go", 1, 12), ("handoff", 1, 20)]
    consumer0 = [("wait", 0, 1), ("go", 0, 100), ("handoff", 0, 160), ("wait", 1, 161), ("go", 1, 170),
                 ("handoff", 1, 230), ("epilogue", 1, 231)]  # fmt: skip
    consumer1 = [("wait", 0, 1), ("go", 0, 101), ("handoff", 0, 165), ("wait", 1, 166), ("go", 1, 171),
                 ("handoff", 1, 240), ("epilogue", 1, 241)]  # fmt: skip
    for role, stamps in enumerate((producer, consumer0, consumer1)):
        for i, (event, stage, clock) in enumerate(stamps):
            words[0, role, i] = timeline.pack(event, stage, base + clock)
    return words


def test_stamps_decode_into_spans_per_role_and_per_stage():
    rows = timeline.decode(_two_stage_run())
    assert [row["role"] for row in rows] == list(timeline.ROLE_NAMES)  # CTA 1 stamped nothing: no rows
    producer = rows[0]["events"]
    assert producer[0] == ["wait", 0, 0] and producer[-1] == ["handoff", 1, 20]
    spans = timeline.role_spans(rows[1]["events"])
    assert spans[0] == {"kind": "waiting", "stage": 0, "start": 1, "end": 100}
    assert spans[1] == {"kind": "working", "stage": 0, "start": 100, "end": 160}
    assert len(spans) == 6  # the epilogue stamp opens no span: nothing marks its end
    ring = timeline.ring_spans(rows)
    assert {"kind": "issued", "stage": 0, "start": 10, "end": 100} in ring
    assert {"kind": "in use", "stage": 0, "start": 100, "end": 165} in ring  # until the later consumer hands back
    assert {"kind": "in use", "stage": 1, "start": 170, "end": 240} in ring
    assert timeline.epilogue_starts(rows) == [231] and timeline.epilogue_starts(rows, cta=1) == []
    summary = {row["role"]: row for row in timeline.summary(rows)}
    assert summary["consumer 0"]["waiting"] == (100 - 1) + (170 - 161)
    assert summary["producer"]["pct_waiting"] == pytest.approx(100 * 3 / 20)
    assert summary["consumer 0"]["median_waiting"] == (99 + 9) / 2 and summary["consumer 0"]["median_working"] == 60
    assert timeline.ring_summary(rows) == {"first_issued": 90, "median_issued": (90 + 150) / 2, "median_in_use": 67.5}
    assert "first load taken 90 cycles" in timeline.ring_line(rows)
    text = timeline.report(rows, rows).splitlines()
    assert text[0].startswith("Recorded: ring of CTA 0") and sum(line.startswith("This GPU:") for line in text) == 1


def test_the_figure_has_a_lane_per_role_and_per_stage():
    from tutorial.figures import pipeline_timeline

    rows = [{"stage": "v4_pipeline_swizzle", "dtype": "fp16", **row} for row in timeline.decode(_two_stage_run())]
    fig = pipeline_timeline(rows)
    labels = [tick.get_text() for tick in fig.axes[0].get_yticklabels()]
    assert labels == [*timeline.ROLE_NAMES, "stage 0", "stage 1"]
    assert "no timeline" in pipeline_timeline(rows, cta=1).axes[0].texts[0].get_text()


def test_a_stage_without_a_timeline_is_refused_by_name():
    with pytest.raises(ValueError, match="v3_wgmma_tma has no timeline"):
        timeline.record("v3_wgmma_tma", 256, 256, 256, "fp16")


def test_the_library_kernel_carries_no_timeline():
    """The stamps are the lessons' instrument: the library's kernel has no TIMELINE knob and no stamp buffer,
    its build reads no clock, and a timeline of it is refused by name."""
    assert "TIMELINE" not in kernel_knobs("library")
    assert timeline.SYMBOL not in kernel_path("library").read_text()
    assert "SR_CLOCK" not in sass("library", launcher_defines("library", False))
    with pytest.raises(ValueError, match="library has no timeline"):
        timeline.record("library", 256, 256, 256, "fp16")


@pytest.mark.gpu
@pytest.mark.parametrize("stage", timeline.STAGES)
def test_a_stamped_launch_is_right_and_stamps_every_k_tile(stage):
    """512 x 512 x 1024 FP16: 16 k-tiles a tile. The producer stamps wait, go and hand-off for each k-tile
    it loads; each consumer wait, go and hand-off for each k-tile it multiplies and one epilogue a tile."""
    stage_or_skip(stage)
    rows = timeline.record(stage, 512, 512, 1024, "fp16")  # raises if the product is wrong
    cta0 = {row["role"]: row["events"] for row in rows if row["cta"] == 0}
    assert set(cta0) == set(timeline.ROLE_NAMES)
    producer = [event for event, _, _ in cta0["producer"]]
    assert len(producer) % 48 == 0 and producer[:3] == ["wait", "go", "handoff"]
    for name in timeline.ROLE_NAMES[1:]:
        events = [event for event, _, _ in cta0[name]]
        tiles = events.count("epilogue")
        assert tiles >= 1 and len(events) == tiles * 49, (name, events[:8])
        clocks = [clock for _, _, clock in cta0[name]]
        assert clocks == sorted(clocks), f"{name}'s stamps are not in time order"


def test_a_timeline_with_knobs_is_not_recorded_over_the_shipped_one():
    from tutorial.cli import main

    with pytest.raises(SystemExit, match="printed, not recorded"):
        main(["timeline", "--knobs", "BOX_K=8", "--record"])
