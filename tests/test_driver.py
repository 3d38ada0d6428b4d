"""The library call's parameter buffer, laid out without a GPU: what `cuLaunchKernel` will read."""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

from deepgemm.driver import MAP_ALIGN, MAP_BYTES, RawLaunch


def _map(fill: int) -> np.void:
    return np.frombuffer(bytes([fill]) * MAP_BYTES, dtype=np.dtype((np.void, MAP_BYTES)))[0]


def _v5_like_args() -> tuple:
    """gemm_kernel's parameters: maps of A, B and C, a bias pointer, alpha, M, N, K."""
    sizes = (np.int32(v) for v in (4096, 2048, 1024))
    return (_map(1), _map(2), _map(3), np.uint64(0xDEAD0000), np.float32(0.5), *sizes)


def test_each_parameter_holds_its_bytes_at_its_alignment():
    launch = RawLaunch(0x1234, 128, 384, 200_000, _v5_like_args())
    maps, scalars = launch.addresses[:3], launch.addresses[3:]
    assert all(address % MAP_ALIGN == 0 for address in maps)
    assert [ctypes.string_at(address, MAP_BYTES) for address in maps] == [bytes([i]) * MAP_BYTES for i in (1, 2, 3)]
    assert ctypes.c_uint64.from_address(scalars[0]).value == 0xDEAD0000
    assert ctypes.c_float.from_address(scalars[1]).value == 0.5
    assert [ctypes.c_int32.from_address(a).value for a in scalars[2:]] == [4096, 2048, 1024]
    spans = sorted((a, a + size) for a, size in zip(launch.addresses, [MAP_BYTES] * 3 + [8, 4, 4, 4, 4], strict=True))
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))  # no overlap


def test_a_call_rewrites_the_pointer_and_scalar_in_place():
    launch = RawLaunch(0x1234, 128, 384, 0, _v5_like_args())
    launch.u64(3).value = 0xBEEF0000
    launch.f32(4).value = 2.0
    assert ctypes.c_uint64.from_address(launch.addresses[3]).value == 0xBEEF0000
    assert ctypes.c_float.from_address(launch.addresses[4]).value == 2.0


def test_a_map_already_pointing_at_the_address_is_left_alone(monkeypatch):
    from deepgemm import driver

    launch = RawLaunch(0x1234, 128, 384, 0, _v5_like_args())
    calls = []
    fake = type("Lib", (), {"cuTensorMapReplaceAddress": staticmethod(lambda m, a: calls.append((m, a)) or 0)})
    monkeypatch.setattr(driver, "libcuda", lambda: fake)
    for address in (0x1000, 0x1000, 0x2000):
        launch.repoint_map(0, address)
    assert calls == [(launch.addresses[0], 0x1000), (launch.addresses[0], 0x2000)]


def test_an_argument_the_kernel_cannot_take_is_refused():
    with pytest.raises(TypeError, match="CuPy array or a NumPy scalar"):
        RawLaunch(0x1234, 1, 32, 0, (3,))
