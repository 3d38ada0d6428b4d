"""The library call as a caller makes it, on whichever kernel `deepgemm.gemm` runs here (the sm_90a kernel on
Hopper, the sm_80 kernel on other GPUs of 8.0 or newer): the caller's torch or CuPy stream, inputs dropped
right after the call, threads calling at once, every operand layout, and the compiled kernel across a process
restart. Split-K configs name the sm_90a kernel's knobs and run on Hopper alone."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cupy
import pytest
from gpu import library_call_or_skip, sm90a_library_or_skip

import deepgemm
from deepgemm.dtypes import input_dtype
from tutorial import call_suite, first_call
from tutorial.bench import arrange
from tutorial.check import error_stats, random_problem, reference

pytestmark = pytest.mark.gpu

THREADS, CALLS = 4, 6  # calls per thread, each on its own stream
OVERLAP_SHAPE = (2048, 2048, 4096)  # ~50 us a kernel: calls from different threads overlap on the GPU
TAIL_SHAPES = ((200, 136, 96), (129, 520, 200), (1000, 384, 1000))  # K not a multiple of 64, M and N tails
UNDESCRIBABLE = (  # row strides TMA cannot take (not a multiple of 16 bytes): the call copies, and is right
    ("mk", "nk", (64, 256, 4097)),  # a's and b's rows of K = 4097 elements, 8194 bytes
    ("mk", "kn", (64, 4097, 128)),  # row-major b with N = 4097
    ("km", "nk", (4097, 64, 128)),  # a the view of a (K, M) array with M = 4097
    ("km", "kn", (131, 257, 4097)),  # every stride odd
)


@pytest.fixture(autouse=True)
def _a_library_kernel() -> None:
    library_call_or_skip()


def _operands(shape: tuple[int, int, int], dtype_name: str, a_layout: str, b_layout: str, seed: int) -> tuple:
    """Fresh random a and b (CuPy) in the layouts named."""
    m, n, k = shape
    a, b = random_problem(m, n, k, input_dtype(dtype_name), seed=seed)
    return arrange(a, a_layout), arrange(b, b_layout)


def _as_framework(framework: str, arrays: tuple) -> tuple:
    """The arrays as the framework's own (torch tensors on the same memory, strides kept)."""
    if framework == "cupy":
        return arrays
    torch = pytest.importorskip("torch")
    tensors = tuple(torch.from_dlpack(x) for x in arrays)
    for x, t in zip(arrays, tensors):
        assert t.stride() == tuple(s // x.itemsize for s in x.strides)
    return tensors


def _check_call(framework: str, a: cupy.ndarray, b: cupy.ndarray) -> None:
    result = deepgemm.gemm(*_as_framework(framework, (a, b)))
    native = cupy.ndarray if framework == "cupy" else pytest.importorskip("torch").Tensor
    assert isinstance(result, native), f"{framework} in, {type(result).__name__} out"
    stats = error_stats(cupy.from_dlpack(result) if framework == "torch" else result, reference(a, b))
    assert stats.passed, f"{framework} {a.shape}x{b.shape} strides {a.strides}, {b.strides}: {stats.summary()}"


@pytest.mark.parametrize("framework", call_suite.FRAMEWORKS)
@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
@pytest.mark.parametrize(("a_layout", "b_layout"), call_suite.LAYOUT_PAIRS)
def test_every_layout_through_the_call_matches_reference(framework, dtype_name, a_layout, b_layout):
    for i, shape in enumerate(TAIL_SHAPES):
        _check_call(framework, *_operands(shape, dtype_name, a_layout, b_layout, seed=300 + i))


@pytest.mark.parametrize("framework", call_suite.FRAMEWORKS)
@pytest.mark.parametrize(("a_layout", "b_layout", "shape"), UNDESCRIBABLE)
def test_a_layout_tma_cannot_describe_is_still_right(framework, a_layout, b_layout, shape):
    """Copied by every call into row-padded buffers (the first case at M = 64 through split-K): the plan
    made by the first call serves the second, on other values."""
    for seed in (sum(shape), sum(shape) + 1):
        _check_call(framework, *_operands(shape, "fp16", a_layout, b_layout, seed=seed))


@pytest.mark.parametrize("b_layout", ["nk", "kn"])
def test_library_call_is_torch_native_and_runs_on_the_callers_stream(b_layout):
    """Torch in, torch out, on torch's current stream: `out=` read on that stream holds the result (on
    another stream it would still hold the NaN written before the call), and inputs dropped right after the
    call, whose memory torch hands to the next allocations on the stream, are read before they are reused.
    A row-major b ("kn") is read in place as well, so it must stay alive as long."""
    torch = pytest.importorskip("torch")
    a, b = _as_framework("torch", _operands((8192,) * 3, "fp16", "mk", b_layout, seed=8))  # ~1.7 ms a call
    expected = reference(cupy.from_dlpack(a), cupy.from_dlpack(b))
    c = torch.full(a.shape[:1] + b.shape[1:], float("nan"), device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        returned = deepgemm.gemm(a, b, out=c)
        read_after = c.clone()  # on the same stream, after the kernel
        x, y = a.clone(), b.clone()  # clone keeps b's strides
        dropped = deepgemm.gemm(x, y)
        del x, y
        reused = [torch.full_like(t, float("nan")) for t in (a, b)]  # may take x's and y's memory
        for t in reused:
            t += 1
    side.synchronize()
    assert returned is c and isinstance(dropped, torch.Tensor) and dropped.device == a.device
    for result in (read_after, dropped):
        assert error_stats(cupy.from_dlpack(result), expected).passed


def test_library_call_runs_on_cupys_current_stream_and_reads_dropped_inputs_in_time():
    """The same for CuPy: its memory pool hands a block freed on a stream to the next allocation on that
    stream at once, so inputs dropped after the call must be read first, on the caller's stream."""
    a, b = _operands((8192,) * 3, "fp16", "mk", "kn", seed=9)
    expected = reference(a, b)
    c = cupy.full((a.shape[0], b.shape[1]), cupy.nan, dtype=a.dtype)
    cupy.cuda.Device().synchronize()
    with cupy.cuda.Stream(non_blocking=True) as side:
        returned = deepgemm.gemm(a, b, out=c)
        read_after = c.copy()
        x, y = a.copy(), b.copy()  # row-major, as a and b are
        dropped = deepgemm.gemm(x, y)
        del x, y
        reused = [cupy.full(t.shape, cupy.nan, dtype=t.dtype) for t in (a, b)]
        for t in reused:
            t += 1
    side.synchronize()
    assert returned is c and isinstance(dropped, cupy.ndarray)
    for result in (read_after, dropped):
        assert error_stats(result, expected).passed


def _on_threads(work: Callable[[int], Any]) -> list[Any]:
    """`work(i)` on THREADS threads, started together."""
    start = threading.Barrier(THREADS)

    def run(i: int) -> Any:
        start.wait()
        return work(i)

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(run, range(THREADS)))


def _thread_inputs() -> list[tuple[cupy.ndarray, cupy.ndarray]]:
    """Different inputs per thread, one shape and layout for all: the threads share one plan."""
    return [_operands(OVERLAP_SHAPE, "fp16", "mk", "kn", seed=500 + i) for i in range(THREADS)]


def test_threads_each_on_its_own_torch_stream_match_the_single_stream_run():
    torch = pytest.importorskip("torch")
    inputs = [_as_framework("torch", pair) for pair in _thread_inputs()]
    alone = [deepgemm.gemm(a, b) for a, b in inputs]
    torch.cuda.synchronize()
    assert error_stats(cupy.from_dlpack(alone[0]), reference(*map(cupy.from_dlpack, inputs[0]))).passed

    def calls_on_own_stream(i: int) -> list:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            outs = [deepgemm.gemm(*inputs[i]) for _ in range(CALLS)]
        stream.synchronize()
        return outs

    for i, outs in enumerate(_on_threads(calls_on_own_stream)):
        same = [torch.equal(out.view(torch.int16), alone[i].view(torch.int16)) for out in outs]
        assert all(same), f"thread {i}: calls {[j for j, ok in enumerate(same) if not ok]} differ from one stream's"


def test_threads_each_on_its_own_cupy_stream_match_the_single_stream_run():
    inputs = _thread_inputs()
    alone = [deepgemm.gemm(a, b) for a, b in inputs]
    cupy.cuda.Device().synchronize()
    assert error_stats(alone[0], reference(*inputs[0])).passed

    def calls_on_own_stream(i: int) -> list:
        with cupy.cuda.Stream(non_blocking=True) as stream:
            outs = [deepgemm.gemm(*inputs[i]) for _ in range(CALLS)]
        stream.synchronize()
        return outs

    for i, outs in enumerate(_on_threads(calls_on_own_stream)):
        same = [bool(cupy.array_equal(out.view(cupy.uint16), alone[i].view(cupy.uint16))) for out in outs]
        assert all(same), f"thread {i}: calls {[j for j, ok in enumerate(same) if not ok]} differ from one stream's"


def test_the_compiled_kernel_survives_a_process_restart(tmp_path):
    """A fresh process compiles into CUPY_CACHE_DIR; the next one, with the same directory, reads the
    cubin back and runs NVRTC not once (first_call's script counts CuPy's cache-miss compiles)."""
    shape = (384, 256, 320)
    cold = first_call.run_once(tmp_path, "cold", shape, "fp16", "cupy")
    assert cold["nvrtc_compiles"] >= 1, "the first process compiled nothing: the count cannot be trusted"
    assert cold["cache_files"] > 0, f"nothing was written to {tmp_path}"
    warm = first_call.run_once(tmp_path, "warm", shape, "fp16", "cupy")
    assert warm["nvrtc_compiles"] == 0, f"the second process compiled {warm['nvrtc_compiles']} times"


def test_the_call_suite_verifies_and_times_every_layout():
    """The suite end to end at a small shape: every row verified, both calls timed, host time measured."""
    pytest.importorskip("torch")
    rows = call_suite.bench_call(256, 512, 320, "bf16", settle_s=0.0, log=lambda _: None)
    assert len(rows) == len(call_suite.LAYOUT_PAIRS) * len(call_suite.FRAMEWORKS)
    for row in rows:
        assert row["passed"] and row["torch_passed"], f"{row['framework']} {row['a_layout']} x {row['b_layout']}"
        assert row["host_us"] > 0 and row["torch_host_us"] > 0 and row["x_torch"] > 0
        assert row["call_us"] == pytest.approx(1e3 * row["ms"])


@pytest.mark.parametrize("framework", call_suite.FRAMEWORKS)
def test_split_k_through_the_call_is_right_and_the_same_on_every_stream(framework):
    """[6] A split-K config through the library call: one kernel, its partials and counters the scratch of
    the caller's stream (allocated by the caller's framework). Right in every layout, and threads on their
    own streams get the bits one stream gets (the slices are added in a fixed order)."""
    sm90a_library_or_skip()
    config = deepgemm.GemmConfig(block_n=128, extra={"SPLIT_K": 4, "CLUSTER_M": 1})
    for i, (a_layout, b_layout) in enumerate(call_suite.LAYOUT_PAIRS):
        a, b = _operands((128, 4096, 4096), "bf16", a_layout, b_layout, seed=600 + i)
        result = deepgemm.gemm(*_as_framework(framework, (a, b)), config=config)
        got = cupy.from_dlpack(result) if framework == "torch" else result
        stats = error_stats(got, reference(a, b))
        assert stats.passed, f"{framework} {a_layout} x {b_layout}: {stats.summary()}"
    inputs = [_as_framework(framework, pair) for pair in _thread_inputs()]
    alone = [cupy.from_dlpack(deepgemm.gemm(a, b, config=config)).copy() for a, b in inputs]
    cupy.cuda.Device().synchronize()

    def calls_on_own_stream(i: int) -> list:
        if framework == "torch":
            torch = pytest.importorskip("torch")
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                outs = [deepgemm.gemm(*inputs[i], config=config) for _ in range(CALLS)]
        else:
            with cupy.cuda.Stream(non_blocking=True) as stream:
                outs = [deepgemm.gemm(*inputs[i], config=config) for _ in range(CALLS)]
        stream.synchronize()
        return [cupy.from_dlpack(out) for out in outs]

    for i, outs in enumerate(_on_threads(calls_on_own_stream)):
        same = [bool(cupy.array_equal(out.view(cupy.uint16), alone[i].view(cupy.uint16))) for out in outs]
        assert all(same), f"thread {i}: calls {[j for j, ok in enumerate(same) if not ok]} differ from one stream's"


@pytest.mark.parametrize("framework", call_suite.FRAMEWORKS)
def test_split_k_plans_of_several_sizes_share_one_stream_scratch(framework):
    """[6] Split-K calls of growing and shrinking size on one stream, queued back to back without a
    synchronisation: the stream's scratch grows under the queued launches (the old one freed in stream
    order) and each launch leaves its counters zero for the next; every result is right."""
    sm90a_library_or_skip()
    config = deepgemm.GemmConfig(block_m=64, block_n=64, extra={"SPLIT_K": 3, "CLUSTER_M": 1})
    shapes = [(16, 256, 1024), (64, 4096, 2048), (1, 520, 1000), (64, 4096, 2048), (33, 1000, 700)]
    problems = [_operands(shape, "fp16", "mk", "nk", seed=700 + i) for i, shape in enumerate(shapes)]
    results = [deepgemm.gemm(*_as_framework(framework, pair), config=config) for pair in problems]
    for shape, (a, b), result in zip(shapes, problems, results):
        got = cupy.from_dlpack(result) if framework == "torch" else result
        stats = error_stats(got, reference(a, b))
        assert stats.passed, f"{framework} {shape}: {stats.summary()}"


@pytest.mark.parametrize("framework", call_suite.FRAMEWORKS)
def test_small_m_calls_are_right_in_every_layout_whichever_config_they_get(framework):
    """[8] At M = 1 and 16 the model may pick swap AB, which takes only a K-major a: every layout pair
    through the call, with no config, is right (an MN-major a gets a config it can take)."""
    for m in (1, 16):
        for i, (a_layout, b_layout) in enumerate(call_suite.LAYOUT_PAIRS):
            a, b = _operands((m, 1000, 520), "fp16", a_layout, b_layout, seed=640 + i)
            result = deepgemm.gemm(*_as_framework(framework, (a, b)))
            got = cupy.from_dlpack(result) if framework == "torch" else result
            stats = error_stats(got, reference(a, b))
            assert stats.passed, f"{framework} M = {m} {a_layout} x {b_layout}: {stats.summary()}"


@pytest.mark.parametrize("framework", call_suite.FRAMEWORKS)
def test_one_plan_per_key_serves_calls_on_other_arrays(framework):
    """A plan is built once per key, from the first call's metadata alone: calls alternating between two
    input sets of that key (and an out of its own) reuse it, each right for its own arrays, with its maps
    pointed at the arrays of that call; a new shape gets a plan of its own."""
    from deepgemm import api

    first = [_operands((300, 520, 200), "bf16", "mk", "nk", seed=900 + i) for i in range(2)]
    planned = len(api._PLANS)
    for _ in range(3):
        for a, b in first:
            result = deepgemm.gemm(*_as_framework(framework, (a, b)))
            got = cupy.from_dlpack(result) if framework == "torch" else result
            assert error_stats(got, reference(a, b)).passed
    assert len(api._PLANS) <= planned + 1
    key_plans = [p for p in api._PLANS.values() if p.out_shape == (300, 520)]
    assert key_plans and all(not p.out_staged for p in key_plans)
    a, b = _operands((301, 520, 200), "bf16", "mk", "nk", seed=902)
    deepgemm.gemm(*_as_framework(framework, (a, b)))
    assert any(p.out_shape == (301, 520) for p in api._PLANS.values())
