"""Timing: warm-up, equally long batches of back-to-back launches timed with CUDA events, the median.

Input sets rotate so that a batch does not run out of the 60 MB L2. The H200 is power-bound (under GEMMs it
holds its 700 W limit by lowering the SM clock from 1980 MHz to about 1500), so NVML samples the SM clock,
the board power and the power-cap flag while each batch runs, every row reports them, and TFLOP/s is also
given as a percentage of the peak at the clock measured. cuBLAS is timed by the same function in the same
run; `bench_pairs` alternates it with a stage to measure a small gap with its spread.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cupy

from deepgemm.model import ceil_div

PEAK_TFLOPS = 989.4  # dense FP16/BF16 tensor peak of the H100/H200 SXM datasheet
PEAK_CLOCK_MHZ = 1830.0  # the clock that peak assumes: 132 SMs x 4096 FLOP per clock
L2_BYTES = 60 * 2**20
SLOW_BATCHES = 3
SW_POWER_CAP_REASON = 0x4  # nvmlClocksEventReasonSwPowerCap


def gemm_flops(m: int, n: int, k: int) -> int:
    return 2 * m * n * k


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return gemm_flops(m, n, k) / (ms * 1e-3) / 1e12


def peak_at_clock(sm_clock_mhz: float | None) -> float | None:
    """The dense peak scaled to the SM clock the card actually ran at."""
    return PEAK_TFLOPS * sm_clock_mhz / PEAK_CLOCK_MHZ if sm_clock_mhz else None


def input_sets_needed(bytes_per_set: int, l2_bytes: int = L2_BYTES, at_most: int = 8) -> int:
    """Enough input sets that rotating through them touches three times the L2 (at least two)."""
    return max(2, min(at_most, ceil_div(3 * l2_bytes, max(bytes_per_set, 1))))


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
                import pynvml

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


def time_launches(
    launches: Sequence[Callable[[], object]],
    *,
    batch_ms: float = 60.0,
    batches: int = 7,
    warmup_ms: float = 60.0,
    sampler: PowerSampler | None = None,
) -> Timing:
    """Median time per launch; `launches` holds one ready launch per input set, called in rotation."""
    sampler = sampler or PowerSampler()
    probe = run_batch(launches, len(launches), sampler)  # also compiles and loads anything lazy
    per_batch = max(1, round(batch_ms / max(probe, 1e-3)))
    run_batch(launches, max(1, round(warmup_ms / max(probe, 1e-3))), sampler)
    sampler.reset()
    if probe > batch_ms:  # one launch outlasts a batch (v0 at 8192^3): fewer, single-launch batches
        batches = min(batches, SLOW_BATCHES)
    times = tuple(run_batch(launches, per_batch, sampler) for _ in range(batches))
    return Timing(
        ms=float(statistics.median(times)),
        batch_ms=times,
        launches_per_batch=per_batch,
        sm_clock_mhz=sampler.median_clock(),
        power_w=sampler.median_power(),
        power_capped_pct=sampler.capped_pct(),
    )


def settle(seconds: float) -> None:
    """Let the card cool and its clock recover, so one row's heat does not slow the next."""
    cupy.cuda.Device().synchronize()
    time.sleep(seconds)


@dataclass(frozen=True)
class LibraryLaunch:
    """A library call timed like our kernels; `out` is where it writes (None: it allocates its result)."""

    run: Callable[[], object]
    out: cupy.ndarray | None = None

    def __call__(self) -> object:
        return self.run()


def cublas_launch(a: cupy.ndarray, b: cupy.ndarray, out: cupy.ndarray) -> LibraryLaunch:
    """cuBLAS on the same operands, through CuPy (or PyTorch where CuPy has no cuBLAS path for the dtype)."""
    try:
        cupy.matmul(a, b, out=out)
        return LibraryLaunch(lambda: cupy.matmul(a, b, out=out), out)
    except (TypeError, NotImplementedError, ValueError):
        import torch

        ta, tb, tout = (torch.from_dlpack(x) for x in (a, b, out))
        return LibraryLaunch(lambda: torch.matmul(ta, tb, out=tout), out)


def cublaslt_fused_launch(a: cupy.ndarray, b: cupy.ndarray, bias: cupy.ndarray) -> LibraryLaunch | None:
    """cuBLASLt's own bias + GELU(tanh) epilogue through PyTorch, or None where PyTorch is absent."""
    try:
        import torch
    except ImportError:
        return None
    ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
    tbias = torch.from_dlpack(bias).to(ta.dtype)
    return LibraryLaunch(lambda: torch._addmm_activation(tbias, ta, tb, use_gelu=True))


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


@dataclass(frozen=True)
class Workload:
    """Rotating input sets of one shape and dtype, with the float64 reference of the first set."""

    m: int
    n: int
    k: int
    dtype_name: str
    problems: list[tuple[cupy.ndarray, cupy.ndarray]]
    bias: cupy.ndarray | None
    epilogue: dict[str, object]
    ref: cupy.ndarray
    scale: cupy.ndarray
    activation_input: cupy.ndarray | None

    @classmethod
    def make(
        cls,
        m: int,
        n: int,
        k: int,
        dtype_name: str,
        *,
        seed: int = 0,
        bias: bool = False,
        min_sets: int = 2,
        **epilogue: object,
    ) -> Workload:
        from deepgemm.check import random_problem, reference
        from deepgemm.dtypes import input_dtype

        dtype = input_dtype(dtype_name)
        sets = max(min_sets, input_sets_needed((m * k + n * k + m * n) * 2))
        problems = [random_problem(m, n, k, dtype, seed=seed + i) for i in range(sets)]
        bias_vec = cupy.random.default_rng(seed).random(n, dtype=cupy.float32) * 2 - 1 if bias else None
        epilogue = {**epilogue, **({"bias": bias_vec} if bias else {})}
        return cls(m, n, k, dtype_name, problems, bias_vec, epilogue, *reference(*problems[0], **epilogue))

    def base_row(self, name: str) -> dict[str, object]:
        return {"stage": name, "dtype": self.dtype_name, "m": self.m, "n": self.n, "k": self.k,
                "input_sets": len(self.problems)}  # fmt: skip


def measure(
    name: str,
    work: Workload,
    launches: Sequence[Callable[[], object]],
    *,
    settle_s: float,
) -> dict[str, object]:
    """Verify the first launch (on poisoned output where it has one), then time all of them in rotation."""
    from deepgemm.check import error_stats, poison
    from deepgemm.operands import as_device_array

    row = work.base_row(name)
    out = getattr(launches[0], "out", None)
    if out is not None:
        poison(out)
    result = launches[0]()
    cupy.cuda.Device().synchronize()
    checked = out if out is not None else as_device_array(result, name)
    stats = error_stats(checked, work.ref, work.scale, work.activation_input, k=work.k)
    row.update(stats.as_dict(), rel_err=stats.rel_fro, max_abs_err=stats.max_abs)
    settle(settle_s)
    row.update(timing_fields(time_launches(launches), work.m, work.n, work.k))
    return row


def with_ratios(rows: list[dict[str, object]], baseline: dict[str, object]) -> list[dict[str, object]]:
    """Each row's ratio to the baseline (cuBLAS in the same run) and to the row before it."""
    for i, row in enumerate(rows):
        row["cublas_tflops"] = baseline["tflops"]
        row["x_cublas"] = row["tflops"] / baseline["tflops"]
        row["x_prev"] = row["tflops"] / rows[i - 1]["tflops"] if i else None
    return rows


def _log_row(row: dict[str, object], log: Callable[[str], None]) -> None:
    verdict = "" if "passed" not in row else ("  ok" if row["passed"] else f"  FAILED (max abs {row['max_abs']:.3g})")
    log(f"  {row['stage']:<28} {row['tflops']:8.1f} TFLOP/s{verdict}")


def cublas_launches(work: Workload) -> list[LibraryLaunch]:
    """cuBLAS on each of the workload's input sets, each into its own output."""
    return [cublas_launch(a, b, cupy.empty((work.m, work.n), dtype=a.dtype)) for a, b in work.problems]


def cublas_row(work: Workload, settle_s: float, log: Callable[[str], None]) -> dict[str, object]:
    row = measure("cublas", work, cublas_launches(work), settle_s=settle_s)
    row["x_cublas"] = 1.0
    _log_row(row, log)
    return row


def bench_shape(
    stages: Sequence[str],
    m: int,
    n: int,
    k: int,
    dtype_name: str,
    *,
    settle_s: float = 1.0,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> list[dict[str, object]]:
    """Verify and time each stage and cuBLAS at one shape and dtype; one row per stage, then cuBLAS."""
    from deepgemm import stages as stage_registry

    work = Workload.make(m, n, k, dtype_name, seed=seed)
    baseline = cublas_row(work, settle_s, log)
    rows = []
    for stage in stages:
        launcher = stage_registry.load(stage)
        rows.append(measure(stage, work, [launcher.plan(a, b) for a, b in work.problems], settle_s=settle_s))
        _log_row(rows[-1], log)
    return [*with_ratios(rows, baseline), baseline]


def bench_configs(
    stage: str,
    configs: dict[str, object],
    m: int,
    n: int,
    k: int,
    dtype_name: str,
    *,
    settle_s: float = 1.0,
    log: Callable[[str], None] = print,
) -> list[dict[str, object]]:
    """One stage under several GemmConfigs (e.g. v4 with and without the grouped tile order)."""
    from deepgemm import stages as stage_registry

    work = Workload.make(m, n, k, dtype_name)
    baseline = cublas_row(work, settle_s, log)
    launcher = stage_registry.load(stage)
    rows = []
    for name, config in configs.items():
        launches = [launcher.plan(a, b, config=config) for a, b in work.problems]
        rows.append(measure(f"{stage} {name}", work, launches, settle_s=settle_s))
        _log_row(rows[-1], log)
    return [*with_ratios(rows, baseline), baseline]


def bench_epilogue(
    m: int, n: int, k: int, dtype_name: str, *, settle_s: float = 1.0, log: Callable[[str], None] = print
) -> list[dict[str, object]]:
    """v5 plain and with bias + GELU(tanh) beside cuBLAS and cuBLASLt's own fused bias + GELU epilogue."""
    from stages.v5_fused import launch as v5

    plain = Workload.make(m, n, k, dtype_name)
    fused = Workload.make(m, n, k, dtype_name, bias=True, activation="gelu_tanh")
    baseline = cublas_row(plain, settle_s, log)
    rows = [
        measure("v5_fused", plain, [v5.plan(a, b) for a, b in plain.problems], settle_s=settle_s),
        measure(
            "v5_fused +bias +gelu_tanh",
            fused,
            [v5.plan(a, b, bias=fused.bias, activation="gelu_tanh") for a, b in fused.problems],
            settle_s=settle_s,
        ),
    ]
    lt = [cublaslt_fused_launch(a, b, fused.bias) for a, b in fused.problems]
    if all(launch is not None for launch in lt):
        # cuBLASLt's GELU epilogue is the tanh form; its output is checked against the same reference
        rows.append(measure("cublaslt +bias +gelu", fused, lt, settle_s=settle_s))
    for row in rows:
        _log_row(row, log)
    rows = with_ratios(rows, baseline)
    rows[1]["x_v5_plain"] = rows[1]["tflops"] / rows[0]["tflops"]
    if len(rows) > 2:
        rows[1]["x_cublaslt_fused"] = rows[1]["tflops"] / rows[2]["tflops"]
    return [*rows, baseline]


def bench_call(
    m: int, n: int, k: int, dtype_name: str, *, settle_s: float = 1.0, log: Callable[[str], None] = print
) -> list[dict[str, object]]:
    """The library call as a user makes it, beside the kernel alone and cuBLAS.

    At shapes TMA cannot describe as they are (K or a row stride not a multiple of 8 elements) the call
    pads the operands into a copy on every call; "v5_fused kernel" plans once, so its copies and tensor
    maps stay outside the timing, and the difference between the two rows is what that path costs.
    """
    import deepgemm
    from stages.v5_fused import launch as v5

    work = Workload.make(m, n, k, dtype_name)
    baseline = cublas_row(work, settle_s, log)
    per_call = [LibraryLaunch(lambda a=a, b=b: deepgemm.gemm(a, b)) for a, b in work.problems]
    rows = [
        measure("v5_fused kernel", work, [v5.plan(a, b) for a, b in work.problems], settle_s=settle_s),
        measure("deepgemm.gemm per call", work, per_call, settle_s=settle_s),
    ]
    for row in rows:
        _log_row(row, log)
    return [*with_ratios(rows, baseline), baseline]


def bench_pairs(
    stage: str,
    m: int,
    n: int,
    k: int,
    dtype_name: str,
    *,
    pairs: int = 6,
    settle_s: float = 1.0,
    log: Callable[[str], None] = print,
) -> list[dict[str, object]]:
    """A stage and cuBLAS timed alternately, `pairs` times, the order swapped from one pair to the next.

    One progression row per stage says little about a gap of a percent or two: the card's clock drifts with
    its temperature and the power cap, and whichever row runs first meets a cooler card. Each pair's ratio
    compares two rows measured seconds apart, and swapping the order cancels what running first is worth.
    """
    from deepgemm import stages as stage_registry

    work = Workload.make(m, n, k, dtype_name)
    launchers = {
        "cublas": cublas_launches(work),
        stage: [stage_registry.load(stage).plan(a, b) for a, b in work.problems],
    }
    rows = []
    for pair in range(pairs):
        order = ("cublas", stage) if pair % 2 == 0 else (stage, "cublas")
        measured = {name: measure(name, work, launchers[name], settle_s=settle_s) for name in order}
        for name in order:
            measured[name].update(pair=pair, x_cublas=measured[name]["tflops"] / measured["cublas"]["tflops"])
            _log_row(measured[name], log)
            rows.append(measured[name])
    return rows
