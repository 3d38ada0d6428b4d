import pytest

from deepgemm.config import GemmConfig, parse_defines, require_at_most, require_in, require_multiple

DEFAULTS = GemmConfig(block_m=128, block_n=256, block_k=64, num_stages=4, extra={"GROUP_M": 8})


def test_override_keeps_unset_defaults():
    cfg = GemmConfig(block_n=128).merged_over(DEFAULTS)
    assert cfg.defines() == {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_STAGES": 4, "GROUP_M": 8}


def test_extra_knob_overrides_default():
    assert GemmConfig(extra={"GROUP_M": 1}).merged_over(DEFAULTS).value("GROUP_M") == 1


def test_rejects_unknown_extra_knob():
    with pytest.raises(ValueError, match="WARPS_M"):
        GemmConfig(extra={"WARPS_M": 2}).merged_over(DEFAULTS)


def test_rejects_field_the_stage_does_not_have():
    with pytest.raises(ValueError, match="num_stages"):
        GemmConfig(num_stages=3).merged_over(GemmConfig(extra={"BLOCK_X": 32}))


def test_value_of_missing_knob_names_it():
    with pytest.raises(ValueError, match="THREAD_M"):
        DEFAULTS.value("THREAD_M")


@pytest.mark.parametrize("value", [0, -64, 96])
def test_require_multiple_rejects(value):
    with pytest.raises(ValueError, match=f"BLOCK_K = {value} must be a positive multiple of 64"):
        require_multiple(GemmConfig(block_k=value), "BLOCK_K", 64, "one 128-byte swizzle row")


def test_require_in_and_at_most():
    require_in(DEFAULTS, "BLOCK_N", (128, 256), "wgmma n")
    with pytest.raises(ValueError, match="one of"):
        require_in(DEFAULTS, "BLOCK_M", (64,), "one warpgroup")
    with pytest.raises(ValueError, match="shared memory per block of 232448"):
        require_at_most("dynamic shared memory", 300_000, 232_448, "shared memory per block")


RUNNERS = {  # each suite's runner in the harness (module, function)
    "progression": ("bench", "bench_shape"),
    "epilogue": ("bench", "bench_epilogue"),
    "pairs": ("bench", "bench_pairs"),
    "call": ("call_suite", "bench_call"),
    "shapes": ("shape_suite", "bench_shape_row"),
    "ablation": ("ablation", "run"),
}


def test_every_bench_suite_is_dispatched_to_its_own_runner(monkeypatch):
    """Each suite the CLI offers runs its own runner, and a name the dispatcher does not know fails rather
    than falling through to another suite."""
    from tutorial import cli

    assert set(cli.SUITES) == set(RUNNERS)
    for module, function in RUNNERS.values():
        monkeypatch.setattr(getattr(cli, module), function, lambda *a, _f=function, **kw: [{"ran": _f}])
    for suite, (_, function) in RUNNERS.items():
        assert cli.run_suite(suite, ["v5_fused"], (64, 64, 64), "fp16", 0.0) == [{"ran": function}], suite
    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        cli.run_suite("nope", [], (1, 1, 1), "fp16", 0.0)


def test_the_v5_lesson_has_no_split_k_knob():
    """Split-K is the library kernel's ([6], `deepgemm.plan.check_split`); v5 names the knobs it has."""
    from tutorial import stages

    with pytest.raises(ValueError, match=r"\['SPLIT_K'\] do not exist"):
        GemmConfig(extra={"SPLIT_K": 2}).merged_over(stages.load("v5").DEFAULTS)


def test_value_reads_core_fields_and_extra_knobs_by_define_name():
    cfg = GemmConfig(block_m=128, num_stages=4, extra={"GROUP_M": 16})
    assert (cfg.value("BLOCK_M"), cfg.value("NUM_STAGES"), cfg.value("GROUP_M")) == (128, 4, 16)
    for missing in ("BLOCK_N", "CLUSTER_M"):
        with pytest.raises(ValueError, match=f"no knob {missing}"):
            cfg.value(missing)


def test_equal_configs_have_equal_keys_whatever_the_order_of_their_knobs():
    """The plan cache keys a caller's config by `key()`: the same knobs in another order are the same plan,
    and any knob that differs is another."""
    one = GemmConfig(block_n=128, extra={"CLUSTER_M": 1, "SPLIT_K": 2})
    assert one.key() == GemmConfig(block_n=128, extra={"SPLIT_K": 2, "CLUSTER_M": 1}).key()
    others = [GemmConfig(block_n=128, extra={"CLUSTER_M": 1, "SPLIT_K": 3}), GemmConfig(block_n=128),
              GemmConfig(block_n=256, extra={"CLUSTER_M": 1, "SPLIT_K": 2})]  # fmt: skip
    assert len({one.key(), *(c.key() for c in others)}) == 4
    hash(one.key())


def test_the_wgmma_tile_check_names_the_knob_and_stages_size_the_shared_memory():
    from deepgemm.config import require_wgmma_tile, tile_smem_bytes

    tile = GemmConfig(block_m=128, block_n=256, block_k=64, num_stages=4, extra={"BOX_K": 64})
    require_wgmma_tile(tile)
    with pytest.raises(ValueError, match=r"BLOCK_N = 96 must be one of \(256,\)"):
        require_wgmma_tile(GemmConfig(block_n=96).merged_over(tile))
    with pytest.raises(ValueError, match=r"BOX_K = 32 must be one of \(64,\)"):
        require_wgmma_tile(GemmConfig(extra={"BOX_K": 32}).merged_over(tile))
    assert tile_smem_bytes(tile) == 4 * (128 + 256) * 64 * 2


def test_a_configs_exact_defines_come_back_as_the_same_config():
    """The torch op carries a config as its exact `defines()` text: a lower-case knob stays an unknown extra
    (as eager refuses it), not SPLIT_K or BLOCK_M; the command line's upper-casing is its own."""
    for config in (GemmConfig(block_m=64, extra={"SPLIT_K": 2}), GemmConfig(extra={"split_k": 2, "block_m": 64})):
        text = ",".join(f"{name}={value}" for name, value in sorted(config.defines().items()))
        assert GemmConfig.from_defines(parse_defines(text, upper=False)) == config
    assert parse_defines("split_k=2") == {"SPLIT_K": 2}
