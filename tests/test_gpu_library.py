"""The library kernel's options through the library call (tutorial.library runs deepgemm.gemm into a given
output, as the harness runs a stage): tile widths, clusters on either operand, split-K, swap AB, every
operand layout, every epilogue, and the checks that refuse what the kernel cannot do (needs a GPU)."""

from __future__ import annotations

import pytest
from gpu import stage_or_skip

from tutorial.stages import LIBRARY

pytestmark = pytest.mark.gpu


def _check(launcher, a, b, **kwargs):
    from tutorial.check import reference, verify

    launch = launcher.plan(a, b, **kwargs)
    return verify(launch, reference(a, b), launch.out)


def _bias(n: int, dtype, seed: int):
    """A bias of N in [-1, 1) rounded to `dtype`: float32, or a 16-bit model's float16 or bfloat16."""
    import cupy

    from tutorial.check import random_matrix

    return random_matrix(1, n, dtype, cupy.random.default_rng(seed))[0]


def _plan_of(call):
    """The library's cached plan of a call made through the library launcher."""
    from deepgemm import api
    from deepgemm.frameworks import Cupy

    o = call.options
    key = api.plan_key(Cupy, call.a, call.b, o.get("bias"), call.out, o.get("activation"), o.get("out_dtype"),
                       o["config"])  # fmt: skip
    return api._PLANS[key]


def _reads_bias_in_place(call) -> bool:
    """Whether the library's cached plan of this call reads its bias as it lies (no float32 copy)."""
    return _plan_of(call).bias_in_place


@pytest.mark.parametrize("activation", ["relu", "gelu_tanh", "gelu", "silu", None])
@pytest.mark.parametrize("out_dtype", ["fp16", "bf16", "fp32"])
def test_library_fused_epilogue_matches_reference(activation, out_dtype):
    """Every activation into every output type, whatever the input's (here bf16), at tails; the bias read as it
    lies in each of its types (fp16, fp32, bf16), mostly another type than the output's."""
    from deepgemm.dtypes import BFLOAT16, FLOAT16, FLOAT32, OUTPUT_DTYPES
    from tutorial.check import random_problem, reference, verify

    launcher = stage_or_skip(LIBRARY)
    shapes = ((129, 300, 136, FLOAT16), (256, 512, 1024, FLOAT32), (17, 3, 40, BFLOAT16))
    for i, (m, n, k, bias_dtype) in enumerate(shapes):
        a, b = random_problem(m, n, k, BFLOAT16, seed=50 + i)
        bias = _bias(n, bias_dtype, seed=i)
        launch = launcher.plan(a, b, bias=bias, alpha=0.5, activation=activation, out_dtype=OUTPUT_DTYPES[out_dtype])
        stats = verify(launch, reference(a, b, alpha=0.5, bias=bias, activation=activation), launch.out)
        assert stats.passed, f"{m}x{n}x{k} {activation} {out_dtype} bias {bias_dtype}: {stats.summary()}"
        assert _reads_bias_in_place(launch), bias_dtype


def test_library_gemm_checks_its_config():
    import cupy

    import deepgemm
    from deepgemm.dtypes import FLOAT16
    from tutorial.check import error_stats, random_problem, reference

    stage_or_skip(LIBRARY)
    a, b = random_problem(300, 200, 96, FLOAT16, seed=11, b_k_major=False)
    assert error_stats(deepgemm.gemm(a, b), reference(a, b)).passed
    with pytest.raises(ValueError, match="exceeds the GPU's shared memory per block"):
        deepgemm.gemm(a, b, config=deepgemm.GemmConfig(num_stages=6))
    with pytest.raises(ValueError, match="BLOCK_K = 32 must be one of"):
        deepgemm.gemm(a, b, config=deepgemm.GemmConfig(block_k=32))
    with pytest.raises(ValueError, match="bias has shape"):
        deepgemm.gemm(a, b, bias=cupy.zeros(3, dtype=cupy.float32))
    with pytest.raises(ValueError, match="activation 'tanh'"):
        deepgemm.gemm(a, b, activation="tanh")


def test_library_clusters_on_either_operand_and_tile_groups_match_reference():
    """CLUSTER_M = 1 (no multicast), GROUP_M = 1 (row-major order) and 2 x 2 clusters (CLUSTER_N = 2: A
    multicast too), at shapes with odd tile-row and tile-column counts, where a cluster's second CTA along
    M or N has no rows or columns of C."""
    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import BFLOAT16
    from tutorial.check import random_problem

    launcher = stage_or_skip(LIBRARY)
    for cluster_m, group_m, cluster_n in ((1, 16, 1), (2, 1, 1), (1, 1, 1), (2, 16, 2), (1, 16, 2)):
        config = GemmConfig(extra={"CLUSTER_M": cluster_m, "GROUP_M": group_m, "CLUSTER_N": cluster_n})
        for i, (m, n, k) in enumerate(((300, 520, 200), (1152, 768, 64), (4096, 4096, 4096))):
            a, b = random_problem(m, n, k, BFLOAT16, seed=90 + i)
            stats = _check(launcher, a, b, config=config)
            assert stats.passed, f"{m}x{n}x{k} {config.extra}: {stats.summary()}"
    a, b = random_problem(64, 64, 64, BFLOAT16, seed=1)
    with pytest.raises(ValueError, match="CLUSTER_M = 3 must be one of"):  # a side of 1, 2 or 4 CTAs
        launcher.plan(a, b, config=GemmConfig(extra={"CLUSTER_M": 3}))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_with_128_wide_tiles_matches_reference(dtype):
    """BLOCK_N 128 (wgmma m64n128k16): tails in every dimension, clusters on and off, a fused epilogue,
    and shapes where every CTA of the persistent grid takes several tiles."""
    import cupy

    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import input_dtype
    from tutorial.check import random_problem, reference, verify

    launcher = stage_or_skip(LIBRARY)
    failures = []
    for cluster_m in (1, 2):
        config = GemmConfig(block_n=128, extra={"CLUSTER_M": cluster_m})
        for i, (m, n, k) in enumerate(((129, 200, 72), (1000, 3000, 520), (2304, 4096, 200), (4096, 4096, 4096))):
            a, b = random_problem(m, n, k, input_dtype(dtype), seed=700 + i)
            stats = _check(launcher, a, b, config=config)
            if not stats.passed:
                failures.append(f"{m}x{n}x{k} CLUSTER_M={cluster_m}: {stats.summary()}")
    a, b = random_problem(300, 520, 200, input_dtype(dtype), seed=7)
    bias = cupy.random.default_rng(7).random(520, dtype=cupy.float32) * 2 - 1
    launch = launcher.plan(a, b, bias=bias, activation="gelu_tanh", config=GemmConfig(block_n=128))
    stats = verify(launch, reference(a, b, bias=bias, activation="gelu_tanh"), launch.out)
    assert stats.passed, f"fused: {stats.summary()}"
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_split_k_matches_reference_and_repeats_bit_for_bit(dtype):
    """[6] SPLIT_K 2, 3 and 4, clusters on and off, 128- and 64-row tiles: small M (what it is for), tails
    in every dimension, K whose k-tiles do not split evenly; the epilogue (a bias of each type, GELU, an fp32
    or 16-bit out) applied by the last slice; then five more launches of one plan, each bit-identical to the
    first."""
    import cupy

    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import BFLOAT16, FLOAT16, FLOAT32, input_dtype
    from tutorial.check import random_problem, reference, verify

    launcher = stage_or_skip(LIBRARY)
    failures = []
    for split, block_m in ((2, 128), (3, 128), (4, 128), (3, 64)):
        for cluster_m in (1, 2):
            config = GemmConfig(block_m=block_m, block_n=128, extra={"SPLIT_K": split, "CLUSTER_M": cluster_m})
            for i, (m, n, k) in enumerate(((1, 4096, 4096), (128, 4096, 4096), (129, 520, 200), (300, 1000, 1000))):
                a, b = random_problem(m, n, k, input_dtype(dtype), seed=800 + 10 * split + i)
                stats = _check(launcher, a, b, config=config)
                if not stats.passed:
                    failures.append(f"{m}x{n}x{k} SPLIT_K={split} CLUSTER_M={cluster_m}: {stats.summary()}")
    assert not failures, "\n".join(failures)
    a, b = random_problem(200, 520, 1000, input_dtype(dtype), seed=9)
    for out_dtype, block_m, bias_dtype in ((None, 128, FLOAT32), (FLOAT32, 128, FLOAT16), (None, 64, BFLOAT16)):
        bias = _bias(520, bias_dtype, seed=9)
        config = GemmConfig(block_m=block_m, extra={"SPLIT_K": 3})
        launch = launcher.plan(a, b, bias=bias, activation="gelu_tanh", out_dtype=out_dtype, config=config)
        expected = reference(a, b, bias=bias, activation="gelu_tanh")
        stats = verify(launch, expected, launch.out)
        assert stats.passed, f"fused, out {out_dtype}, BLOCK_M {block_m}, bias {bias_dtype}: {stats.summary()}"
        first = launch().copy()
        for _ in range(5):
            assert bool((launch().view(cupy.uint8) == first.view(cupy.uint8)).all()), "split-K is not deterministic"
    with pytest.raises(ValueError, match="SPLIT_K = 20 exceeds the 16 k-tiles"):
        launcher.plan(a, b, config=GemmConfig(extra={"SPLIT_K": 20}))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_every_tile_width_cluster_and_split_the_heuristic_may_pick(dtype):
    """[7] BLOCK_M 128 and 64, BLOCK_N 64, 128, 192 and 256, each with clusters of one and two along M,
    without and with split-K (3 slices: uneven), at tails in every dimension and M = 1; b in both layouts
    wherever the layout allows the tile (an MN-major B's part per CTA is whole 64-wide boxes); every
    pipeline depth the heuristic gives the tile."""
    import cupy

    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import input_dtype
    from deepgemm.heuristic import max_stages
    from tutorial.check import random_problem

    launcher = stage_or_skip(LIBRARY)
    failures = []
    for block_m, block_n in ((bm, bn) for bm in (128, 64) for bn in (64, 128, 192, 256)):
        for cluster_m in (1, 2):
            for split in (1, 3):
                extra = {"CLUSTER_M": cluster_m, "SPLIT_K": split}
                stages = max_stages(block_n, block_m)
                config = GemmConfig(block_m=block_m, block_n=block_n, num_stages=stages, extra=extra)
                for i, (m, n, k) in enumerate(((1, 520, 1000), (129, 1000, 520), (300, 700, 1000))):
                    a, b = random_problem(m, n, k, input_dtype(dtype), seed=900 + i)
                    mn_ok = (block_n // cluster_m) % 64 == 0
                    layouts = [b] + ([cupy.ascontiguousarray(b)] if mn_ok else [])  # K-major, MN-major
                    for b_in in layouts:
                        stats = _check(launcher, a, b_in, config=config)
                        if not stats.passed:
                            major = "MN" if b_in.strides[1] == b_in.itemsize else "K"
                            failures.append(f"{m}x{n}x{k} {major}-major b {config}: {stats.summary()}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_deep_split_k_the_heuristic_may_pick(dtype):
    """[6] [7] The heuristic's other splits (2, 4, 6, 8, 12, 16 slices; 3 is above) at every tile shape,
    without a cluster (it clusters only where there is more than a round of tiles, which split-K is not
    for): M = 1 and tails in M, N and K, with K long enough for four k-tiles a slice."""
    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import input_dtype
    from deepgemm.heuristic import SPLITS, max_stages
    from tutorial.check import random_problem

    launcher = stage_or_skip(LIBRARY)
    failures = []
    for block_m, block_n in ((bm, bn) for bm in (128, 64) for bn in (64, 128, 192, 256)):
        for split in (s for s in SPLITS if s not in (1, 3)):
            extra = {"CLUSTER_M": 1, "SPLIT_K": split}
            stages = max_stages(block_n, block_m)
            config = GemmConfig(block_m=block_m, block_n=block_n, num_stages=stages, extra=extra)
            for i, (m, n, k) in enumerate(((1, 520, 4100), (129, 1000, 4160))):
                a, b = random_problem(m, n, k, input_dtype(dtype), seed=950 + i)
                stats = _check(launcher, a, b, config=config)
                if not stats.passed:
                    failures.append(f"{m}x{n}x{k} {config}: {stats.summary()}")
    assert not failures, "\n".join(failures)


def test_library_refuses_an_mn_major_b_split_across_partial_boxes():
    """An MN-major B arrives in 64-wide boxes: BLOCK_N 64 in clusters of two would give each CTA half a box."""
    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import FLOAT16
    from tutorial.check import random_problem

    launcher = stage_or_skip(LIBRARY)
    a, b = random_problem(256, 512, 128, FLOAT16, seed=3, b_k_major=False)
    with pytest.raises(ValueError, match="MN-major B"):
        launcher.plan(a, b, config=GemmConfig(block_n=64, extra={"CLUSTER_M": 2}))


def test_library_call_on_cupy_returns_cupy():
    import cupy

    import deepgemm
    from tutorial.check import random_problem, reference, verify

    stage_or_skip(LIBRARY)
    a, b = random_problem(300, 520, 200, cupy.float16, seed=3)
    assert isinstance(deepgemm.gemm(a, b), cupy.ndarray)
    out = cupy.empty((300, 520), dtype=cupy.float16)
    assert verify(lambda: deepgemm.gemm(a, b, out=out), reference(a, b), out).passed


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_swap_ab_every_tile_and_split_the_heuristic_may_pick(dtype):
    """[8] Swap AB: tiles of 128 or 64 rows of N by 16 or 32 rows of M, at every split the heuristic offers,
    at M = 1, tails in every dimension and M over one tile of 16; b K-major and MN-major (the kernel's A
    either way), a K-major (the only layout swap AB takes)."""
    import cupy

    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import input_dtype
    from deepgemm.heuristic import SPLITS, max_stages
    from tutorial.check import random_problem

    launcher = stage_or_skip(LIBRARY)
    failures = []
    for block_m, block_n in ((bm, bn) for bm in (128, 64) for bn in (16, 32)):
        stages = max_stages(block_n, block_m, swap_ab=True)
        for split in SPLITS:
            config = GemmConfig(block_m=block_m, block_n=block_n, num_stages=stages,
                                extra={"CLUSTER_M": 1, "SPLIT_K": split, "SWAP_AB": 1})  # fmt: skip
            shapes = (
                ((1, 520, 4100), (17, 1000, 4160), (33, 300, 1100))
                if split > 4
                else ((1, 520, 1000), (17, 1000, 520), (33, 300, 200))
            )
            for i, (m, n, k) in enumerate(shapes):
                if split * 4 > -(-k // 64):
                    continue
                a, b = random_problem(m, n, k, input_dtype(dtype), seed=970 + i)
                for b_in in (b, cupy.ascontiguousarray(b)):  # K-major, MN-major
                    stats = _check(launcher, a, b_in, config=config)
                    if not stats.passed:
                        failures.append(f"{m}x{n}x{k} {config} b strides {b_in.strides}: {stats.summary()}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_swap_ab_fuses_the_epilogue_repeats_bit_for_bit_and_reads_an_mn_major_a_in_whole_boxes(dtype):
    """[8] Swapped, the bias runs along the tile's rows: bias (fp32, or 16-bit read as it lies) + GELU into a
    16-bit or fp32 out (with split-K) at M = 9; five more launches bit-identical; into an out with a row stride;
    an MN-major a (the kernel's B) is read in place where each CTA's part is whole 64-wide boxes, and refused by
    name where it is not."""
    import cupy

    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import BFLOAT16, FLOAT16, FLOAT32, input_dtype
    from tutorial.check import random_problem, reference, verify

    launcher = stage_or_skip(LIBRARY)
    a, b = random_problem(9, 700, 1000, input_dtype(dtype), seed=31)
    for out_dtype, split, bias_dtype in ((None, 1, FLOAT32), (FLOAT32, 3, BFLOAT16), (None, 3, FLOAT16)):
        bias = _bias(700, bias_dtype, seed=31)
        expected = reference(a, b, bias=bias, activation="gelu_tanh")
        config = GemmConfig(block_n=16, num_stages=8, extra={"CLUSTER_M": 1, "SPLIT_K": split, "SWAP_AB": 1})
        launch = launcher.plan(a, b, bias=bias, activation="gelu_tanh", out_dtype=out_dtype, config=config)
        stats = verify(launch, expected, launch.out)
        assert stats.passed, f"out {out_dtype}, SPLIT_K {split}, bias {bias_dtype}: {stats.summary()}"
        assert _reads_bias_in_place(launch), bias_dtype
        first = launch().copy()
        for _ in range(5):
            assert bool((launch().view(cupy.uint8) == first.view(cupy.uint8)).all()), "swap AB is not deterministic"
    wide = cupy.full((9, 1000), cupy.nan, dtype=a.dtype)
    config = GemmConfig(block_n=16, num_stages=8, extra={"CLUSTER_M": 1, "SWAP_AB": 1})
    launch = launcher.plan(a, b, wide[:, :700], config=config)
    assert verify(launch, reference(a, b), launch.out).passed and bool(cupy.isnan(wide[:, 700:]).all())
    a16, b16 = random_problem(16, 700, 1000, input_dtype(dtype), seed=32)  # 32-byte rows: TMA reads a16.T in place
    with pytest.raises(ValueError, match="an MN-major B arrives in 64-wide boxes"):
        launcher.plan(cupy.ascontiguousarray(a16.T).T, b16, config=config)
    a64, b64 = random_problem(100, 700, 1000, input_dtype(dtype), seed=33)
    wide_tokens = GemmConfig(block_n=128, num_stages=6, extra={"CLUSTER_M": 1, "SWAP_AB": 1})
    launch = launcher.plan(cupy.ascontiguousarray(a64.T).T, b64, config=wide_tokens)
    assert verify(launch, reference(a64, b64), launch.out).passed
    mn_unreadable = cupy.ascontiguousarray(a.T).T  # 9 rows, 18-byte rows: copied K-major, so swap AB takes it
    launch = launcher.plan(mn_unreadable, b, config=config)
    assert verify(launch, reference(a, b), launch.out).passed


def _repeats_bit_for_bit(launcher, a, b, launch, what, **options):
    """The planned `launch` of (a, b, options) run three more times, then its plan three times into an out of
    its own on each of four streams at once: every result bit-identical to the first. Returns the first."""
    import cupy

    first = launch().copy()
    for _ in range(3):
        assert bool((launch().view(cupy.uint8) == first.view(cupy.uint8)).all()), f"{what} differs run to run"
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(4)]
    outs = [cupy.empty_like(first) for _ in streams]
    for stream, out in zip(streams, outs):
        with stream:
            for _ in range(3):
                launcher.plan(a, b, out, **options)()
    for stream, out in zip(streams, outs):
        stream.synchronize()
        assert bool((out.view(cupy.uint8) == first.view(cupy.uint8)).all()), f"{what} differs across streams"
    return first


def _fuses_then_repeats_with_pdl(launcher, shape, dtype, fused, repeated, what, seed):
    """At one shape, on fresh inputs: `fused` with a bias (16-bit, of the other type than the input's) and GELU
    into fp32, verified; `repeated` verified, then run again and on four streams (`_repeats_bit_for_bit`), then
    with PDL, 20 launches queued back to back (each prologue overlapping the launch before): every result
    bit-identical to the first."""
    from dataclasses import replace

    import cupy

    from deepgemm.dtypes import BFLOAT16, FLOAT16, FLOAT32, input_dtype
    from tutorial.check import random_problem, reference, verify

    m, n, k = shape
    a, b = random_problem(m, n, k, input_dtype(dtype), seed=seed)
    bias = _bias(n, BFLOAT16 if dtype == "fp16" else FLOAT16, seed=seed)
    launch = launcher.plan(a, b, config=fused, bias=bias, activation="gelu_tanh", out_dtype=FLOAT32)
    assert verify(launch, reference(a, b, bias=bias, activation="gelu_tanh"), launch.out).passed
    launch = launcher.plan(a, b, config=repeated)
    assert verify(launch, reference(a, b), launch.out).passed
    first = _repeats_bit_for_bit(launcher, a, b, launch, what, config=repeated)
    pdl = replace(repeated, extra={**repeated.extra, "PDL": 1})
    outs = [cupy.empty_like(first) for _ in range(20)]
    for out in outs:
        launcher.plan(a, b, out, config=pdl)()
    assert all(bool((out.view(cupy.uint8) == first.view(cupy.uint8)).all()) for out in outs), f"{what}: PDL differs"


def _failures_over(launcher, configs, shapes, dtype, seed, layouts=("k",)):
    """Every config at every shape (and b layout: "k" K-major, "mn" MN-major where the config reads it in
    whole boxes), verified on fresh inputs: the list of what failed, named."""
    import cupy

    from deepgemm.dtypes import input_dtype
    from deepgemm.heuristic import layout_fits
    from deepgemm.plan import DEFAULTS
    from tutorial.check import random_problem

    failures = []
    for c, config in enumerate(configs):
        for i, (m, n, k) in enumerate(shapes):
            a, b = random_problem(m, n, k, input_dtype(dtype), seed=seed + 100 * c + i)
            for layout in layouts:
                if layout == "mn" and not layout_fits(config.merged_over(DEFAULTS), True, False):
                    continue
                b_in = cupy.ascontiguousarray(b) if layout == "mn" else b
                stats = _check(launcher, a, b_in, config=config)
                if not stats.passed:
                    failures.append(f"{m}x{n}x{k} {layout}-major b {config}: {stats.summary()}")
    return failures


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_tile_widths_in_steps_of_16_and_clusters_of_four_match_reference(dtype):
    """[7] [9] BLOCK_N in steps of 16 (stored in 128-, 64- or 32-byte chunks, each with the swizzle of its
    span) and clusters of up to 4 x 2 CTAs multicasting A, B or both, at tails in every dimension (a
    cluster's last CTAs with no rows or columns of C), b in both layouts where the tile allows."""
    from deepgemm.config import GemmConfig

    launcher = stage_or_skip(LIBRARY)
    tiles = ((128, 16, 1, 1), (64, 48, 1, 4), (128, 112, 2, 1), (128, 176, 2, 4), (128, 208, 1, 2),
             (64, 224, 4, 2), (128, 256, 4, 1), (64, 96, 4, 1), (128, 128, 1, 4))  # fmt: skip
    configs = [GemmConfig(block_m=bm, block_n=bn, num_stages=3, extra={"CLUSTER_M": cm, "CLUSTER_N": cn})
               for bm, bn, cm, cn in tiles]  # fmt: skip
    shapes = ((300, 520, 200), (129, 1000, 136), (1000, 300, 72), (777, 2112, 520))
    failures = _failures_over(launcher, configs, shapes, dtype, seed=2000, layouts=("k", "mn"))
    assert not failures, "\n".join(failures)


def test_library_narrow_store_chunks_fuse_the_epilogue_into_every_output_type():
    """[7] A tile row that is not whole 128-byte chunks (BLOCK_N 208: 32-byte chunks of fp16, 64-byte of fp32)
    stores bias + GELU into fp16 and fp32 at tails, through the map whose swizzle matches the chunk."""
    import cupy

    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import BFLOAT16, FLOAT32
    from tutorial.check import random_problem, reference, verify

    launcher = stage_or_skip(LIBRARY)
    a, b = random_problem(333, 1000, 520, BFLOAT16, seed=41)
    bias = cupy.random.default_rng(41).random(1000, dtype=cupy.float32) * 2 - 1
    for block_n in (208, 48, 96):
        for out_dtype in (None, FLOAT32):
            config = GemmConfig(block_n=block_n, num_stages=3, extra={"CLUSTER_M": 1})
            launch = launcher.plan(a, b, bias=bias, activation="gelu_tanh", out_dtype=out_dtype, config=config)
            stats = verify(launch, reference(a, b, bias=bias, activation="gelu_tanh"), launch.out)
            assert stats.passed, f"BLOCK_N {block_n} out {out_dtype}: {stats.summary()}"


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_swap_ab_token_tiles_in_steps_of_8_match_reference(dtype):
    """[8] [9] Swapped, the tokens as wgmma's N in steps of 8 (8 to 256 rows of C per tile) at odd M (1, 17,
    200, 777), clusters along the weight's rows (sharing the tokens) and along the tokens (sharing the
    weight, up to 4), whole, stream-K and split-K."""
    from deepgemm.config import GemmConfig

    launcher = stage_or_skip(LIBRARY)
    tiles = ((64, 8, 1, 1, {}), (128, 32, 2, 1, {"STREAM_K": 1}), (128, 40, 1, 2, {}), (64, 88, 1, 4, {"STREAM_K": 2}),
             (128, 200, 1, 4, {"STREAM_K": 1}), (128, 256, 2, 2, {}), (64, 200, 1, 1, {"SPLIT_K": 3}),
             (128, 160, 4, 1, {"STREAM_K": 1}))  # fmt: skip
    configs = [GemmConfig(block_m=bm, block_n=bn, num_stages=4,
                          extra={"SWAP_AB": 1, "CLUSTER_M": cm, "CLUSTER_N": cn, **cut})
               for bm, bn, cm, cn, cut in tiles]  # fmt: skip
    shapes = ((1, 1000, 520), (17, 1032, 1000), (200, 700, 1000), (777, 4096, 520))
    failures = _failures_over(launcher, configs, shapes, dtype, seed=3000, layouts=("k", "mn"))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_swap_ab_stores_c_through_transposed_boxes_where_tma_can_write_it(dtype):
    """[8] Swapped tiles store a 16-bit C through boxes of 8 to 64 of its rows (stmatrix's transpose form, then
    TMA), with tails in the tokens and the weight's rows, bias + GELU, whole tiles, split-K and stream-K, each
    result bit-identical over repeats; and by pointer, in place, where the kernel's rule or TMA says so: a
    cluster of tiles under 96 wide, an fp32 C, rows of C that are not whole 16-byte vectors (N = 700) and an
    `out` that starts off a 16-byte boundary. Which way C went is read off the launch's shared memory (the
    boxes come after the stages). Neither writes beside an `out` view: a TMA store writes whole 16-byte chunks,
    so rows of 700 fp16 (1400 bytes) are not stored by TMA, plain or swapped."""
    import cupy

    from deepgemm.config import GemmConfig, tile_smem_bytes
    from deepgemm.dtypes import FLOAT32, input_dtype
    from deepgemm.heuristic import max_stages, store_box_bytes
    from deepgemm.plan import DEFAULTS
    from tutorial.check import random_problem, reference, verify

    launcher = stage_or_skip(LIBRARY)
    tiles = ((64, 8, 1, 1, {}), (128, 16, 1, 1, {"SPLIT_K": 3}), (64, 24, 1, 1, {}), (128, 32, 1, 1, {"STREAM_K": 1}),
             (64, 64, 1, 1, {}), (128, 96, 1, 2, {}), (128, 128, 2, 1, {"STREAM_K": 1}), (64, 200, 1, 1, {}),
             (128, 256, 1, 1, {}), (64, 64, 2, 1, {}))  # fmt: skip
    failures = []
    for t, (bm, bn, cm, cn, cut) in enumerate(tiles):
        size = cm * cn
        config = GemmConfig(block_m=bm, block_n=bn, num_stages=max_stages(bn, bm, True, size),
                            extra={"SWAP_AB": 1, "CLUSTER_M": cm, "CLUSTER_N": cn, **cut})  # fmt: skip
        tile_bytes = tile_smem_bytes(config.merged_over(DEFAULTS)) + 1024
        for i, (m, n, k, out_dtype) in enumerate(((1, 1024, 520, None), (17, 1000, 1000, None),
                                                  (777, 2112, 520, None), (200, 700, 1000, None),
                                                  (33, 1032, 600, FLOAT32))):  # fmt: skip
            a, b = random_problem(m, n, k, input_dtype(dtype), seed=5000 + 10 * t + i)
            bias = _bias(n, FLOAT32, seed=5000 + i)
            call = launcher.plan(a, b, bias=bias, activation="gelu_tanh", out_dtype=out_dtype, config=config)
            stats = verify(call, reference(a, b, bias=bias, activation="gelu_tanh"), call.out)
            first = call().copy()
            repeats = all(bool((call().view(cupy.uint8) == first.view(cupy.uint8)).all()) for _ in range(3))
            by_pointer = out_dtype is not None or n % 8 or (size > 1 and bn < 96)
            boxes = 0 if by_pointer else store_box_bytes(bn, bm, True, size)
            smem = _plan_of(call).launch.shared_mem
            if not (stats.passed and repeats and smem == tile_bytes + boxes):
                failures.append(f"{m}x{n}x{k} {config}: {stats.summary()}, repeats {repeats}, smem {smem} "
                                f"against {tile_bytes} + {boxes}")  # fmt: skip
    swapped = GemmConfig(block_m=64, block_n=16, num_stages=8, extra={"SWAP_AB": 1, "CLUSTER_M": 1})
    plain = GemmConfig(block_m=128, block_n=64, num_stages=4, extra={"CLUSTER_M": 1})
    buffer = cupy.empty((9, 1040), dtype=input_dtype(dtype))
    # (config, N, first column in the buffer, store boxes): 16 bytes in, TMA writes the view; 2 bytes in, or
    # rows of 700 (1400 bytes, TMA would write to 704), by pointer when swapped, padded and copied when plain.
    for config, n, offset, boxes in ((swapped, 1000, 8, True), (swapped, 1000, 1, False), (swapped, 700, 8, False),
                                     (plain, 700, 8, None)):  # fmt: skip
        a, b = random_problem(9, n, 520, input_dtype(dtype), seed=5100 + n + offset)
        buffer[:] = cupy.nan
        call = launcher.plan(a, b, buffer[:, offset : offset + n], config=config)
        stats = verify(call, reference(a, b), call.out)
        has_boxes = _plan_of(call).launch.shared_mem > tile_smem_bytes(config.merged_over(DEFAULTS)) + 1024
        untouched = bool(cupy.isnan(buffer[:, :offset]).all()) and bool(cupy.isnan(buffer[:, offset + n :]).all())
        if not (stats.passed and boxes in (None, has_boxes) and untouched):
            failures.append(f"N {n} out at element {offset} {config}: {stats.summary()}, store boxes {has_boxes}, "
                            f"columns beside it untouched {untouched}")  # fmt: skip
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_stream_k_matches_reference_and_repeats_bit_for_bit_on_every_stream(dtype):
    """[6] Stream-K at tile counts that leave the last round partial (odd counts, clusters of two and four),
    one and two rounds cut, runs that cross from one tile into the next, K short enough that the workers are
    fewer than the SMs, bias (16-bit, of the other type than the input's and output's) and GELU applied by the
    last part; then the same plan again and on four streams, every result bit-identical to the first."""

    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import BFLOAT16, FLOAT16, input_dtype
    from tutorial.check import random_problem, reference, verify

    launcher = stage_or_skip(LIBRARY)
    cuts = [GemmConfig(block_m=bm, block_n=bn, extra={"CLUSTER_M": cm, "CLUSTER_N": cn, "STREAM_K": r})
            for bm, bn, cm, cn, r in ((128, 256, 2, 1, 1), (128, 256, 2, 1, 2), (128, 176, 1, 1, 1),
                                      (64, 128, 2, 2, 2), (128, 128, 4, 1, 1))]  # fmt: skip
    shapes = ((4096, 2112, 1000), (1000, 4096, 4160), (2500, 3000, 200), (129, 7000, 520))
    failures = _failures_over(launcher, cuts, shapes, dtype, seed=4000)
    assert not failures, "\n".join(failures)
    a, b = random_problem(3000, 2112, 1000, input_dtype(dtype), seed=44)
    bias = _bias(2112, BFLOAT16 if dtype == "fp16" else FLOAT16, seed=44)
    launch = launcher.plan(a, b, bias=bias, activation="gelu_tanh", config=cuts[0])
    assert verify(launch, reference(a, b, bias=bias, activation="gelu_tanh"), launch.out).passed
    assert _reads_bias_in_place(launch)
    _repeats_bit_for_bit(launcher, a, b, launch, "stream-K", bias=bias, activation="gelu_tanh", config=cuts[0])


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_split_k_in_the_cluster_matches_reference_and_repeats_bit_for_bit_on_every_stream(dtype):
    """[12] CLUSTER_K: a cluster's CTAs each take a slice of K of one tile and sum the parts in shared memory.
    Swapped and plain, 64- and 128-row tiles, slices of 2 and 4, one round and several (the slots handed
    back between tiles), K that does not split evenly, odd M and N, MN-major b, bias and GELU into fp32; then
    one plan again, with PDL back to back, and on four streams, every result bit-identical to the first."""

    from deepgemm.config import GemmConfig

    launcher = stage_or_skip(LIBRARY)
    sliced = [GemmConfig(block_m=bm, block_n=bn, extra={"CLUSTER_M": 1, "CLUSTER_K": ck, "SWAP_AB": swap})
              for bm, bn, ck, swap in ((64, 8, 2, 1), (64, 128, 2, 1), (128, 16, 4, 1), (128, 32, 2, 1),
                                       (128, 128, 2, 0), (64, 64, 4, 0))]  # fmt: skip
    shapes = ((1, 2112, 7168), (9, 5000, 1000), (130, 4096, 200), (300, 7000, 4160))
    failures = _failures_over(launcher, sliced, shapes, dtype, seed=4600, layouts=("k", "mn"))
    assert not failures, "\n".join(failures)
    _fuses_then_repeats_with_pdl(launcher, (33, 2112, 7168), dtype, sliced[1], sliced[0], "CLUSTER_K", seed=46)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_pingpong_matches_reference_and_repeats_bit_for_bit_on_every_stream(dtype):
    """[13] PINGPONG: the two consumer warpgroups take a CTA's tiles in turn. 64- and 128-row tiles (up to 144
    wide), plain and swapped, clusters along either side, CTAs with an odd number of tiles, tiles of one k-tile
    and of fewer k-tiles than stages (the other warpgroup's passed over), odd M and N, MN-major b, bias and GELU
    into fp32; then one plan again, with PDL back to back, and on four streams, every result bit-identical to
    the first."""

    from deepgemm.config import GemmConfig

    launcher = stage_or_skip(LIBRARY)
    turns = [GemmConfig(block_m=bm, block_n=bn, extra={"CLUSTER_M": cm, "CLUSTER_N": cn, "SWAP_AB": swap,
                                                       "PINGPONG": 1})
             for bm, bn, cm, cn, swap in ((64, 224, 2, 1, 0), (64, 128, 1, 2, 0), (128, 128, 2, 1, 0),
                                          (64, 192, 1, 2, 1), (64, 256, 1, 1, 0), (64, 48, 2, 1, 1),
                                          (128, 144, 2, 1, 0), (128, 128, 1, 2, 1))]  # fmt: skip
    shapes = ((1000, 3000, 1000), (4100, 520, 264), (129, 7000, 64), (777, 2112, 1500))
    failures = _failures_over(launcher, turns, shapes, dtype, seed=4700, layouts=("k", "mn"))
    assert not failures, "\n".join(failures)
    _fuses_then_repeats_with_pdl(launcher, (1000, 3000, 1000), dtype, turns[0], turns[1], "PINGPONG", seed=47)


def test_library_programmatic_dependent_launch_reads_what_the_kernel_before_wrote():
    """[10] With PDL a launch may start before the one before it in the stream ends; griddepcontrol.wait
    holds it until that kernel's writes are visible. A chain in which each product is the next one's A (and
    the same output buffer is written again at once, so a late read of it would see the next values) must
    still equal the unchained products: run many links with small, fast kernels, so that overlap is likely."""
    import cupy

    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import BFLOAT16
    from tutorial.check import random_problem, reference

    launcher = stage_or_skip(LIBRARY)
    pdl = GemmConfig(block_n=64, extra={"CLUSTER_M": 1, "PDL": 1, "STREAM_K": 1})
    a, b = random_problem(256, 256, 256, BFLOAT16, seed=61)
    b = (b * 0.125).astype(b.dtype)  # each link multiplies the variance by 256 / 3 / 64: 20 links stay in range
    x, expected = a, a
    for _ in range(20):
        x = launcher.gemm(x, b, config=pdl)
        expected = cupy.asarray(reference(expected, b).value, dtype=a.dtype)  # one rounding per link, as the kernel
    got, want = x.astype(cupy.float64), expected.astype(cupy.float64)
    rel = float(cupy.linalg.norm(got - want) / cupy.linalg.norm(want))
    assert rel < 5e-2, f"relative error {rel:.3g} after 20 chained launches"  # bf16 rounding: about 1e-2; a race: ~1


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_256_row_tiles_match_reference_in_every_orientation_layout_and_schedule(dtype):
    """[7] BLOCK_M 256 (two consumer warpgroups of two wgmma m64 each, BLOCK_N up to 128): plain and swapped,
    clusters multicasting either operand, whole tiles, stream-K (a strip counter per 16 rows of each
    fragment) and split-K, at tails in every dimension (a tile whose second fragment is past M), b in both
    layouts where the tile allows."""
    from deepgemm.config import GemmConfig

    launcher = stage_or_skip(LIBRARY)
    tiles = ((128, 2, 1, {}), (128, 1, 2, {"STREAM_K": 1}), (64, 1, 1, {"SPLIT_K": 2}), (112, 2, 2, {"STREAM_K": 2}),
             (96, 4, 1, {}), (128, 1, 4, {}))  # fmt: skip
    configs = [GemmConfig(block_m=256, block_n=bn, num_stages=4,
                          extra={"SWAP_AB": swap, "CLUSTER_M": cm, "CLUSTER_N": cn, **cut})
               for bn, cm, cn, cut in tiles for swap in (0, 1)]  # fmt: skip
    shapes = ((300, 520, 200), (777, 2112, 1000), (1000, 300, 72), (129, 1000, 136))
    failures = _failures_over(launcher, configs, shapes, dtype, seed=5000, layouts=("k", "mn"))
    assert not failures, "\n".join(failures)


def test_library_256_row_tiles_fuse_the_epilogue_and_repeat_bit_for_bit_under_stream_k():
    """[7] [6] BLOCK_M 256 with bias and GELU into fp16 and fp32, then a stream-K plan again and again: every
    result bit-identical to the first."""
    import cupy

    from deepgemm.config import GemmConfig
    from deepgemm.dtypes import BFLOAT16, FLOAT32
    from tutorial.check import random_problem, reference, verify

    launcher = stage_or_skip(LIBRARY)
    a, b = random_problem(1333, 1000, 1040, BFLOAT16, seed=51)
    bias = _bias(1000, FLOAT32, seed=51)
    for swap in (0, 1):
        for out_dtype in (None, FLOAT32):
            config = GemmConfig(block_m=256, block_n=128, num_stages=4,
                                extra={"CLUSTER_M": 2, "STREAM_K": 1, "SWAP_AB": swap})  # fmt: skip
            launch = launcher.plan(a, b, bias=bias, activation="gelu_tanh", out_dtype=out_dtype, config=config)
            stats = verify(launch, reference(a, b, bias=bias, activation="gelu_tanh"), launch.out)
            assert stats.passed, f"swap {swap} out {out_dtype}: {stats.summary()}"
            first = launch().copy()
            for _ in range(3):
                assert bool((launch().view(cupy.uint8) == first.view(cupy.uint8)).all()), "not deterministic"


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_library_shape_jit_compiles_the_weights_dimensions_in_and_matches_reference(dtype):
    """[11] SHAPE_JIT: K and the weight's rows compiled into the kernel (plain its N', swapped its M'), at tails
    in every dimension, whole tiles, stream-K and split-K, a split in the cluster and ping-pong (each launched
    with PDL, as the heuristic picks them under JIT_BELOW_US), b in both layouts."""
    from deepgemm.config import GemmConfig

    launcher = stage_or_skip(LIBRARY)
    tiles = ((128, 256, {"CLUSTER_M": 2}), (64, 144, {"CLUSTER_M": 2, "STREAM_K": 1}),
             (128, 40, {"SWAP_AB": 1, "CLUSTER_M": 1, "CLUSTER_N": 2}),
             (64, 8, {"SWAP_AB": 1, "SPLIT_K": 3, "CLUSTER_M": 1}),
             (256, 128, {"CLUSTER_M": 1, "STREAM_K": 1}),
             (64, 16, {"SWAP_AB": 1, "CLUSTER_M": 1, "CLUSTER_K": 2, "PDL": 1}),
             (128, 128, {"CLUSTER_M": 2, "PINGPONG": 1, "PDL": 1}))  # fmt: skip
    configs = [GemmConfig(block_m=bm, block_n=bn, num_stages=4, extra={**extra, "SHAPE_JIT": 1})
               for bm, bn, extra in tiles]  # fmt: skip
    shapes = ((1, 1000, 520), (33, 2112, 1000), (777, 1032, 136))
    failures = _failures_over(launcher, configs, shapes, dtype, seed=6000, layouts=("k", "mn"))
    assert not failures, "\n".join(failures)
