import pytest

from deepgemm.config import GemmConfig, require_at_most, require_in, require_multiple

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


def test_every_bench_suite_is_dispatched():
    """A suite name the dispatcher does not know must fail, not fall through to another suite."""
    from deepgemm import cli

    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        cli.run_suite("nope", [], (1, 1, 1), "fp16", 0.0)
    assert {"progression", "raster", "epilogue", "call", "pairs", "shapes", "ablation"} == set(cli.SUITES)


def test_value_reads_core_fields_and_extra_knobs_by_define_name():
    from deepgemm.config import GemmConfig

    cfg = GemmConfig(block_m=128, num_stages=4, extra={"GROUP_M": 16})
    assert (cfg.value("BLOCK_M"), cfg.value("NUM_STAGES"), cfg.value("GROUP_M")) == (128, 4, 16)
    for missing in ("BLOCK_N", "CLUSTER_M"):
        with pytest.raises(ValueError, match=f"no knob {missing}"):
            cfg.value(missing)


def test_v5_refuses_a_split_k_it_cannot_run():
    import pytest

    from deepgemm import stages
    from deepgemm.config import GemmConfig

    v5 = stages.load("v5")
    with pytest.raises(ValueError, match="SPLIT_K = 0 must be a positive number"):
        v5.check_config(GemmConfig(extra={"SPLIT_K": 0}).merged_over(v5.DEFAULTS))
    with pytest.raises(ValueError, match="SPLIT_K = 5 exceeds the 4 k-tiles of K = 200"):
        v5.check_split(5, 200, 64)
    v5.check_split(4, 200, 64)  # one k-tile per slice is allowed
