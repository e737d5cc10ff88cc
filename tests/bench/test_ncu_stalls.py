"""lab/ncu_stalls.py's report half (its run half is the workload ncu profiles on a GPU): an
ncu source-page export in ncu's CSV shape summed by stall reason and ranked by
instruction, and a file of another shape refused with what to export instead."""
from __future__ import annotations

import pytest

from lab.ncu_stalls import read_source, summary

HEAD = ('"Address","Source","Warp Stall Sampling (All Samples)",'
        '"Warp Stall Sampling (Not-issued Samples)","stall_barrier","stall_mio",'
        '"stall_short_sb","stall_barrier (Not Issued)"')
CSV = "\n".join([
    '"Kernel Name","attention_bwd_bf16_d64",',
    HEAD,
    '"0x7f0000a0","      STS.64 [R18], R24","40","38","0","36","4","0"',
    '"0x7f0000b0","      SHF.L.U32 R15, R6, 0x1f, RZ","100","99","0","0","100","0"',
    '"0x7f0000c0","      BAR.SYNC 0x3, 0x100","7","7","7","0","0","7"',
    '"0x7f0000d0","      NOP","","","","","",""',
]) + "\n"


def test_sums_by_reason_and_ranks_instructions(tmp_path):
    path = tmp_path / "src.csv"
    path.write_text(CSV)
    name, rows = read_source(str(path))
    s = summary(rows, top=2)
    assert name == "attention_bwd_bf16_d64" and s["samples"] == 147
    assert list(s["by_reason"].items()) == [("short_sb", 104), ("mio", 36), ("barrier", 7)]
    assert [t["sass"] for t in s["top"]] == ["SHF.L.U32 R15, R6, 0x1f, RZ",
                                             "STS.64 [R18], R24"]
    assert s["top"][1]["reasons"] == {"mio": 36}          # (short_sb's 4: under 15%)


def test_refuses_another_export(tmp_path):
    path = tmp_path / "details.csv"
    path.write_text('"ID","Kernel Name","Metric Name"\n"0","k","Duration"\n')
    with pytest.raises(ValueError, match="not ncu's source page.*--page source --csv"):
        read_source(str(path))
    path.write_text('"Kernel Name","k",\n"Address","Source"\n')
    with pytest.raises(ValueError, match="SourceCounters.*--print-source sass"):
        read_source(str(path))
