"""The library call's framework detection, without a GPU or torch."""

from __future__ import annotations

from types import SimpleNamespace

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
    """Where the stage copies an operand, the first call's planned launch (its copies included) computes
    that call; the plan kept replans later calls. Nothing is planned or launched twice."""
    from deepgemm import api

    planned, ran = [], []

    def stage_launch(framework, device, a, b, bias, alpha, out, options):
        planned.append(a)
        return SimpleNamespace(in_place=False), f"result of {a}"

    monkeypatch.setattr(api, "stage_launch", stage_launch)
    monkeypatch.setattr(api, "run_on_stream", lambda framework, device, launch: ran.append(launch))
    framework = SimpleNamespace(meta=lambda x: (None, None, None, 0))
    plan, result = api.make_plan(framework, "a", "b", None, 1.0, None, {})
    assert isinstance(plan, api.Replanned) and result == "result of a"
    assert len(planned) == len(ran) == 1
    assert plan("a2", "b", None, 1.0, None) == "result of a2"  # a later call: planned and launched anew
    assert len(planned) == len(ran) == 2
