"""The lab's sweeps and records: every sweep names its rows as its record does, every record has provenance."""

from __future__ import annotations

import json

import pytest

from deepgemm import results
from lab import RESULTS_DIR, cli, sweeps


@pytest.mark.parametrize("sweep", sorted(sweeps.SWEEPS))
def test_each_sweep_names_its_rows_as_its_record_does_shipped_setting_first(sweep):
    names = list(sweeps.variants(sweep))
    recorded = {row["stage"] for row in results.load(sweep, RESULTS_DIR)["rows"]} - {"cublas"}
    assert set(names) == recorded
    shipped = "BALANCED_ROUNDS=1" if sweep == "v5_grid" else None
    if shipped is None:
        knob, _ = sweeps.KNOB_SWEEPS[sweep]
        from deepgemm import stages

        shipped = f"{knob}={stages.load(sweeps.STAGE).DEFAULTS.value(knob)}"
    assert names[0] == f"{sweeps.STAGE} {shipped}"


def test_an_unknown_sweep_is_refused():
    with pytest.raises(ValueError, match="unknown sweep 'v5_gpc'"):
        sweeps.variants("v5_gpc")


def test_every_lab_record_has_provenance_and_a_way_to_show_it():
    for path in RESULTS_DIR.glob("*.json"):
        record = json.loads(path.read_text())
        assert {"gpu", "driver", "cuda", "date", "commit", "command"} <= set(record["provenance"]), path.name
        assert record["rows"], path.name
        assert path.stem in cli.COMMANDS or path.stem in sweeps.RECORD_ONLY, path.stem


def test_without_a_gpu_a_sweep_prints_its_record(monkeypatch, capsys):
    monkeypatch.setattr(cli, "gpu_available", lambda: False)
    assert cli.main(["sweep", "v5_grid"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("RECORDED") and "v5_fused BALANCED_ROUNDS=0" in out
    assert cli.main(["show", "v5_gpc"]) == 0
    assert "v5_fused GPC_SLOTS=1" in capsys.readouterr().out


def test_the_epilogue_hiding_record_shows_every_variant_checked_and_timed(capsys):
    assert cli.main(["show", "v5_hiding"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("RECORDED") and "tail checks: 80 of 80 passed" in out
    for variant in ("plain", "head", "head+gpc", "pingpong"):
        assert variant in out
    rows = json.loads((RESULTS_DIR / "v5_hiding.json").read_text())["rows"]
    medians = {(s["stage"], s["dtype"], s["m"]): s["x_cublas_median"] for s in results.pair_summary(rows)}
    cases = {(dtype, m) for _, dtype, m in medians}
    assert cases == {("fp16", 4096), ("bf16", 4096), ("fp16", 8192), ("bf16", 8192)}
    assert all(medians["pingpong", d, m] < medians["plain", d, m] for d, m in cases)  # what the v5 README says


def test_a_rounds_setting_parses_into_its_config():
    from lab.rounds import parse_variant

    config = parse_variant("CLUSTER_N=2,BLOCK_N=128")
    assert config.block_n == 128 and dict(config.extra) == {"CLUSTER_N": 2}
