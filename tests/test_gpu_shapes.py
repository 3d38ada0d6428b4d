"""The shape table's GPU timings on the GPU (needs PyTorch): calls captured in a CUDA graph are verified as
replayed and timed, on whichever kernel deepgemm.gemm runs here; split-K's per-stream scratch, a row of the
table and the decoder block at M = 1 on Hopper alone (the table's configs and heuristic are the sm_90a
kernel's)."""

from __future__ import annotations

import pytest
from gpu import library_call_or_skip, sm90a_library_or_skip

from deepgemm.config import GemmConfig
from tutorial import block_suite, shape_suite
from tutorial.bench import Workload
from tutorial.call_suite import GEMM, TORCH, call_launches

pytestmark = pytest.mark.gpu

SMALL = (64, 512, 256)  # a few microseconds a call: the graph holds the most calls


@pytest.fixture(autouse=True)
def _a_library_kernel_and_torch() -> None:
    library_call_or_skip()
    pytest.importorskip("torch")


def _work(m: int, n: int, k: int, dtype_name: str = "fp16") -> Workload:
    return Workload.make(m, n, k, dtype_name).in_layout(*shape_suite.SHAPE_LAYOUT)


def test_graphs_of_calls_are_timed_together_and_their_replayed_outputs_verified():
    work = _work(*SMALL)
    launches = call_launches(work, "torch")
    fields = shape_suite.graph_fields({"": (launches[GEMM], 0.005), "torch_": (launches[TORCH], 0.005)}, work)
    for prefix, name in (("", GEMM), ("torch_", TORCH)):
        assert fields[f"{prefix}graph_passed"] and fields[f"{prefix}graph_max_abs"] >= 0
        assert 0 < fields[f"{prefix}graph_us"] < 1000  # µs per call, not per graph or per batch
        assert fields[f"{prefix}graph_calls"] >= 50 and fields[f"{prefix}graph_calls"] % len(launches[name]) == 0


def test_split_k_calls_in_a_graph_use_the_capture_streams_scratch_and_verify():
    """Split-K's scratch is per stream and made on first use: the warm-up makes it on the capture stream,
    so the graph reads memory that outlives it; a config that needs more scratch grows it, and its own
    graph, captured after, verifies too."""
    sm90a_library_or_skip()
    work = _work(64, 1024, 4096)
    for split in (2, 4):
        config = GemmConfig(block_n=128, extra={"SPLIT_K": split, "CLUSTER_M": 1})
        fields = shape_suite.graph_fields({"": (call_launches(work, "torch", config)[GEMM], 0.01)}, work)
        assert fields["graph_passed"] and fields["graph_us"] > 0, split


def test_a_row_of_the_shape_table_verifies_and_times_everything():
    sm90a_library_or_skip()
    row = shape_suite.shape_row(*SMALL, "bf16", settle_s=0.0)
    assert row["passed"] and row["torch_passed"] and "error" not in row
    for field in ("call_us", "torch_us", "device_us", "graph_us", "torch_graph_us", "heuristic_graph_us"):
        assert row[field] > 0, field
    assert row["config_source"] in ("table", "heuristic") and row["heuristic_config"]
    assert row["x_torch_graph"] == pytest.approx(row["torch_graph_us"] / row["graph_us"])


def test_the_decoder_block_runs_and_verifies_at_m_1():
    sm90a_library_or_skip()
    row = block_suite.bench_block(1, "fp16", log=lambda _: None)
    assert row["passed"] and row["torch_passed"] and len(row["max_abs_err"]) == len(row["configs"]) == 4
    assert row["graph_us"] > 0 and row["torch_graph_us"] > 0 and row["graph_calls"] >= 1
    # 436 MB of weights at M = 1, at most 60 MB of them in L2: at 4.8 TB/s from HBM, 78 µs at the least
    assert row["graph_us"] > 70 and row["torch_graph_us"] > 70


def test_the_heuristic_is_timed_per_call_as_a_caller_without_a_table_calls_it():
    """With the table switched off a call the table holds runs the heuristic's pick, from the C++ path where
    torch's calls have one; after it, the table's entry again."""
    sm90a_library_or_skip()
    from deepgemm.api import config_of

    work = _work(1, 4096, 4096)  # in the H200's table: swap m64 n8 s1 with SHAPE_JIT, the heuristic without
    (a, b), picked = call_launches(work, "torch")[GEMM][0].args, shape_suite.heuristic_config(1, 4096, 4096)
    tabled = config_of(a, b)
    with shape_suite.table_switched_off():
        assert config_of(a, b) == (picked, "heuristic")
        out = call_launches(work, "torch")[GEMM][0]()
        assert out.shape == (1, 4096)
    assert config_of(a, b) == tabled
