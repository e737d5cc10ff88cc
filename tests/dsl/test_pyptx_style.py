"""``kernel(style="pyptx")`` and ``ptxdsl.pyptx``: pyptx's spellings of the PTX text
(its ``.version`` floor, ``smem_N`` / ``mbar_N`` names); the instructions are the same."""
from __future__ import annotations

import re

import pytest

import ptxdsl
import ptxdsl.pyptx
from ptxdsl import kernel, ptx, reg, smem
from ptxdsl.core.errors import TraceError
from ptxdsl.types import b32, bf16, u32


def _body(fn):
    def k():
        fn()
        ptx.ret()
    return k


def _smem_kernel():
    smem.alloc(bf16, (64, 64), swizzle="128B")
    smem.alloc(u32, (4,))
    bar = smem.mbarrier(2)
    ptx.mbarrier.init(bar[1], 1)


def test_pyptx_style_version_floor_and_names():
    text = kernel(arch="sm_90a", style="pyptx")(_body(_smem_kernel)).ptx()
    assert ".version 8.5\n" in text
    assert re.search(r"\.shared \.align 1024 \.b8 smem_0\[8192\];", text)
    assert ".b8 smem_1[16];" in text and ".b8 mbar_0[16];" in text
    assert "mbarrier.init.shared::cta.b64 [mbar_0+8], 1;" in text


def test_plain_style_unchanged():
    text = kernel(arch="sm_90a")(_body(_smem_kernel)).ptx()
    assert ".version 8.0\n" in text
    assert ".b8 smem0[8192];" in text and ".b8 smem2[16];" in text
    assert "[smem2+8]" in text and "smem_" not in text and "mbar_" not in text


def test_pyptx_style_same_instructions_as_plain():
    def strip(t):   # everything but the header, the version and the array names
        t = t[t.index(".target"):]
        return re.sub(r"smem_?\d+|mbar_\d+", "S", t)
    a = kernel(arch="sm_90a", style="pyptx")(_body(_smem_kernel)).ptx()
    b = kernel(arch="sm_90a")(_body(_smem_kernel)).ptx()
    assert strip(a) == strip(b)


@pytest.mark.parametrize("arch, version", [("sm_90a", "8.5"), ("sm_100a", "8.8"),
                                           ("sm_120a", "8.7"), ("sm_80", "8.5")])
def test_pyptx_version_per_arch(arch, version):
    text = ptxdsl.pyptx.kernel(arch=arch)(_body(lambda: None)).ptx()
    assert f".version {version}\n" in text


def test_explicit_version_wins_and_is_checked():
    text = kernel(arch="sm_90a", style="pyptx", version=(8, 3))(_body(lambda: None)).ptx()
    assert ".version 8.3\n" in text


def test_compat_module_bare_kernel_and_empty_params():
    from ptxdsl.pyptx import kernel as pk

    @pk
    def simple():
        r = reg.array(b32, 5)
        ptx.mov(b32, r[0], 42)
        ptx.ret()
    text = simple.ptx()
    assert simple.style == "pyptx" and ".version 8.5\n" in text
    assert ".visible .entry simple()\n" in text   # no parameters: '()' on one line
    assert ptxdsl.pyptx.reg is ptxdsl.reg and ptxdsl.pyptx.smem is ptxdsl.smem


def test_bad_style_refused():
    with pytest.raises(TraceError, match="style is 'ptxdsl' or 'pyptx'"):
        kernel(style="triton")(_body(lambda: None))
