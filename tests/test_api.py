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
