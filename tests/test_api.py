"""The library call's framework detection, without a GPU or torch."""

from __future__ import annotations

import weakref
from types import SimpleNamespace

import numpy as np

from deepgemm.frameworks import is_cuda_tensor


def _fake(module: str, device_type: str) -> object:
    cls = type("Tensor", (), {"device": SimpleNamespace(type=device_type, index=0)})
    cls.__module__ = module
    return cls()


def test_only_a_torch_tensor_on_a_cuda_device_takes_the_torch_path():
    assert is_cuda_tensor(_fake("torch", "cuda"))
    assert not is_cuda_tensor(_fake("torch", "cpu"))  # a host tensor gets the usual TypeError instead
    assert not is_cuda_tensor(_fake("cupy._core.core", "cuda"))
    assert not is_cuda_tensor(object())


class _Framework:
    """A stand-in framework whose arrays are (shape, strides, dtype, device, pointer) namespaces."""

    name = "fake"

    @staticmethod
    def meta(x: object) -> tuple:
        return (x.shape, x.strides, x.dtype, x.device)

    @staticmethod
    def pointer(x: object) -> int:
        return x.ptr


def _array(shape=(128, 64), strides=(128, 2), ptr=0x10000, device=0) -> object:
    return SimpleNamespace(shape=shape, strides=strides, dtype="float16", device=device, ptr=ptr)


def _key(a=None, b=None, *, bias=None, out=None, **options) -> tuple:
    from deepgemm.api import plan_key

    options = {"activation": None, "out_dtype": None, "config": None, **options}
    return plan_key(_Framework, a or _array(), b or _array((64, 32), (64, 2)), bias, out, **options)


def test_a_plan_is_found_again_only_by_what_fixes_the_launch():
    from deepgemm.config import GemmConfig

    assert _key() == _key(_array(ptr=0x20000))  # another address of the same layout: the same plan
    assert _key(config=GemmConfig(block_n=128)) == _key(config=GemmConfig(block_n=128))
    different = [
        _key(_array(strides=(2, 256))),  # the transposed view of a (64, 128) array
        _key(_array(ptr=0x10008)),  # TMA cannot read from this address in place
        _key(_array(device=1)),
        _key(bias=_array((32,), (2,))),
        _key(out=_array((128, 32), (64, 2))),
        _key(activation="gelu"),
        _key(out_dtype="float32"),
        _key(config=GemmConfig(block_n=128)),
    ]
    assert len({_key(), *different}) == 1 + len(different)


def test_host_arrays_get_the_usual_error_without_a_plan():
    import numpy as np
    import pytest

    from deepgemm import gemm

    with pytest.raises(TypeError, match=r"host numpy\.ndarray"):
        gemm(np.ones((4, 4), np.float16), np.ones((4, 4), np.float16))


def test_a_call_that_copies_is_planned_and_launched_once_on_its_first_call(monkeypatch):
    """Where the stage's launch makes copies a plan cannot repeat (none it names in `staged`), the first
    call's planned launch (its copies included) computes that call; the plan kept replans later calls.
    Nothing is planned or launched twice."""
    from deepgemm import api

    planned, ran = [], []

    def stage_launch(framework, device, a, b, bias, alpha, out, options):
        planned.append(a)
        return SimpleNamespace(in_place=False, staged={}), f"result of {a}"

    monkeypatch.setattr(api, "stage_launch", stage_launch)
    monkeypatch.setattr(api, "run_on_stream", lambda framework, device, launch: ran.append(launch))
    framework = SimpleNamespace(meta=lambda x: (None, None, None, 0))
    plan, result = api.make_plan(framework, "a", "b", None, 1.0, None, {})
    assert isinstance(plan, api.Replanned) and result == "result of a"
    assert len(planned) == len(ran) == 1
    assert plan("a2", "b", None, 1.0, None) == "result of a2"  # a later call: planned and launched anew
    assert len(planned) == len(ran) == 2


class _HostFramework:
    """NumPy arrays standing in for the caller's: a pointer finds its array again, so a fake kernel can read
    what the call handed it."""

    def __init__(self) -> None:
        # Weak: an array the call drops is gone, as a GPU buffer goes back to the allocator for reuse.
        self.arrays: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()

    def empty(self, shape, dtype, like):
        x = np.full(shape, np.nan, dtype=dtype)  # what was there before: never to be read
        self.arrays[x.ctypes.data] = x
        return x

    def zeros(self, shape, dtype, like):
        x = self.empty(shape, dtype, like)
        x[...] = 0
        return x

    def pointer(self, x) -> int:
        if x.ctypes.data not in self.arrays:
            self.arrays[x.ctypes.data] = x
        return x.ctypes.data

    @staticmethod
    def copy(dst, src) -> None:
        np.copyto(dst, src)

    @staticmethod
    def stream(device: int) -> int:
        return 0

    @staticmethod
    def framework_dtype(dtype):
        return dtype


class _FakeKernel:
    """A RawLaunch stand-in: records what the call writes into its slots; `launch` multiplies what the A and
    B slots point at (rows-padded (M, K) and (N, K) buffers) into the out slot's (M, N)."""

    def __init__(self, fw: _HostFramework, k_padded: int) -> None:
        self.fw, self.k_padded, self.values = fw, k_padded, {}

    def setters(self, slots):
        return [(name, lambda value, name=name: self.values.__setitem__(name, value)) for name in slots]

    def launch(self, stream: int) -> int:
        def view(name: str, cols: int) -> np.ndarray:
            base = self.fw.arrays.get(self.values[name])
            assert base is not None, f"the buffer the {name} slot points at was dropped before the launch"
            return base if base.shape[1] == cols else base[:, :cols]

        pointers = [self.values[name] for name in ("a", "b", "out")]
        assert len(set(pointers)) == 3, "two slots point at one buffer"

        a, b = view("a", self.k_padded), view("b", self.k_padded)  # the maps span K's padding
        out = self.fw.arrays[self.values["out"]]
        out[:, : b.shape[0]] = a @ b.T
        return 0


def test_a_call_copies_what_tma_cannot_read_into_row_padded_buffers_and_writes_back_a_padded_out():
    """The plan of a layout TMA cannot describe stays: each call copies a (M, K = 7) and b's (N, K) into
    buffers whose rows are padded with zeros to 8 elements (16 bytes: the maps read the padding, so it must
    add nothing), launches on those, and copies the output, which the kernel writes into a padded (M, 8)
    buffer, back into the caller's (M, N = 5). Fresh memory holds NaN here, as it may on the GPU."""
    from deepgemm.api import Launched

    fw, (m, n, k) = _HostFramework(), (3, 5, 7)
    kernel = _FakeKernel(fw, 8)
    launch = SimpleNamespace(slots={"a": (0, "map"), "b": (1, "map"), "out": (2, "map"), "bias": (3, "ptr"),
                                    "alpha": (4, "f32")}, kernel=SimpleNamespace(name="fake"),
                             out=SimpleNamespace(shape=(m, n)), scratch=(0, 0),
                             staged={"a": (m, 8), "b": (n, 8), "out": (m, 8)})  # fmt: skip
    plan = Launched(fw, 0, kernel, launch, np.float64, True)
    for seed in (1, 2):  # a second call with other values: nothing of the first is reused
        rng = np.random.default_rng(seed)
        a, b = rng.random((m, k)), rng.random((n, k)).T  # b (K, N), its rows of N = 5 elements
        result = plan.launch(a, b, None, 1.0, None)
        assert kernel.values["a"] != a.ctypes.data and kernel.values["out"] != result.ctypes.data
        assert result.shape == (m, n) and np.allclose(result, a @ b)
