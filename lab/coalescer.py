"""The L2 request coalescer, probed: whose identical reads does it merge, and for how long?

Before a read reaches an L2 slice, the coalescer in front of it may merge it with an identical request
still in flight; cuBLAS's GEMM gets much of its low L2 traffic that way (lab/README.md). This probe asks
the rule. Two CTAs on chosen SMs stream the same 2 MB with bulk TMA copies after a common start line, the
rest of the GPU idle, and Nsight Compute counts the read sectors their requests name and those the
coalescer merged. The second reader may start a chosen number of cycles late, and the data may come
from L2 (read once just before) or from DRAM (ncu flushes the caches first).

Which SMs share a GPC, CUDA does not say. The probe learns it from where the hardware places the CTAs of
large clusters (`lab/gpc.py`): a cluster never spans two GPCs. SMs that no cluster covered stay alone.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import cupy

from deepgemm.jit import BASE_OPTIONS, device_arch
from lab import gpc
from lab.gpc import HOLD_SMEM_BYTES, group_index
from tutorial.profile import ncu_binary, parse_ncu_rows, run_ncu

SOURCE = Path(__file__).with_name("coalescer.cu")
CHUNK_BYTES = 16 * 1024  # one bulk copy
CHUNKS = 128  # 2 MB per reader
DELAYS = (0, 200, 1000, 4000, 16000)  # cycles by which the second reader starts late
ANCHOR_SM = 0
DATA_SOURCES = {"L2": "none", "DRAM": "all"}  # where the bytes come from -> ncu --cache-control
METRICS = {
    "request_sectors": "lrc__request_sectors_op_read_coalescable.sum",
    "merged_sectors": "lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum",
}


def pair_plan(groups: Sequence[Sequence[int]], anchor: int = ANCHOR_SM) -> list[dict[str, int]]:
    """The anchor SM with every other SM, both starting together; then a sweep of start delays for one
    partner in the anchor's group and one outside it."""
    where = group_index(groups)
    others = sorted(sm for sm in where if sm != anchor)
    plan = [{"sm_a": anchor, "sm_b": sm, "delay": 0} for sm in others]
    near = [sm for sm in others if where[sm] == where[anchor]]
    far = [sm for sm in others if where[sm] != where[anchor]]
    for partner in near[:1] + far[:1]:
        plan += [{"sm_a": anchor, "sm_b": partner, "delay": d} for d in DELAYS if d > 0]
    return plan


def pair_rows(
    plan: Sequence[dict[str, int]], measured: Sequence[dict[str, Any]], groups: Sequence[Sequence[int]], data: str
) -> list[dict[str, Any]]:
    """One row per planned pair: the sectors requested and merged, and the share of the second reader's
    sectors that were merged (1 when every one of its requests met the first reader's, 0 when none did)."""
    if len(plan) != len(measured):
        raise ValueError(f"{len(plan)} pairs planned but {len(measured)} launches profiled")
    where = group_index(groups)
    rows = []
    for pair, raw in zip(plan, measured):
        requested, merged = (raw.get(METRICS[key]) for key in ("request_sectors", "merged_sectors"))
        if not isinstance(requested, float) or not isinstance(merged, float) or requested <= 0:
            raise ValueError(f"ncu gave no coalescer counts for {pair}: {raw}")
        rows.append({
            **pair, "data": data, "same_gpc": where[pair["sm_a"]] == where[pair["sm_b"]],
            "request_sectors": requested, "merged_sectors": merged, "second_reader_merged": 2 * merged / requested,
        })  # fmt: skip
    return rows


def summary_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """What a probe found, as text: the delay sweeps, then for each data source the range of merged shares
    over the partners a cluster placed with the anchor and over the others."""
    lines = [
        f"data from {row['data']:4s}: SMs {row['sm_a']} and {row['sm_b']:3d} "
        f"({'placed together' if row['same_gpc'] else 'never placed together'} by a cluster), second reader "
        f"{row['delay']:5d} cycles late: {row['second_reader_merged']:.2f} of its sectors merged"
        for row in rows
        if row["delay"] > 0
    ]
    for data in DATA_SOURCES:
        for together in (True, False):
            picked = [r for r in rows if r["data"] == data and r["delay"] == 0 and r["same_gpc"] is together]
            if picked:
                shares = [r["second_reader_merged"] for r in picked]
                merging = sorted(r["sm_b"] for r in picked if r["second_reader_merged"] > 0.5)
                lines.append(
                    f"data from {data:4s}, same start, {len(picked):3d} partners "
                    f"{'placed with' if together else 'never placed with'} SM {picked[0]['sm_a']}: merged "
                    f"{min(shares):.2f} to {max(shares):.2f}; more than half on SMs {merging}"
                )
    return lines


# ---- on the GPU ---------------------------------------------------------------------------------------


@cache
def _function(name: str) -> Any:
    options = (f"-arch={device_arch()}", *BASE_OPTIONS)
    kernel = cupy.RawModule(code=SOURCE.read_text(), options=options, backend="nvrtc").get_function(name)
    kernel.max_dynamic_shared_size_bytes = HOLD_SMEM_BYTES
    return kernel


def run_pairs(plan: Sequence[dict[str, int]], warm: bool) -> list[dict[str, int]]:
    """Launch the two readers for each planned pair (after reading the bytes into L2 when `warm`); return
    each pair with the cycles its two readers took, as a check that both ran."""
    sm_count = gpc.sm_count()
    src = cupy.random.RandomState(0).randint(0, 2**30, size=CHUNKS * CHUNK_BYTES // 4, dtype=cupy.int32)
    counter = cupy.zeros(1, dtype=cupy.uint32)
    cycles = cupy.zeros(sm_count, dtype=cupy.int64)
    sink = cupy.zeros(1, dtype=cupy.int32)
    twin, warm_l2 = _function("twin_reads"), _function("warm_l2")
    done = []
    for pair in plan:
        if warm:
            warm_l2((2 * sm_count,), (256,), (src, cupy.int32(src.size // 4), sink))
        counter.fill(0)
        cycles.fill(0)
        args = (src, cupy.int32(CHUNKS), cupy.int32(CHUNK_BYTES), cupy.int32(pair["sm_a"]), cupy.int32(pair["sm_b"]),
                cupy.int32(pair["delay"]), counter, cycles)  # fmt: skip
        twin((sm_count,), (32,), args, shared_mem=HOLD_SMEM_BYTES)
        cupy.cuda.Device().synchronize()
        spent = cycles.get()
        done.append({**pair, "cycles_a": int(spent[pair["sm_a"]]), "cycles_b": int(spent[pair["sm_b"]])})
    if any(p["cycles_a"] <= 0 or p["cycles_b"] <= 0 for p in done):
        raise RuntimeError("a reader did not run: the GPU has fewer SMs free than the plan assumes")
    return done


def profile_pairs(plan: Sequence[dict[str, int]], data: str, timeout_s: float = 300) -> list[dict[str, Any]]:
    """ncu over `run_pairs` in a subprocess, one profiled launch of the readers per planned pair."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(list(plan), handle)
    target = [sys.executable, "-m", "lab", "coalescer", "--run-plan", handle.name]
    command = [
        ncu_binary(), "--cache-control", DATA_SOURCES[data], "--clock-control", "none", "--csv", "--page", "raw",
        "--kernel-name", "twin_reads", "--metrics", ",".join(METRICS.values()),
        *target, *(["--warm"] if data == "L2" else []),
    ]  # fmt: skip
    try:
        return parse_ncu_rows(run_ncu(command, timeout_s))
    finally:
        Path(handle.name).unlink(missing_ok=True)


def probe() -> tuple[list[list[int]], list[dict[str, Any]]]:
    """The GPC groups and one row per pair and data source."""
    groups = gpc.gpc_groups()
    plan = pair_plan(groups)
    rows = []
    for data in DATA_SOURCES:
        rows += pair_rows(plan, profile_pairs(plan, data), groups, data)
    return groups, rows
