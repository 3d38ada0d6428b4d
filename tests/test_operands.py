"""Input checks that need no GPU, and the ones that do (marked)."""

import numpy as np
import pytest

from deepgemm.dtypes import BFLOAT16, FLOAT16, dtype_defines, dtype_name, input_dtype
from deepgemm.operands import as_device_array, check_compute_capability, padded_k
from deepgemm.stages import parse_stages, stage_name


def test_rejects_host_arrays():
    with pytest.raises(TypeError, match=r"a is a host numpy\.ndarray"):
        as_device_array(np.zeros((4, 4), np.float16), "a")


def test_rejects_objects_that_are_not_arrays():
    with pytest.raises(TypeError, match="b is a list"):
        as_device_array([[1.0]], "b")


class _CpuDlpackTensor:
    """What a PyTorch CPU tensor looks like through DLPack: device type 1 (kDLCPU)."""

    def __dlpack_device__(self):
        return (1, 0)


def test_rejects_dlpack_tensors_on_the_host():
    with pytest.raises(TypeError, match="DLPack device type 1"):
        as_device_array(_CpuDlpackTensor(), "a")


@pytest.mark.parametrize(("k", "padded"), [(1, 8), (8, 8), (17, 24), (4096, 4096), (4097, 4104)])
def test_padded_k_is_whole_16_byte_vectors(k, padded):
    assert padded_k(k) == padded


def test_dtype_names_and_defines():
    assert dtype_name(FLOAT16) == "fp16" and dtype_name(BFLOAT16) == "bf16"
    assert dtype_defines(BFLOAT16) == {"DTYPE_BF16": 1} and dtype_defines(FLOAT16) == {"DTYPE_BF16": 0}
    assert input_dtype("bf16") == BFLOAT16
    with pytest.raises(TypeError, match="float64"):
        input_dtype(np.float64)


def test_stage_names():
    assert stage_name("v3") == "v3_wgmma_tma"
    assert parse_stages("v0, v2") == ["v0_naive", "v2_mma_sync"]
    assert len(parse_stages("all")) == 6
    with pytest.raises(ValueError, match="unknown stage 'v9'"):
        stage_name("v9")


@pytest.mark.parametrize(
    ("cc", "min_cc", "exact", "message"),
    [
        ((8, 0), (9, 0), True, r"exactly 9\.0 \(sm_90a, Hopper\); Fake GPU is 8\.0"),
        ((10, 0), (9, 0), True, r"exactly 9\.0 \(sm_90a, Hopper\); Fake GPU is 10\.0"),
        ((7, 5), (8, 0), False, r"8\.0 or newer; Fake GPU is 7\.5"),
    ],
)
def test_rejects_a_gpu_the_stage_cannot_run_on(cc, min_cc, exact, message):
    with pytest.raises(RuntimeError, match=message):
        check_compute_capability(cc, "Fake GPU", min_cc, "stage", exact=exact)


def test_accepts_hopper_for_the_sm90a_stages_and_newer_gpus_for_the_portable_ones():
    check_compute_capability((9, 0), "H200", (9, 0), "v5_fused", exact=True)
    check_compute_capability((10, 0), "B200", (8, 0), "v2_mma_sync")
