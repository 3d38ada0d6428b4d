"""The C++ call path (deepgemm.fast) on the GPU: every call it takes gives, bit for bit, what the Python path
gives for the same call (the same plan, the same kernel), gradients and a double backward included; what it
does not take goes to Python and is right; a call it runs is captured in a CUDA graph and replayed."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest
from gpu import library_call_or_skip

torch = pytest.importorskip("torch")

import deepgemm  # noqa: E402 - after torch: its ops are registered at import
from deepgemm import api, fast, plan_sm80, torch_ops  # noqa: E402
from deepgemm.frameworks import framework_of  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _the_cpp_path() -> None:
    library_call_or_skip()
    if plan_sm80.runs_on(torch.cuda.current_device()):
        pytest.skip("the sm_80 kernel's plans run through Python (deepgemm.fast.runnable)")
    if not fast.enabled():
        pytest.skip(f"{fast.ENV}=0: every call runs through Python")
    assert fast.module() is not None, "the C++ call path did not build on this machine (see the warning)"


def _python_then_cpp(call: Callable[[], tuple]) -> tuple[tuple, tuple, dict]:
    """call() with every call through Python (which builds its plans and registers those C++ can run), then
    again with C++ holding them: both results, and how many calls C++ ran and passed back meanwhile."""
    held = fast.module()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch_ops, "call_fast", lambda *args, **kwargs: None)
        python = call()
    before = held.stats()
    cpp = call()
    after = held.stats()
    return python, cpp, {key: after[key] - before[key] for key in ("hits", "misses")}


def _runs_from_cpp(a, b, bias=None, activation=None, out_dtype=None) -> bool:
    """Whether the plan of this call (built already) is one C++ runs (no copy, no split-K scratch)."""
    key = api.plan_key(framework_of(a), a, b, bias, None, activation, out_dtype, None)
    found = api._PLANS[key]
    return fast.runnable(found) and (bias is None or found.bias_in_place)


def _equal(got: tuple, want: tuple) -> None:
    assert len(got) == len(want)
    for i, (x, y) in enumerate(zip(got, want, strict=True)):
        assert (x is None) == (y is None), i
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride(), i
            assert torch.equal(x, y), f"result {i} differs between the C++ and the Python path"


def _rand(*shape: int, dtype: torch.dtype = torch.bfloat16, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=dtype).requires_grad_(grad)


FORWARD_CASES = {  # name: (M, N, K, dtype, bias dtype or None, activation, out_dtype, a transposed, alpha)
    "plain": (256, 384, 512, torch.float16, None, None, None, False, 1.0),
    "bias_relu": (200, 384, 512, torch.bfloat16, torch.bfloat16, "relu", None, False, 1.0),
    "bias_fp32_gelu_alpha": (129, 256, 320, torch.bfloat16, torch.float32, "gelu", None, False, 0.5),
    "silu_out_fp32": (64, 256, 256, torch.float16, torch.float16, "silu", torch.float32, False, 1.0),
    "decode_row": (1, 512, 1024, torch.bfloat16, None, None, None, False, 1.0),
    "transposed_a": (96, 256, 192, torch.float16, None, "gelu_tanh", None, True, 1.0),
    "long_k": (64, 256, 8192, torch.bfloat16, None, None, None, False, 1.0),  # few tiles: K cut (split/stream-K)
}


@pytest.mark.parametrize("case", FORWARD_CASES)
def test_a_cached_call_runs_from_cpp_bit_for_bit_as_from_python(case):
    m, n, k, dtype, bias_dtype, activation, out_dtype, a_transposed, alpha = FORWARD_CASES[case]
    a = _rand(k, m, dtype=dtype).T if a_transposed else _rand(m, k, dtype=dtype)
    w = _rand(n, k, dtype=dtype)
    bias = None if bias_dtype is None else _rand(n, dtype=bias_dtype)

    def call() -> tuple:
        return (deepgemm.gemm(a, w.T, bias=bias, alpha=alpha, activation=activation, out_dtype=out_dtype),)

    python, cpp, ran = _python_then_cpp(call)
    _equal(cpp, python)
    runs = _runs_from_cpp(a, w.T, bias, activation, out_dtype)
    assert ran == ({"hits": 1, "misses": 0} if runs else {"hits": 0, "misses": 1})
    assert runs, "a cached call without a copy that C++ does not run"


def _recorded_by(y: torch.Tensor) -> str:
    """The autograd node that recorded the GEMM under linear's reshape of y (3-D x: a view node first)."""
    node = y.grad_fn
    while node is not None and "View" in node.name():
        node = node.next_functions[0][0]
    return node.name() if node is not None else ""


@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("shape", [(3, 40, 200), (4, 96, 256)], ids=lambda s: "x".join(map(str, s)))
def test_a_training_call_and_its_gradients_run_from_cpp_as_from_python(shape, activation):
    """Forward and backward (x, W and bias need grad; the gradients in their inputs' layouts) by C++'s
    autograd node: three launches from C++, none through Python."""
    batch, tokens, width = shape
    x = _rand(batch, tokens, width, grad=True)
    w = _rand(width, width, grad=True)
    bias = _rand(width, grad=True)
    dy = _rand(batch, tokens, width)

    def call() -> tuple:
        for t in (x, w, bias):
            t.grad = None
        y = deepgemm.linear(x, w, bias, activation)
        y.backward(dy)
        return y, x.grad, w.grad, bias.grad

    python, cpp, ran = _python_then_cpp(call)
    _equal(cpp, python)
    assert "CppNode" in _recorded_by(cpp[0]), _recorded_by(cpp[0])  # by C++, not by torch_ops._Gemm
    assert ran["hits"] >= 1 and ran["hits"] + ran["misses"] == 3, ran  # the forward, da and db


def test_a_backward_whose_products_have_no_plan_yet_builds_them_through_python():
    """The forward's plan registered by a call without grad; the first backward's two products then go to
    Python, which builds and registers their plans; the next backward runs them from C++."""
    a, w = _rand(72, 136), _rand(200, 136)
    deepgemm.gemm(a, w.T)  # the forward's plan only
    ran = []
    for _ in range(2):
        before = fast.module().stats()
        x = a.clone().requires_grad_()
        y = deepgemm.gemm(x, w.T)
        y.backward(torch.ones_like(y))
        after = fast.module().stats()
        ran.append((after["hits"] - before["hits"], after["misses"] - before["misses"]))
        want = torch.ones(72, 200, device="cuda", dtype=torch.float64) @ w.double()
        assert ((x.grad.double() - want).norm() / want.norm()).item() < 1e-2
    assert ran == [(1, 1), (2, 0)]  # the first: forward hit, da missed (built in Python); then all three hit


def test_a_double_backward_through_a_cpp_node_matches_python():
    """create_graph=True: C++ hands the backward to torch_ops.backward, whose products record their own."""
    x, w = _rand(64, 96, grad=True), _rand(128, 96, grad=True)

    def call() -> tuple:
        x.grad = w.grad = None
        y = deepgemm.linear(x, w)
        (gx,) = torch.autograd.grad((y.float() ** 2).sum(), x, create_graph=True)
        gx.float().pow(2).sum().backward()
        return gx, w.grad

    python, cpp, _ = _python_then_cpp(call)
    _equal(cpp, python)
    assert cpp[1] is not None and cpp[1].abs().sum() > 0


def test_what_cpp_does_not_run_goes_to_python_and_is_right():
    """An unaligned operand (copied by the plan), and an out_dtype given as a NumPy dtype: Python."""
    base = _rand(64 * 130 + 1, dtype=torch.float16)
    a = base[1:].view(64, 130)  # 2 bytes off 16-byte alignment: the plan copies it
    w = _rand(96, 130, dtype=torch.float16)
    want = a.double() @ w.double().T
    for _ in range(2):
        before = fast.module().stats()
        for got in (deepgemm.gemm(a, w.T), deepgemm.gemm(a, w.T, out_dtype=np.float32)):
            assert ((got.double() - want).norm() / want.norm()).item() < 1e-2
        after = fast.module().stats()
    assert after["hits"] == before["hits"]


def test_a_cpp_call_is_captured_in_a_cuda_graph_and_replays_with_new_inputs():
    a, w, bias = _rand(128, 256), _rand(384, 256), _rand(384)
    deepgemm.gemm(a, w.T, bias=bias, activation="relu")  # the plan, registered
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        deepgemm.gemm(a, w.T, bias=bias, activation="relu")
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    before = fast.module().stats()
    with torch.cuda.graph(graph):
        c = deepgemm.gemm(a, w.T, bias=bias, activation="relu")
    assert fast.module().stats()["hits"] == before["hits"] + 1
    for _ in range(3):
        a.copy_(_rand(128, 256))
        graph.replay()
        torch.cuda.synchronize()
        want = torch.relu(a.double() @ w.double().T + bias.double())
        assert ((c.double() - want).norm() / want.norm()).item() < 1e-2


def test_cpp_calls_from_two_threads_each_get_their_own_result():
    """The plan's parameter buffer is shared: each launch writes it under the plan's lock."""
    w = _rand(256, 512)
    inputs = [_rand(128, 512) for _ in range(8)]
    deepgemm.gemm(inputs[0], w.T)
    results: dict[int, list] = {0: [], 1: []}

    def work(t: int) -> None:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for i in range(t, len(inputs), 2):
                results[t].append((i, deepgemm.gemm(inputs[i], w.T)))
        stream.synchronize()

    threads = [threading.Thread(target=work, args=(t,)) for t in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, got in results[0] + results[1]:
        assert torch.equal(got, torch_ops.launch(inputs[i], w.T, None, 1.0, None, None, None, None))


def test_the_op_s_cuda_kernel_runs_registered_plans_from_cpp():
    """torch.ops.deepgemm.gemm, as torch.compile's graphs call it: C++'s CUDA kernel, bit for bit as the op's
    Python kernel; a call with a config goes to the Python kernel."""
    a, w = _rand(128, 256), _rand(192, 256)
    op = torch.ops.deepgemm.gemm.default
    want = torch_ops._gemm_kernel(a, w.T, None, 0.5, "gelu", torch.float32)  # builds and registers the plan
    before = fast.module().stats()
    got = op(a, w.T, None, 0.5, "gelu", torch.float32)
    assert fast.module().stats()["hits"] == before["hits"] + 1
    assert torch.equal(got, want)
    built = api._PLANS[api.plan_key(framework_of(a), a, w.T, None, None, "gelu", torch.float32, None)]
    text = torch_ops.config_text(built.config)
    by_config = op(a, w.T, None, 1.0, None, None, text)
    assert fast.module().stats()["misses"] == before["misses"] + 1
    assert torch.equal(by_config, torch_ops._gemm_kernel(a, w.T, None, 1.0, None, None, text))
