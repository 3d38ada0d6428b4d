"""The library call as PyTorch operators: `torch.ops.deepgemm.gemm` and `torch.ops.deepgemm.gemm_out`, so that
autograd, torch.compile and CUDA graphs see one operator. `deepgemm.gemm` with torch tensors calls `gemm` here.

Imported once a caller has torch: by `import deepgemm` where torch is already imported, else by the first
call with a torch tensor (or `import deepgemm.nn`); `import deepgemm` alone never imports torch. A trace
cannot import it (its guards saw no ops): torch.compile meeting deepgemm.gemm before then stops with a
message that says to import torch first. A call whose plan is not built yet refuses a CUDA graph capture
(`api.require_not_capturing`): the build compiles and loads a kernel.

Registration: `torch.library.Library.define` and `impl` with plain functions, the route serving frameworks
take; `torch.library.custom_op` wraps each call in more Python (`lab/op_host.py` times both). The fake
gives the result's exact metadata: a contiguous (M, N) in out_dtype, else the input dtype, on a's device.

Route: the dispatcher costs microseconds a call (more with an autograd kernel), so a plain eager call goes
first to C++ (`deepgemm.fast`: the plan's launch, and where a gradient is needed its autograd node, with no
Python), and where C++ does not hold the call's plan, straight to the plan (`api.launch`) or, where its result
needs a gradient, to the same launch inside an autograd.Function (`_Gemm`). torch.compile and torch.export,
and tensor subclasses (FakeTensor, FunctionalTensor), reach the registered op, whose fake and registered
autograd record the same forward and backward; its CUDA kernel is C++'s once deepgemm.fast is built. Either
way a result that needs a gradient has a `grad_fn`, or the call raises.

Backward of y = act(z), z = alpha * a @ b + bias: dz = dy * act'(z), da = alpha * dz @ b^T and
db = alpha * a^T @ dz through the same kernel, which reads the transposed views b^T and a^T as they lie,
each written in its input's layout (db for b = W^T as (dz^T @ a)^T, so that W's gradient needs no copy),
and dbias = the sum of dz over rows. relu's derivative comes from the output (y > 0 exactly where z > 0).
gelu, gelu_tanh and silu need z: `gemm` keeps it, the kernel writing z and torch applying the activation,
so autograd keeps z as nn.Linear followed by F.gelu does, for one elementwise pass; recomputing z instead
would cost a second GEMM in every backward. The op, called directly with those activations, fuses the
activation and recomputes z in its backward (`tutorial/train.py` times both).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from deepgemm import api, fast
from deepgemm.api import launch
from deepgemm.config import GemmConfig, parse_defines
from deepgemm.dtypes import dtype_name, output_dtype
from deepgemm.epilogue import ACTIVATIONS, activation_name

LIB = torch.library.Library("deepgemm", "DEF")  # the library's namespace: defined once, by this module
LIB.define(
    "gemm(Tensor a, Tensor b, Tensor? bias=None, float alpha=1.0, str? activation=None, ScalarType? out_dtype=None, "
    "str? config=None) -> Tensor"
)
LIB.define(
    "gemm_out(Tensor a, Tensor b, Tensor(a!) out, Tensor? bias=None, float alpha=1.0, str? activation=None, "
    "ScalarType? out_dtype=None, str? config=None) -> ()"
)
GEMM, GEMM_OUT = torch.ops.deepgemm.gemm.default, torch.ops.deepgemm.gemm_out.default

PLAIN = (torch.Tensor, torch.nn.Parameter)  # what the plan reads directly; other subclasses go through the op
KERNEL_DTYPES = (torch.float16, torch.bfloat16)
OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DTYPES_BY_NAME = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
ACTIVATION_FUNCTIONS = {  # torch's own, by the canonical names of deepgemm.epilogue
    "none": lambda z: z,
    "relu": F.relu,
    "gelu_erf": functools.partial(F.gelu, approximate="none"),
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "silu": F.silu,
}
KEPT = ("gelu_erf", "gelu_tanh", "silu")  # the activations whose derivative needs the pre-activation z
OUT_NO_GRAD = (
    "deepgemm.gemm(..., out=...) records no gradient (as torch's out= functions), and one of its tensors "
    "requires grad: call it without out, or under torch.no_grad()"
)


def gemm(
    a: torch.Tensor,
    b: Any,
    bias: Any,
    alpha: float,
    activation: str | None,
    out_dtype: Any,
    out: Any,
    config: GemmConfig | None,
) -> Any:
    """`deepgemm.gemm` where a is a torch tensor (api.gemm's arguments, in order)."""
    compiling = torch.compiler.is_compiling()
    plain = type(a) in PLAIN and type(b) in PLAIN and (bias is None or type(bias) in PLAIN)
    if not compiling and plain and (out is None or type(out) in PLAIN):
        if FAST[0] is not None and out is None and config is None:
            found = call_fast(a, b, bias, alpha, activation, out_dtype)
            if found is not None:  # the plan ran from C++ (deepgemm.fast), recorded for autograd where needed
                return found
        if not needs_grad(a, b, bias, out):
            return launch(a, b, bias, alpha, activation, out_dtype, out, config)  # the plain call: no dispatcher
        return recorded(a, b, bias, alpha, activation, out_dtype, out, config, traced=False)
    if not compiling and not all(isinstance(x, torch.Tensor) for x in (b, bias, out) if x is not None):
        # other arrays: converted, or named (api.gemm_as_cupy, which refuses a gradient wanted there)
        return launch(a, b, bias, alpha, activation, out_dtype, out, config)
    return recorded(a, b, bias, alpha, activation, out_dtype, out, config, traced=True)


FAST: list[Any] = [None]  # deepgemm.fast's extension, once it holds a plan (`on_plan`)


def call_fast(a: torch.Tensor, b: Any, bias: Any, alpha: Any, activation: Any, out_dtype: Any) -> Any:
    """The call from C++ where its plan is registered there (deepgemm.fast), else None: the Python path."""
    found = fast.codes(activation, out_dtype)
    if found is None or type(alpha) not in (float, int):
        return None
    return FAST[0].call(a, b, bias, alpha, *found)


def on_plan(plan: Any, a: Any, b: Any, bias: Any, out: Any, activation: Any, out_dtype: Any, config: Any) -> None:
    """api.ON_PLAN: a torch call's plan, just built, handed to C++ where it can run it (deepgemm.fast)."""
    ours = out is None and config is None and plan.framework.name == "torch" and fast.enabled()
    if ours and fast.register(plan, a, b, bias, activation, out_dtype):
        FAST[0] = fast.loaded()


def on_forget() -> None:
    """api.ON_FORGET: the plans registered with C++ dropped with Python's."""
    if FAST[0] is not None:
        FAST[0].clear()


def needs_grad(a: torch.Tensor, b: torch.Tensor, bias: Any, out: Any) -> bool:
    """Whether autograd would record this call: a tensor that requires grad, with grad mode on."""
    wanted = a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)
    return (wanted or (out is not None and out.requires_grad)) and torch.is_grad_enabled()


def recorded(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    alpha: float,
    activation: str | None,
    out_dtype: Any,
    out: torch.Tensor | None,
    config: GemmConfig | None,
    *,
    traced: bool,
) -> torch.Tensor:
    """The call as autograd and tracers see it: through the registered op where `traced`, else through `_Gemm`.
    Where the result needs a gradient and the activation's derivative needs z, the kernel writes z and torch
    applies the activation (the module docstring says why)."""
    grad = needs_grad(a, b, bias, out)
    dtype = torch_dtype(out_dtype)
    if out is not None:
        if grad:
            raise RuntimeError(OUT_NO_GRAD)
        GEMM_OUT(a, b, out, bias, alpha, activation, dtype, config_text(config))
        return out
    act = activation_name(activation)
    keep = grad and act in KEPT
    fused = None if keep else activation
    if traced:
        result = GEMM(a, b, bias, alpha, fused, dtype, config_text(config))
    else:
        result = _Gemm.apply(a, b, bias, alpha, fused, dtype, config)
    return ACTIVATION_FUNCTIONS[act](result) if keep else result


def torch_dtype(dtype: Any) -> torch.dtype | None:
    """out_dtype as a torch dtype (None stays None); TypeError for one the kernel cannot write."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    return DTYPES_BY_NAME[dtype_name(output_dtype(dtype))]


@torch.compiler.assume_constant_result
def config_text(config: GemmConfig | None) -> str | None:
    """A GemmConfig as the op's string argument, 'NAME=VALUE,...' (parse_config reads it back)."""
    if config is None:
        return None
    if type(config) is not GemmConfig:
        raise TypeError(f"config must be a GemmConfig, got {type(config).__name__}")
    return ",".join(f"{name}={value}" for name, value in sorted(config.defines().items()))


@functools.lru_cache(maxsize=256)
def parse_config(text: str | None) -> GemmConfig | None:
    """The GemmConfig of `config_text`, parsed once per text."""
    return None if text is None else GemmConfig.from_defines(parse_defines(text, upper=False))


# --- the op's kernels: the planned launch (CPU tensors get the launch's TypeError for host arrays) ---------


def _gemm_kernel(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None = None,
    alpha: float = 1.0,
    activation: str | None = None,
    out_dtype: torch.dtype | None = None,
    config: str | None = None,
) -> torch.Tensor:
    return launch(a, b, bias, alpha, activation, out_dtype, None, parse_config(config))


def _gemm_out_kernel(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: torch.Tensor | None = None,
    alpha: float = 1.0,
    activation: str | None = None,
    out_dtype: torch.dtype | None = None,
    config: str | None = None,
) -> None:
    launch(a, b, bias, alpha, activation, out_dtype, out, parse_config(config))


# gemm's kernel for every backend; deepgemm.fast registers a C++ one for CUDA, which calls this one where its
# plan is not held in C++ (a backend's own kernel comes before CompositeExplicitAutograd's).
LIB.impl("gemm", _gemm_kernel, "CompositeExplicitAutograd")
for _key in ("CUDA", "CPU"):
    LIB.impl("gemm_out", _gemm_out_kernel, _key)


# --- the fake: what a tracer learns without running the kernel ---------------------------------------------


def check_meta(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str | None, out_dtype: Any
) -> torch.dtype:
    """What the plan checks that metadata alone decides, with its messages; the result's dtype."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"a and b must be 2-D, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype not in KERNEL_DTYPES:
        raise TypeError(f"a has dtype {a.dtype}; the kernels take float16 or bfloat16")
    if b.dtype != a.dtype:
        raise TypeError(f"a is {a.dtype} but b is {b.dtype}; both must have the same dtype")
    m, k = a.shape
    torch._check_with(ValueError, b.shape[0] == k, lambda: f"b has {b.shape[0]} rows but a has K = {k} columns")
    n = b.shape[1]
    for size in (m, n, k):
        torch._check_with(ValueError, size >= 1, lambda: f"empty problem: M = {m}, N = {n}, K = {k}")
    if bias is not None:
        shape = tuple(bias.shape)
        torch._check_with(ValueError, bias.dim() == 1 and shape[0] == n,
                          lambda: f"bias has shape {shape}; it must be a vector of N = {n} elements")  # fmt: skip
        if not bias.dtype.is_floating_point:
            raise TypeError(f"bias has dtype {bias.dtype}; it must be a floating-point vector")
    activation_name(activation)
    dtype = a.dtype if out_dtype is None else out_dtype
    if dtype not in OUT_DTYPES:
        raise TypeError(f"out_dtype {dtype} is not supported: use float16, bfloat16 or float32")
    return dtype


@torch.library.register_fake("deepgemm::gemm", lib=LIB)
def _gemm_fake(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None = None,
    alpha: float = 1.0,
    activation: str | None = None,
    out_dtype: torch.dtype | None = None,
    config: str | None = None,
) -> torch.Tensor:
    dtype = check_meta(a, b, bias, activation, out_dtype)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=dtype)  # contiguous, as the plan allocates it


@torch.library.register_fake("deepgemm::gemm_out", lib=LIB)
def _gemm_out_fake(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: torch.Tensor | None = None,
    alpha: float = 1.0,
    activation: str | None = None,
    out_dtype: torch.dtype | None = None,
    config: str | None = None,
) -> None:
    dtype = check_meta(a, b, bias, activation, out_dtype)
    if tuple(out.shape) != (a.shape[0], b.shape[1]):
        raise ValueError(f"out has shape {tuple(out.shape)}; the product is {(a.shape[0], b.shape[1])}")
    if out.dtype != dtype:
        raise TypeError(f"out has dtype {out.dtype}; expected {dtype}")


# --- autograd ---------------------------------------------------------------------------------------------


def save(ctx: Any, a: torch.Tensor, b: torch.Tensor, bias: Any, alpha: float, activation: Any, y: torch.Tensor) -> None:
    """What the backward needs, and no more: a for db, b for da, y for relu's derivative, and a, b and bias
    where the activation's derivative needs z, which the backward recomputes."""
    act = activation_name(activation)
    recompute = act in KEPT
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    ctx.save_for_backward(a if need_b or recompute else None, b if need_a or recompute else None,
                          bias if recompute else None, y if act == "relu" else None)  # fmt: skip
    ctx.alpha, ctx.activation, ctx.kernel_dtype = alpha, act, a.dtype
    ctx.transposed = (need_a and transposed(a), need_b and transposed(b))  # each gradient in its input's layout
    ctx.bias_dtype = None if bias is None else bias.dtype


def backward(ctx: Any, dy: torch.Tensor) -> tuple:
    """da, db and dbias (None where not wanted), then None for alpha, activation, out_dtype and config."""
    a, b, bias, y = ctx.saved_tensors
    need_a, need_b, need_bias = (*ctx.needs_input_grad, False)[:3]  # the dispatcher leaves out a default bias
    dz = pre_activation_grad(ctx, dy, a, b, bias, y)
    dz_in = dz if dz.dtype == ctx.kernel_dtype else dz.to(ctx.kernel_dtype)  # an fp32 output's grad: the kernel's type
    da = product(dz_in, b.T, ctx.alpha, ctx.transposed[0]) if need_a else None
    db = product(a.T, dz_in, ctx.alpha, ctx.transposed[1]) if need_b else None
    dbias = dz.sum(0, dtype=ctx.bias_dtype) if need_bias else None
    return da, db, dbias, None, None, None, None


def transposed(x: torch.Tensor) -> bool:
    """Whether x is the transposed view of a row-major matrix (a weight W read as W^T)."""
    return x.dim() == 2 and x.shape[0] > 1 and x.shape[1] > 1 and x.T.is_contiguous()


def product(left: torch.Tensor, right: torch.Tensor, alpha: float, transpose: bool) -> torch.Tensor:
    """alpha * left @ right; where `transpose`, written as the kernel's row-major (right^T @ left^T) and
    returned as its transposed view: a gradient in its input's layout, which autograd accumulates into W
    without a transposing copy. Every operand is a view the kernel reads in place."""
    if transpose:
        return gemm(right.T, left.T, None, alpha, None, None, None, None).T
    return gemm(left, right, None, alpha, None, None, None, None)


def pre_activation_grad(
    ctx: Any, dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias: Any, y: torch.Tensor | None
) -> torch.Tensor:
    """dL/dz from dL/dy: relu's from the output, the others' from z recomputed by a second GEMM."""
    act = ctx.activation
    if act == "none":
        return dy
    if act == "relu":
        return torch.ops.aten.threshold_backward(dy, y, 0)
    z = gemm(a, b, bias, ctx.alpha, None, dy.dtype, None, None)
    if act == "silu":  # silu' = s (1 + z (1 - s)), s = sigmoid(z), in at least fp32 (aten's silu_backward has no
        wide = torch.promote_types(z.dtype, torch.float32)  # derivative, so it would stop a double backward)
        z = z.to(wide)
        s = torch.sigmoid(z)
        return (dy.to(wide) * s * (1 + z * (1 - s))).to(dy.dtype)
    return torch.ops.aten.gelu_backward(dy, z, approximate="tanh" if act == "gelu_tanh" else "none")


class _Gemm(torch.autograd.Function):
    """An eager call that records a backward: the planned launch, then `save`; `backward` as the op's."""

    @staticmethod
    def forward(ctx: Any, a: Any, b: Any, bias: Any, alpha: float, activation: Any, out_dtype: Any, config: Any) -> Any:
        y = launch(a, b, bias, alpha, activation, out_dtype, None, config)
        save(ctx, a, b, bias, alpha, activation, y)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple:
        return backward(ctx, dy)


def _setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    a, b, bias, alpha, activation = inputs[:5]
    save(ctx, a, b, bias, alpha, activation, output)


torch.library.register_autograd("deepgemm::gemm", backward, setup_context=_setup_context, lib=LIB)


def _gemm_out_autograd(
    keyset: Any,
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: torch.Tensor | None = None,
    alpha: float = 1.0,
    activation: str | None = None,
    out_dtype: torch.dtype | None = None,
    config: str | None = None,
) -> None:
    """gemm_out under autograd: an error where a gradient is wanted; else the kernel, and out's version bumped
    (a tensor saved for some backward and then overwritten is caught, as for torch's in-place ops)."""
    if needs_grad(a, b, bias, out):
        raise RuntimeError(OUT_NO_GRAD)
    with torch._C._AutoDispatchBelowAutograd():
        GEMM_OUT.redispatch(keyset & torch._C._after_autograd_keyset, a, b, out, bias, alpha, activation,
                            out_dtype, config)  # fmt: skip
    torch.autograd.graph.increment_version(out)


LIB.impl("gemm_out", _gemm_out_autograd, "Autograd", with_keyset=True)

# --- what deepgemm.fast's C++ hands back to Python -----------------------------------------------------------


def cpp_backward(
    dy: torch.Tensor,
    a: torch.Tensor | None,
    b: torch.Tensor | None,
    y: torch.Tensor | None,
    alpha: float,
    act: int,
    need_a: bool,
    need_b: bool,
    need_bias: bool,
    transposed_a: bool,
    transposed_b: bool,
    bias_dtype: int,
) -> tuple:
    """da, db and dbias of a call C++ recorded, by `backward`, whose products record their own backward: a
    double backward (create_graph=True) goes through here."""
    ctx = SimpleNamespace(
        saved_tensors=(a, b, None, y),
        needs_input_grad=(need_a, need_b, need_bias),
        alpha=alpha,
        activation="relu" if act == ACTIVATIONS["relu"] else "none",
        kernel_dtype=(a if a is not None else b).dtype,
        transposed=(transposed_a, transposed_b),
        bias_dtype=fast.DTYPES.get(bias_dtype),
    )
    return backward(ctx, dy)[:3]


def cpp_op_kernel(a: Any, b: Any, bias: Any, alpha: float, activation: str | None, out_code: int, config: Any) -> Any:
    """The op's Python kernel for a call its C++ CUDA kernel does not run (out_dtype as a c10 code, -1: None)."""
    return _gemm_kernel(a, b, bias, alpha, activation, fast.DTYPES.get(out_code), config)


fast.PYTHON_PATHS = (fast.python_launch, cpp_backward, cpp_op_kernel)
api.ON_PLAN, api.ON_FORGET = on_plan, on_forget
api.TORCH_TENSOR, api.TORCH_GEMM = torch.Tensor, gemm  # deepgemm.gemm routes torch tensors here from now on
