"""The one rule for what a GPU runs, without a GPU: the capability the code goes by (DEEPGEMM_CC where set, the
JIT excepted), which stages and which library kernel that capability runs, and how the tutorial degrades where
it cannot run v3 to v5: `bench` measures v0 to v2 and cuBLAS and shows the rest from the record with one line
that says why, the notebooks' LIVE cells stand down, nothing is recorded under an overridden capability."""

from __future__ import annotations

import pytest

from deepgemm import driver, jit, operands, plan_sm80
from deepgemm.driver import CC_ENV, DeviceLimits
from tutorial import bench, cli, results, runner, stages
from tutorial.stages import LIBRARY, LIBRARY_SM80, STAGES

PORTABLE, SM90A_STAGES = STAGES[:3], STAGES[3:]  # v0..v2 (8.0 or newer) and v3..v5 (Hopper alone)


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(CC_ENV, raising=False)
    monkeypatch.delenv(plan_sm80.FORCE_ENV, raising=False)


@pytest.fixture
def gpu(monkeypatch):
    """`gpu(cc)` makes the current GPU (device 0, "Fake GPU") one of capability `cc` wherever the code reads it."""

    def make(cc: tuple[int, int], name: str = "Fake GPU") -> None:
        monkeypatch.setattr(operands, "real_compute_capability", lambda: cc)
        monkeypatch.setattr(stages, "current_device", lambda: 0)
        monkeypatch.setattr(stages, "device_name", lambda device: name)
        monkeypatch.setattr(plan_sm80, "device_limits", lambda device: DeviceLimits(128, 101_376, cc))

    return make


# ---- DEEPGEMM_CC ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [("8.0", (8, 0)), ("8.9", (8, 9)), ("12.0", (12, 0)), (" 9.0 ", (9, 0)),
                                                ("", None)])  # fmt: skip
def test_deepgemm_cc_reads_major_dot_minor(monkeypatch, text, expected):
    monkeypatch.setenv(CC_ENV, text)
    assert driver.capability_override() == expected
    assert driver.effective_capability((9, 0)) == (expected or (9, 0))


@pytest.mark.parametrize("text", ["8", "89", "sm_89", "8.10", "8,9", "eight", "8.9a"])
def test_a_malformed_deepgemm_cc_is_named(monkeypatch, text):
    monkeypatch.setenv(CC_ENV, text)
    with pytest.raises(ValueError, match=rf"^DEEPGEMM_CC='{text}' is not a compute capability: write MAJOR\.MINOR"):
        driver.capability_override()


def test_the_override_is_the_capability_everything_reads_but_the_jit(monkeypatch, gpu):
    """An H200 told it is 8.9 checks, dispatches and gates as an 8.9 card, and still compiles for sm_90a: a
    cubin built for sm_89 would not load on it."""
    gpu((9, 0))
    monkeypatch.setattr(jit, "real_compute_capability", lambda: (9, 0))
    assert (operands.compute_capability(), operands.capability_label(), jit.device_arch()) == ((9, 0), "9.0", "sm_90a")
    monkeypatch.setenv(CC_ENV, "8.9")
    assert operands.compute_capability() == (8, 9)
    assert operands.capability_label() == "8.9 (DEEPGEMM_CC; really 9.0)"
    assert jit.device_arch() == "sm_90a"
    monkeypatch.setattr(jit, "real_compute_capability", lambda: (8, 9))
    assert jit.device_arch() == "sm_89"


def test_nothing_is_recorded_under_an_overridden_capability(monkeypatch, tmp_path):
    prov = {"gpu": "NVIDIA H200", "driver": "D", "cuda": "C", "date": "T", "commit": "abc"}
    monkeypatch.setenv(CC_ENV, "8.0")
    with pytest.raises(RuntimeError, match=r"DEEPGEMM_CC=8\.0 is set: a run under an overridden compute capability"):
        results.save("progression", [], prov, tmp_path)
    assert not (tmp_path / "progression.json").exists()
    monkeypatch.delenv(CC_ENV)
    assert results.save("progression", [], prov, tmp_path).is_file()


# ---- which stages a GPU runs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cc", "runs"),
    [
        ((7, 5), ()),  # Turing: no bf16 mma.sync, no cp.async
        ((8, 0), PORTABLE),  # A100
        ((8, 9), PORTABLE),  # RTX 4090, L40
        ((9, 0), STAGES),  # H100, H200
        ((10, 0), PORTABLE),  # B200: sm_90a's wgmma is not in sm_100
        ((12, 0), PORTABLE),  # RTX 5090
    ],
)
def test_v0_to_v2_run_from_ampere_on_and_v3_to_v5_on_hopper_alone(gpu, cc, runs):
    gpu(cc)
    assert [stage for stage in STAGES if stages.runs_here(stage)] == list(runs)
    assert stages.runs_here(LIBRARY_SM80) is (cc >= (8, 0))


@pytest.mark.parametrize(
    ("cc", "forced", "sm90a_library"),
    [((9, 0), None, True), ((9, 0), "1", False), ((8, 9), None, False), ((12, 0), None, False)],
)
def test_the_library_stage_runs_where_deepgemm_gemm_runs_the_sm90a_kernel(monkeypatch, gpu, cc, forced, sm90a_library):
    """`library` is the sm_90a kernel through deepgemm.gemm: where the call runs the sm_80 kernel (any GPU but
    Hopper, or Hopper forced), the stage is not run under that name, and says why."""
    from tutorial import library

    gpu(cc)
    if forced:
        monkeypatch.setenv(plan_sm80.FORCE_ENV, forced)
    assert stages.runs_here(LIBRARY) is sm90a_library
    if sm90a_library:
        library.require_sm90a_kernel()
    else:
        with pytest.raises(RuntimeError, match=r"^library needs sm_90a \(Hopper\); .*runs the sm_80 kernel here"):
            library.require_sm90a_kernel()


def test_one_line_says_which_stages_need_what_and_what_the_gpu_is(monkeypatch, gpu):
    gpu((8, 9), "NVIDIA GeForce RTX 4090")
    assert stages.unavailable_line(SM90A_STAGES, "showing the record") == (
        "v3, v4, v5 need sm_90a (Hopper); this GPU (NVIDIA GeForce RTX 4090) is 8.9: showing the record"
    )
    gpu((7, 5), "Tesla T4")
    assert stages.unavailable_line(["v2_mma_sync", "v3_wgmma_tma"], "so") == (
        "v2 needs compute capability 8.0 or newer; v3 needs sm_90a (Hopper); this GPU (Tesla T4) is 7.5: so"
    )
    gpu((9, 0), "NVIDIA H200")
    monkeypatch.setenv(CC_ENV, "12.0")
    assert stages.unavailable_line(["v5_fused"], "so") == (
        "v5 needs sm_90a (Hopper); this GPU (NVIDIA H200) is 12.0 (DEEPGEMM_CC; really 9.0): so"
    )


# ---- the notebooks and bench where v3..v5 cannot run ------------------------------------------------------------


def test_a_notebooks_live_cells_run_only_where_its_stage_runs(monkeypatch, gpu, capsys):
    monkeypatch.setattr(runner, "gpu_available", lambda: False)
    assert not runner.live_for("v3_wgmma_tma") and capsys.readouterr().out == ""  # the banner says "no GPU here"
    monkeypatch.setattr(runner, "gpu_available", lambda: True)
    gpu((8, 9), "NVIDIA L40S")
    assert runner.live_for() and runner.live_for("v2_mma_sync") and capsys.readouterr().out == ""
    assert not runner.live_for("v3_wgmma_tma")
    assert capsys.readouterr().out == (
        "v3 needs sm_90a (Hopper); this GPU (NVIDIA L40S) is 8.9: the `if LIVE:` cells do not run, and every "
        "table shows the record\n"
    )
    gpu((9, 0))
    assert runner.live_for("v3_wgmma_tma") and runner.live_for(LIBRARY)


@pytest.fixture
def fake_bench(monkeypatch):
    """bench on a faked GPU: the stages each progression row was asked to run, rows that verified."""
    ran: list[list[str]] = []

    def bench_shape(stage_list, m, n, k, dtype, **_):
        ran.append(list(stage_list))
        return [{"stage": s, "dtype": dtype, "m": m, "n": n, "k": k, "tflops": 1.0, "passed": True}
                for s in [*stage_list, "cublas"]]  # fmt: skip

    monkeypatch.setattr(cli, "gpu_available", lambda: True)
    monkeypatch.setattr(results, "gpu_available", lambda: True)  # the banners' "(no GPU here)"
    monkeypatch.setattr(bench, "bench_shape", bench_shape)
    monkeypatch.setattr(bench, "bench_pairs", lambda *a, **k: pytest.fail("v5 cannot be alternated here"))
    return ran


def test_bench_runs_v0_to_v2_live_and_shows_v3_to_v5_from_the_record(gpu, fake_bench, capsys):
    gpu((8, 9), "NVIDIA GeForce RTX 4090")
    assert cli.main(["bench", "--shapes", "1024", "--dtype", "fp16", "--settle", "0"]) == 0
    assert fake_bench == [list(PORTABLE)]
    out = capsys.readouterr().out
    line = "v3, v4, v5 need sm_90a (Hopper); this GPU (NVIDIA GeForce RTX 4090) is 8.9: showing the NVIDIA H200 record"
    assert out.count("need sm_90a") == 1 and line in out.splitlines()
    live, recorded = out.split(line)
    assert "v2_mma_sync" in live and "1024x1024x1024" in live and "v3_wgmma_tma" not in live
    assert recorded.lstrip("\n").startswith("RECORDED results: NVIDIA H200")
    recorded_rows = results.rows_of_stages(results.load("progression")["rows"], SM90A_STAGES)
    for row in (r for r in recorded_rows if r["dtype"] == "fp16"):
        assert row["stage"] in recorded and f"{row['m']}x{row['n']}x{row['k']}" in recorded
    assert "v2_mma_sync" not in recorded and "bf16" not in recorded


def test_on_hopper_bench_runs_every_stage_and_says_nothing_of_the_record(gpu, fake_bench, capsys):
    gpu((9, 0))
    assert cli.main(["bench", "--stages", "v1,v3", "--shapes", "512", "--dtype", "bf16", "--settle", "0"]) == 0
    assert fake_bench == [["v1_tiled", "v3_wgmma_tma"]]
    assert "RECORDED" not in capsys.readouterr().out


@pytest.mark.parametrize(("suite", "needs"), [("epilogue", "v5 needs"), ("pairs", "v5 needs")])
def test_a_suite_of_one_sm90a_kernel_shows_its_record_and_says_why(gpu, fake_bench, capsys, suite, needs):
    gpu((12, 0), "NVIDIA GeForce RTX 5090")
    assert cli.main(["bench", "--suite", suite]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{needs} sm_90a (Hopper); this GPU (NVIDIA GeForce RTX 5090) is 12.0: showing the")
    assert out[1].startswith("RECORDED results: NVIDIA H200") and fake_bench == []


@pytest.mark.parametrize(("cc", "stages"), [((9, 0), ("library",)), ((8, 9), ("library_sm80",)),
                                            ((12, 0), ("library_sm80",))])  # fmt: skip
def test_the_shape_table_runs_the_library_kernel_the_call_runs_on_this_gpu(gpu, monkeypatch, cc, stages):
    """Off Hopper the shape table runs live on the sm_80 kernel (into shapes_sm80.json), as deepgemm.gemm does."""
    gpu(cc)
    monkeypatch.setattr(cli, "gpu_available", lambda: True)
    assert cli.suite_stages("shapes") == stages and not cli.missing_here(stages)


def test_the_ablation_suite_ablates_v2_here_and_shows_v3_s_recorded_ablation(gpu, fake_bench, monkeypatch, capsys):
    gpu((8, 0), "NVIDIA A100-SXM4-80GB")
    ran = []

    def run(stage, dtype, size, settle_s, log):
        ran.append(stage)
        return [{"stage": stage, "ablated_stage": stage, "ablation": "as shipped", "dtype": dtype, "m": size,
                 "n": size, "k": size, "passed": True}]  # fmt: skip

    monkeypatch.setattr(cli.ablation, "run", run)
    assert cli.main(["bench", "--suite", "ablation", "--stages", "v2,v3", "--dtype", "fp16"]) == 0
    out = capsys.readouterr().out
    assert ran == ["v2_mma_sync"]
    assert "v3 needs sm_90a (Hopper); this GPU (NVIDIA A100-SXM4-80GB) is 8.0: showing the NVIDIA H200 record" in out
    recorded = {r["ablation"] for r in results.load("ablation")["rows"] if r["ablated_stage"] == "v3_wgmma_tma"}
    assert recorded and all(name in out for name in recorded)


def test_the_call_suite_runs_deepgemm_gemm_on_whichever_kernel_and_shows_no_stage_record(gpu, monkeypatch, capsys):
    gpu((8, 9))
    monkeypatch.setattr(cli, "gpu_available", lambda: True)
    monkeypatch.setattr(cli.call_suite, "bench_call", lambda m, n, k, dtype, **_: [{"stage": "deepgemm.gemm",
                        "dtype": dtype, "m": m, "n": n, "k": k, "passed": True}])  # fmt: skip
    assert cli.main(["bench", "--suite", "call", "--shapes", "64x128x256", "--dtype", "fp16", "--no-first-call"]) == 0
    out = capsys.readouterr().out
    assert "64x128x256" in out and "need" not in out and "RECORDED" not in out


def test_the_recorded_rows_of_stages_come_with_cublas_beside_them():
    progression = [
        {"stage": "v3_wgmma_tma", "dtype": "fp16", "m": 8, "n": 8, "k": 8},
        {"stage": "cublas", "dtype": "fp16", "m": 8, "n": 8, "k": 8},
        {"stage": "cublas", "dtype": "bf16", "m": 8, "n": 8, "k": 8},  # v3 has no bf16 row here
        {"stage": "v2_mma_sync", "dtype": "fp16", "m": 4, "n": 4, "k": 4},
        {"stage": "cublas", "dtype": "fp16", "m": 4, "n": 4, "k": 4},  # beside v2 alone
    ]
    assert results.rows_of_stages(progression, ["v3_wgmma_tma"]) == progression[:2]
    ablation = [  # every row names the stage it ablates, cuBLAS's too
        {"stage": "v3_wgmma_tma", "ablated_stage": "v3_wgmma_tma", "dtype": "fp16", "m": 8, "n": 8, "k": 8},
        {"stage": "cublas", "ablated_stage": "v3_wgmma_tma", "dtype": "fp16", "m": 8, "n": 8, "k": 8},
        {"stage": "cublas", "ablated_stage": "v2_mma_sync", "dtype": "fp16", "m": 8, "n": 8, "k": 8},
    ]
    assert results.rows_of_stages(ablation, ["v3_wgmma_tma"]) == ablation[:2]
