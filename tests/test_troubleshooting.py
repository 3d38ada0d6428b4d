"""The troubleshooting table (notebook 08) from the compiler, the checks and the records (no GPU)."""

from __future__ import annotations

import pytest

from tutorial import results, troubleshooting

TUNED_ROW = ("fp16", 128, 4096, 4096)  # the shape the table's row quotes


def test_a_plain_sm_90_build_fails_on_the_hopper_only_instructions():
    assert "not supported on .target 'sm_90'" in troubleshooting.compile_error("sm_90")
    assert "__cluster_dims__ is not supported" in troubleshooting.compile_error("sm_80")


def test_the_messages_name_the_gpu_and_the_stride():
    assert "needs compute capability exactly 9.0" in troubleshooting.wrong_gpu_error()
    assert "multiple of 16 bytes, got 1400" in troubleshooting.misaligned_error()


def test_every_symptom_of_the_seed_has_a_row_drawn_from_the_records():
    rows = troubleshooting.symptoms()
    assert [r.symptom for r in rows] == [
        "PTX version / unsupported instruction", "misaligned address", "half of cuBLAS's speed",
        "large deviations", "slow first call", "second call still slow",
    ]  # fmt: skip
    assert all(r.shown and r.cause and r.fix for r in rows)
    tuned = next(r for r in results.load("autotune")["rows"] if (r["dtype"], r["m"], r["n"], r["k"]) == TUNED_ROW)
    assert "default tile takes" in rows[2].shown and f"tuned {tuned['name']} " in rows[2].shown  # autotune.json


def test_a_missing_record_row_is_an_error_not_a_blank():
    with pytest.raises(LookupError, match="no row"):
        troubleshooting.row({"rows": [{"m": 1}]}, m=2)
