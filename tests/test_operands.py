"""Input checks that need no GPU, and the ones that do (marked)."""

import numpy as np
import pytest

from deepgemm.dtypes import BFLOAT16, FLOAT16, FLOAT32, dtype_defines, dtype_name, input_dtype, output_dtype
from deepgemm.operands import as_device_array, check_compute_capability, padded_k
from tutorial.stages import parse_stages, stage_name


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
    assert [output_dtype(name) for name in ("fp16", "bf16", "fp32", "float32")] == [FLOAT16, BFLOAT16, FLOAT32, FLOAT32]
    with pytest.raises(TypeError, match="out_dtype fp64 is not supported"):
        output_dtype("fp64")


def test_an_activation_that_is_not_a_name_is_a_type_error_and_an_unknown_name_a_value_error():
    from deepgemm.epilogue import activation_name

    assert [activation_name(x) for x in (None, "gelu", "silu")] == ["none", "gelu_erf", "silu"]
    for wrong in (["relu"], 5):
        with pytest.raises(TypeError, match=f"activation must be a name or None, got {type(wrong).__name__}"):
            activation_name(wrong)
    with pytest.raises(ValueError, match="activation 'tanh' is not one of"):
        activation_name("tanh")


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


def _gpu_array(shape, strides=None, dtype=np.float16, ptr=0x10000, device=0):
    """A CuPy array over memory that is never touched: its metadata is all the checks read (no GPU needed)."""
    import cupy

    itemsize = np.dtype(dtype).itemsize
    strides = strides or tuple(itemsize * int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
    memory = cupy.cuda.UnownedMemory(ptr, 1 << 30, None, device)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides)


def test_a_checked_problem_is_views_of_the_callers_arrays_and_allocates_nothing():
    from deepgemm.operands import check_operands

    a, b = _gpu_array((300, 72)), _gpu_array((72, 40), ptr=0x200000)
    p = check_operands(a, b)
    assert (p.m, p.n, p.k, p.out_dtype, p.out) == (300, 40, 72, FLOAT16, None)
    assert p.a is a and p.b is b
    out = _gpu_array((300, 40), (192, 4), np.float32, ptr=0x400000)  # a row stride past N is fine
    assert check_operands(a, b, out, np.float32).out is out


@pytest.mark.parametrize(
    ("a", "b", "error", "message"),
    [
        (((4, 8, 2),), ((8, 4),), ValueError, r"a must be 2-D, got shape \(4, 8, 2\)"),
        (((4, 8),), ((8, 4), None, np.float32), TypeError, "b has dtype float32; the kernels take float16 or bfloat16"),
        (((4, 8),), ((8, 4), None, BFLOAT16), TypeError, "a is float16 but b is bfloat16"),
        (((4, 8),), ((9, 4),), ValueError, "b has 9 rows but a has K = 8 columns"),
        (((0, 8),), ((8, 4),), ValueError, "empty problem: M = 0"),
        (((4, 8),), ((8, 4), None, np.float16, 0x10000, 1), ValueError, "a is on GPU 0 but b is on GPU 1"),
        (((2**31 - 2**16 + 1, 8),), ((8, 4),), ValueError, "M = 2147418113, N = 4, K = 8: the kernels take each "
         "as a 32-bit int, at most 2147418112"),
    ],
)
def test_a_problem_the_kernels_cannot_take_is_named(a, b, error, message):
    from deepgemm.operands import check_operands

    with pytest.raises(error, match=message):
        check_operands(_gpu_array(*a), _gpu_array(*b))


@pytest.mark.parametrize(
    ("out", "out_dtype", "error", "message"),
    [
        (((4, 5),), None, ValueError, r"out has shape \(4, 5\); the product is \(4, 6\)"),
        (((4, 6), None, np.float32), None, TypeError, "out has dtype float32; expected float16"),
        (((4, 6),), np.float32, TypeError, "out has dtype float16; expected float32"),
        (((4, 6), (2, 8)), None, ValueError, r"row-major with unit column stride; it has strides \(2, 8\)"),
        (((4, 6), (8, 2)), None, ValueError, r"row-major with unit column stride; it has strides \(8, 2\)"),
        (None, np.dtype(np.float64), TypeError, "out_dtype float64 is not supported"),
        (((4, 6), None, np.float16, 0x400000, 1), None, ValueError, "out is on GPU 1 but a and b are on GPU 0"),
        (((4, 6), None, np.float16, 0x10000), None, ValueError, "out overlaps a in memory"),
        (((4, 6), None, np.float16, 0x20030), None, ValueError, "out overlaps b in memory"),  # b's last row
        (((4, 6), (2**32, 2), np.float16, 0x400000), None, ValueError, "row stride of 4294967296 bytes is over"),
    ],
)
def test_an_out_the_call_cannot_write_is_named(out, out_dtype, error, message):
    from deepgemm.operands import check_operands

    a, b = _gpu_array((4, 8)), _gpu_array((8, 6), ptr=0x20000)  # a: 64 bytes at 0x10000, b: 96 at 0x20000
    with pytest.raises(error, match=message):
        check_operands(a, b, None if out is None else _gpu_array(*out), out_dtype)


def test_an_out_beside_the_inputs_is_taken_and_a_single_rows_stride_is_never_read():
    from deepgemm.operands import check_operands

    a, b = _gpu_array((4, 8)), _gpu_array((8, 6), ptr=0x20000)
    for ptr in (0x10040, 0x20060, 0x1ffd0):  # just after a, just after b, ending just before b
        out = _gpu_array((4, 6), ptr=ptr)
        assert check_operands(a, b, out).out is out
    row = _gpu_array((1, 6), (2, 2), ptr=0x400000)  # the transposed view of a (6, 1) column
    assert check_operands(_gpu_array((1, 8)), b, row).out is row


def test_a_cupy_array_of_a_subclass_is_read_as_a_plain_view_of_its_memory():
    import cupy

    from deepgemm.operands import as_device_array

    class Mine(cupy.ndarray):
        pass

    x = _gpu_array((4, 8), (32, 2), ptr=0x30000)
    mine = Mine(x.shape, x.dtype, x.data, x.strides)
    view = as_device_array(mine, "a")
    assert type(view) is cupy.ndarray
    assert (view.shape, view.strides, view.data.ptr) == ((4, 8), (32, 2), 0x30000)


def test_a_bias_must_be_a_float_vector_of_n():
    from deepgemm.operands import check_bias

    vector = _gpu_array((6,), dtype=np.float32)
    assert check_bias(vector, 6) is vector
    with pytest.raises(ValueError, match=r"bias has shape \(5,\); it must be a vector of N = 6"):
        check_bias(_gpu_array((5,), dtype=np.float32), 6)
    with pytest.raises(TypeError, match="bias has dtype int32"):
        check_bias(_gpu_array((6,), dtype=np.int32), 6)
    with pytest.raises(TypeError, match=r"bias is a host numpy\.ndarray"):
        check_bias(np.zeros(6, np.float32), 6)
    assert check_bias(vector, 6, device=0) is vector
    with pytest.raises(ValueError, match="bias is on GPU 1 but a and b are on GPU 0"):
        check_bias(_gpu_array((6,), dtype=np.float32, device=1), 6, device=0)


def test_without_a_usable_gpu_a_stage_says_so(monkeypatch):
    import cupy

    from deepgemm.operands import require_gpu

    def no_driver():
        raise cupy.cuda.runtime.CUDARuntimeError(35)  # cudaErrorInsufficientDriver

    monkeypatch.setattr(cupy.cuda.runtime, "getDeviceCount", no_driver)
    with pytest.raises(RuntimeError, match="v3_wgmma_tma needs a CUDA GPU and none is usable here"):
        require_gpu((9, 0), "v3_wgmma_tma", exact=True)
    monkeypatch.setattr(cupy.cuda.runtime, "getDeviceCount", lambda: 0)
    with pytest.raises(RuntimeError, match="v0_naive needs a CUDA GPU and none is visible"):
        require_gpu((7, 0), "v0_naive")
