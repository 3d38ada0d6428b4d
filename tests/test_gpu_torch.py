"""The torch operators on the GPU (torch, and a GPU of 8.0 or newer: whichever kernel deepgemm.gemm runs there; the
paths named by an sm_90a config run on Hopper alone): opcheck on CUDA tensors, gradients against float64
at tails, torch.compile with fullgraph and with mode="reduce-overhead", CUDA graphs at every path of the
kernel (captured inputs given new values, eager calls between replays, two graphs on two streams at once, a
training step), a capture that would have to build a plan, and the training comparison, short."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import cupy
import pytest
from gpu import library_call_or_skip, sm90a_library_or_skip

torch = pytest.importorskip("torch")

import deepgemm  # noqa: E402 - after torch: its ops are registered at import
import deepgemm.nn as dnn  # noqa: E402
from deepgemm import plan, torch_ops  # noqa: E402
from deepgemm.config import GemmConfig  # noqa: E402
from deepgemm.epilogue import activation_name  # noqa: E402

pytestmark = pytest.mark.gpu

ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")


@pytest.fixture(autouse=True)
def _a_library_kernel() -> None:
    library_call_or_skip()


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    """Relative Frobenius error of `got` against a float64 `want`."""
    return ((got.double() - want).norm() / want.norm()).item()


def _tolerance(dtype: torch.dtype) -> float:
    """A result rounded once to `dtype` is off by about 0.3 eps (Frobenius, relative); the backward rounds
    dz and the product: 4 eps leaves room for both, and a wrong formula is off by ~1. FP32 results carry
    the FP32 accumulation's error instead (1e-4 covers K = 4096)."""
    return max(4 * torch.finfo(dtype).eps, 1e-4)


def _reference(a, b, bias=None, alpha=1.0, activation=None) -> torch.Tensor:
    """act(alpha * a @ b + bias) in float64 on the GPU."""
    z = alpha * (a.double() @ b.double())
    if bias is not None:
        z = z + bias.double()
    return torch_ops.ACTIVATION_FUNCTIONS[activation_name(activation)](z)


# --- opcheck and gradients ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["plain", "bias_relu_alpha", "transposed_a_gelu_fp32", "bf16_silu_tail",
                                  "gelu_tanh_unaligned_n"])  # fmt: skip
def test_opcheck_passes_on_cuda_tensors(case):
    """Schema, fake against the kernel's output (shape, strides, dtype), the registered autograd, AOT dispatch
    with dynamic shapes: torch.library.opcheck with the kernel itself."""
    dev = {"device": "cuda"}
    a = torch.randn(129, 200, dtype=torch.float16, requires_grad=True, **dev)
    w = (torch.randn(136, 200, dtype=torch.float16, **dev) / 16).requires_grad_()
    bias = torch.randn(136, requires_grad=True, **dev)
    args = {
        "plain": (a, w.T),
        "bias_relu_alpha": (a, w.T, bias, 0.5, "relu"),
        "transposed_a_gelu_fp32": (a.detach().T.contiguous().T.requires_grad_(), w.T, bias, 2.0, "gelu", torch.float32),
        "bf16_silu_tail": (torch.randn(17, 40, dtype=torch.bfloat16, requires_grad=True, **dev),
                           torch.randn(40, 24, dtype=torch.bfloat16, requires_grad=True, **dev), None, 1.0, "silu"),
        "gelu_tanh_unaligned_n": (a, (torch.randn(200, 300, dtype=torch.float16, **dev) / 16).requires_grad_(),
                                  torch.randn(300, requires_grad=True, **dev), 1.0, "gelu_tanh"),
    }[case]  # fmt: skip
    torch.library.opcheck(torch.ops.deepgemm.gemm.default, args)
    out = torch.empty(129, 136, dtype=torch.float16, **dev)
    torch.library.opcheck(torch.ops.deepgemm.gemm_out.default, (a.detach(), w.detach().T, out))


GRAD_SHAPES = ((129, 300, 72), (17, 40, 200), (33, 24, 100), (256, 192, 64))  # N = 300, K = 100: rows TMA cannot read


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("route", ["gemm", "op", "linear"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gradients_match_float64_at_tails(activation, route, dtype):
    """da, db, dbias (and the result) of every route against float64 autograd of the same formula from the
    same inputs: 'gemm' keeps z (or fuses relu), 'op' fuses and recomputes z (both with an fp32 bias), 'linear'
    is F.linear's form, its bias in the model's 16-bit type as a 16-bit nn.Linear holds it."""
    alpha = 1.0 if route == "linear" else 0.75
    bias_dtype = dtype if route == "linear" else torch.float32
    for i, (m, n, k) in enumerate(GRAD_SHAPES):
        gen = torch.Generator("cuda").manual_seed(i)
        a = torch.randn(m, k, generator=gen, device="cuda").to(dtype).requires_grad_()
        w = (torch.randn(n, k, generator=gen, device="cuda") / k**0.5).to(dtype).requires_grad_()
        bias = torch.randn(n, generator=gen, device="cuda").to(bias_dtype).requires_grad_()
        if route == "gemm":
            c = deepgemm.gemm(a, w.T, bias=bias, alpha=alpha, activation=activation)
        elif route == "op":
            c = torch.ops.deepgemm.gemm(a, w.T, bias, alpha, activation)
        else:
            c = deepgemm.linear(a, w, bias, activation)
        dy = torch.randn(m, n, generator=gen, device="cuda").to(dtype)
        c.backward(dy)
        leaves = [x.detach().double().requires_grad_() for x in (a, w, bias)]
        want = _reference(leaves[0], leaves[1].T, leaves[2], alpha, activation)
        want.backward(dy.double())
        tol = _tolerance(dtype)
        errors = {"c": _rel(c, want.detach())} | {name: _rel(x.grad, ref.grad) for name, x, ref in
                                                 zip(("da", "db", "dbias"), (a, w, bias), leaves)}  # fmt: skip
        assert max(errors.values()) <= tol, f"{m}x{n}x{k} {route} {activation}: {errors} (tolerance {tol:.2g})"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_linear_layers_bias_goes_to_the_kernel_as_it_is(dtype):
    """A 16-bit model's nn.Linear holds its bias in the model's type: the plan reads it as it lies (no float32
    copy, no kernel of its own in every forward), and the result matches float64, at a decode-sized M and a
    tail."""
    from deepgemm import api

    for m in (17, 129):
        layer = dnn.Linear(200, 136, device="cuda", dtype=dtype)
        x = torch.randn(m, 200, device="cuda", dtype=dtype)
        with torch.no_grad():
            y = layer(x)
        key = api.plan_key(api.framework_of(x), x, layer.weight.T, layer.bias, None, None, None, None)
        assert api._PLANS[key].bias_in_place, (m, dtype)
        assert _rel(y, _reference(x, layer.weight.T, layer.bias)) <= _tolerance(dtype), (m, dtype)


@pytest.mark.parametrize("route", ["gemm", "op", "linear"])
def test_a_result_that_needs_a_gradient_has_a_grad_fn_on_the_gpu(route):
    a = torch.randn(64, 128, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    w = torch.randn(96, 128, dtype=torch.bfloat16, device="cuda")
    for activation in ACTIVATIONS:
        for out_dtype in (None, torch.float32):
            if route == "gemm":
                c = deepgemm.gemm(a, w.T, activation=activation, out_dtype=out_dtype)
            elif route == "op":
                c = torch.ops.deepgemm.gemm(a, w.T, None, 1.0, activation, out_dtype)
            else:
                c = deepgemm.linear(a, w, None, activation)
            assert c.grad_fn is not None, (activation, out_dtype)


# --- torch.compile -----------------------------------------------------------------------------------------


def test_compile_fullgraph_runs_the_issue_s_example():
    """`torch.compile(lambda x, y: torch.relu(gemm(x, y)) * 2)` crashed inside CuPy: now one graph, no break."""
    torch._dynamo.reset()

    def fn(x, y):
        return torch.relu(deepgemm.gemm(x, y)) * 2

    x = torch.randn(256, 512, dtype=torch.float16, device="cuda")
    y = torch.randn(512, 384, dtype=torch.float16, device="cuda") / 16
    assert torch._dynamo.explain(fn)(x, y).graph_break_count == 0
    got = torch.compile(fn, fullgraph=True)(x, y)
    assert _rel(got, torch.relu(_reference(x, y)) * 2) <= _tolerance(torch.float16)


def _mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(dnn.Linear(256, 1024, activation="gelu"), dnn.Linear(1024, 256)).to(
        "cuda", torch.bfloat16
    )


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in model.parameters()]


def test_compile_fullgraph_trains_as_eager():
    torch._dynamo.reset()
    model, twin = _mlp(), _mlp()
    compiled = torch.compile(model, fullgraph=True)
    for step in range(3):
        x = torch.randn(4, 96, 256, dtype=torch.bfloat16, device="cuda")
        for m in (model, twin):
            m.zero_grad(set_to_none=True)
        out, want = compiled(x), twin(x)
        out.float().square().mean().backward()
        want.float().square().mean().backward()
        assert _rel(out, want.double()) <= _tolerance(torch.bfloat16), step
        for g, w in zip(_grads(model), _grads(twin)):
            assert _rel(g, w.double()) <= _tolerance(torch.bfloat16), step


def test_reduce_overhead_captures_the_op_in_cuda_graphs():
    """mode="reduce-overhead": inference and training steps replayed from CUDA graphs (cudagraph trees), with
    no op that made them skip a graph, the results those of eager calls."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model, twin = _mlp(1), _mlp(1)
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for _ in range(4):
            torch.compiler.cudagraph_mark_step_begin()
            x = torch.randn(8, 64, 256, dtype=torch.bfloat16, device="cuda")
            assert _rel(compiled(x), twin(x).double()) <= _tolerance(torch.bfloat16)
    for _ in range(4):
        torch.compiler.cudagraph_mark_step_begin()
        x = torch.randn(8, 64, 256, dtype=torch.bfloat16, device="cuda")
        for m in (model, twin):
            m.zero_grad(set_to_none=True)
        compiled(x).float().square().mean().backward()
        twin(x).float().square().mean().backward()
        for g, w in zip(_grads(model), _grads(twin)):
            assert _rel(g, w.double()) <= _tolerance(torch.bfloat16)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])


def test_reduce_overhead_replays_a_split_k_call_whose_scratch_the_library_keeps(monkeypatch):
    """cudagraph trees warm a function up with the thread's allocations routed into the graph's private pool:
    the stream's split-K scratch, made there and kept past the call, would be a tensor that pool does not
    track, and the recording would refuse. It is the library's own memory (driver.StreamMemory)."""
    from torch._dynamo.utils import counters

    from deepgemm import api

    monkeypatch.setattr(plan, "_SCRATCH", {})  # made fresh here, as a first split-K call of a process would
    torch._dynamo.reset()
    counters.clear()
    gen = torch.Generator("cuda").manual_seed(11)
    weight = torch.randn(1024, 4096, generator=gen, device="cuda").half()
    config, _ = api.config_of(torch.empty(32, 4096, dtype=torch.half, device="cuda"), weight.T)
    assert config.extra.get("SPLIT_K", 1) > 1, config  # the shape the kernel cuts along K, with either kernel
    # (at M = 64 the Hopper kernel's pick sums its slices of K in the cluster, in shared memory: no scratch)
    compiled = torch.compile(lambda x, w: deepgemm.gemm(x, w.T), mode="reduce-overhead", fullgraph=True)
    for step in range(4):
        torch.compiler.cudagraph_mark_step_begin()
        x = torch.randn(32, 4096, generator=gen, device="cuda").half()
        got = compiled(x, weight).clone()
        assert _rel(got, _reference(x, weight.T, None, 1.0, None)) <= _tolerance(torch.half), step
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])


# --- CUDA graphs -------------------------------------------------------------------------------------------


def _knob(name: str) -> bool:
    return name in plan.DEFAULTS.extra


@dataclass(frozen=True)
class Path:
    """A path through the kernel: a shape, b's layout ('nk': the transposed view of a row-major (N, K)), and
    the call's options."""

    shape: tuple[int, int, int]
    b_layout: str = "nk"
    config: GemmConfig | None = None
    bias: bool = False
    activation: str | None = None
    out_dtype: torch.dtype | None = None
    needs: tuple[str, ...] = field(default=())  # knobs the kernel must have

    def operands(self, gen: torch.Generator) -> tuple:
        m, n, k = self.shape
        a = torch.randn(m, k, generator=gen, device="cuda").half()
        b = torch.randn(n, k, generator=gen, device="cuda").half().T if self.b_layout == "nk" else \
            torch.randn(k, n, generator=gen, device="cuda").half()  # fmt: skip
        bias = torch.randn(n, generator=gen, device="cuda") if self.bias else None
        return a, b, bias

    def call(self, a, b, bias) -> torch.Tensor:
        return deepgemm.gemm(a, b, bias=bias, activation=self.activation, out_dtype=self.out_dtype, config=self.config)

    def check(self, got, a, b, bias, what: str) -> None:
        err = _rel(got, _reference(a, b, bias, 1.0, self.activation))
        assert err <= _tolerance(got.dtype), f"{what}: relative error {err:.3g}"


SPLIT_K = GemmConfig(block_n=128, extra={"SPLIT_K": 4, "CLUSTER_M": 1})
STREAM_K = GemmConfig(block_m=128, block_n=256, extra={"CLUSTER_M": 2, "CLUSTER_N": 1, "STREAM_K": 1})
SWAP_AB = GemmConfig(block_n=16, num_stages=8, extra={"CLUSTER_M": 1, "SWAP_AB": 1})
PDL = GemmConfig(block_n=64, extra={"CLUSTER_M": 1, "PDL": 1, "STREAM_K": 1})
PATHS = {
    "data-parallel": Path((512, 1024, 768)),
    "split-K": Path((128, 4096, 4096), config=SPLIT_K),
    "stream-K": Path((4096, 2112, 1000), config=STREAM_K, needs=("STREAM_K",)),
    "swap AB": Path((16, 1000, 520), config=SWAP_AB),
    "padded operands": Path((64, 256, 4097)),  # rows of 8194 bytes: copied into padded rows each call
    "padded out": Path((64, 4097, 128), b_layout="kn"),  # C's rows of 8194 bytes: written padded, copied back
    "bias and activation": Path((200, 392, 136), bias=True, activation="gelu", out_dtype=torch.float32),
    "PDL": Path((256, 256, 256), config=PDL, needs=("PDL", "STREAM_K")),  # launches overlapping the one before
}


def _path(name: str) -> Path:
    path = PATHS[name]
    if path.config is not None:  # the sm_90a kernel's knobs (clusters, split-K's slots, swap AB, PDL)
        sm90a_library_or_skip()
    missing = [knob for knob in path.needs if not _knob(knob)]
    if missing:
        pytest.skip(f"this kernel has no {missing}")
    return path


def _warm_and_capture(run: Callable[[], torch.Tensor], stream: torch.cuda.Stream | None = None) -> tuple:
    """The call once on a side stream (its plan built there, as torch.cuda.graphs asks), then captured."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = run()
    return graph, out


@pytest.mark.parametrize("name", list(PATHS))
def test_capture_and_replay_with_new_inputs_and_eager_calls_between(name):
    path = _path(name)
    gen = torch.Generator("cuda").manual_seed(7)
    a, b, bias = path.operands(gen)
    graph, out = _warm_and_capture(lambda: path.call(a, b, bias))
    for r in range(3):
        for x, fresh in zip((a, b, bias), path.operands(gen)):
            if x is not None:
                x.copy_(fresh)  # new values into the captured inputs
        out.fill_(float("nan"))  # an element the replay does not write fails
        graph.replay()
        eager = path.operands(gen)  # an eager call of the same key between replays, on other arrays
        path.check(path.call(*eager), *eager, f"{name}: eager call after replay {r}")
        path.check(out, a, b, bias, f"{name}: replay {r}")


@pytest.mark.parametrize("name", ["data-parallel", "split-K", "stream-K"])
def test_two_graphs_replay_on_two_streams_at_once(name):
    """Two captures of one path (the default capture stream for both, as torch.cuda.graph does) replayed at
    the same time on two streams, twenty times: each graph's result is its own inputs' product. Split-K
    and stream-K sum partials through scratch memory: each graph needs its own."""
    path = _path(name)
    gen = torch.Generator("cuda").manual_seed(11)
    problems = [path.operands(gen) for _ in range(2)]
    graphs = [_warm_and_capture(lambda p=p: path.call(*p)) for p in problems]
    streams = [torch.cuda.Stream() for _ in graphs]
    for r in range(20):
        for (graph, out), stream in zip(graphs, streams):
            out.fill_(float("nan"))
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                graph.replay()
        for stream in streams:
            torch.cuda.current_stream().wait_stream(stream)
        for i, ((_, out), p) in enumerate(zip(graphs, problems)):
            path.check(out, *p, f"{name}: graph {i}, round {r}")


def test_split_k_graphs_captured_on_one_stream_each_run_alone():
    """A stream whose split-K scratch is first allocated inside a capture: a second graph captured on it,
    replayed before the first ever ran, and an eager call on that stream after the captures, are right. The
    GPU memory is dirtied first, so that memory allocated (not zeroed) inside a capture is not zero by luck."""
    path = _path("split-K")
    dirty = torch.full((1 << 28,), -1, dtype=torch.int32, device="cuda")  # 1 GiB of set bits, handed back
    del dirty
    torch.cuda.empty_cache()
    gen = torch.Generator("cuda").manual_seed(13)
    first, second = path.operands(gen), path.operands(gen)
    fresh = cupy.cuda.Stream(non_blocking=True)  # a new handle: torch's own streams come from a pool, reused
    stream = torch.cuda.ExternalStream(fresh.ptr)  # no split-K call has used it
    graph1, out1 = _warm_and_capture(lambda: path.call(*first), stream)
    graph2, out2 = _warm_and_capture(lambda: path.call(*second), stream)
    out1.fill_(float("nan"))
    out2.fill_(float("nan"))
    graph2.replay()
    path.check(out2, *second, "the second graph, replayed first")
    with torch.cuda.stream(stream):
        eager = path.operands(gen)
        result = path.call(*eager)
    torch.cuda.current_stream().wait_stream(stream)
    path.check(result, *eager, "an eager call on the capture stream")
    graph1.replay()
    path.check(out1, *first, "the first graph")


def test_a_capture_that_would_build_a_plan_is_refused_with_how_to_warm_up():
    """No compile inside a capture the user did not ask for: the call says to warm up; warmed up, it captures."""
    a = torch.randn(77, 136, dtype=torch.float16, device="cuda")  # a shape no other test plans
    b = torch.randn(136, 232, dtype=torch.float16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="Warm up first"), torch.cuda.graph(graph):
        deepgemm.gemm(a, b)
    graph, out = _warm_and_capture(lambda: deepgemm.gemm(a, b))
    graph.replay()
    assert _rel(out, _reference(a, b)) <= _tolerance(torch.float16)


def test_a_training_step_is_captured_with_make_graphed_callables():
    """Forward and backward of deepgemm.nn.Linear layers as CUDA graphs (torch warms them up, then captures):
    the gradients of every replayed step those of eager steps."""
    model = _mlp(2)
    twin = copy.deepcopy(model)
    sample = torch.randn(128, 256, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(model, (sample,))
    for step in range(3):
        x = torch.randn(128, 256, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        x_twin = x.detach().clone().requires_grad_()
        for m in (model, twin):
            m.zero_grad(set_to_none=True)
        graphed(x).float().square().mean().backward()
        twin(x_twin).float().square().mean().backward()
        for g, w in zip([*_grads(model), x.grad], [*_grads(twin), x_twin.grad]):
            assert _rel(g, w.double()) <= _tolerance(torch.bfloat16), step


# --- the training comparison, short ------------------------------------------------------------------------


def test_the_model_trains_with_deepgemm_as_with_nn_linear():
    """tutorial.train at a small size: the first gradients and the loss curve of deepgemm.nn.Linear against
    nn.Linear's, and the loss falling (python -m tutorial.train records the full run)."""
    from tutorial import train

    setup = replace(train.Setup(), width=256, heads=4, blocks=1, batch=8, tokens=128, steps=120, lr=1e-3)
    check = train.run_curves(setup)["check"]
    assert check["passed"], check
