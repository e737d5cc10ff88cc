"""The one arch parser (ptxdsl/arch.py): names, refusals and the PTX ISA floor."""
from __future__ import annotations

import pytest

from ptxdsl.arch import Arch, arch_ptx_floor, parse_arch
from ptxdsl.errors import ArchError, TraceError


@pytest.mark.parametrize("arch,num,suffix", [
    ("sm_80", 80, ""), ("sm_90a", 90, "a"), ("SM_90", 90, ""), ("sm_100f", 100, "f")])
def test_parse_arch(arch, num, suffix):
    assert parse_arch(arch) == Arch(num, suffix)
    assert parse_arch(arch).name == arch.lower()


@pytest.mark.parametrize("arch,msg", [("compute_80", "must look like"), ("sm_81", "unknown arch"),
                                      ("sm_x", "must look like"), ("sm_90aa", "must look like"),
                                      ("sm_90b", "must look like"), ("sm_", "must look like")])
def test_parse_arch_refusals(arch, msg):
    with pytest.raises(ArchError, match=msg) as info:
        parse_arch(arch)
    assert isinstance(info.value, TraceError)


@pytest.mark.parametrize("arch,floor", [("sm_75", (6, 3)), ("sm_80", (7, 0)), ("sm_90", (7, 8)),
                                        ("sm_90a", (8, 0)), ("sm_100", (8, 6))])
def test_arch_ptx_floor(arch, floor):
    assert arch_ptx_floor(arch) == floor
