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


class _Lib:
    """A stand-in for libcuda: records each entry point's arguments; `results` maps a name to its CUresult."""

    def __init__(self, **results: int) -> None:
        self.calls: list[tuple] = []
        self.results = results

    def __getattr__(self, name: str):
        def entry(*args):
            self.calls.append((name, *args))
            return self.results.get(name, 0)

        return entry

    def cuGetErrorName(self, result, name_ref) -> int:
        name_ref._obj.value = {719: b"CUDA_ERROR_LAUNCH_FAILED"}.get(result)
        return 0


@pytest.fixture
def lib(monkeypatch):
    from deepgemm import driver

    fake = _Lib()
    monkeypatch.setattr(driver, "libcuda", lambda: fake)
    return fake


def test_without_a_driver_libcuda_says_it_is_not_installed(monkeypatch):
    from deepgemm import driver

    def missing(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    driver.libcuda.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"the CUDA driver \(libcuda\.so\.1\) is not installed here"):
            driver.libcuda()
    finally:
        driver.libcuda.cache_clear()  # a GPU machine loads the real one again


def test_a_failed_driver_call_names_the_call_and_the_error(lib):
    from deepgemm.driver import check

    check(0, "cuLaunchKernel")
    with pytest.raises(RuntimeError, match=r"cuLaunchKernel of gemm failed with CUDA_ERROR_LAUNCH_FAILED \(719\)"):
        check(719, "cuLaunchKernel of gemm")
    with pytest.raises(RuntimeError, match=r"failed with an unknown error \(12345\)"):
        check(12345, "cuInit")


def test_a_launch_passes_its_grid_block_memory_stream_and_parameter_buffer(lib):
    launch = RawLaunch(0x1234, 66, 384, 200_000, _v5_like_args())
    assert launch.launch(0xABC) == 0
    ((name, function, *dims, shared, stream, params, extra),) = lib.calls
    assert name == "cuLaunchKernel" and function.value == 0x1234 and extra is None
    assert [d.value for d in dims] == [66, 1, 1, 384, 1, 1] and shared.value == 200_000 and stream.value == 0xABC
    assert list(params) == launch.addresses  # the driver reads each parameter where the buffer holds it


def test_setters_write_a_calls_values_into_the_named_slots(lib):
    launch = RawLaunch(0x1234, 1, 384, 0, _v5_like_args())
    setters = dict(launch.setters({"a": (0, "map"), "bias": (3, "ptr"), "alpha": (4, "f32")}))
    rng = np.random.default_rng()
    map_address, pointer = (16 * int(x) for x in rng.integers(1, 1 << 40, 2))
    alpha = float(rng.random())
    setters["a"](map_address)
    setters["bias"](pointer)
    setters["alpha"](alpha)
    assert lib.calls == [("cuTensorMapReplaceAddress", launch.addresses[0], map_address)]
    assert ctypes.c_uint64.from_address(launch.addresses[3]).value == pointer
    assert ctypes.c_float.from_address(launch.addresses[4]).value == pytest.approx(alpha)
    assert ctypes.string_at(launch.addresses[1], MAP_BYTES) == bytes([2]) * MAP_BYTES  # the others untouched


def test_device_limits_are_the_drivers_attributes(monkeypatch):
    from deepgemm import driver

    values = {driver.ATTRIBUTE_SM_COUNT: 132, driver.ATTRIBUTE_SMEM_PER_BLOCK_OPTIN: 232_448,
              driver.ATTRIBUTE_CC_MAJOR: 9, driver.ATTRIBUTE_CC_MINOR: 0}  # fmt: skip

    class Lib(_Lib):
        def cuDeviceGetAttribute(self, value_ref, which, device):
            value_ref._obj.value = values[which] + 1000 * device
            return 0

    monkeypatch.setattr(driver, "libcuda", Lib)
    driver.device_limits.cache_clear()
    try:
        assert driver.device_limits(0) == driver.DeviceLimits(132, 232_448, (9, 0))
        assert driver.device_limits(1).sm_count == 1132  # asked of that device
    finally:
        driver.device_limits.cache_clear()


def test_a_tensor_map_is_encoded_innermost_first_and_aligned(monkeypatch):
    from deepgemm import driver

    class Lib(_Lib):
        def cuTensorMapEncodeTiled(self, start, *args):
            self.calls.append(("encode", start, *args))
            ctypes.memmove(start, bytes(range(MAP_BYTES)), MAP_BYTES)
            return 0

    fake = Lib()
    monkeypatch.setattr(driver, "libcuda", lambda: fake)
    raw = driver.encode_tiled_2d("bfloat16", 1 << 20, 520, 300, 1040, (128, 64), 128)
    ((_, start, dtype, rank, address, dims, strides, box, elements, *enums),) = fake.calls
    assert raw == bytes(range(MAP_BYTES)) and start % MAP_ALIGN == 0
    assert (dtype, rank, address) == (driver.MAP_DATA_TYPES["bfloat16"], 2, 1 << 20)
    assert (list(dims), list(strides), list(box), list(elements)) == ([520, 300], [1040], [64, 128], [1, 1])
    assert enums == [driver.INTERLEAVE_NONE, driver.MAP_SWIZZLES[128], driver.L2_PROMOTION_256B, driver.OOB_FILL_ZEROS]


def test_a_cluster_that_fits_nowhere_is_an_error(monkeypatch):
    from deepgemm import driver

    monkeypatch.setattr(driver, "libcuda", lambda: _Lib())  # every call succeeds; the count stays 0
    driver.max_active_clusters.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="no cluster of 2 CTAs x 384 threads, 300000 B fits this GPU"):
            driver.max_active_clusters(0x1234, 2, 384, 300_000)
    finally:
        driver.max_active_clusters.cache_clear()
