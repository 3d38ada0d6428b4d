"""SYNTHETIC rows for the table and figure tests, made up here to exercise the code; no number in them was
measured."""

from __future__ import annotations

from tutorial.profile import METRICS
from tutorial.stages import STAGES

FAKE_TFLOPS = dict(zip((*STAGES, "cublas"), (1.0, 10.0, 100.0, 200.0, 300.0, 400.0, 350.0)))


def fake_bench_rows() -> list[dict]:
    """SYNTHETIC bench rows: every stage and cuBLAS, two dtypes, two shapes (28 rows)."""
    rows = []
    for size in (256, 512):
        for dtype in ("fp16", "bf16"):
            for stage, rate in FAKE_TFLOPS.items():
                rows.append({"stage": stage, "dtype": dtype, "m": size, "n": size, "k": size, "tflops": rate,
                             "sm_clock_mhz": 1500.0, "pct_peak": None, "x_prev": None})  # fmt: skip
    return rows


def fake_profile_rows() -> list[dict]:
    """SYNTHETIC profile rows for three stages at one shape; every metric None unless set."""
    rows = []
    for i, stage in enumerate(("v0_naive", "v2_mma_sync", "v4_pipeline_swizzle")):
        row = {"stage": stage, "dtype": "fp16", "m": 256, "n": 256, "k": 256, **dict.fromkeys(METRICS)}
        row.update(stall_long_scoreboard=5.0 - i, stall_barrier=1.0 + i, stall_gmma=float(i), stall_wait=0.25)
        row.update(stall_selected=1.0, stall_misc=0.01)
        row.update(bank_conflicts_ld=float(10 * i), wavefronts_shared_ld=1000.0, bank_conflicts_gmma=None)
        row.update(dram_read_bytes=1e6, duration_ns=1e5)
        rows.append(row)
    return rows


def fake_variant_rows() -> list[dict]:
    """SYNTHETIC GROUP_M rows (named as the raster record and the v5_group_m sweep name theirs) and a cuBLAS row."""
    rows = []
    for stage, group, rate, clock in (
        ("v5_fused", 8, 600.0, 1500.0),
        ("v5_fused", 1, 540.0, 1350.0),
        ("v5_fused", 16, 606.0, 1500.0),
        ("v4_pipeline_swizzle", 1, 500.0, None),
    ):
        rows.append(
            {
                "stage": f"{stage} GROUP_M={group}",
                "dtype": "fp16",
                "m": 256,
                "n": 256,
                "k": 256,
                "tflops": rate,
                "sm_clock_mhz": clock,
                "pct_peak_at_clock": 80.0,
            }
        )
    rows.append({"stage": "cublas", "dtype": "fp16", "m": 256, "n": 256, "k": 256, "tflops": 650.0})
    return rows


def pairs_rows(ratios: list[float]) -> list[dict]:
    """SYNTHETIC pairs rows at 4096^3 fp16: cuBLAS at 1500 MHz, v5 at 1470, v5's ratio as given."""
    rows = []
    for pair, ratio in enumerate(ratios):
        base = {"dtype": "fp16", "m": 4096, "n": 4096, "k": 4096, "pair": pair}
        rows += [
            {**base, "stage": "cublas", "x_cublas": 1.0, "sm_clock_mhz": 1500.0},
            {**base, "stage": "v5_fused", "x_cublas": ratio, "sm_clock_mhz": 1470.0},
        ]
    return rows


def shape_rows(ratios: dict[int, float], dtype: str = "fp16", heuristic_scale: float = 1.0) -> list[dict]:
    """SYNTHETIC shape-table rows at N = K = 4096, one per M of `ratios`, verified: that x torch in graphs and
    per call, the heuristic's ratios scaled by `heuristic_scale`."""
    rows = []
    for m, ratio in ratios.items():
        rows.append({"stage": "deepgemm.gemm", "dtype": dtype, "m": m, "n": 4096, "k": 4096, "x_torch_graph": ratio,
                     "x_torch": ratio, "x_torch_graph_heuristic": ratio * heuristic_scale,
                     "x_torch_heuristic": ratio * heuristic_scale, "passed": True})  # fmt: skip
    return rows
