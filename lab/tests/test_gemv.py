"""The matrix-vector probe's kernel: it compiles for sm_90a without spilling for the token counts the probe
runs, and its weight streams through cp.async past L1 with the 256-byte L2 hint; the launcher refuses what the
kernel cannot take, by name."""

from pathlib import Path

import pytest

from deepgemm.jit import compile_file_report
from lab import gemv, recorded_dir
from tutorial import results


@pytest.mark.parametrize("dtype", sorted(gemv.DTYPES))
@pytest.mark.parametrize("tokens", [1, 2, 4])
@pytest.mark.parametrize("stages", [4, 8])
def test_the_kernel_compiles_for_sm90a_and_streams_the_weight_through_cp_async(dtype, tokens, stages):
    from tutorial.sass import disassemble

    report = compile_file_report(gemv.SOURCE, {"TOKENS": tokens, "STAGES": stages},
                                 extra=(f"-DDTYPE={gemv.DTYPES[dtype]}",))  # fmt: skip
    assert report.spill_stores == report.spill_loads == report.stack_bytes == 0
    assert report.static_smem_bytes == gemv.WARPS * stages * gemv.WARP * 16  # a 16-byte slot per lane and stage
    code = disassemble(report.cubin)
    assert "LDGSTS.E.BYPASS.LTC256B.128" in code and "LDGDEPBAR" in code
    assert "LDG.E.128.CONSTANT" in code  # the tokens, through L1


@pytest.mark.parametrize("shape", [(gemv.MAX_TOKENS + 1, 64, 64), (1, 64, 60), (0, 64, 64)])
def test_the_probe_refuses_more_tokens_or_a_k_it_cannot_load_in_16_byte_pieces(shape):
    with pytest.raises(ValueError, match="gemv takes M 1 to 8 and K a multiple of 8"):
        gemv.check_shape(*shape)
    gemv.check_shape(4, 64, 64)  # and takes what it can


def test_without_a_gpu_the_probe_prints_its_record_and_the_gpu_it_ran_on(monkeypatch, capsys):
    monkeypatch.setattr(gemv, "gpu_available", lambda: False)
    assert gemv.main([]) == 0
    record = results.load("gemv", recorded_dir("gemv"))
    out = capsys.readouterr().out
    assert record["provenance"]["gpu"] in out and "\n".join(gemv.lines(record["rows"])) in out


def test_the_lab_readme_reading_holds_for_the_record():
    rows = results.load("gemv", recorded_dir("gemv"))["rows"]
    assert all(row[f"{p}graph_passed"] for row in rows for p in ("", "torch_", "gemv4_", "gemv8_"))
    readme = (Path(gemv.__file__).parent / "README.md").read_text()
    assert "it is slower than the library's pick at every row" in readme
    assert all(min(row["gemv4_graph_us"], row["gemv8_graph_us"]) > row["graph_us"] for row in rows)
