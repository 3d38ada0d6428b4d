"""The library call: `deepgemm.gemm(a, b, ...)` runs the last stage, v5_fused (sm_90a, Hopper).

A call is planned once per key: device, dtypes, shapes, strides and alignment of the operands, the bias,
`out`, the activation, the output dtype and the config. The plan holds what the checks, the JIT, the
occupancy query and the tensor maps produced, and a parameter buffer for `cuLaunchKernel`
(`driver.RawLaunch`). A call whose key has a plan reads the metadata off the caller's arrays, allocates the
output in the caller's framework, re-points the tensor maps at this call's arrays and launches on the
caller's current stream: no checks, no DLPack, no CuPy launch. An operand TMA cannot read as it lies (a row
stride that is not a multiple of 16 bytes) is copied by each call into a row-padded buffer of the caller's
framework, and an output TMA cannot write is written padded and copied back; the plan stays.

A call without a config runs the one this GPU's autotune table holds for its problem, or else the
heuristic's pick (`deepgemm.heuristic`): tile width, cluster, split-K and pipeline depth by shape. A
split-K launch's partial sums and counters come from one scratch pair per device and stream, allocated in
the caller's framework and grown when a launch needs more: launches on one stream run one after another,
and each leaves the counters zero for the next.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import cupy

from deepgemm import stages
from deepgemm.config import GemmConfig
from deepgemm.driver import CUDA_ERROR_INVALID_CONTEXT, RawLaunch, check
from deepgemm.dtypes import FLOAT32, dtype_name
from deepgemm.frameworks import Cupy, Torch, framework_of
from deepgemm.heuristic import pick_config
from deepgemm.launch import KernelLaunch, device_limits
from deepgemm.operands import Problem, as_device_array, check_problem, device_name, require_gpu
from deepgemm.tma import read_mn_major

LIBRARY_STAGE = "v5_fused"  # the stage the library call runs: the last one
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
    vector of N; activation is None, 'relu', 'gelu' (erf), 'gelu_tanh', 'gelu_erf' or 'silu'; out_dtype
    defaults to the input dtype and may be float32; `out` may have a row stride.

    The result comes back in the caller's framework, computed on its current stream: for CuPy arrays a
    CuPy array on CuPy's current stream; for PyTorch tensors a tensor allocated by torch, on torch's
    current stream, so that torch's stream-ordered allocator cannot hand inputs dropped after the call
    to other work before the kernel has read them. With `out`, the result is `out` itself.
    """
    framework = framework_of(a)
    try:
        key = plan_key(framework, a, b, bias, out, activation, out_dtype, config)
    except TypeError:  # not arrays of one framework, or an unhashable option: the checks say what is wrong
        options = {"activation": activation, "out_dtype": out_dtype, "config": config}
        return Replanned(framework, None, options)(a, b, bias, alpha, out)
    plan = _PLANS.get(key)
    if plan is None:
        options = {"activation": activation, "out_dtype": out_dtype, "config": config}
        plan, result = make_plan(framework, a, b, bias, alpha, out, options)
        if len(_PLANS) >= PLAN_CACHE_SIZE:
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[key] = plan
        if result is not None:  # planning this call already computed it
            return result
    return plan(a, b, bias, alpha, out)


_PLANS: dict[tuple, Any] = {}


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
    meta, pointer = framework.meta, framework.pointer
    operands = (meta(a), meta(b))  # first: they refuse what is not the framework's array
    aligned = not ((pointer(a) | pointer(b)) & 15)
    return (
        framework.name,
        *operands,
        aligned,
        None if bias is None else meta(bias),
        None if out is None else (meta(out), not pointer(out) & 15),
        activation,
        out_dtype,
        None if config is None else config.key(),
    )


def make_plan(
    framework: Cupy | Torch, a: Any, b: Any, bias: Any, alpha: float, out: Any, options: dict[str, Any]
) -> tuple[Launched | Replanned, Any]:
    """Check the call, compile and plan it: a `Launched` plan where the kernels read the operands in place
    or from copies each call can make (`KernelLaunch.staged`), and None (the plan then makes the call);
    else a `Replanned` one, with this call's result, computed by the launch just planned (its copies
    included), so that they are not made twice."""
    device = framework.meta(a)[3]
    launch, target = stage_launch(framework, device, a, b, bias, alpha, out, options)
    if not (launch.in_place or launch.staged):
        run_on_stream(framework, device, launch)
        return Replanned(framework, device, options), target
    bias_in_place = bias is None or framework.is_float32_vector(framework.meta(bias))
    out_dtype = framework.framework_dtype(launch.out.dtype)
    raw = RawLaunch(launch.kernel.kernel.ptr, launch.grid[0], launch.block[0], launch.shared_mem, launch.args)
    return Launched(framework, device, raw, launch, out_dtype, bias_in_place), None


def stage_launch(
    framework: Cupy | Torch, device: int, a: Any, b: Any, bias: Any, alpha: float, out: Any, options: dict[str, Any]
) -> tuple[KernelLaunch, Any]:
    """The stage's plan of this call, with the output (`out`, or allocated by the framework) it writes."""
    stage = stages.load(LIBRARY_STAGE)
    with cupy.cuda.Device(device), framework.on_stream(device):
        require_gpu(stage.MIN_CC, LIBRARY_STAGE, exact=True)
        problem = check_problem(a, b, out, out_dtype=options["out_dtype"])  # the caller's errors, named
        target = out
        if out is None:  # allocated by the caller's framework; problem.out was only the checks' CuPy stand-in
            target = framework.empty(problem.out.shape, framework.framework_dtype(problem.out.dtype), a)
            problem = replace(problem, out=as_device_array(target, "out"))
        config = options["config"] or chosen_config(problem, device)[0]
        launch = stage.plan_problem(problem, bias=bias, alpha=alpha, activation=options["activation"], config=config)
        return launch, target


def chosen_config(problem: Problem, device: int) -> tuple[GemmConfig, str]:
    """The config a call without one runs: this GPU's autotune table entry for the problem, else the
    cost model's pick (`heuristic.pick_config`); and which of the two it is."""
    b_mn_major, a_mn_major = read_mn_major(problem.b.T), read_mn_major(problem.a)
    gpu, sm_count = device_name(device), device_limits(device)["sm_count"]
    dtype = dtype_name(problem.a.dtype)
    return pick_config(problem.m, problem.n, problem.k, dtype, gpu, sm_count, b_mn_major, a_mn_major)


def config_of(a: Any, b: Any, **options: Any) -> tuple[GemmConfig, str]:
    """The config `gemm(a, b, **options)` runs and where it came from ("table", "heuristic" or "caller")."""
    if options.get("config") is not None:
        return options["config"], "caller"
    problem = check_problem(as_device_array(a, "a"), as_device_array(b, "b"), None, out_dtype=options.get("out_dtype"))
    return chosen_config(problem, problem.a.device.id)


def run_on_stream(framework: Cupy | Torch, device: int, launch: KernelLaunch) -> None:
    """A stage's planned launch (CuPy's) on the caller's current stream of `device`."""
    with cupy.cuda.Device(device), framework.on_stream(device):
        launch()


_SCRATCH: dict[tuple[str, int, int], tuple[Any, Any]] = {}  # (framework, device, stream) -> split-K's scratch
_SCRATCH_LOCK = threading.Lock()


def split_k_scratch(fw: Cupy | Torch, device: int, stream: int, need: tuple[int, int], like: Any) -> tuple[int, int]:
    """Pointers to at least need[0] fp32 partials and need[1] zeroed counters for a split-K launch on
    `stream`. The pair is shared by every plan on that stream and regrown (the old pair freed in stream
    order, after the launches queued on it) when a launch needs more."""
    key = (fw.name, device, stream)
    with _SCRATCH_LOCK:
        held = _SCRATCH.get(key)
        if held is None or held[0].shape[1] < need[0] or held[1].shape[1] < need[1]:
            have = (0, 0) if held is None else (held[0].shape[1], held[1].shape[1])
            f32 = fw.framework_dtype(FLOAT32)
            partials = fw.empty((1, max(need[0], have[0])), f32, like)
            counters = fw.zeros((1, max(need[1], have[1])), f32, like)  # all-zero bits: unsigned 0 in the kernel
            held = _SCRATCH[key] = (partials, counters)
    return fw.pointer(held[0]), fw.pointer(held[1])


class Launched:
    """A planned call whose kernel reads the operands in place: a call re-points and launches."""

    def __init__(
        self,
        framework: Cupy | Torch,
        device: int,
        raw: RawLaunch,
        launch: KernelLaunch,
        out_dtype: Any,
        bias_in_place: bool,
    ) -> None:
        self.framework, self.device = framework, device
        self.out_shape, self.out_dtype, self.bias_in_place = launch.out.shape, out_dtype, bias_in_place
        self.scratch = launch.scratch if launch.scratch[0] else None
        # Operands TMA cannot read as they lie (rows not a multiple of 16 bytes): each call copies them into
        # buffers of these shapes, row-padded like the copies the maps were encoded for; an out TMA cannot
        # write is written padded and copied back.
        self.staged_in = {name: launch.staged[name] for name in ("a", "b") if name in launch.staged}
        self.staged_out = launch.staged.get("out")
        # The launch (its parameter buffer), what each call writes into its parameters, its name for errors.
        self.raw, self.setters, self.name = raw, raw.setters(launch.slots), launch.kernel.name
        self.lock = threading.Lock()  # one parameter buffer: written and launched by one thread at a time

    def __call__(self, a: Any, b: Any, bias: Any, alpha: float, out: Any) -> Any:
        if cupy.cuda.runtime.getDevice() != self.device:  # the kernels are loaded in the device's primary context
            with cupy.cuda.Device(self.device):
                return self.launch(a, b, bias, alpha, out)
        return self.launch(a, b, bias, alpha, out)

    def launch(self, a: Any, b: Any, bias: Any, alpha: float, out: Any) -> Any:
        fw = self.framework
        result = fw.empty(self.out_shape, self.out_dtype, a) if out is None else out
        if bias is not None and not self.bias_in_place:
            bias = fw.float32_vector(bias)  # on the same stream as the kernels: it lives until they ran
        values = {"a": fw.pointer(a), "b": fw.pointer(b), "out": fw.pointer(result), "alpha": alpha}
        values["bias"] = 0 if bias is None else fw.pointer(bias)
        stream = fw.stream(self.device)
        if self.scratch is not None:
            values["partials"], values["counters"] = split_k_scratch(fw, self.device, stream, self.scratch, a)
        # Held until the kernel is queued: a buffer dropped earlier goes back to the framework's allocator,
        # which may hand its memory to the next one (the padded out) for the same kernel to write into.
        staged = self.copy_in(a, b, values)
        written = None if self.staged_out is None else fw.empty(self.staged_out, self.out_dtype, a)
        if written is not None:
            written = written[:, : self.out_shape[1]]
            values["out"] = fw.pointer(written)
        with self.lock:
            for slot, write in self.setters:
                write(values[slot])
            status = self.raw.launch(stream)
            if status == CUDA_ERROR_INVALID_CONTEXT:  # a thread that has not used the GPU: make it current
                with cupy.cuda.Device(self.device):
                    status = self.raw.launch(stream)
            check(status, f"cuLaunchKernel of {self.name}")
        if written is not None:
            fw.copy(result, written)
        del staged  # the copies are queued before the kernel on this stream: their memory may be reused now
        return result

    def copy_in(self, a: Any, b: Any, values: dict[str, Any]) -> list[Any]:
        """The row-padded copies of a and b's (N, K) the kernel reads instead of them, on its stream (so they
        live until read); their pointers go into `values`."""
        fw, staged = self.framework, []
        for name, shape in self.staged_in.items():
            source = a if name == "a" else b.T  # as the kernel reads it: (M or N, K)
            k = source.shape[1]
            padded = (fw.zeros if shape[1] > k else fw.empty)(shape, source.dtype, a)  # the map reads K's padding
            fw.copy(padded[:, :k], source)
            values[name] = fw.pointer(padded)
            staged.append(padded)
        return staged


class Replanned:
    """A call planned anew each time: arguments that are not arrays of the caller's framework (the checks
    name what is wrong), or a launch whose copies a plan cannot repeat."""

    def __init__(self, framework: Cupy | Torch, device: int | None, options: dict[str, Any]) -> None:
        self.framework, self.device, self.options = framework, device, options

    def __call__(self, a: Any, b: Any, bias: Any, alpha: float, out: Any) -> Any:
        device = self.device if self.device is not None else as_device_array(a, "a").device.id
        launch, target = stage_launch(self.framework, device, a, b, bias, alpha, out, self.options)
        run_on_stream(self.framework, device, launch)
        return target
