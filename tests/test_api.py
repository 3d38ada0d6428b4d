"""The library call without a GPU or torch: which framework a call takes, what keys its plan, the plan cache,
and the errors a call raises before it has a plan. The plan itself is tests/test_plan.py's."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

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

    @staticmethod
    def span(x: object) -> tuple[int, int]:
        from deepgemm.frameworks import byte_span

        return byte_span(x.ptr, x.shape, x.strides, 2)

    capturing_now = False  # what `capturing` answers: whether the caller's stream captures a CUDA graph

    @classmethod
    def capturing(cls, device: int) -> bool:
        return cls.capturing_now


def _array(shape=(128, 64), strides=(128, 2), ptr=0x10000, device=0, dtype="float16") -> object:
    return SimpleNamespace(shape=shape, strides=strides, dtype=dtype, device=device, ptr=ptr)


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
        _key(None, _array((64, 32), (64, 2), ptr=0x30008)),  # nor b from this one
        _key(None, _array((64, 32), (2, 128))),  # b (K, N) as the transposed view of a row-major (N, K)
        _key(_array(device=1)),
        _key(bias=_array((32,), (2,))),  # the kernel reads each bias type in its own: fp16 ...
        _key(bias=_array((32,), (2,), dtype="bfloat16")),  # ... bf16 ...
        _key(bias=_array((32,), (4,), dtype="float32")),  # ... and fp32 compile apart
        _key(bias=_array((32,), (4,))),  # a strided fp16 bias is converted to fp32 by every call
        _key(out=_array((128, 32), (64, 2), ptr=0x40000)),
        _key(out=_array((128, 32), (64, 2), ptr=0x40008)),  # an out TMA cannot store into: written padded
        _key(out=_array((128, 32), (96, 2), ptr=0x40000)),  # out with a row stride past N
        _key(activation="gelu"),
        _key(out_dtype="float32"),
        _key(config=GemmConfig(block_n=128)),
    ]
    assert len({_key(), *different}) == 1 + len(different)
    # A bias is read one element at a time: its address keys nothing.
    assert _key(bias=_array((32,), (2,))) == _key(bias=_array((32,), (2,), ptr=0x50002))
    # The plan of an unaligned a copies a and reads b in place: it is not the plan of an unaligned b.
    assert _key(_array(ptr=0x10008)) != _key(None, _array((64, 32), (64, 2), ptr=0x30008))


def test_a_call_whose_out_lies_over_an_input_never_finds_a_plan_built_for_one_that_does_not():
    """Where out lies keys nothing, unless it lies over an input: that call keys a plan of its own, whose build
    refuses it (a at 0x10000 spans 16 KB, b at 0x10000 4 KB, the bias 64 bytes at 0x30000)."""
    bias = _array((32,), (2,), ptr=0x30000)
    apart = [_key(out=_array((128, 32), (64, 2), ptr=ptr), bias=bias) for ptr in (0x40000, 0x80000)]
    assert apart[0] == apart[1]
    for ptr in (0x10000, 0x13ff0, 0x2fff0):  # over a and b, over a's last bytes, over the bias's first
        assert _key(out=_array((128, 32), (64, 2), ptr=ptr), bias=bias) != apart[0], hex(ptr)


def test_a_config_that_is_not_exactly_a_gemm_config_keys_no_plan():
    from deepgemm.config import GemmConfig

    class Mine(GemmConfig):
        pass

    for config in ({"block_n": 128}, Mine(block_n=128)):
        with pytest.raises(TypeError, match="config is not a GemmConfig"):
            _key(config=config)


def _gpu_array(shape, strides=None, dtype=np.float16, ptr=0x10000):
    """A CuPy array over memory that is never touched: its metadata is all a call reads before its plan."""
    import cupy

    itemsize = np.dtype(dtype).itemsize
    strides = strides or tuple(itemsize * int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
    memory = cupy.cuda.UnownedMemory(ptr, 1 << 30, None, 0)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides)


@pytest.fixture
def no_plan(monkeypatch):
    """A call that gets as far as building a plan fails the test: the errors below come before it."""
    from deepgemm import api

    monkeypatch.setattr(api.plan, "build", lambda *args, **kwargs: pytest.fail("a plan was built"))


def test_host_arrays_are_named_without_a_plan(no_plan):
    from deepgemm import gemm

    host, device = np.ones((4, 8), np.float16), _gpu_array((4, 8))
    with pytest.raises(TypeError, match=r"^a is a host numpy\.ndarray"):
        gemm(host, _gpu_array((8, 4)))
    with pytest.raises(TypeError, match=r"^b is a host numpy\.ndarray"):
        gemm(device, np.ones((8, 4), np.float16))
    with pytest.raises(TypeError, match=r"^bias is a host numpy\.ndarray"):
        gemm(device, _gpu_array((8, 4)), bias=np.ones(4, np.float32))
    with pytest.raises(TypeError, match=r"^out is a host numpy\.ndarray"):
        gemm(device, _gpu_array((8, 4)), out=np.ones((4, 4), np.float16))
    with pytest.raises(TypeError, match="b is a list"):
        gemm(device, [[1.0]])


class _Mine:
    """Stands for a GemmConfig subclass (made in the test: the config module is imported there)."""


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"activation": ["relu"]}, "activation must be a name or None, got list"),
        ({"config": {"block_n": 128}}, "config must be a GemmConfig, got dict"),
        ({"config": _Mine}, "config must be a GemmConfig, got Mine"),
        ({"out_dtype": [1]}, r"out_dtype \[1\] is not supported"),
    ],
)
def test_an_option_that_is_no_value_is_named_not_recursed_on(no_plan, options, message):
    """An option no plan can be keyed by sends the call to the conversion path (`gemm_as_cupy`), which
    names it, for host arrays as for CuPy arrays (which would come back to the key without end)."""
    from deepgemm import gemm
    from deepgemm.config import GemmConfig

    class Mine(GemmConfig):
        pass

    options = {name: Mine(block_n=128) if value is _Mine else value for name, value in options.items()}
    for a, b in ((np.ones((4, 8), np.float16), np.ones((8, 4), np.float16)), (_gpu_array((4, 8)), _gpu_array((8, 4)))):
        with pytest.raises(TypeError, match=message):
            gemm(a, b, **options)


def test_a_config_whose_knobs_are_no_values_is_named(no_plan):
    from deepgemm import gemm
    from deepgemm.config import GemmConfig

    with pytest.raises(TypeError, match=r"gemm's options must be plain values .*unhashable type: 'list'"):
        gemm(_gpu_array((4, 8)), _gpu_array((8, 4)), config=GemmConfig(extra={"SPLIT_K": [2]}))


class _Plan:
    """A built plan stand-in: each call returns what it was called with."""

    def __init__(self, key) -> None:
        self.key, self.calls = key, []

    def __call__(self, a, b, bias, alpha, out):
        self.calls.append((a, b, bias, alpha, out))
        return ("result", a.ptr)


@pytest.fixture
def plans(monkeypatch):
    """deepgemm.gemm over the stand-in framework: `built` lists the plans built, by their arguments."""
    from deepgemm import api

    built = []

    def build(framework, a, b, bias, out, *, activation, out_dtype, config):
        built.append(_Plan((a.shape, a.strides, activation)))
        return built[-1]

    monkeypatch.setattr(api, "framework_of", lambda x: _Framework)
    monkeypatch.setattr(api.plan, "build", build)
    monkeypatch.setattr(api.plan_sm80, "runs_on", lambda device: False)  # Hopper's plans (CI has no driver to ask)
    monkeypatch.setattr(api, "_PLANS", {})
    monkeypatch.setattr(api, "ON_PLAN", None)  # with torch imported, deepgemm.torch_ops hands real plans to C++
    return built


def test_a_plan_is_built_once_per_key_and_runs_every_call(plans):
    """The first call of a key builds its plan; every call, the first included, runs it once, with that
    call's own arrays and alpha."""
    from deepgemm import gemm

    rng = np.random.default_rng()
    pointers = [16 * int(p) for p in rng.integers(1, 1 << 30, 3)]
    first = gemm(_array(ptr=pointers[0]), _array((64, 32), (64, 2)), alpha=0.5)
    assert len(plans) == 1 and first == ("result", pointers[0])
    again = gemm(_array(ptr=pointers[1]), _array((64, 32), (64, 2)), alpha=2.0)  # another address: the same plan
    assert len(plans) == 1 and again == ("result", pointers[1])
    assert [(call[0].ptr, call[3]) for call in plans[0].calls] == [(pointers[0], 0.5), (pointers[1], 2.0)]
    gemm(_array(ptr=pointers[2]), _array((64, 32), (64, 2)), activation="relu")  # another key: another plan
    assert len(plans) == 2 and len(plans[0].calls) == 2 and len(plans[1].calls) == 1


def test_the_plan_cache_drops_its_oldest_plan_when_full(plans, monkeypatch):
    from deepgemm import api, gemm

    monkeypatch.setattr(api, "PLAN_CACHE_SIZE", 2)
    b = _array((64, 32), (64, 2))
    for rows in (128, 256, 128, 384, 128):
        gemm(_array((rows, 64)), b)
    assert [p.key[0][0] for p in plans] == [128, 256, 384, 128]  # 128 dropped when 384 came, then rebuilt
    assert len(api._PLANS) == 2


def test_forgotten_plans_are_built_again_and_the_hook_drops_the_cpp_copies(plans, monkeypatch):
    """`forget_plans` empties the cache, and calls ON_FORGET (deepgemm.torch_ops: the C++ path's plans)."""
    from deepgemm import api, gemm

    forgotten = []
    monkeypatch.setattr(api, "ON_FORGET", lambda: forgotten.append(True))
    b = _array((64, 32), (64, 2))
    gemm(_array(), b)
    api.forget_plans()
    assert api._PLANS == {} and forgotten == [True]
    gemm(_array(), b)
    assert len(plans) == 2 and plans[0].key == plans[1].key  # the same key, planned again


def test_config_of_says_what_a_call_runs_and_from_where(monkeypatch):
    """`config_of` reports `plan.chosen_config` for the checked problem on the operands' device."""
    from deepgemm import api
    from deepgemm.config import GemmConfig

    asked = []

    def chosen_config(problem, device, config):
        asked.append((problem.m, problem.n, problem.k, device, config))
        return "cfg", "table"

    monkeypatch.setattr(api.plan, "chosen_config", chosen_config)
    monkeypatch.setattr(api.plan_sm80, "runs_on", lambda device: False)
    mine = GemmConfig(block_n=128)
    assert api.config_of(_gpu_array((4, 8)), _gpu_array((8, 6)), config=mine) == ("cfg", "table")
    assert asked == [(4, 6, 8, 0, mine)]
    with pytest.raises(ValueError, match="b has 9 rows but a has K = 8 columns"):
        api.config_of(_gpu_array((4, 8)), _gpu_array((9, 6)))


def test_no_plan_is_built_while_the_stream_captures_a_graph(plans, monkeypatch):
    """A plan's build compiles, loads and queries the GPU, none of which a CUDA graph can hold: a key without a
    plan refuses a capture and says to warm up; a key with one launches as in any other call."""
    from deepgemm import gemm

    b = _array((64, 32), (64, 2))
    gemm(_array(), b)  # the warm-up: the key's plan
    monkeypatch.setattr(_Framework, "capturing_now", True)
    gemm(_array(ptr=0x20000), b)  # captured: the same key
    with pytest.raises(RuntimeError, match="Warm up first: make the same call"):
        gemm(_array((256, 64)), b)  # another key
    assert len(plans) == 1 and len(plans[0].calls) == 2


# ---- which kernel: the plan family by the device's compute capability --------------------------------------


@pytest.fixture
def gpu_of(monkeypatch):
    """`gpu_of(cc)` makes device 0 a GPU of compute capability `cc` as plan_sm80 reads it (DEEPGEMM_FORCE_SM80
    unset unless a test sets it)."""
    from deepgemm import plan_sm80
    from deepgemm.driver import DeviceLimits

    monkeypatch.delenv(plan_sm80.FORCE_ENV, raising=False)

    def make(cc: tuple[int, int]) -> None:
        monkeypatch.setattr(plan_sm80, "device_limits", lambda device: DeviceLimits(128, 101_376, cc))

    return make


@pytest.mark.parametrize(
    ("cc", "family"),
    [((8, 0), "plan_sm80"), ((8, 6), "plan_sm80"), ((8, 9), "plan_sm80"), ((12, 0), "plan_sm80"), ((9, 0), "plan")],
)
def test_every_gpu_but_hopper_gets_the_sm80_plans(gpu_of, cc, family):
    """A100 (8.0), RTX 30 (8.6), RTX 40 / L40 (8.9) and consumer Blackwell (12.0) have no wgmma: the sm_80
    kernel; Hopper (9.0) its own."""
    from deepgemm import api

    gpu_of(cc)
    assert api.plan_family(0) is getattr(api, family)


def test_forcing_sm80_sends_hopper_to_the_sm80_plans(gpu_of, monkeypatch):
    from deepgemm import api, plan_sm80

    gpu_of((9, 0))
    monkeypatch.setenv(plan_sm80.FORCE_ENV, "1")
    assert api.plan_family(0) is plan_sm80
    monkeypatch.setenv(plan_sm80.FORCE_ENV, "0")
    assert api.plan_family(0) is api.plan


def test_a_call_builds_its_plan_with_its_gpus_family_once_per_key(monkeypatch):
    """The family is asked when a key's plan is built, not on the calls that find it: a cached call costs
    what it did before there were two kernels. config_of asks the same family."""
    from deepgemm import api, gemm, plan_sm80

    built, asked = [], []

    def builder(name):
        def build(framework, a, b, bias, out, *, activation, out_dtype, config):
            built.append(name)
            return _Plan(name)

        return build

    def runs_on(device):
        asked.append(device)
        return True

    monkeypatch.setattr(api, "framework_of", lambda x: _Framework)
    monkeypatch.setattr(api, "_PLANS", {})
    monkeypatch.setattr(api, "ON_PLAN", None)
    monkeypatch.setattr(api.plan, "build", builder("sm90a"))
    monkeypatch.setattr(plan_sm80, "build", builder("sm80"))
    monkeypatch.setattr(plan_sm80, "runs_on", runs_on)
    for ptr in (0x10000, 0x20000, 0x30000):
        gemm(_array(ptr=ptr), _array((64, 32), (64, 2)))
    assert built == ["sm80"] and asked == [0]
    monkeypatch.setattr(plan_sm80, "chosen_config", lambda problem, device, config: ("sm80 cfg", "heuristic"))
    assert api.config_of(_gpu_array((4, 8)), _gpu_array((8, 6))) == ("sm80 cfg", "heuristic")


@pytest.mark.parametrize(("override", "family"), [("8.0", "plan_sm80"), ("8.9", "plan_sm80"), ("12.0", "plan_sm80"),
                                                  ("9.0", "plan")])  # fmt: skip
def test_deepgemm_cc_makes_an_h200_pick_the_kernel_of_that_gpu(monkeypatch, override, family):
    """DEEPGEMM_CC overrides the capability the driver reports (an H200's 9.0 here) wherever the library reads it:
    the dispatch follows."""
    from deepgemm import api, driver, plan_sm80

    attributes = {driver.ATTRIBUTE_SM_COUNT: 132, driver.ATTRIBUTE_SMEM_PER_BLOCK_OPTIN: 232_448,
                  driver.ATTRIBUTE_CC_MAJOR: 9, driver.ATTRIBUTE_CC_MINOR: 0}  # fmt: skip

    class Lib:
        def cuDeviceGetAttribute(self, value_ref, which, device):
            value_ref._obj.value = attributes[which]
            return 0

    monkeypatch.setattr(driver, "libcuda", Lib)
    monkeypatch.delenv(plan_sm80.FORCE_ENV, raising=False)
    monkeypatch.setenv(driver.CC_ENV, override)
    driver.device_limits.cache_clear()
    try:
        major, minor = map(int, override.split("."))
        assert driver.device_limits(0) == driver.DeviceLimits(132, 232_448, (major, minor))
        assert api.plan_family(0) is getattr(api, family)
    finally:
        driver.device_limits.cache_clear()
