"""The one arch parser (ptxdsl/arch.py): names, refusals and the PTX ISA floor."""
from __future__ import annotations

import pytest

from ptxdsl.core.arch import Arch, arch_ptx_floor, parse_arch
from ptxdsl.core.errors import ArchError, TraceError


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


# ptxas 13 (measured): no sm_70/72/101, 'a' from sm_90, 'f' from sm_100; sm_100f/120f at 8.8
@pytest.mark.parametrize("arch", ["sm_70", "sm_72", "sm_80a", "sm_90f", "sm_101a", "sm_60"])
def test_archs_ptxas_13_refuses(arch):
    with pytest.raises(ArchError, match="unknown arch"):
        parse_arch(arch)


@pytest.mark.parametrize("arch,version", [("sm_100f", (8, 8)), ("sm_120f", (8, 8)),
                                          ("sm_120a", (8, 7)), ("sm_90a", (8, 0)),
                                          ("sm_110f", (9, 0))])
def test_suffixed_arch_versions(arch, version):
    assert arch_ptx_floor(arch) == version


@pytest.mark.parametrize("arch", ["sm_100f", "sm_120f", "sm_103a"])
def test_suffixed_archs_assemble(arch):
    from ptxdsl import kernel, reg, toolchain
    from ptxdsl.core.types import u32
    if toolchain.find_ptxas() is None:
        pytest.skip("no ptxas")

    @kernel(arch=arch)
    def body():
        reg.scalar(u32, init=1)
    body.check()
