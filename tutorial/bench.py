"""Benchmark suites: workloads of rotating input sets, the cuBLAS baseline, and the suites the CLI runs.

Every row is verified first (on NaN-poisoned output) and then timed (`tutorial.timing`). Input sets rotate
so that a batch does not run out of the 50 MB L2. cuBLAS is timed by the same function in the same run;
`bench_pairs` alternates it with a stage to measure a small gap with its spread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import cupy

from deepgemm.dtypes import input_dtype
from deepgemm.model import ceil_div
from tutorial import stages
from tutorial.check import Reference, first_failing, random_problem, reference, verify
from tutorial.stages import CUBLAS
from tutorial.timing import settle, time_launches, time_launches_alternated, timing_fields

L2_BYTES = 60 * 2**20  # above the H100's and H200's 50 MB: rotated sets overflow the L2 with room to spare
EPILOGUE_STAGE = "v5_fused"  # the stage that teaches the fused epilogue


def input_sets_needed(bytes_per_set: int, l2_bytes: int = L2_BYTES, at_most: int = 8) -> int:
    """Enough input sets that rotating through them touches three times the L2 (at least two)."""
    return max(2, min(at_most, ceil_div(3 * l2_bytes, max(bytes_per_set, 1))))


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
        import torch  # optional and heavy: only where CuPy has no cuBLAS path

        ta, tb, tout = (torch.from_dlpack(x) for x in (a, b, out))
        return LibraryLaunch(lambda: torch.matmul(ta, tb, out=tout), out)


def cublaslt_fused_launch(a: cupy.ndarray, b: cupy.ndarray, bias: cupy.ndarray) -> LibraryLaunch | None:
    """cuBLASLt's own bias + GELU(tanh) epilogue through PyTorch, or None where PyTorch is absent."""
    try:
        import torch  # optional and heavy: the fused baseline is left out without it
    except ImportError:
        return None
    ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
    tbias = torch.from_dlpack(bias).to(ta.dtype)
    return LibraryLaunch(lambda: torch._addmm_activation(tbias, ta, tb, use_gelu=True))


BIAS_SEED_OFFSET = 1 << 20  # the bias's generator apart from every input set's (seed + i)
A_LAYOUTS = ("mk", "km")  # a (M, K): row-major, or the transposed view of a row-major (K, M) array
B_LAYOUTS = ("kn", "nk")  # b (K, N): row-major, or the transposed view of a row-major (N, K) array
TRANSPOSED_LAYOUTS = ("km", "nk")


def arrange(x: Any, layout: str) -> Any:
    """`x`'s values (a CuPy or NumPy matrix) in `layout`: row-major ("mk", "kn"), or the transposed view of
    a row-major copy of x.T ("km", "nk"); x itself, no copy, where it already is laid out so."""
    if layout not in (*A_LAYOUTS, *B_LAYOUTS):
        raise ValueError(f"layout {layout!r} is none of {A_LAYOUTS + B_LAYOUTS}")
    xp = cupy.get_array_module(x)
    return xp.ascontiguousarray(x.T).T if layout in TRANSPOSED_LAYOUTS else xp.ascontiguousarray(x)


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
    expected: Reference
    references: dict[int, Reference] = field(default_factory=dict, init=False, compare=False, repr=False)

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
        dtype = input_dtype(dtype_name)
        sets = max(min_sets, input_sets_needed((m * k + n * k + m * n) * 2))
        problems = [random_problem(m, n, k, dtype, seed=seed + i) for i in range(sets)]
        bias_rng = cupy.random.default_rng(seed + BIAS_SEED_OFFSET)  # not seed: the bias would be a's first draws
        bias_vec = bias_rng.random(n, dtype=cupy.float32) * 2 - 1 if bias else None
        epilogue = {**epilogue, **({"bias": bias_vec} if bias else {})}
        return cls(m, n, k, dtype_name, problems, bias_vec, epilogue, reference(*problems[0], **epilogue))

    def in_layout(self, a_layout: str, b_layout: str) -> Workload:
        """The same input sets (so the same reference) with a in `a_layout` and b in `b_layout`."""
        if a_layout not in A_LAYOUTS or b_layout not in B_LAYOUTS:
            raise ValueError(f"a's layout is one of {A_LAYOUTS} and b's one of {B_LAYOUTS}, not {a_layout}, {b_layout}")
        return replace(self, problems=[(arrange(a, a_layout), arrange(b, b_layout)) for a, b in self.problems])

    def checked_sets(self, launches: int) -> list[tuple[int, Reference]]:
        """The input sets whose outputs a check reads, with their float64 references, for `launches` rotating
        one per set: the first and the last (a launch that reads another set's operands fails there); the
        first alone where the launches are not one per set. Each reference is computed once per workload."""
        found = [(0, self.expected)]
        if launches > 1 and launches == len(self.problems):
            last = launches - 1
            if last not in self.references:
                self.references[last] = reference(*self.problems[last], **self.epilogue)
            found.append((last, self.references[last]))
        return found

    def base_row(self, name: str) -> dict[str, object]:
        return {"stage": name, "dtype": self.dtype_name, "m": self.m, "n": self.n, "k": self.k,
                "input_sets": len(self.problems)}  # fmt: skip


def measure(
    name: str,
    work: Workload,
    launches: Sequence[Callable[[], object]],
    *,
    settle_s: float,
    **timing: float,
) -> dict[str, object]:
    """Verify the first and last launches (`verified_row`), then time all of them in rotation
    (`timing`: `time_launches`' batch lengths, where a suite wants other than its defaults)."""
    row = verified_row(name, work, launches)
    settle(settle_s)
    row.update(timing_fields(time_launches(launches, **timing), work.m, work.n, work.k))
    return row


def measure_alternated(
    contenders: dict[str, Sequence[Callable[[], object]]],
    work: Workload,
    *,
    settle_s: float,
    **timing: float,
) -> dict[str, dict[str, object]]:
    """`measure` for contenders compared with each other: each one verified (`verified_row`), in order, then
    all of them timed with their batches alternated (`timing.time_launches_alternated`), so that their
    ratio is not the clock's drift from one timing to the next."""
    rows = {name: verified_row(name, work, launches) for name, launches in contenders.items()}
    settle(settle_s)
    timings = time_launches_alternated(list(contenders.values()), **timing)
    for row, measured in zip(rows.values(), timings, strict=True):
        row.update(timing_fields(measured, work.m, work.n, work.k))
    return rows


def verified_row(name: str, work: Workload, launches: Sequence[Callable[[], object]]) -> dict[str, object]:
    """The row's fields and the check (on poisoned output where it has one) of launch i on input set i for
    each of `Workload.checked_sets`; the stats shown are the first failing check's (`first_failing`)."""
    row = work.base_row(name)
    stats = [verify(launches[i], expected, getattr(launches[i], "out", None))
             for i, expected in work.checked_sets(len(launches))]  # fmt: skip
    shown = first_failing(stats)
    row.update(shown.as_dict(), rel_err=shown.rel_fro, max_abs_err=shown.max_abs, sets_verified=len(stats))
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
    row = measure(CUBLAS, work, cublas_launches(work), settle_s=settle_s)
    row["x_cublas"] = 1.0
    _log_row(row, log)
    return row


def bench_variants(
    variants: dict[str, Callable[[cupy.ndarray, cupy.ndarray], Callable[[], object]]],
    m: int,
    n: int,
    k: int,
    dtype_name: str,
    *,
    settle_s: float = 1.0,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> list[dict[str, object]]:
    """Named ways to plan one GEMM (`plan(a, b)` -> a launch), each verified and timed beside cuBLAS; one row
    per name, then cuBLAS's."""
    work = Workload.make(m, n, k, dtype_name, seed=seed)
    baseline = cublas_row(work, settle_s, log)
    rows = []
    for name, plan in variants.items():
        rows.append(measure(name, work, [plan(a, b) for a, b in work.problems], settle_s=settle_s))
        _log_row(rows[-1], log)
    return [*with_ratios(rows, baseline), baseline]


def bench_shape(stage_list: Sequence[str], *args: object, **kwargs: object) -> list[dict[str, object]]:
    """Verify and time each stage and cuBLAS at one shape and dtype (`bench_variants`' other arguments); one
    row per stage, then cuBLAS."""
    return bench_variants({stage: stages.load(stage).plan for stage in stage_list}, *args, **kwargs)


def bench_epilogue(
    m: int, n: int, k: int, dtype_name: str, *, settle_s: float = 1.0, log: Callable[[str], None] = print
) -> list[dict[str, object]]:
    """v5 plain and with bias + GELU(tanh) beside cuBLAS and cuBLASLt's own fused bias + GELU epilogue."""
    v5 = stages.load(EPILOGUE_STAGE)
    plain = Workload.make(m, n, k, dtype_name)
    fused = Workload.make(m, n, k, dtype_name, bias=True, activation="gelu_tanh")
    baseline = cublas_row(plain, settle_s, log)
    rows = [
        measure(EPILOGUE_STAGE, plain, [v5.plan(a, b) for a, b in plain.problems], settle_s=settle_s),
        measure(
            f"{EPILOGUE_STAGE} +bias +gelu_tanh",
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


def bench_rounds(
    variants: dict[str, Callable[[cupy.ndarray, cupy.ndarray], Callable[[], object]]],
    m: int,
    n: int,
    k: int,
    dtype_name: str,
    *,
    rounds: int = 6,
    settle_s: float = 1.0,
    log: Callable[[str], None] = print,
) -> list[dict[str, object]]:
    """Named ways to plan one GEMM and cuBLAS, all timed in each of `rounds` rounds, the order rotated from one
    round to the next; each row carries its round (`pair`) and its ratio to cuBLAS in that round.

    One progression row per stage says little about a gap of a percent or two: the card's clock drifts with
    its temperature and the power cap, and whichever row runs first meets a cooler card. Each round's ratios
    compare rows measured seconds apart, and rotating the order cancels what running first is worth.
    """
    work = Workload.make(m, n, k, dtype_name)
    launchers = {CUBLAS: cublas_launches(work)}
    launchers.update({name: [plan(a, b) for a, b in work.problems] for name, plan in variants.items()})
    names = list(launchers)
    rows = []
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        measured = {name: measure(name, work, launchers[name], settle_s=settle_s) for name in order}
        for name in order:
            measured[name].update(pair=r, x_cublas=measured[name]["tflops"] / measured[CUBLAS]["tflops"])
            _log_row(measured[name], log)
            rows.append(measured[name])
    return rows


def bench_pairs(
    stage: str, m: int, n: int, k: int, dtype_name: str, *, pairs: int = 6, **kwargs: object
) -> list[dict[str, object]]:
    """A stage and cuBLAS timed alternately, `pairs` times, the order swapped from one pair to the next."""
    return bench_rounds({stage: stages.load(stage).plan}, m, n, k, dtype_name, rounds=pairs, **kwargs)
