"""The cached torch call in C++ (`csrc/fast_call.cpp`): the host cost of a call whose plan exists, without
Python in it.

A cached call through Python costs about 13 µs of host time, as much as torch.matmul's; a call that needs a
gradient adds autograd.Function's Python (about 10 µs) and a backward in Python that makes two more calls. A
small model's training step is then bound by the host. Here the same plans run from C++: the Python path
builds a plan as before (`deepgemm.plan`), and where the plan is one that C++ can run as it is, `register`
hands it over (the kernel, its grid, the parameter buffer and which parameters a call writes); the calls
after that find it by the same key (shapes, strides, dtypes, alignment, bias, activation, output dtype),
point its parameters at the call's tensors and launch. With inputs that need a gradient, C++ records an
autograd node whose backward launches the two gradient GEMMs the same way.

What stays in Python: a call's first run, the CuPy path, a caller's `config` or `out`, plans that copy an
operand or C, a split-K launch whose stream has no scratch yet or is capturing a graph, a bias converted to
float32, gradients through an activation whose
derivative needs z (gelu, silu), and a backward that must itself be differentiable (create_graph).
The op `torch.ops.deepgemm.gemm`, which torch.compile's graphs call, gets a CUDA kernel here (registered
when the extension loads) that runs registered plans and hands every other call to its Python kernel.

Built once per machine by torch.utils.cpp_extension (a C++ compiler and ninja; no CUDA headers), under a
name that carries the source's digest, in DEEPGEMM_CACHE (default ~/.cache/deepgemm); building takes about a
minute and says so. Where it cannot be built, one warning says why and every call stays in Python.
DEEPGEMM_FAST=0 keeps every call in Python (to compare the two).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import sys
import threading
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from deepgemm import plan, plan_sm80
from deepgemm.api import launch
from deepgemm.epilogue import ACTIVATIONS, ALIASES

ENV = "DEEPGEMM_FAST"
CACHE_ENV = "DEEPGEMM_CACHE"
SOURCE = Path(__file__).resolve().parent / "csrc" / "fast_call.cpp"
KINDS = {"map": 0, "ptr": 1, "f32": 2}  # fast_call.cpp's Kind
VALUES = {"a": 0, "b": 1, "out": 2, "bias": 3, "alpha": 4, "partials": 5, "counters": 6}  # fast_call.cpp's Value
SCALAR_TYPES = {torch.float16: 5, torch.float32: 6, torch.bfloat16: 15}  # c10::ScalarType's codes
DTYPES = {code: dtype for dtype, code in SCALAR_TYPES.items()}
ACT_CODES = {**ACTIVATIONS, **{alias: ACTIVATIONS[name] for alias, name in ALIASES.items()}}  # None -> 0
OUT_CODES = {None: -1, **SCALAR_TYPES}  # the call's out_dtype, None for the input's

_lock = threading.Lock()
_state: dict[str, Any] = {}  # "module": the built extension, or None where it cannot be


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def module() -> Any | None:
    """The extension, built or loaded on the first ask (None where DEEPGEMM_FAST=0 or it cannot be built)."""
    if "module" not in _state:
        with _lock:
            if "module" not in _state:
                _state["module"] = _load() if enabled() else None
    return _state["module"]


def loaded() -> Any | None:
    """The extension where it has been loaded already, else None; never builds."""
    return _state.get("module")


def extension_name() -> str:
    return "deepgemm_fast_" + hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]


def library_file() -> Path:
    """Where the built extension is (or will be): its build directory in the cache, per torch and Python."""
    name = extension_name()
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "deepgemm")
    versions = f"cpp-torch{torch.__version__.split('+')[0]}-py{sys.version_info[0]}{sys.version_info[1]}"
    return root / versions / name / f"{name}.so"


def codes(activation: Any, out_dtype: Any) -> tuple[int, int] | None:
    """The activation and output dtype as the C++ key holds them, or None for a call C++ does not take (an
    out_dtype given other than as a torch dtype)."""
    act = ACT_CODES.get(activation) if activation is None or type(activation) is str else None
    out_code = OUT_CODES.get(out_dtype) if out_dtype is None or type(out_dtype) is torch.dtype else None
    return None if act is None or out_code is None else (act, out_code)


def _load() -> Any | None:
    if PYTHON_PATHS is None:  # deepgemm.torch_ops sets them once the op is defined (its C++ kernel needs the op)
        raise RuntimeError("deepgemm.fast is loaded through deepgemm.torch_ops: import torch, then deepgemm")
    target = library_file()
    name, directory = extension_name(), target.parent
    try:
        from torch.utils import cpp_extension

        directory.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            print(f"deepgemm: building its C++ call path in {directory} (once per machine, about a minute)",
                  file=sys.stderr)  # fmt: skip
        built = cpp_extension.load(name=name, sources=[str(SOURCE)], extra_cflags=["-O2"],
                                   build_directory=str(directory), verbose=False)  # fmt: skip
    except Exception as err:  # no compiler, no ninja, no headers: the Python path serves every call
        warnings.warn(f"deepgemm: its C++ call path could not be built ({type(err).__name__}: {err}); every "
                      f"call runs through Python instead (about 10 µs more host time each)", stacklevel=3)  # fmt: skip
        return None
    built.set_python_paths(*PYTHON_PATHS)
    with plan._SCRATCH_LOCK:  # split-K's scratch per stream: what exists now, then each pair as it is made
        for (device, stream), held in plan._SCRATCH.items():
            tell_scratch(built, device, stream, held)
        plan.ON_SCRATCH = partial(tell_scratch, built)
    return built


def tell_scratch(ext: Any, device: int, stream: int, held: plan.Scratch) -> None:
    ext.set_scratch(device, stream, held.partials, held.partials_words, held.counters, held.counters_words)


def runnable(found: plan.Plan) -> bool:
    """Whether C++ runs the plan as it is: torch's, of the sm_90a kernel, reading both operands and writing C
    in place, and parameters that pointers, maps, alpha and split-K's scratch fill. The sm_80 kernel's plans
    have the same parameters, but C++ has not run them on a GPU: they stay in Python."""
    return (
        found.framework.name == "torch"
        and not plan_sm80.runs_on(found.device)
        and found.kernel_a.staged is None
        and found.kernel_b.staged is None
        and found.out_staged is None
        and found.out_dtype in SCALAR_TYPES
        and set(found.launch.slots) <= set(VALUES)
    )


def register(found: plan.Plan, a: Any, b: Any, bias: Any, activation: Any, out_dtype: Any) -> bool:
    """Hand a plan, just built for this call, to C++ for the calls with the same key; False where C++ cannot
    run it (`runnable`, a bias converted by every call), or the call is one C++ does not take (an out_dtype
    not given as a torch dtype)."""
    found_codes = codes(activation, out_dtype)
    if found_codes is None or not runnable(found) or (bias is not None and not found.bias_in_place):
        return False
    ext = module()  # built on the first plan it can run (never on a GPU whose plans it does not run)
    if ext is None:
        return False
    raw = found.launch
    base = raw.addresses[0]
    offsets = [address - base for address in raw.addresses]
    writes = [(VALUES[name], KINDS[kind], offsets[slot]) for name, (slot, kind) in raw.slots.items()]
    return ext.register_plan(
        a, b, bias, *found_codes, raw.function, raw.grid, raw.block, raw.shared_mem,
        raw.programmatic, found.kernel_a.source == "b", *found.out_shape, SCALAR_TYPES[found.out_dtype],
        *found.scratch, found.kernel_name, ctypes.string_at(base, raw.size), offsets, writes,
    )  # fmt: skip


# --- what C++ calls back ------------------------------------------------------------------------------------

# (launch, backward, op): a product whose plan is not registered yet (`python_launch`), a backward that must
# itself be differentiable (torch_ops.cpp_backward) and the op's Python kernel (torch_ops.cpp_op_kernel); set
# by deepgemm.torch_ops when it defines the op.
PYTHON_PATHS: tuple[Callable[..., Any], ...] | None = None


def python_launch(a: torch.Tensor, b: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * a @ b through the Python path (which builds the plan and registers it where C++ can run it)."""
    return launch(a, b, None, alpha, None, None, None, None)
