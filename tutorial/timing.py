"""Timing: warm-up, equally long batches of back-to-back launches timed with CUDA events, the median.

The H200 is power-bound (under GEMMs it holds its 700 W limit by lowering the SM clock from 1980 MHz to
about 1500), so NVML samples the SM clock, the board power and the power-cap flag while each batch runs,
every row reports them, and TFLOP/s is also given as a percentage of the peak at the clock measured.
What a call costs the host is timed apart, on the wall clock: calls issued without waiting for the GPU;
and what it costs the GPU alone, with the launch queue held full (`device_us_per_call`) or inside a CUDA
graph (`capture_graph`, `time_graph`), where no host launches anything.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from typing import Any

import cupy
import numpy as np

PEAK_TFLOPS = 989.4  # dense FP16/BF16 tensor peak of the H100/H200 SXM datasheet
PEAK_CLOCK_MHZ = 1830.0  # the clock that peak assumes: 132 SMs x 4096 FLOP per clock
SLOW_BATCHES = 3
WARM_ENOUGH = 0.9  # of the warm-up asked for: a last batch of a few launches would add nothing
SW_POWER_CAP_REASON = 0x4  # nvmlClocksEventReasonSwPowerCap


def gemm_flops(m: int, n: int, k: int) -> int:
    return 2 * m * n * k


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return gemm_flops(m, n, k) / (ms * 1e-3) / 1e12


def peak_at_clock(sm_clock_mhz: float | None) -> float | None:
    """The dense peak scaled to the SM clock the card actually ran at."""
    return PEAK_TFLOPS * sm_clock_mhz / PEAK_CLOCK_MHZ if sm_clock_mhz else None


class PowerSampler:
    """SM clock (MHz), board power (W) and the power-cap flag through NVML; silent Nones where NVML is missing.

    Power is the instantaneous reading (NVML field NVML_FI_DEV_POWER_INSTANT) where the driver has it: the
    older nvmlDeviceGetPowerUsage is a one-second average, which for a 60 ms batch mostly averages the idle
    second before it. The flag is NVML's "SW power cap" clock-event reason: set while the driver holds the
    SM clock down to keep the board within its power limit (700 W on the H200 SXM).
    """

    def __init__(self, nvml: Any = None, handle: Any = None) -> None:
        """With no arguments, NVML's handle of the current device; tests pass a stand-in for both."""
        self.clocks: list[float] = []
        self.powers: list[float] = []
        self.capped: list[bool] = []
        self._nvml, self._handle = nvml, handle
        if nvml is None:
            try:
                import pynvml  # optional: without NVML the rows say None

                pynvml.nvmlInit()
                pci_bus = cupy.cuda.runtime.deviceGetPCIBusId(cupy.cuda.Device().id)
                self._nvml, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus.encode())
            except Exception:  # no NVML: the rows say None rather than a made-up clock
                self._nvml = None

    def _power_w(self) -> float:
        field = getattr(self._nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        if field is not None:
            value = self._nvml.nvmlDeviceGetFieldValues(self._handle, [field])[0]
            if value.nvmlReturn == 0:
                return value.value.uiVal / 1000.0
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0  # the one-second average

    def _power_capped(self) -> bool | None:
        reasons = getattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if reasons is None:  # the name before NVML 12.2
            reasons = self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        try:
            return bool(reasons(self._handle) & SW_POWER_CAP_REASON)
        except Exception:  # a driver that does not report the reasons: no flag rather than a made-up one
            return None

    def sample(self) -> None:
        if self._nvml is None:
            return
        self.clocks.append(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
        self.powers.append(self._power_w())
        capped = self._power_capped()
        if capped is not None:
            self.capped.append(capped)

    def reset(self) -> None:
        self.clocks.clear()
        self.powers.clear()
        self.capped.clear()

    @staticmethod
    def _median(values: list[float]) -> float | None:
        return float(statistics.median(values)) if values else None

    def median_clock(self) -> float | None:
        return self._median(self.clocks)

    def median_power(self) -> float | None:
        return self._median(self.powers)

    def capped_pct(self) -> float | None:
        """The share of samples, in percent, taken while the SW power cap held the clock down."""
        return 100.0 * sum(self.capped) / len(self.capped) if self.capped else None


@dataclass(frozen=True)
class Timing:
    """The median time of one launch over equally long batches, and what the card did meanwhile."""

    ms: float
    batch_ms: tuple[float, ...]
    launches_per_batch: int
    sm_clock_mhz: float | None
    power_w: float | None
    power_capped_pct: float | None = None

    @classmethod
    def of_batches(cls, times: tuple[float, ...], per_batch: int, sampler: PowerSampler) -> Timing:
        """The median of per-launch batch times, with what the sampler saw while they ran."""
        return cls(
            ms=float(statistics.median(times)),
            batch_ms=times,
            launches_per_batch=per_batch,
            sm_clock_mhz=sampler.median_clock(),
            power_w=sampler.median_power(),
            power_capped_pct=sampler.capped_pct(),
        )


def run_batch(launches: Sequence[Callable[[], object]], count: int, sampler: PowerSampler) -> float:
    """`count` launches back to back, rotating over `launches`, NVML sampled meanwhile: ms per launch."""
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for i in range(count):
        launches[i % len(launches)]()
    end.record()
    while not end.done:  # sample while the GPU works through the queued launches
        sampler.sample()
        time.sleep(0.002)
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / count


def warm_up(
    launches: Sequence[Callable[[], object]], warmup_ms: float, first_ms: float, sampler: PowerSampler
) -> float:
    """Launches back to back for about `warmup_ms` of GPU time (after a settle the clock needs it to climb back),
    the first batch sized by `first_ms` (the first launches' time, compiling included), the next by the warm
    ones'. Returns the last batch's time per launch."""
    spent, per_launch = 0.0, first_ms
    while True:
        count = max(1, round((warmup_ms - spent) / max(per_launch, 1e-3)))
        per_launch = run_batch(launches, count, sampler)
        spent += per_launch * count
        if spent >= WARM_ENOUGH * warmup_ms:
            return per_launch


def time_launches(
    launches: Sequence[Callable[[], object]],
    *,
    batch_ms: float = 60.0,
    batches: int = 7,
    warmup_ms: float = 60.0,
    sampler: PowerSampler | None = None,
) -> Timing:
    """Median time per launch; `launches` holds one ready launch per input set, called in rotation
    (`time_launches_alternated` of one contender)."""
    return time_launches_alternated([launches], batch_ms=batch_ms, batches=batches, warmup_ms=warmup_ms,
                                    sampler=sampler)[0]  # fmt: skip


def time_launches_alternated(
    contenders: Sequence[Sequence[Callable[[], object]]],
    *,
    batch_ms: float = 60.0,
    batches: int = 7,
    warmup_ms: float = 60.0,
    sampler: PowerSampler | None = None,
) -> list[Timing]:
    """Median time per launch of each contender (one ready launch per input set, called in rotation), their
    batches alternated, one batch of each per round, as `time_graphs` alternates graphs: timed one after the
    other, the first would meet the clock the power limit left it and the second the clock it recovered to.
    Each batch starts on an idle queue, so the host's cost per call counts; each is sized by the contender's
    warm launches (`warm_up`)."""
    sampler = sampler or PowerSampler()
    probes = [run_batch(launches, len(launches), sampler) for launches in contenders]  # also compiles and loads
    warm = [warm_up(launches, warmup_ms, probe, sampler) for launches, probe in zip(contenders, probes, strict=True)]
    per_batch = [max(1, round(batch_ms / max(ms, 1e-3))) for ms in warm]
    sampler.reset()
    if max(warm) > batch_ms:  # one launch outlasts a batch (v0 at 8192^3): fewer, single-launch batches
        batches = min(batches, SLOW_BATCHES)
    times: list[list[float]] = [[] for _ in contenders]
    for _ in range(batches):
        for c, launches in enumerate(contenders):
            times[c].append(run_batch(launches, per_batch[c], sampler))
    return [Timing.of_batches(tuple(t), n, sampler) for t, n in zip(times, per_batch, strict=True)]


HOST_CALLS = 100  # calls per host-time repeat: well short of the launch queue (about 1000 pending launches)
HOST_REPEATS = 7  # the least of seven: the host machine's own noise (other tenants, clock) only ever adds


def synchronize() -> None:
    """Wait for all work on the current GPU, every stream (CuPy's, torch's) included."""
    cupy.cuda.Device().synchronize()


def host_us_per_call(
    launches: Sequence[Callable[[], object]],
    *,
    calls: int = HOST_CALLS,
    repeats: int = HOST_REPEATS,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], None] = synchronize,
) -> float:
    """Host µs per call: the wall time of `calls` calls issued without synchronising, divided by `calls`; the
    least of `repeats` (what the host spends, not what it waited for). Each launch runs once first, so that
    whatever the first call sets up (a plan, a compiled kernel, an allocator's pool) is outside the clock.

    The GPU finishes each repeat's work before the next starts, so the queue never fills and the host never
    waits for it inside the clock.
    """
    for launch in launches:
        launch()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        for i in range(calls):
            launches[i % len(launches)]()
        best = min(best, clock() - start)
        sync()
    return 1e6 * best / calls


HOLD_SOURCE = r"""
extern "C" __global__ void hold_stream(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""
DEVICE_CALLS = 50  # calls per timed batch (split-K's are two launches each: well inside the launch queue)
DEVICE_REPEATS = 7
MIN_HOLD_US = 2000.0


@cache
def _hold_kernel() -> cupy.RawKernel:
    return cupy.RawKernel(HOLD_SOURCE, "hold_stream")


def hold_stream(us: float) -> None:
    """Keep the current stream busy for `us` microseconds (one thread spinning on the global timer)."""
    _hold_kernel()((1,), (1,), (np.uint64(int(us * 1e3)),))


def device_us_per_call(
    launches: Sequence[Callable[[], object]], *, calls: int = DEVICE_CALLS, repeats: int = DEVICE_REPEATS
) -> float:
    """GPU µs per call, the host's time hidden: the stream is held busy while the host queues `calls` calls
    (rotating over `launches`), so they run back to back however long the host takes to issue them. The
    median of `repeats`; a batch whose queueing outlasted the hold is timed again with a longer hold.

    Per call, `time_launches` measures the longer of the host's time and the GPU's; this measures the GPU's
    alone (each launch's own start-up on the GPU included), what a caller gets when the host runs ahead,
    as it does in a model whose GPU work is queued in advance or captured in a CUDA graph."""
    for launch in launches:
        launch()
    synchronize()
    hold_us, times = MIN_HOLD_US, []
    while len(times) < repeats:
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        hold_stream(hold_us)
        start.record()
        began = time.perf_counter()
        for i in range(calls):
            launches[i % len(launches)]()
        queued_us = 1e6 * (time.perf_counter() - began)
        end.record()
        end.synchronize()
        if queued_us > 0.8 * hold_us:  # the GPU may have caught up with the host: hold longer, time again
            hold_us = 2 * queued_us
            continue
        times.append(1e3 * cupy.cuda.get_elapsed_time(start, end) / calls)
    return float(statistics.median(times))


def settle(seconds: float) -> None:
    """Let the card cool and its clock recover, so one row's heat does not slow the next."""
    synchronize()
    time.sleep(seconds)


def timing_fields(timing: Timing, m: int, n: int, k: int) -> dict[str, float | int | None]:
    """A row's timing columns: median ms, TFLOP/s, % of peak (flat and at the measured clock), clock, power."""
    rate = tflops(m, n, k, timing.ms)
    at_clock = peak_at_clock(timing.sm_clock_mhz)
    return {
        "ms": timing.ms,
        "tflops": rate,
        "pct_peak": 100 * rate / PEAK_TFLOPS,
        "pct_peak_at_clock": 100 * rate / at_clock if at_clock else None,
        "sm_clock_mhz": timing.sm_clock_mhz,
        "power_w": timing.power_w,
        "power_capped_pct": timing.power_capped_pct,
        "launches_per_batch": timing.launches_per_batch,
    }


# GPU time inside CUDA graphs, what a serving engine that captures its decode step sees: calls captured back
# to back in one graph (the input sets rotated, as everywhere), the graph replayed, replays timed with CUDA
# events. The host's launch cost is gone; each kernel's own start-up on the GPU stays.
GRAPH_BATCH_MS = 3.0  # GPU time per timed batch of replays: events resolve ~0.5 us, so a batch of 3 ms reads to 0.02%
GRAPH_BATCHES = 20
GRAPH_MAX_CALLS = 50  # calls per graph at small shapes; long calls take fewer (a replay lasts GRAPH_BATCH_MS anyway)


def require_torch() -> Any:
    """PyTorch, whose CUDA graphs and torch.matmul the call's timings need; a clear RuntimeError without it."""
    try:
        import torch  # optional and heavy: only the call's suites need it
    except ImportError:
        raise RuntimeError("the call suites time torch.matmul and CUDA graphs: install PyTorch") from None
    return torch


def graph_calls(call_ms: float, sets: int, *, batch_ms: float = GRAPH_BATCH_MS, most: int = GRAPH_MAX_CALLS) -> int:
    """Calls to capture in one graph: about `batch_ms` of them (`call_ms` each), at most `most`, in whole
    rotations over the `sets` input sets (so that every set is read equally often)."""
    wanted = min(most, max(1, math.ceil(batch_ms / max(call_ms, 1e-6))))
    return sets * math.ceil(wanted / sets)


@cache
def capture_stream(device: int) -> Any:
    """The one side stream of this process that graphs are captured on: a call's per-stream state (the
    library's split-K scratch, cuBLAS's workspace) is made there once, by the warm-up, and reused."""
    return require_torch().cuda.Stream(device)


@dataclass(frozen=True)
class CapturedGraph:
    """`calls` launches captured in one torch.cuda.CUDAGraph; `first` and `last` are what the first and the
    last of them returned, in the graph's own memory, rewritten by every replay (what a check of the replayed
    graph reads)."""

    graph: Any
    calls: int
    first: Any
    last: Any = None

    def replay(self) -> None:
        self.graph.replay()


def capture_graph(launches: Sequence[Callable[[], object]], calls: int) -> CapturedGraph:
    """Capture `calls` launches (rotating over `launches`) into a CUDA graph on `capture_stream`. Each launch
    runs once on that stream first: a plan, a compiled kernel or a stream's scratch made during the capture
    would be made in the graph, or fail."""
    torch = require_torch()
    stream = capture_stream(torch.cuda.current_device())
    stream.wait_stream(torch.cuda.current_stream())  # the inputs were written on the caller's stream
    with torch.cuda.stream(stream):
        for launch in launches:
            launch()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        first = last = launches[0]()
        for i in range(1, calls):
            last = launches[i % len(launches)]()
    return CapturedGraph(graph, calls, first, last)


def replays_per_batch(captured: CapturedGraph, batch_ms: float) -> int:
    """Replays that make a batch of about `batch_ms` of GPU time: the first replay also uploads the graph and is
    not counted; the second is timed alone."""
    torch = require_torch()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    captured.replay()
    start.record()
    captured.replay()
    end.record()
    end.synchronize()
    return max(1, math.ceil(batch_ms / max(start.elapsed_time(end), 1e-3)))


def time_graphs(
    graphs: Sequence[CapturedGraph],
    *,
    batch_ms: float = GRAPH_BATCH_MS,
    batches: int = GRAPH_BATCHES,
    sampler: PowerSampler | None = None,
) -> list[Timing]:
    """Median GPU time per captured call of each graph, their batches alternated: each round replays every
    graph for one batch of at least `batch_ms`, in turn, all queued back to back (no idle GPU between them)
    with an event between batches; NVML sampled meanwhile. The H200 moves its SM clock by hundreds of MHz
    within a second as its power limit bites, so graphs timed one after the other would each meet their own
    clock; alternated, every graph meets the clocks the others meet, and their ratio is the kernels'."""
    torch = require_torch()
    sampler = sampler or PowerSampler()
    per_batch = [replays_per_batch(captured, batch_ms) for captured in graphs]
    for captured, count in zip(graphs, per_batch, strict=True):  # warm-up at the timed pace
        for _ in range(count):
            captured.replay()
    synchronize()
    sampler.reset()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(batches * len(graphs) + 1)]
    events[0].record()
    for i, event in enumerate(events[1:]):
        captured = graphs[i % len(graphs)]
        for _ in range(per_batch[i % len(graphs)]):
            captured.replay()
        event.record()
    while not events[-1].query():
        sampler.sample()
        time.sleep(0.002)
    events[-1].synchronize()
    elapsed = [start.elapsed_time(end) for start, end in pairwise(events)]
    timings = []
    for g, captured in enumerate(graphs):
        calls = per_batch[g] * captured.calls
        timings.append(Timing.of_batches(tuple(ms / calls for ms in elapsed[g :: len(graphs)]), calls, sampler))
    return timings


def alternated_graph_fields(graphs: dict[str, CapturedGraph]) -> dict[str, Any]:
    """Graphs named by a field prefix, timed together (`time_graphs`): `<prefix>graph_us` (µs per captured
    call), `<prefix>graph_calls` and `<prefix>graph_sm_clock_mhz` for each."""
    fields: dict[str, Any] = {}
    for (prefix, graph), timing in zip(graphs.items(), time_graphs(list(graphs.values())), strict=True):
        fields.update({f"{prefix}graph_us": 1e3 * timing.ms, f"{prefix}graph_calls": graph.calls,
                       f"{prefix}graph_sm_clock_mhz": timing.sm_clock_mhz})  # fmt: skip
    return fields


def time_graph(
    captured: CapturedGraph,
    *,
    batch_ms: float = GRAPH_BATCH_MS,
    batches: int = GRAPH_BATCHES,
    sampler: PowerSampler | None = None,
) -> Timing:
    """Median GPU time per captured call: `batches` batches of replays, each at least `batch_ms` long, queued
    back to back with an event between batches; NVML sampled meanwhile (`time_graphs` of one graph)."""
    return time_graphs([captured], batch_ms=batch_ms, batches=batches, sampler=sampler)[0]
