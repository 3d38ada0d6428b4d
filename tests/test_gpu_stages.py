"""Every stage, and the library call, against the float64 reference on fresh random inputs, tails included;
v5's own switches and epilogue (needs a GPU). The library kernel's options: tests/test_gpu_library.py."""

from __future__ import annotations

import numpy as np
import pytest
from gpu import stage_or_skip

from tutorial.stages import LIBRARY, STAGES

pytestmark = pytest.mark.gpu
EVERY = (*STAGES, LIBRARY)  # the library call runs through tutorial.library like a stage

SIZES = (1, 3, 17, 32, 64, 128, 129, 1024)  # the first seed's checklist (section 6.5)
SHAPES = sorted(
    {(s, 128, 64) for s in SIZES}
    | {(128, s, 64) for s in SIZES}
    | {(64, 128, s) for s in SIZES}
    | {(1, 1, 1), (3, 17, 129), (129, 1024, 17), (1024, 1024, 1024), (4096, 4096, 4096)}
)


def _check(launcher, a, b, **kwargs):
    from tutorial.check import reference, verify

    launch = launcher.plan(a, b, **kwargs)
    return verify(launch, reference(a, b), launch.out)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("stage", EVERY)
def test_stage_matches_reference(stage, dtype):
    from deepgemm.dtypes import input_dtype
    from tutorial.check import random_problem

    launcher = stage_or_skip(stage)
    failures = []
    for i, (m, n, k) in enumerate(SHAPES):
        a, b = random_problem(m, n, k, input_dtype(dtype), seed=1000 + i)
        stats = _check(launcher, a, b)
        if not stats.passed:
            failures.append(f"{m}x{n}x{k}: {stats.summary()}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("stage", EVERY)
def test_stage_takes_every_b_layout(stage):
    """Row-major b (copied to K-major where the stage needs it), K-major b, and a K that TMA cannot stride."""
    from deepgemm.dtypes import FLOAT16
    from tutorial.check import random_problem

    launcher = stage_or_skip(stage)
    for m, n, k, k_major in ((200, 136, 96, False), (200, 136, 96, True), (77, 65, 45, True), (77, 65, 45, False)):
        a, b = random_problem(m, n, k, FLOAT16, seed=k + m, b_k_major=k_major)
        stats = _check(launcher, a, b)
        assert stats.passed, f"{m}x{n}x{k} k_major={k_major}: {stats.summary()}"


@pytest.mark.parametrize("stage", EVERY)
def test_stage_writes_into_given_out_with_row_stride(stage):
    import cupy

    from deepgemm.dtypes import FLOAT16
    from tutorial.check import error_stats, poison, random_problem, reference

    launcher = stage_or_skip(stage)
    for n in (80, 76):  # 76 columns end inside a 16-byte chunk, which a TMA store writes whole: v5 stages C
        a, b = random_problem(96, n, 64, FLOAT16, seed=7)
        wide = cupy.zeros((96, 88), dtype=FLOAT16)
        out = wide[:, :n]
        poison(out)
        result = launcher.gemm(a, b, out=out)
        assert result.data.ptr == out.data.ptr
        assert bool((wide[:, n:] == 0).all()), f"N = {n}: the kernel wrote past N into the padding"
        assert error_stats(out, reference(a, b)).passed


@pytest.mark.parametrize("stage", EVERY)
def test_stage_rejects_bad_input(stage):
    import cupy

    from deepgemm.dtypes import BFLOAT16, FLOAT16

    launcher = stage_or_skip(stage)
    a = cupy.ones((64, 32), dtype=FLOAT16)
    with pytest.raises(ValueError, match="b has 31 rows but a has K = 32 columns"):
        launcher.gemm(a, cupy.ones((31, 16), dtype=FLOAT16))
    with pytest.raises(TypeError, match="a is float16 but b is bfloat16"):
        launcher.gemm(a, cupy.ones((32, 16), dtype=BFLOAT16))
    with pytest.raises(TypeError, match="float32"):
        launcher.gemm(a.astype(cupy.float32), cupy.ones((32, 16), dtype=cupy.float32))
    with pytest.raises(TypeError, match="host numpy"):
        launcher.gemm(np.ones((64, 32), np.float16), cupy.ones((32, 16), dtype=FLOAT16))
    with pytest.raises(ValueError, match="empty problem"):
        launcher.gemm(cupy.ones((0, 32), dtype=FLOAT16), cupy.ones((32, 16), dtype=FLOAT16))
    with pytest.raises(ValueError, match="out has shape"):
        launcher.gemm(a, cupy.ones((32, 16), dtype=FLOAT16), out=cupy.empty((64, 15), dtype=FLOAT16))


def test_torch_tensors_are_taken_without_copy():
    torch = pytest.importorskip("torch")
    from tutorial.check import error_stats, reference

    launcher = stage_or_skip("v2_mma_sync")
    for dtype in (torch.float16, torch.bfloat16):
        a = torch.rand(130, 72, device="cuda", dtype=dtype) * 2 - 1
        b = (torch.rand(96, 72, device="cuda", dtype=dtype) * 2 - 1).T
        out = launcher.gemm(a, b)
        import cupy

        ca, cb = cupy.from_dlpack(a), cupy.from_dlpack(b)
        assert ca.data.ptr == a.data_ptr() and cb.data.ptr == b.data_ptr()
        assert error_stats(out, reference(ca, cb)).passed


def test_check_catches_an_unwritten_element():
    """The poison works: a result with one element never written fails."""
    import cupy

    from deepgemm.dtypes import FLOAT16
    from tutorial.check import error_stats, poison, random_problem, reference

    a, b = random_problem(64, 64, 64, FLOAT16, seed=3)
    out = cupy.empty((64, 64), dtype=FLOAT16)
    poison(out)
    full = (a.astype(cupy.float32) @ b.astype(cupy.float32)).astype(FLOAT16)
    out[:] = full
    assert error_stats(out, reference(a, b)).passed
    poison(out[5:6, 7:8])
    stats = error_stats(out, reference(a, b))
    assert not stats.passed and stats.nonfinite == 1
    out[:] = full
    out[9, 9] += 0.25
    assert not error_stats(out, reference(a, b)).passed


@pytest.mark.parametrize("activation", ["relu", "gelu_tanh", None])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_v5_fused_epilogue_matches_reference(activation, dtype):
    """[4] alpha, bias and each activation v5 fuses, into its input's type, at tails."""
    import cupy

    from deepgemm.dtypes import input_dtype
    from tutorial.check import random_problem, reference, verify

    launcher = stage_or_skip("v5_fused")
    for i, (m, n, k) in enumerate(((129, 300, 136), (256, 512, 1024), (17, 3, 40))):
        a, b = random_problem(m, n, k, input_dtype(dtype), seed=50 + i)
        bias = cupy.random.default_rng(i).random(n, dtype=cupy.float32) * 2 - 1
        launch = launcher.plan(a, b, bias=bias, alpha=0.5, activation=activation)
        stats = verify(launch, reference(a, b, alpha=0.5, bias=bias, activation=activation), launch.out)
        assert stats.passed, f"{m}x{n}x{k} {activation}: {stats.summary()}"


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_v5_every_switch_a_notebook_measures_matches_reference(dtype):
    """The ablations of notebook 06: CLUSTER_M = 1 (no multicast), GROUP_M = 1 (row-major order),
    WGMMA_IN_FLIGHT = 0 ([3] off) and TMA_STORE = 0 ([4] off, plain and fused), at shapes with odd tile-row
    counts (the last cluster's second CTA has no rows of C) and where every CTA takes several tiles."""
    import cupy

    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import input_dtype
    from tutorial.check import random_problem, reference, verify

    launcher = stage_or_skip("v5_fused")
    failures = []
    switches = ({"CLUSTER_M": 1}, {"GROUP_M": 1}, {"CLUSTER_M": 1, "GROUP_M": 1}, {"WGMMA_IN_FLIGHT": 0},
                {"TMA_STORE": 0}, {"TMA_STORE": 0, "CLUSTER_M": 1})  # fmt: skip
    for extra in switches:
        config = GemmConfig(extra=extra)
        for i, (m, n, k) in enumerate(((300, 520, 200), (1152, 768, 64), (4096, 4096, 4096))):
            a, b = random_problem(m, n, k, input_dtype(dtype), seed=90 + i)
            stats = _check(launcher, a, b, config=config)
            if not stats.passed:
                failures.append(f"{m}x{n}x{k} {extra}: {stats.summary()}")
        a, b = random_problem(300, 520, 200, input_dtype(dtype), seed=7)
        bias = cupy.random.default_rng(7).random(520, dtype=cupy.float32) * 2 - 1
        launch = launcher.plan(a, b, bias=bias, activation="gelu_tanh", config=config)
        stats = verify(launch, reference(a, b, bias=bias, activation="gelu_tanh"), launch.out)
        if not stats.passed:
            failures.append(f"fused {extra}: {stats.summary()}")
    assert not failures, "\n".join(failures)


def test_v5_refuses_what_only_the_library_takes():
    """v5 is the lesson: other tiles, clusters, activations and output types are the library's, and v5 says so."""
    import cupy

    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import BFLOAT16, FLOAT16, FLOAT32
    from tutorial.check import random_problem

    launcher = stage_or_skip("v5_fused")
    a, b = random_problem(64, 64, 64, FLOAT16, seed=1)
    with pytest.raises(ValueError, match="CLUSTER_M = 4 must be one of"):
        launcher.plan(a, b, config=GemmConfig(extra={"CLUSTER_M": 4}))
    with pytest.raises(ValueError, match="BLOCK_N = 128 must be one of"):
        launcher.plan(a, b, config=GemmConfig(block_n=128))
    with pytest.raises(ValueError, match=r"config knobs \[.SPLIT_K.\] do not exist"):
        launcher.plan(a, b, config=GemmConfig(extra={"SPLIT_K": 2}))
    with pytest.raises(ValueError, match=r"deepgemm\.gemm takes every activation"):
        launcher.plan(a, b, activation="silu")
    for out_dtype in (BFLOAT16, FLOAT32):
        with pytest.raises(TypeError, match=r"deepgemm\.gemm writes any"):
            launcher.plan(a, b, out_dtype=out_dtype)
    with pytest.raises(ValueError, match="bias has shape"):
        launcher.plan(a, b, bias=cupy.zeros(3, dtype=cupy.float32))
