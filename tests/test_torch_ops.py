"""The torch operators without a GPU (torch's CPU build): the schemas, the fake (the metadata a tracer gets),
opcheck, the route a call takes, the backward's formulas, torch.compile with no graph break, `linear` and
`deepgemm.nn.Linear`, and the errors.

Where a test runs a call, the planned launch (`deepgemm.torch_ops.launch`, what the kernel does on a GPU) is
replaced by `reference_launch`, torch's matmul on the CPU: those tests check the formulas, the registration
and the routing around the kernel, not the kernel (tests/test_gpu_torch.py runs them with it).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import deepgemm  # noqa: E402 - after torch: its ops are registered at import
import deepgemm.nn as dnn  # noqa: E402
from deepgemm import torch_ops  # noqa: E402
from deepgemm.config import GemmConfig  # noqa: E402
from deepgemm.epilogue import activation_name  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")
LAYOUTS = ("mk", "km")  # a row-major (M, K), or the transposed view of a row-major (K, M); b likewise


class Launches:
    """The reference launch's calls: (route, a, b, bias, activation, out_dtype, config) each, where route
    is the function that called the launch ('gemm' straight, 'forward' through _Gemm, '_gemm_kernel' or
    '_gemm_out_kernel' through the dispatcher)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, a, b, bias, alpha, activation, out_dtype, out, config):
        self.calls.append((sys._getframe(1).f_code.co_name, a, b, bias, activation, out_dtype, config))
        wide = torch.float64 if a.dtype == torch.float64 else torch.float32
        z = alpha * (a.to(wide) @ b.to(wide))
        if bias is not None:
            z = z + bias.to(wide)
        activate = torch_ops.ACTIVATION_FUNCTIONS[activation_name(activation)]
        y = activate(z).to(torch_ops.torch_dtype(out_dtype) or a.dtype)
        if out is None:
            return y
        out.data.copy_(y)  # as the kernel writes: through the memory, out's version untouched
        return out

    @property
    def routes(self) -> list[str]:
        return [call[0] for call in self.calls]


@pytest.fixture
def launches(monkeypatch) -> Launches:
    """The reference launch in the kernel's place (see the module's docstring)."""
    recorder = Launches()
    monkeypatch.setattr(torch_ops, "launch", recorder)
    return recorder


def _operand(rows: int, cols: int, layout: str, dtype=torch.float16, **kw) -> torch.Tensor:
    """A (rows, cols) operand, row-major ('mk') or the transposed view of a row-major (cols, rows) ('km')."""
    x = torch.randn(rows, cols, dtype=dtype, **kw) if layout == "mk" else torch.randn(cols, rows, dtype=dtype, **kw).T
    return x


# --- import ------------------------------------------------------------------------------------------------


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)


def test_importing_deepgemm_imports_no_torch():
    done = _python("import sys, deepgemm; print('torch' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_torch_imported_after_deepgemm_registers_the_ops_at_the_first_torch_call():
    """No ops yet after `import deepgemm; import torch`; the first call with a torch tensor registers them and
    goes the torch route (here a host tensor: the launch's TypeError names it)."""
    done = _python(
        "import deepgemm, torch\n"
        "assert not hasattr(torch.ops.deepgemm, 'gemm')\n"
        "try:\n    deepgemm.gemm(torch.ones(4, 8, dtype=torch.float16), torch.ones(8, 4, dtype=torch.float16))\n"
        "except TypeError as err:\n    print(err)\n"
        "print(torch.ops.deepgemm.gemm.default._schema.name)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["a lives on DLPack device type 1, not on a CUDA GPU", "deepgemm::gemm"]


def test_compile_before_the_ops_are_registered_says_what_to_do():
    """`import deepgemm` before torch and torch.compile before any eager call: the trace cannot register the
    ops (its guards saw none), so with fullgraph the error says to import torch first."""
    done = _python(
        "import deepgemm, torch\n"
        "fn = torch.compile(lambda x, y: deepgemm.gemm(x, y), fullgraph=True, backend='eager')\n"
        "try:\n    fn(torch.ones(4, 8, dtype=torch.float16), torch.ones(8, 4, dtype=torch.float16))\n"
        "except Exception as err:\n    print('import torch before deepgemm' in str(err))\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


# --- schema and fake ---------------------------------------------------------------------------------------


def test_the_schemas_name_every_option_and_gemm_out_mutates_out_alone():
    gemm = torch.ops.deepgemm.gemm.default._schema
    assert [a.name for a in gemm.arguments] == ["a", "b", "bias", "alpha", "activation", "out_dtype", "config"]
    assert not gemm.is_mutable and len(gemm.returns) == 1
    out = torch.ops.deepgemm.gemm_out.default._schema
    written = [a.name for a in out.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert written == ["out"] and not out.returns


DTYPES = [
    (torch.float16, None),
    (torch.bfloat16, None),
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.bfloat16),
]  # (input, out_dtype)


@pytest.mark.parametrize("a_layout", LAYOUTS)
@pytest.mark.parametrize("b_layout", LAYOUTS)
@pytest.mark.parametrize(("dtype", "out_dtype"), DTYPES)
def test_the_fake_gives_a_contiguous_m_by_n_in_the_output_dtype_on_a_device(a_layout, b_layout, dtype, out_dtype):
    """What torch.compile learns without running anything: fake CUDA tensors in, the plan's output out."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = _operand(129, 72, a_layout, dtype, device="cuda")
        b = _operand(72, 300, b_layout, dtype, device="cuda")
        bias = torch.empty(300, device="cuda")
        c = torch.ops.deepgemm.gemm(a, b, bias, 0.5, "gelu", out_dtype)
        via_api = deepgemm.gemm(a, b, bias=bias, out_dtype=out_dtype)  # a FakeTensor takes the op's route
    for result in (c, via_api):
        assert result.shape == (129, 300) and result.stride() == (300, 1)
        assert result.dtype == (out_dtype or dtype) and result.device.type == "cuda"


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"b": (71, 300)}, ValueError, "b has 71 rows but a has K = 72 columns"),
        ({"a": (0, 72)}, ValueError, "empty problem: M = 0"),
        ({"dtype": torch.float32}, TypeError, "the kernels take float16 or bfloat16"),
        ({"b_dtype": torch.bfloat16}, TypeError, "both must have the same dtype"),
        ({"bias": (299,)}, ValueError, "it must be a vector of N = 300"),
        ({"bias_dtype": torch.int32}, TypeError, "bias has dtype torch.int32"),
        ({"activation": "tanh"}, ValueError, "activation 'tanh' is not one of"),
        ({"out_dtype": torch.float64}, TypeError, "out_dtype torch.float64 is not supported"),
        ({"a": (129, 72, 1)}, ValueError, "a and b must be 2-D"),
    ],
)
def test_the_fake_refuses_what_the_plan_refuses(change, error, message):
    from torch._subclasses.fake_tensor import FakeTensorMode

    dtype = change.get("dtype", torch.float16)
    with FakeTensorMode():
        a = torch.empty(change.get("a", (129, 72)), dtype=dtype, device="cuda")
        b = torch.empty(change.get("b", (72, 300)), dtype=change.get("b_dtype", dtype), device="cuda")
        bias = torch.empty(change.get("bias", (300,)), dtype=change.get("bias_dtype", torch.float32), device="cuda")
        with pytest.raises(error, match=message):
            torch.ops.deepgemm.gemm(a, b, bias, 1.0, change.get("activation"), change.get("out_dtype"))


def test_the_out_form_checks_out_against_the_product():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(8, 16, dtype=torch.float16, device="cuda")
        b = torch.empty(16, 24, dtype=torch.float16, device="cuda")
        torch.ops.deepgemm.gemm_out(a, b, torch.empty(8, 24, dtype=torch.float16, device="cuda"))
        with pytest.raises(ValueError, match=r"out has shape \(8, 23\); the product is \(8, 24\)"):
            torch.ops.deepgemm.gemm_out(a, b, torch.empty(8, 23, dtype=torch.float16, device="cuda"))
        with pytest.raises(TypeError, match=r"out has dtype torch\.float32; expected torch\.float16"):
            torch.ops.deepgemm.gemm_out(a, b, torch.empty(8, 24, dtype=torch.float32, device="cuda"))


# --- opcheck (the reference launch as the kernel) ----------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["plain", "bias_relu_alpha", "transposed_a_gelu_fp32", "bf16_silu_tail", "gelu_tanh_bias_only_grad"],
)
def test_opcheck_passes_for_gemm(launches, case):
    """torch.library.opcheck: the schema against what the kernel does, the fake against the real output,
    the registered autograd, and AOT dispatch with dynamic shapes."""
    a = torch.randn(37, 72, dtype=torch.float16, requires_grad=True)
    w = torch.randn(40, 72, dtype=torch.float16, requires_grad=True)
    bias = torch.randn(40, requires_grad=True)
    args = {
        "plain": (a, w.T),
        "bias_relu_alpha": (a, w.T, bias, 0.5, "relu"),
        "transposed_a_gelu_fp32": (a.detach().T.contiguous().T.requires_grad_(), w.T, bias, 2.0, "gelu", torch.float32),
        "bf16_silu_tail": (torch.randn(3, 24, dtype=torch.bfloat16, requires_grad=True),
                           torch.randn(24, 5, dtype=torch.bfloat16, requires_grad=True), None, 1.0, "silu"),
        "gelu_tanh_bias_only_grad": (a.detach(), w.detach().T, bias, 1.0, "gelu_tanh"),
    }[case]  # fmt: skip
    torch.library.opcheck(torch.ops.deepgemm.gemm.default, args)


def test_opcheck_passes_for_gemm_out(launches):
    a, w = torch.randn(37, 72, dtype=torch.float16), torch.randn(40, 72, dtype=torch.float16)
    torch.library.opcheck(torch.ops.deepgemm.gemm_out.default, (a, w.T, torch.empty(37, 40, dtype=torch.float16)))
    out32 = torch.empty(37, 40, dtype=torch.float32)
    torch.library.opcheck(torch.ops.deepgemm.gemm_out.default, (a, w.T, out32, torch.randn(40), 0.5, "silu",
                                                                 torch.float32))  # fmt: skip


# --- the route --------------------------------------------------------------------------------------------


def test_a_plain_call_goes_straight_to_the_launch(launches):
    """Nothing needs a gradient: no dispatcher, no autograd (the cached call's host time stays as it was)."""
    a, b = torch.randn(8, 16, dtype=torch.float16), torch.randn(16, 24, dtype=torch.float16)
    deepgemm.gemm(a, b, activation="gelu")
    requires = a.clone().requires_grad_()
    with torch.no_grad():
        deepgemm.gemm(requires, b)
    deepgemm.gemm(a, torch.nn.Parameter(b, requires_grad=False))
    out = torch.empty(8, 24, dtype=torch.float16)
    assert deepgemm.gemm(a, b, out=out) is out
    assert launches.routes == ["gemm"] * 4
    assert launches.calls[0][4] == "gelu"  # fused


def test_a_call_that_needs_a_gradient_records_a_backward(launches):
    a, b = torch.randn(8, 16, dtype=torch.float16), torch.randn(16, 24, dtype=torch.float16, requires_grad=True)
    c = deepgemm.gemm(a, b, activation="relu")
    assert c.grad_fn is not None and launches.routes == ["forward"]
    assert launches.calls[0][4] == "relu"  # relu stays fused: its derivative comes from the output


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "silu"])
def test_the_pre_activation_is_kept_where_its_derivative_needs_it(launches, activation):
    """With a gradient to record, the kernel writes z and torch applies the activation (one elementwise pass
    and z kept, as nn.Linear + F.gelu keep it); without one the activation stays fused."""
    a, b = torch.randn(8, 16, dtype=torch.float16, requires_grad=True), torch.randn(16, 24, dtype=torch.float16)
    c = deepgemm.gemm(a, b, activation=activation)
    assert launches.calls[-1][4] is None and type(c.grad_fn).__name__ in ("GeluBackward0", "SiluBackward0")
    with torch.no_grad():
        deepgemm.gemm(a, b, activation=activation)
    assert launches.calls[-1][4] == activation


def test_mixed_frameworks_with_a_gradient_are_refused():
    """Whichever tensor needs the gradient (a, b or the bias), a call that mixes in another framework's array
    runs as CuPy and returns no tensor autograd could record: refused, not a result without a grad_fn."""
    import cupy

    memory = cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(0x10000, 1 << 20, None, 0), 0)
    other = {"a": cupy.ndarray((8, 16), cupy.float16, memory), "bias": cupy.ndarray((24,), cupy.float32, memory)}
    a, b = torch.randn(8, 16, dtype=torch.float16), torch.randn(16, 24, dtype=torch.float16)
    bias = torch.randn(24)
    cases = {
        "a needs it, b a list": (a.requires_grad_(True), [[1.0] * 24] * 16, None),
        "b needs it, the bias CuPy's": (a.detach(), b.requires_grad_(True), other["bias"]),
        "b needs it, a CuPy's": (other["a"], b, None),
        "the bias needs it, a CuPy's": (other["a"], b.detach(), bias.requires_grad_(True)),
    }
    for case, (x, y, z) in cases.items():
        with pytest.raises(TypeError, match="gradients flow through torch tensors only"):
            deepgemm.gemm(x, y, bias=z)
            pytest.fail(case)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
@pytest.mark.parametrize("grad_of", ["a", "b", "bias", "a_b_bias"])
@pytest.mark.parametrize("route", ["gemm", "op", "linear"])
def test_a_result_that_needs_a_gradient_always_has_a_grad_fn(launches, activation, out_dtype, grad_of, route):
    """The silent wrong answer of issue 26: a result that needs grad, returned without a grad_fn."""
    a = torch.randn(8, 16, dtype=torch.float16, requires_grad="a" in grad_of)
    w = torch.randn(24, 16, dtype=torch.float16, requires_grad="b" in grad_of)
    bias = torch.randn(24, requires_grad="bias" in grad_of)
    if route == "gemm":
        c = deepgemm.gemm(a, w.T, bias=bias, activation=activation, out_dtype=out_dtype)
    elif route == "op":
        c = torch.ops.deepgemm.gemm(a, w.T, bias, 1.0, activation, out_dtype)
    else:
        c = deepgemm.linear(a.unsqueeze(0), w, bias, activation)
    assert c.requires_grad and c.grad_fn is not None
    c.float().sum().backward()
    for name, x in (("a", a), ("b", w), ("bias", bias)):
        assert (x.grad is not None) == (name in grad_of), name


def test_out_with_a_gradient_is_refused_never_dropped(launches):
    a, b = torch.randn(8, 16, dtype=torch.float16, requires_grad=True), torch.randn(16, 24, dtype=torch.float16)
    out = torch.empty(8, 24, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="records no gradient"):
        deepgemm.gemm(a, b, out=out)
    with pytest.raises(RuntimeError, match="records no gradient"):
        torch.ops.deepgemm.gemm_out(a, b, out)
    with pytest.raises(RuntimeError, match="records no gradient"):
        torch.ops.deepgemm.gemm_out(a.detach(), b, out.clone().requires_grad_())
    assert launches.calls == []


def test_gemm_out_bumps_the_version_of_out(launches):
    """A tensor saved for a backward and then overwritten by gemm_out is caught, as for torch's in-place ops."""
    a, b = torch.randn(8, 16, dtype=torch.float16), torch.randn(16, 24, dtype=torch.float16)
    out = torch.empty(8, 24, dtype=torch.float16)
    version = out._version
    torch.ops.deepgemm.gemm_out(a, b, out)
    assert out._version == version + 1
    x = torch.randn(8, 24, dtype=torch.float16, requires_grad=True)
    y = x * out  # saves out for the backward
    torch.ops.deepgemm.gemm_out(a, b, out)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# --- the backward's formulas (float64 through the reference launch) ----------------------------------------


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("route", ["gemm", "op"])
@pytest.mark.parametrize(("a_layout", "b_layout"), [("mk", "km"), ("km", "mk")])
def test_gradients_pass_gradcheck(launches, activation, route, a_layout, b_layout):
    """The formulas (da = alpha dz b^T, db = alpha a^T dz, dbias = sum dz, each activation's derivative) against
    finite differences, float64 at a tail shape. 'gemm' keeps z (or fuses relu); 'op' recomputes z."""
    a = _operand(5, 7, a_layout, torch.float64, requires_grad=True)
    b = _operand(7, 3, b_layout, torch.float64, requires_grad=True)
    bias = torch.randn(3, dtype=torch.float64, requires_grad=True)
    if route == "gemm":

        def f(a, b, bias):
            return deepgemm.gemm(a, b, bias=bias, alpha=0.7, activation=activation)
    else:

        def f(a, b, bias):
            return torch.ops.deepgemm.gemm(a, b, bias, 0.7, activation)

    assert torch.autograd.gradcheck(f, (a, b, bias))
    assert torch.autograd.gradgradcheck(f, (a, b, bias))


def _noting_where(out: torch.Tensor, written: list[int]) -> torch.Tensor:
    written.append(out.data_ptr())
    return out


def test_the_backward_reads_the_transposed_operands_in_place(launches, monkeypatch):
    """da = dz @ b^T and db = a^T @ dz: the launch gets views of a's, b's and dz's own memory, not copies.
    b = w^T is a transposed view, so db comes as (dz^T @ a)^T and w's gradient is the kernel's output itself."""
    a = torch.randn(8, 16, dtype=torch.float16, requires_grad=True)
    w = torch.randn(24, 16, dtype=torch.float16, requires_grad=True)
    c = deepgemm.gemm(a, w.T)
    launches.calls.clear()
    written = []
    monkeypatch.setattr(torch_ops, "launch", lambda *args: _noting_where(launches(*args), written))
    c.backward(torch.randn_like(c))
    (_, dz_a, b_t, *_), (_, dz_t, a_b, *_) = launches.calls
    assert b_t.data_ptr() == w.data_ptr() and b_t.shape == (24, 16) and b_t.is_contiguous()  # w itself
    assert dz_t.data_ptr() == dz_a.data_ptr() and dz_t.shape == (24, 8) and dz_t.stride() == (1, 24)  # dz^T
    assert a_b.data_ptr() == a.data_ptr() and a_b.is_contiguous()  # a itself
    assert w.grad.data_ptr() == written[1] and w.grad.is_contiguous()  # accumulated without a copy


@pytest.mark.parametrize(("a_layout", "b_layout"), [(x, y) for x in LAYOUTS for y in LAYOUTS])
def test_each_gradient_comes_in_its_input_s_layout(launches, monkeypatch, a_layout, b_layout):
    """A row-major leaf read as itself or as its transposed view gets the kernel's output as its gradient (no
    transposing copy by autograd), its values right."""
    a_leaf = torch.randn(*((8, 16) if a_layout == "mk" else (16, 8)), dtype=torch.float16, requires_grad=True)
    b_leaf = torch.randn(*((16, 24) if b_layout == "mk" else (24, 16)), dtype=torch.float16, requires_grad=True)
    a, b = (x if layout == "mk" else x.T for x, layout in ((a_leaf, a_layout), (b_leaf, b_layout)))
    dc = torch.randn(8, 24, dtype=torch.float16)
    c = deepgemm.gemm(a, b, alpha=0.5)
    written = []  # where each launch wrote: a reference to the tensor itself would make autograd copy it
    monkeypatch.setattr(torch_ops, "launch", lambda *args: _noting_where(launches(*args), written))
    c.backward(dc)
    assert {a_leaf.grad.data_ptr(), b_leaf.grad.data_ptr()} == set(written)
    da, db = (x.grad if layout == "mk" else x.grad.T for x, layout in ((a_leaf, a_layout), (b_leaf, b_layout)))
    torch.testing.assert_close(da.float(), 0.5 * dc.float() @ b.detach().float().T, rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(db.float(), 0.5 * a.detach().float().T @ dc.float(), rtol=2e-3, atol=2e-3)


def test_an_fp32_output_s_gradient_reaches_the_kernel_in_the_input_dtype(launches):
    a = torch.randn(8, 16, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(16, 24, dtype=torch.bfloat16, requires_grad=True)
    bias = torch.randn(24, dtype=torch.float32, requires_grad=True)
    c = deepgemm.gemm(a, b, bias=bias, out_dtype=torch.float32)
    c.sum().backward()
    assert {call[1].dtype for call in launches.calls[1:]} == {torch.bfloat16}
    assert a.grad.dtype == b.grad.dtype == torch.bfloat16 and bias.grad.dtype == torch.float32


# --- torch.compile (the reference launch as the kernel) ----------------------------------------------------


class _Graphs:
    """A torch.compile backend that keeps the FX graphs Dynamo hands it and runs them as they are."""

    def __init__(self) -> None:
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def targets(self) -> list:
        return [node.target for gm in self.graphs for node in gm.graph.nodes if node.op == "call_function"]


def test_compile_traces_the_issue_s_example_in_one_graph(launches):
    """`torch.compile(lambda x, y: torch.relu(gemm(x, y)) * 2)` crashed in CuPy; now one graph, with the op."""
    torch._dynamo.reset()
    graphs = _Graphs()
    fn = torch.compile(lambda x, y: torch.relu(deepgemm.gemm(x, y)) * 2, fullgraph=True, backend=graphs)
    x, y = torch.randn(8, 16, dtype=torch.float16), torch.randn(16, 24, dtype=torch.float16)
    expected = torch.relu(x.float() @ y.float()).half() * 2
    torch.testing.assert_close(fn(x, y), expected)
    assert len(graphs.graphs) == 1 and torch.ops.deepgemm.gemm.default in graphs.targets()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_trains_a_linear_model_with_no_graph_break(launches, backend):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(dnn.Linear(16, 32, activation="gelu"), dnn.Linear(32, 8)).to(torch.bfloat16)
    twin = torch.nn.Sequential(dnn.Linear(16, 32, activation="gelu"), dnn.Linear(32, 8)).to(torch.bfloat16)
    twin.load_state_dict(model.state_dict())
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    x = torch.randn(2, 5, 16, dtype=torch.bfloat16)
    compiled(x).float().square().sum().backward()
    twin(x).float().square().sum().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=2e-2)
    assert "_gemm_kernel" in launches.routes  # the compiled graph ran the op


def test_compile_passes_config_and_out_and_dynamic_shapes(launches):
    torch._dynamo.reset()
    config = GemmConfig(block_n=128, extra={"SPLIT_K": 2})
    fn = torch.compile(lambda x, y: deepgemm.gemm(x, y, config=config, out_dtype=torch.float32), fullgraph=True,
                       backend="aot_eager")  # fmt: skip
    x, y = torch.randn(8, 16, dtype=torch.float16), torch.randn(16, 24, dtype=torch.float16)
    assert fn(x, y).dtype == torch.float32 and launches.calls[-1][-1] == config
    into = torch.compile(lambda x, y, out: deepgemm.gemm(x, y, out=out), fullgraph=True, backend="aot_eager")
    out = torch.zeros(8, 24, dtype=torch.float16)
    assert into(x, y, out) is out and launches.routes[-1] == "_gemm_out_kernel"
    torch.testing.assert_close(out, (x.float() @ y.float()).half())
    dynamic = torch.compile(deepgemm.linear, fullgraph=True, dynamic=True, backend="aot_eager")
    w = torch.randn(24, 16, dtype=torch.float16)
    for rows in (3, 5, 9):
        assert dynamic(torch.randn(rows, 2, 16, dtype=torch.float16), w).shape == (rows, 2, 24)


def test_export_holds_the_op():
    torch.manual_seed(0)
    layer = dnn.Linear(16, 24, activation="relu", dtype=torch.bfloat16)
    program = torch.export.export(layer, (torch.randn(2, 3, 16, dtype=torch.bfloat16),))
    targets = [node.target for node in program.graph.nodes if node.op == "call_function"]
    assert torch.ops.deepgemm.gemm.default in targets


def test_config_goes_through_the_op_as_text_and_back():
    for config in (GemmConfig(), GemmConfig(block_m=64, num_stages=3, extra={"SWAP_AB": 1, "CLUSTER_M": 1})):
        assert torch_ops.parse_config(torch_ops.config_text(config)) == config
    assert torch_ops.config_text(None) is None and torch_ops.parse_config(None) is None
    with pytest.raises(TypeError, match="config must be a GemmConfig, got dict"):
        torch_ops.config_text({"block_n": 128})


def test_out_dtype_reaches_the_op_as_a_torch_dtype():
    import numpy as np

    assert torch_ops.torch_dtype(np.float32) is torch.float32
    assert torch_ops.torch_dtype("float16") is torch.float16
    assert torch_ops.torch_dtype(torch.bfloat16) is torch.bfloat16 and torch_ops.torch_dtype(None) is None
    with pytest.raises(TypeError, match="is not supported"):
        torch_ops.torch_dtype(np.int8)


# --- linear and nn.Linear ----------------------------------------------------------------------------------


def test_linear_has_f_linear_semantics_for_any_leading_dimensions(launches):
    w, bias = torch.randn(24, 16, dtype=torch.float16), torch.randn(24, dtype=torch.float16)
    for shape in ((16,), (5, 16), (2, 3, 16), (2, 1, 3, 16)):
        x = torch.randn(shape, dtype=torch.float16)
        expected = torch.nn.functional.gelu(torch.nn.functional.linear(x.float(), w.float(), bias.float()))
        got = deepgemm.linear(x, w, bias, activation="gelu")
        assert got.shape == (*shape[:-1], 24)
        torch.testing.assert_close(got.float(), expected, rtol=2e-3, atol=2e-3)


def test_linear_merges_leading_dimensions_without_a_copy(launches):
    x, w = torch.randn(2, 3, 16, dtype=torch.float16), torch.randn(24, 16, dtype=torch.float16)
    deepgemm.linear(x, w)
    _, rows, w_t, *_ = launches.calls[-1]
    assert rows.data_ptr() == x.data_ptr() and rows.shape == (6, 16)
    assert w_t.data_ptr() == w.data_ptr() and w_t.stride() == (1, 16)  # weight^T read in place
    strided = torch.randn(3, 2, 16, dtype=torch.float16).transpose(0, 1)  # rows torch cannot merge: copied
    torch.testing.assert_close(deepgemm.linear(strided, w).float(), strided.float() @ w.float().T, rtol=2e-3, atol=2e-3)


def test_linear_of_an_empty_batch_is_torch_s_empty_product(launches):
    w = torch.randn(24, 16, dtype=torch.float16, requires_grad=True)
    out = deepgemm.linear(torch.randn(0, 3, 16, dtype=torch.float16), w, activation="relu")
    assert out.shape == (0, 3, 24) and out.grad_fn is not None and launches.calls == []


def test_linear_refuses_a_weight_of_another_k():
    with pytest.raises(ValueError, match=r"x has shape \(2, 16\) and weight \(24, 15\)"):
        deepgemm.linear(torch.randn(2, 16, dtype=torch.float16), torch.randn(24, 15, dtype=torch.float16))


def test_nn_linear_initialises_as_torch_s_from_the_same_seed_and_loads_its_state():
    torch.manual_seed(3)
    theirs = torch.nn.Linear(16, 24)
    torch.manual_seed(3)
    ours = dnn.Linear(16, 24, activation="silu")
    assert torch.equal(ours.weight, theirs.weight) and torch.equal(ours.bias, theirs.bias)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    theirs.load_state_dict(ours.state_dict())
    assert "activation='silu'" in repr(ours)
    with pytest.raises(ValueError, match="activation 'tanh'"):
        dnn.Linear(16, 24, activation="tanh")


def test_from_linear_shares_or_copies_the_parameters():
    torch.manual_seed(0)
    source = torch.nn.Linear(16, 24, dtype=torch.float16).eval()
    state = torch.random.get_rng_state()
    shared = dnn.Linear.from_linear(source, activation="relu")
    assert torch.equal(torch.random.get_rng_state(), state)  # nothing initialised anew
    assert shared.weight is source.weight and shared.bias is source.bias and not shared.training
    assert shared.activation == "relu" and shared.weight.dtype == torch.float16
    copied = dnn.Linear.from_linear(source, copy=True)
    assert copied.weight is not source.weight and torch.equal(copied.weight, source.weight)
    assert copied.weight.data_ptr() != source.weight.data_ptr()
    no_bias = dnn.Linear.from_linear(torch.nn.Linear(16, 24, bias=False))
    assert no_bias.bias is None
    with pytest.raises(TypeError, match=r"from_linear takes an nn\.Linear, got Conv1d"):
        dnn.Linear.from_linear(torch.nn.Conv1d(1, 1, 1))


def test_nn_linear_computes_what_torch_s_does(launches):
    torch.manual_seed(0)
    source = torch.nn.Linear(16, 24, dtype=torch.bfloat16)
    ours = dnn.Linear.from_linear(source, activation="gelu_tanh")
    x = torch.randn(4, 2, 16, dtype=torch.bfloat16)
    expected = torch.nn.functional.gelu(source.float()(x.float()), approximate="tanh")
    torch.testing.assert_close(ours(x).float(), expected, rtol=1e-2, atol=1e-2)


# --- the training comparison's machinery (tutorial.train, the reference launch as the kernel) ---------------


def test_the_training_comparison_passes_with_the_reference_kernel(launches):
    """tutorial.train at a tiny size on the CPU: both runs, their comparison and its verdict (the H200 run
    compares the kernel with cuBLAS; here both sides are torch's matmul, so the curves agree closely)."""
    from dataclasses import replace

    from tutorial import train

    setup = replace(train.Setup(), width=32, heads=2, blocks=1, batch=2, tokens=16, steps=60, lr=3e-3, device="cpu")
    found = train.run_curves(setup)
    check = found["check"]
    assert len(found["curves"]["torch"]) == 60 and check["passed"], check
    assert set(check["grad_rel_err"]) == {"blocks.0.qkv.weight", "blocks.0.proj.weight", "blocks.0.fc1.weight",
                                          "blocks.0.fc2.weight", "head.weight"}  # fmt: skip
    assert {"forward", "gemm"} <= set(launches.routes)  # trained through _Gemm, backward through the launch


def test_without_a_gpu_the_training_command_shows_the_record_or_how_to_make_it(tmp_path, capsys):
    from tutorial import results, train

    assert train.show_record(tmp_path) == 2
    assert "run `python -m tutorial.train --record` on a GPU" in capsys.readouterr().err
    rows = [{"mode": "eager", "linear": "torch", "fwd_bwd_ms": 3.0, "x_torch": 1.0, "step_ms": 4.0, "peak_mib": 9.0}]
    check = train.compare([1.0 / (1 + i) for i in range(40)], [1.0 / (1 + i) for i in range(40)], {"w": 0.001})
    prov = {"gpu": "NVIDIA H200", "driver": "D", "cuda": "13.0", "date": "T", "commit": "abc"}
    results.save("train", rows, prov, tmp_path, extra={"check": check})
    assert train.show_record(tmp_path) == 0
    assert "loss curves: every 20-step mean within 0.00% of nn.Linear's" in capsys.readouterr().out


def test_a_window_may_stray_as_far_as_twice_the_rounding_control_and_no_further():
    from tutorial import train

    ref = [1.0 / (1 + i) for i in range(60)]

    def spiked(height: float, at: int = 25) -> list[float]:  # one step's loss raised by `height` times itself
        return [x * (1 + height) if i == at else x for i, x in enumerate(ref)]

    gap = train.window_gaps(ref, spiked(1.0))[1]  # the spike's window: about 5.5% off
    assert gap > train.CURVE_TOL
    assert not train.compare(ref, spiked(1.0), {"w": 0.0})["passed"]  # no control: 2% is the bound
    assert train.compare(ref, spiked(1.0), {"w": 0.0}, control=spiked(0.6))["passed"]  # the control strays 0.6x
    assert not train.compare(ref, spiked(1.0), {"w": 0.0}, control=spiked(0.4))["passed"]  # 0.4x: too far
    late = [x * 1.03 if i >= 40 else x for i, x in enumerate(ref)]  # the last window 3% off
    assert not train.compare(ref, late, {"w": 0.0})["passed"] and train.compare(ref, late, {"w": 0.0}, late)["passed"]


def test_the_recorded_training_run_passes_the_comparison_on_its_own_curves():
    """The H200's train.json holds the three loss curves and the first gradients' errors: the comparison,
    applied to them, passes, and gives the check the record holds (today's rule is the recording one)."""
    from tutorial import results, train

    record = results.load("train")
    curves, grads = record["curves"], record["check"]["grad_rel_err"]
    check = train.compare(curves["torch"], curves["deepgemm"], grads, curves[train.CONTROL])
    assert check["passed"], check
    assert check == record["check"]


def test_the_comparison_fails_a_model_that_does_not_learn():
    from tutorial import train

    flat = [1.0] * 40
    assert not train.compare(flat, flat, {"w": 0.0})["passed"]
    falling = [1.0 / (1 + i) for i in range(40)]
    assert train.compare(falling, falling, {"w": 0.0})["passed"]
    assert not train.compare(falling, [x * 1.2 for x in falling], {"w": 0.0})["passed"]
    assert not train.compare(falling, falling, {"w": 0.5})["passed"]
