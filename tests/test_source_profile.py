"""Stall samples pinned to SASS instructions and kernel.cu lines: the line table, the warp roles and the
join with ncu's per-instruction table, on kernels compiled here (no GPU)."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

import pytest

from tutorial import source_profile as sp
from tutorial.sass import disassemble
from tutorial.stages import compile_report, kernel_path

sys.path.insert(0, str(Path(__file__).parent))
from kernels import function_sass, launcher_defines, normalised_sass, sass

WARP_SPECIALISED = ("v4_pipeline_swizzle", "v5_fused", "library")  # `profile --source` also takes the library


@pytest.mark.parametrize("stage", WARP_SPECIALISED)
def test_a_line_table_leaves_the_sass_as_it_is(stage):
    """`profile --source` profiles the kernel built with -lineinfo: it must be the kernel that ships."""
    defines = launcher_defines(stage, False)
    plain = sass(stage, defines)
    lined = disassemble(compile_report(stage, dict(defines), options=("-lineinfo",)).cubin)
    assert normalised_sass(plain, "gemm_kernel") == normalised_sass(lined, "gemm_kernel")


@pytest.mark.parametrize("stage", WARP_SPECIALISED)
def test_the_roles_are_the_producer_branch_and_its_else(stage):
    source = kernel_path(stage).read_text()
    ranges = sp.role_ranges(source)
    lines = source.splitlines()
    (p_first, p_last), (c_first, c_last) = ranges["producer"], ranges["consumers"]
    assert sp.ROLE_BRANCH in lines[p_first - 1] and "else" in lines[c_first - 1] and p_last == c_first - 1
    assert "---- producer" in lines[p_first] and "---- consumers" in "\n".join(lines[c_first - 1 : c_first + 1])
    assert lines[c_last - 1].strip().startswith("}") and c_last > c_first + 20


def test_a_stage_without_warp_roles_has_none():
    assert sp.role_ranges(kernel_path("v2_mma_sync").read_text()) == {}
    assert sp.role_of(10, {}) == "all warps"


def test_every_instruction_gets_a_line_and_v5s_wgmma_and_tma_loads_their_roles():
    """The line table covers gemm_kernel instruction for instruction (the count cuobjdump shows), the
    HGMMA sit in the consumers' branch, the TMA loads in the producer's, each through its inlined helper."""
    defines = dict(launcher_defines("v5_fused", False))
    lines = sp.compiled_lines("v5_fused", defines)
    sass = function_sass(disassemble(compile_report("v5_fused", defines).cubin), "gemm_kernel")
    assert len(lines) == len(re.findall(r"/\*[0-9a-f]{4}\*/", sass))
    ranges = sp.role_ranges(kernel_path("v5_fused").read_text())
    roles = {sp.opcode(s.instruction).split(".")[0]: set() for s in lines}
    for s in lines:
        roles[sp.opcode(s.instruction).split(".")[0]].add(sp.role_of(s.body_line, ranges))
    assert roles["HGMMA"] == {"consumers"} and roles["UTMALDG"] == {"producer"}
    hgmma = next(s for s in lines if s.instruction.startswith("HGMMA"))
    assert "wgmma_m64nNk16" in kernel_path("v5_fused").read_text().splitlines()[hgmma.line - 1]


CSV = (
    '"Kernel Name","gemm_kernel"\n'
    '"Address","Source","Warp Stall Sampling (All Samples)",'
    '"Warp Stall Sampling (Not-issued Samples)","stall_long_sb"\n'
    '"0x7f0000000000","MOV R1, c[0x0][0x28] ;","3","1","0"\n'
    '"0x7f0000000010","@P0 BRA 0x100 ;","1,024","24","7"\n'
)


def test_ncu_s_instruction_table_is_read_with_its_numbers():
    rows = sp.parse_source_csv("==PROF== Connected\n" + CSV)
    assert [r["Source"] for r in rows] == ["MOV R1, c[0x0][0x28] ;", "@P0 BRA 0x100 ;"]
    assert rows[1][sp.SAMPLES_ALL] == 1024 and rows[1]["stall_long_sb"] == 7
    with pytest.raises(ValueError, match="no per-instruction table"):
        sp.parse_source_csv("nothing")


def test_the_join_is_by_position_and_refuses_another_kernel():
    compiled = [sp.SassLine(0, "MOV R1, c[0x0][0x28]", 5, 5), sp.SassLine(16, "@P0 BRA 0x100", 9, 40)]
    rows = sp.joined(sp.parse_source_csv(CSV), compiled)
    assert [(r["line"], r["body_line"]) for r in rows] == [(5, 5), (9, 40)]
    with pytest.raises(ValueError, match="ncu shows"):
        sp.joined(sp.parse_source_csv(CSV), [compiled[0], sp.SassLine(16, "EXIT", 9, 9)])
    with pytest.raises(ValueError, match="2 instructions"):
        sp.joined(sp.parse_source_csv(CSV), compiled[:1])


def test_samples_add_up_per_line_and_role():
    rows = [
        {"line": 3, "body_line": 30, sp.SAMPLES_ALL: 6, sp.SAMPLES_NOT_ISSUED: 2},
        {"line": 3, "body_line": 31, sp.SAMPLES_ALL: 2, sp.SAMPLES_NOT_ISSUED: 0},
        {"line": 3, "body_line": 50, sp.SAMPLES_ALL: 2, sp.SAMPLES_NOT_ISSUED: 1},
    ]
    source = "\n".join(f"line {i}" for i in range(1, 61))
    found = sp.by_line(rows, source, {"producer": (20, 39), "consumers": (40, 60)})
    assert [(r["role"], r["line"], r["samples"], r["instructions"]) for r in found] == [
        ("producer", 3, 8, 2), ("consumers", 3, 2, 1)
    ]  # fmt: skip
    assert found[0]["pct_samples"] == 80 and found[0]["source"] == "line 3"


def test_the_jit_adds_a_line_table_only_when_asked(monkeypatch):
    from deepgemm import jit

    monkeypatch.delenv(jit.LINEINFO_ENV, raising=False)
    assert jit.compile_options() == jit.BASE_OPTIONS
    monkeypatch.setenv(jit.LINEINFO_ENV, "1")
    assert jit.compile_options() == (*jit.BASE_OPTIONS, "-lineinfo")


def test_the_notebooks_instruction_table_reads_the_record():
    """Per stage, the instructions with the most stall samples, their main reason, role and kernel.cu line:
    shares that fall, reasons that are stall names, and v4's and v5's largest wait on their own wgmma."""
    from tutorial import results, tables

    rows = results.load("profile_source")["rows"]
    reasons = {name.removeprefix("stall_") for name in rows[0]["instructions"][0] if name.startswith("stall_")}
    for stage in ("v0", "v1", "v2", "v3", "v4", "v5"):
        table = tables.source_instructions(rows, stage)
        assert len(table) == 8 and all(a["pct"] >= b["pct"] for a, b in itertools.pairwise(table)), stage
        assert all(r["reason"] in reasons for r in table), stage
    for stage, wait in (("v4", "wgmma_wait_group<0>"), ("v5", "wgmma_wait_group<1>")):
        top = tables.source_instructions(rows, stage)[0]
        assert top["role"] == "consumers" and wait in top["source"] and "WARPGROUP.DEPBAR" in top["sass"], top
