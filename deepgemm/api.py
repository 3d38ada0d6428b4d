"""The library call: `deepgemm.gemm(a, b, ...)` runs the library kernel of the caller's GPU: the sm_90a kernel on
Hopper (H100, H200; `deepgemm.plan`), the sm_80 kernel on any other GPU of compute capability 8.0 or newer
(Ampere, Ada, consumer Blackwell; `deepgemm.plan_sm80`). Which one is decided when a key's plan is built.

A call is planned once per key: the framework, device, dtypes, shapes, strides and alignment of the operands,
the bias, `out`, the activation, the output dtype and the config (`deepgemm.plan`). A call whose key has a
plan reads the metadata off the caller's arrays, and the plan allocates the output in the caller's
framework, points the kernel's tensor maps at this call's arrays and launches on the caller's current
stream: no checks, no DLPack, no CuPy launch.

A call without a config runs the one this GPU's autotune table holds for its problem, or else the
heuristic's pick (`deepgemm.heuristic`; `deepgemm.heuristic_sm80` for the sm_80 kernel): tile, cluster,
split-K and pipeline depth by shape.

PyTorch tensors take `deepgemm.torch_ops.gemm` first, once torch is imported: a plain eager call comes back
to `launch` here, and one whose result needs a gradient, or that torch.compile traces, goes through the
registered op (`torch.ops.deepgemm.gemm`). A plan is never built while the caller's stream captures a CUDA
graph: the build compiles and loads a kernel and asks the GPU for its limits, none of which a graph can hold.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from deepgemm import plan, plan_sm80
from deepgemm.config import GemmConfig
from deepgemm.dtypes import output_dtype
from deepgemm.epilogue import activation_name
from deepgemm.frameworks import Cupy, Torch, framework_of, spans_overlap
from deepgemm.operands import as_device_array, check_operands

PLAN_CACHE_SIZE = 1024  # plans kept, the oldest dropped first; a model has a few dozen shapes


def gemm(
    a: Any,
    b: Any,
    *,
    bias: Any = None,
    alpha: float = 1.0,
    activation: str | None = None,
    out_dtype: Any = None,
    out: Any = None,
    config: GemmConfig | None = None,
) -> Any:
    """act(alpha * a @ b + bias) for FP16/BF16 a (M, K) and b (K, N), FP32 accumulation.

    a may be row-major (M, K) or the transposed view of a row-major (K, M); b row-major (K, N) or the
    transposed view of a row-major (N, K): the kernel reads all four as they lie. bias is an optional
    vector of N, read as it lies in its own type where it is a contiguous float16, bfloat16 or float32 one
    (nn.Linear's in a 16-bit model), else converted to float32 by every call; activation is None, 'relu',
    'gelu' (erf), 'gelu_tanh', 'gelu_erf' or 'silu'; out_dtype (a NumPy or torch dtype) defaults to the input
    dtype and may be float32; `out` may have a row stride, and shares no memory with the inputs.

    The result comes back in the caller's framework, computed on its current stream: for CuPy arrays a
    CuPy array on CuPy's current stream; for PyTorch tensors a tensor allocated by torch, on torch's
    current stream, so that torch's stream-ordered allocator cannot hand inputs dropped after the call
    to other work before the kernel has read them. With `out`, the result is `out` itself. Arrays of another
    framework (DLPack, __cuda_array_interface__) are read as CuPy views and give a CuPy array.

    With torch tensors the call is the operator `torch.ops.deepgemm.gemm` (`deepgemm.torch_ops`): a result that
    needs a gradient carries a backward, torch.compile traces the call without a graph break, and a CUDA
    graph captures it once the same call has run before the capture.
    """
    if isinstance(a, TORCH_TENSOR):  # autograd and torch.compile need the registered op (deepgemm.torch_ops)
        return TORCH_GEMM(a, b, bias, alpha, activation, out_dtype, out, config)
    if TORCH_TENSOR is NoTorch and "torch" in sys.modules:  # torch imported after deepgemm: register its ops now
        if sys.modules["torch"].compiler.is_compiling():  # too late for this trace: its guards saw no ops
            raise RuntimeError(UNREGISTERED_UNDER_COMPILE)
        import deepgemm.torch_ops as torch_ops  # sets TORCH_TENSOR and TORCH_GEMM for the calls after this one

        if isinstance(a, torch_ops.torch.Tensor):
            return torch_ops.gemm(a, b, bias, alpha, activation, out_dtype, out, config)
    return launch(a, b, bias, alpha, activation, out_dtype, out, config)


class NoTorch:
    """What TORCH_TENSOR is until deepgemm.torch_ops registers torch's ops: a type nothing is an instance of."""


TORCH_TENSOR: type = NoTorch  # torch.Tensor once deepgemm.torch_ops is imported
TORCH_GEMM: Callable[..., Any] | None = None  # deepgemm.torch_ops.gemm: the call for a torch tensor a
UNREGISTERED_UNDER_COMPILE = (
    "deepgemm was imported before torch, and torch.compile met deepgemm.gemm before any eager call registered "
    "its torch ops: import torch before deepgemm (or import deepgemm.nn) ahead of torch.compile"
)


def launch(
    a: Any,
    b: Any,
    bias: Any,
    alpha: float,
    activation: str | None,
    out_dtype: Any,
    out: Any,
    config: GemmConfig | None,
) -> Any:
    """The planned call, `gemm` without autograd or tracing: the plan of the call's key (built on the first
    call of a key), run on the caller's arrays."""
    framework = framework_of(a)
    try:
        key = plan_key(framework, a, b, bias, out, activation, out_dtype, config)
        found = _PLANS.get(key)
    except TypeError:  # not arrays of one framework, or an option that is no value: convert, or say what is wrong
        return gemm_as_cupy(a, b, bias=bias, alpha=alpha, activation=activation, out_dtype=out_dtype, out=out,
                            config=config)  # fmt: skip
    if found is None:
        require_not_capturing(framework, a)
        family = plan_family(framework.meta(a)[3])
        found = family.build(framework, a, b, bias, out, activation=activation, out_dtype=out_dtype, config=config)
        with _PLANS_LOCK:  # two threads may both evict: one lock, so neither pops a key the other took
            if len(_PLANS) >= PLAN_CACHE_SIZE:
                _PLANS.pop(next(iter(_PLANS)))
            _PLANS[key] = found
        if ON_PLAN is not None:
            ON_PLAN(found, a, b, bias, out, activation, out_dtype, config)
    return found(a, b, bias, alpha, out)


# Called with each plan just built and its call's arguments (deepgemm.torch_ops sets it: C++ takes the plans it
# can run, `deepgemm.fast`).
ON_PLAN: Callable[..., None] | None = None


_PLANS: dict[tuple, plan.Plan] = {}
_PLANS_LOCK = threading.Lock()  # taken where a plan is added (rare), never by a cached call


def forget_plans() -> None:
    """Drop every plan this process has built, and the C++ path's copies: the next call of each key plans
    again, with the autotune table as it then is (`tutorial.shape_suite` times the heuristic's pick so, as a
    caller whose shape no table holds calls it)."""
    with _PLANS_LOCK:
        _PLANS.clear()
    if ON_FORGET is not None:
        ON_FORGET()


# Called by `forget_plans` (deepgemm.torch_ops sets it: the plans C++ holds go too).
ON_FORGET: Callable[[], None] | None = None


def plan_family(device: int) -> ModuleType:
    """The plan module whose kernel a call on `device` runs: `plan_sm80` where it runs (any GPU but Hopper, by
    the capability the library goes by, or Hopper with DEEPGEMM_FORCE_SM80=1), else `plan` (sm_90a). Asked
    where a plan is built, so a cached call pays nothing for it; both build the same frozen `plan.Plan`."""
    return plan_sm80 if plan_sm80.runs_on(device) else plan


CAPTURE_MESSAGE = (
    "deepgemm.gemm: this call has no plan yet, and a plan cannot be built while the stream captures a CUDA graph "
    "(building one compiles and loads a kernel and queries the GPU). Warm up first: make the same call (shapes, "
    "layouts, dtypes, options) once before the capture, as torch.cuda.graphs asks of every library"
)


def require_not_capturing(framework: Cupy | Torch, a: Any) -> None:
    """RuntimeError where the caller's current stream on a's device is capturing a CUDA graph."""
    if framework.capturing(framework.meta(a)[3]):
        raise RuntimeError(CAPTURE_MESSAGE)


def plan_key(
    framework: Cupy | Torch,
    a: Any,
    b: Any,
    bias: Any,
    out: Any,
    activation: str | None,
    out_dtype: Any,
    config: GemmConfig | None,
) -> tuple:
    """What fixes a launch, read off the arrays; TypeError where an argument is not the framework's array."""
    if config is not None and type(config) is not GemmConfig:
        raise TypeError("config is not a GemmConfig")
    meta, pointer = framework.meta, framework.pointer
    operands = (meta(a), meta(b))  # first: they refuse what is not the framework's array
    return (
        framework.name,
        *operands,
        not pointer(a) & 15,  # each on its own: the plan reads one in place and copies the other
        not pointer(b) & 15,
        None if bias is None else meta(bias),
        None if out is None else (meta(out), not pointer(out) & 15, out_apart(framework, out, a, b, bias)),
        activation,
        out_dtype,
        None if config is None else config.key(),
    )


GRAD_NEEDS_TORCH = "gradients flow through torch tensors only: pass a, b, bias and out all as torch tensors"


def needs_grad_anywhere(*arrays: Any) -> bool:
    """Whether any argument is a torch tensor that requires grad, with torch's grad mode on."""
    wanted = any(getattr(x, "requires_grad", False) is True for x in arrays)
    return wanted and "torch" in sys.modules and sys.modules["torch"].is_grad_enabled()


def out_apart(framework: Cupy | Torch, out: Any, *inputs: Any) -> bool:
    """Whether `out` shares no byte with any input: a call whose out overlaps one keys a plan of its own, whose
    build refuses it (`operands.require_apart`), so no cached plan ever writes over its inputs."""
    span = framework.span(out)
    return not any(spans_overlap(span, framework.span(x)) for x in inputs if x is not None)


def gemm_as_cupy(a: Any, b: Any, *, out: Any, bias: Any, **options: Any) -> Any:
    """A call whose arguments are not arrays of one framework: as CuPy views, whose checks name what is not
    a GPU array; the result is a CuPy array (or `out`, written in place)."""
    activation, out_dtype, config = options["activation"], options["out_dtype"], options["config"]
    if needs_grad_anywhere(a, b, bias, out):  # the result here is no tensor autograd could record
        raise TypeError(GRAD_NEEDS_TORCH)
    activation_name(activation)  # TypeError or ValueError names an activation that is not one
    if config is not None and type(config) is not GemmConfig:  # as plan_key: a subclass would come back here
        raise TypeError(f"config must be a GemmConfig, got {type(config).__name__}")
    if out_dtype is not None:
        output_dtype(out_dtype)  # TypeError names an out_dtype that is not one of the three
    views = [as_device_array(x, name) for x, name in ((a, "a"), (b, "b"))]
    bias_view = None if bias is None else as_device_array(bias, "bias")
    out_view = None if out is None else as_device_array(out, "out")
    try:  # CuPy views that still key no plan would come back here without end
        hash(plan_key(Cupy, *views, bias_view, out_view, activation, out_dtype, config))
    except TypeError as err:
        raise TypeError(f"gemm's options must be plain values (a plan is keyed by them): {err}") from None
    result = launch(*views, bias_view, options["alpha"], activation, out_dtype, out_view, config)
    return result if out is None else out


def config_of(a: Any, b: Any, *, out_dtype: Any = None, config: GemmConfig | None = None) -> tuple[GemmConfig, str]:
    """The config `gemm(a, b, ...)` runs and where it came from: "caller", "table" or "heuristic"."""
    problem = check_operands(a, b, None, out_dtype)
    device = problem.a.device.id
    return plan_family(device).chosen_config(problem, device, config)
