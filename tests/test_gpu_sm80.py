"""The library's kernel for GPUs without wgmma (deepgemm/kernels/gemm_sm80.cu) on a GPU, against the float64
reference (tutorial.check): every tile the heuristic gives, all four operand layouts read in place, operands
copied where they cannot be, tails in M, N and K (K inside a 16-byte chunk too), both input types, every
fused epilogue into every output type, split-K and its run-to-run determinism, and the plan's errors.

Runs on any GPU of compute capability 8.0 or newer, the H200 included: `tutorial.library_sm80` plans the
kernel directly (`deepgemm.plan_sm80`), whichever kernel deepgemm.gemm would pick. Needs a GPU.
"""

from __future__ import annotations

import pytest
from gpu import stage_or_skip

from deepgemm.heuristic_sm80 import TILES, WIDE, Tile
from tutorial.stages import LIBRARY_SM80

pytestmark = pytest.mark.gpu

HEURISTIC_TILES = (*TILES, WIDE)
# (M, N, K): a decode row, tails of every kind (K = 1001 and 4100 end inside a 16-byte chunk when read in
# place), one exact tile, and shapes of several tiles each way.
TAIL_SHAPES = ((1, 520, 1000), (17, 3, 40), (129, 300, 136), (300, 200, 1001), (64, 64, 64), (777, 1000, 520))
LAYOUTS = (("k", "mn"), ("k", "k"), ("mn", "mn"), ("mn", "k"))  # (a, b): K-major or MN-major as the kernel reads


def _tile_config(tile: Tile, split: int = 1):
    from deepgemm.config import GemmConfig

    extra = {"WARPS_M": tile.warps_m, "WARPS_N": tile.warps_n, "SPLIT_K": split}
    return GemmConfig(block_m=tile.block_m, block_n=tile.block_n, block_k=tile.block_k,
                      num_stages=tile.max_stages, extra=extra)  # fmt: skip


def _operands(m: int, n: int, k: int, dtype, layout: tuple[str, str], seed: int, pad: bool = True):
    """a (M, K) and b (K, N), each K-major or MN-major as the kernel reads it: a row-major (K-major) or the
    transposed view of a (K, M) (MN-major); b the transposed view of an (N, K) (K-major) or row-major (MN-major).
    With `pad`, the contiguous dimension's rows are padded to 8 elements (16 bytes), so that every layout is
    read in place, its last chunk in part where the dimension is not a multiple of 8."""
    import cupy

    from deepgemm.model import round_up
    from tutorial.check import random_matrix

    rng = cupy.random.default_rng(seed)

    def stored(rows: int, cols: int):
        width = round_up(cols, 8) if pad else cols
        return random_matrix(rows, width, dtype, rng)[:, :cols]

    a = stored(m, k) if layout[0] == "k" else stored(k, m).T
    b = stored(n, k).T if layout[1] == "k" else stored(k, n)
    return a, b


def _check(launcher, a, b, **options):
    from tutorial.check import reference, verify

    epilogue = {name: options[name] for name in ("alpha", "bias", "activation") if name in options}
    launch = launcher.plan(a, b, **options)
    return launch, verify(launch, reference(a, b, **epilogue), launch.out)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tile", HEURISTIC_TILES, ids=lambda t: f"{t.block_m}x{t.block_n}x{t.block_k}")
def test_sm80_every_tile_reads_all_four_layouts_in_place_at_tails(tile, dtype):
    """[1] [2] [3] Each tile, each of the four layouts read as it lies (the plan copies nothing), at every
    tail: rows past M or N, K past the last k-tile and inside the last 16-byte chunk."""
    from deepgemm.dtypes import input_dtype

    launcher = stage_or_skip(LIBRARY_SM80)
    failures = []
    for i, (m, n, k) in enumerate(TAIL_SHAPES):
        for layout in LAYOUTS:
            a, b = _operands(m, n, k, input_dtype(dtype), layout, seed=100 + i)
            launch, stats = _check(launcher, a, b, config=_tile_config(tile))
            plan = launch.plan
            assert plan.kernel_a.staged is None and plan.kernel_b.staged is None, (m, n, k, layout)
            assert (plan.kernel_a.mn_major, plan.kernel_b.mn_major) == (layout[0] == "mn", layout[1] == "mn")
            if not stats.passed:
                failures.append(f"{m}x{n}x{k} a {layout[0]}, b {layout[1]}: {stats.summary()}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_sm80_copies_what_cp_async_cannot_read_and_stays_right(dtype):
    """Rows that are not whole 16 bytes (K = 7, a transposed (K, 129), b's 3 columns), a strided view and a
    base off 16 bytes: the plan copies those operands into padded K-major rows on every call."""
    import cupy

    from deepgemm.dtypes import input_dtype

    launcher = stage_or_skip(LIBRARY_SM80)
    dt = input_dtype(dtype)
    failures = []
    for i, (m, n, k) in enumerate(((129, 3, 7), (129, 300, 136), (5, 17, 33))):
        for layout in LAYOUTS:
            a, b = _operands(m, n, k, dt, layout, seed=200 + i, pad=False)
            launch, stats = _check(launcher, a, b)
            if not stats.passed:
                failures.append(f"{m}x{n}x{k} unpadded a {layout[0]}, b {layout[1]}: {stats.summary()}")
    rng = cupy.random.default_rng(7)
    wide = (rng.random((300, 2 * 520), dtype=cupy.float32) - 0.5).astype(dt)
    strided_b = wide[:, ::2][:136]  # (136, 520), neither dimension contiguous
    offset_a = (rng.random((129 * 136 + 1,), dtype=cupy.float32) - 0.5).astype(dt)[1:].reshape(129, 136)  # 2 B off
    launch, stats = _check(launcher, offset_a, strided_b)
    assert launch.plan.kernel_a.staged and launch.plan.kernel_b.staged
    if not stats.passed:
        failures.append(f"strided b, misaligned a: {stats.summary()}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("activation", ["relu", "gelu_tanh", "gelu", "silu", None])
@pytest.mark.parametrize("out_dtype", ["fp16", "bf16", "fp32"])
def test_sm80_fused_epilogue_matches_reference(activation, out_dtype, dtype):
    """[5] Every activation into every output type from either input type, with alpha and a bias of each type
    (fp16, bf16, fp32, read as it lies), at tails; an MN-major b, and the decode tile as well as the default."""
    import cupy

    from deepgemm.dtypes import BFLOAT16, FLOAT16, FLOAT32, OUTPUT_DTYPES, input_dtype
    from tutorial.check import random_matrix

    launcher = stage_or_skip(LIBRARY_SM80)
    failures = []
    shapes = ((129, 300, 136, FLOAT16), (17, 3, 40, BFLOAT16), (256, 512, 1024, FLOAT32))
    for tile in (WIDE, TILES[0]):
        for i, (m, n, k, bias_dtype) in enumerate(shapes):
            a, b = _operands(m, n, k, input_dtype(dtype), ("k", "mn"), seed=300 + i)
            bias = random_matrix(1, n, bias_dtype, cupy.random.default_rng(i))[0]
            options = {"bias": bias, "alpha": 0.5, "activation": activation, "out_dtype": OUTPUT_DTYPES[out_dtype]}
            launch, stats = _check(launcher, a, b, config=_tile_config(tile), **options)
            assert launch.plan.bias_in_place, bias_dtype
            if not stats.passed:
                failures.append(f"{tile.block_m}x{tile.block_n} {m}x{n}x{k} bias {bias_dtype}: {stats.summary()}")
    assert not failures, "\n".join(failures)


def test_sm80_bias_is_read_in_its_own_type_or_converted_by_every_call():
    """A contiguous bfloat16 (another type than the fp16 output's) or float16 bias is read as it lies; a float64
    or strided one is converted to a float32 vector on the kernel's stream."""
    import cupy

    from deepgemm.dtypes import BFLOAT16, FLOAT16

    launcher = stage_or_skip(LIBRARY_SM80)
    a, b = _operands(129, 300, 136, FLOAT16, ("k", "k"), seed=4)
    rng = cupy.random.default_rng(4)
    cases = ((rng.random(300, dtype=cupy.float32).astype(BFLOAT16), True),
             (rng.random(300, dtype=cupy.float32).astype(FLOAT16), True),
             (rng.random(300, dtype=cupy.float64), False),
             (rng.random(600, dtype=cupy.float32)[::2], False),
             (rng.random(600, dtype=cupy.float32).astype(BFLOAT16)[::2], False))  # fmt: skip
    for bias, in_place in cases:
        launch, stats = _check(launcher, a, b, bias=bias, activation="silu")
        assert launch.plan.bias_in_place == in_place and stats.passed, (bias.dtype, bias.strides, stats.summary())


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_sm80_split_k_matches_reference_and_repeats_bit_for_bit(dtype):
    """[4] SPLIT_K 2, 3, 4, 7 and 16 on each tile: small M (what it is for), tails in every dimension, K whose
    k-tiles do not split evenly, both layouts of b; then a fused epilogue (a bias of each type) applied by the
    last slice, and five more launches of one plan, each bit-identical to the first, whichever slice finished
    last."""
    import cupy

    from deepgemm.dtypes import BFLOAT16, FLOAT16, FLOAT32, input_dtype
    from tutorial.check import random_matrix

    launcher = stage_or_skip(LIBRARY_SM80)
    dt = input_dtype(dtype)
    failures = []
    for tile in HEURISTIC_TILES:
        for split in (2, 3, 4, 7, 16):
            for i, (m, n, k) in enumerate(((1, 520, 4100), (129, 1000, 2080), (300, 260, 4096))):
                for layout in (("k", "k"), ("mn", "mn")):
                    a, b = _operands(m, n, k, dt, layout, seed=400 + 10 * split + i)
                    _, stats = _check(launcher, a, b, config=_tile_config(tile, split))
                    if not stats.passed:
                        failures.append(f"{tile.block_m}x{tile.block_n} SPLIT_K={split} {m}x{n}x{k} {layout}: "
                                        f"{stats.summary()}")  # fmt: skip
    assert not failures, "\n".join(failures)
    a, b = _operands(200, 520, 4000, dt, ("k", "mn"), seed=9)
    fused = ((None, WIDE, FLOAT32), (FLOAT32, TILES[2], BFLOAT16), (None, TILES[0], FLOAT16))
    for out_dtype, tile, bias_dtype in fused:
        bias = random_matrix(1, 520, bias_dtype, cupy.random.default_rng(9))[0]
        launch, stats = _check(launcher, a, b, bias=bias, activation="gelu_tanh", out_dtype=out_dtype,
                               config=_tile_config(tile, 5))  # fmt: skip
        what = f"fused, out {out_dtype}, {tile.block_m}x{tile.block_n}, bias {bias_dtype}"
        assert launch.plan.bias_in_place and stats.passed, f"{what}: {stats.summary()}"
        first = launch().copy()
        for _ in range(5):
            assert bool((launch().view(cupy.uint8) == first.view(cupy.uint8)).all()), "split-K is not deterministic"


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_sm80_heuristic_picks_match_reference(dtype):
    """Without a config, the heuristic's pick for this GPU (a tile by M, split-K where the grid is short), from
    a decode step to 4096^3."""
    from deepgemm.dtypes import input_dtype

    launcher = stage_or_skip(LIBRARY_SM80)
    failures = []
    for i, (m, n, k) in enumerate(((1, 4096, 4096), (16, 4096, 4096), (33, 1024, 4096), (128, 4096, 4096),
                                   (777, 1000, 4096), (4096, 4096, 4096), (3, 14336, 4096))):  # fmt: skip
        a, b = _operands(m, n, k, input_dtype(dtype), ("k", "mn"), seed=500 + i)
        launch, stats = _check(launcher, a, b)
        assert launch.plan.config_source == "heuristic"
        if not stats.passed:
            failures.append(f"{m}x{n}x{k} {launch.plan.config}: {stats.summary()}")
    assert not failures, "\n".join(failures)


def test_sm80_refuses_what_it_cannot_run_by_name():
    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import FLOAT16

    launcher = stage_or_skip(LIBRARY_SM80)
    a, b = _operands(300, 200, 96, FLOAT16, ("k", "mn"), seed=11)
    with pytest.raises(ValueError, match="exceeds the GPU's shared memory per block"):
        launcher.plan(a, b, config=GemmConfig(num_stages=16))
    with pytest.raises(ValueError, match=r"BLOCK_K = 48 must be one of \(32, 64\)"):
        launcher.plan(a, b, config=GemmConfig(block_k=48))
    with pytest.raises(ValueError, match="SPLIT_K = 4 exceeds the 3 k-tiles of K = 96"):
        launcher.plan(a, b, config=GemmConfig(extra={"SPLIT_K": 4}))
    with pytest.raises(ValueError, match=r"config knobs \['CLUSTER_M'\] do not exist"):
        launcher.plan(a, b, config=GemmConfig(extra={"CLUSTER_M": 2}))
    with pytest.raises(ValueError, match="activation 'tanh'"):
        launcher.plan(a, b, activation="tanh")


def test_deepgemm_gemm_runs_the_sm80_kernel_where_forced_or_on_a_gpu_without_wgmma(monkeypatch):
    """deepgemm.gemm picks this kernel by compute capability (any GPU of 8.0 or newer but 9.0), and on Hopper
    where DEEPGEMM_FORCE_SM80=1: the plan it builds is this kernel's (its config has WARPS_M), and right."""
    import deepgemm
    from deepgemm import api, plan_sm80
    from deepgemm.dtypes import FLOAT16
    from deepgemm.operands import compute_capability
    from tutorial.check import error_stats, reference

    stage_or_skip(LIBRARY_SM80)
    monkeypatch.setenv(plan_sm80.FORCE_ENV, "1")
    monkeypatch.setattr(api, "_PLANS", {})
    a, b = _operands(129, 300, 136, FLOAT16, ("k", "mn"), seed=12)
    assert error_stats(deepgemm.gemm(a, b), reference(a, b)).passed
    (built,) = api._PLANS.values()
    assert "WARPS_M" in built.config.extra
    monkeypatch.delenv(plan_sm80.FORCE_ENV)
    monkeypatch.setattr(api, "_PLANS", {})
    deepgemm.gemm(a, b)
    (built,) = api._PLANS.values()
    # unforced, Hopper runs its own kernel and any other GPU this one (an H200 under DEEPGEMM_CC=8.9 as well)
    assert ("CLUSTER_M" if compute_capability() == (9, 0) else "WARPS_M") in built.config.extra
