"""Seed 003's RMSNorm kernel, verbatim: it traces, verifies, prints the instructions the seed
promises, and ptxas assembles it for sm_80 and sm_90a.

``(B, N)`` covers the v4 path (items per thread a multiple of 4) and the scalar path
(N not divisible by 4 * block: 96, 160, 480 give 3, 5 and 15 items per thread).
"""
from __future__ import annotations

import re

import pytest

from ptxdsl import toolchain
from seed_kernels import _pick_block, build_rms_norm

needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas found")

V4_SHAPES = [(1, 512), (4, 1024), (2048, 8192), (3, 4096), (8, 2048)]
SCALAR_SHAPES = [(2, 96), (5, 160), (7, 480), (1, 32)]
ARCHS = ["sm_80", "sm_90a"]

# What the seed's text says the kernel is made of.
V4_OPCODES = ["ld.global.v4.f32", "fma.rn.f32", "shfl.sync.bfly.b32", "rsqrt.approx.f32",
              "bar.sync", "st.global.v4.f32", "mul.wide.u32"]
SCALAR_OPCODES = ["ld.global.f32", "fma.rn.f32", "shfl.sync.bfly.b32", "rsqrt.approx.f32",
                  "bar.sync", "st.global.f32", "mul.wide.u32"]


def _uses_v4(n: int) -> bool:
    ipt = n // _pick_block(n)
    return ipt >= 4 and ipt % 4 == 0


def _opcodes(ptx: str) -> list[str]:
    """The opcode of every instruction line (guards stripped)."""
    out = []
    for line in ptx.splitlines():
        line = line.strip()
        if not line or line.startswith(("//", ".", "{", "}", "$")) or line.endswith(":"):
            continue
        line = re.sub(r"^@!?%\w+\s+", "", line)
        out.append(line.split()[0].rstrip(";"))
    return out


def test_shapes_cover_both_paths():
    assert all(_uses_v4(n) for _, n in V4_SHAPES)
    assert not any(_uses_v4(n) for _, n in SCALAR_SHAPES)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("B,N", V4_SHAPES + SCALAR_SHAPES)
def test_seed_contains_the_promised_instructions(B, N, arch):
    k = build_rms_norm(B, N, arch=arch)
    ptx = k.ptx()
    ops = _opcodes(ptx)
    for want in (V4_OPCODES if _uses_v4(N) else SCALAR_OPCODES):
        assert want in ops, f"{want} missing from RMSNorm B={B} N={N} {arch}"
    assert f".target {arch}" in ptx
    # The seed's step 5: the warp butterfly is exactly five shfl/add pairs.
    assert ops.count("shfl.sync.bfly.b32") == 5
    assert ops.count("bar.sync") == 2
    if _uses_v4(N):
        ipt = N // _pick_block(N)
        assert ops.count("ld.global.v4.f32") == 2 * (ipt // 4)  # x in pass 1, w in pass 2
        assert ops.count("st.global.v4.f32") == ipt // 4
        assert ops.count("fma.rn.f32") == ipt                     # 4 per v4 load
        assert "mul.lo.u32" not in ops                            # every product meets a pointer


@needs_ptxas
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("B,N", V4_SHAPES + SCALAR_SHAPES)
def test_seed_assembles(B, N, arch):
    res = build_rms_norm(B, N, arch=arch).check()
    r = res.resources["rms_norm"]
    assert r.spill_stores == 0 and r.spill_loads == 0
    # partials[num_warps] then stats[1], each 16-byte aligned (smem.alloc's default)
    partials = 4 * (_pick_block(N) // 32)
    assert r.shared == (partials + 15) // 16 * 16 + 4


def test_seed_version_follows_arch():
    assert ".version 7.0\n.target sm_80\n" in build_rms_norm(4, 1024, arch="sm_80").ptx()
    assert ".version 8.0\n.target sm_90a\n" in build_rms_norm(4, 1024, arch="sm_90a").ptx()


def test_seed_row_offset_is_one_wide_multiply():
    """``row * (N * 4)`` meets only pointers, so it is mul.wide.u32 and nothing else."""
    ptx = build_rms_norm(4, 1024).ptx()
    assert re.search(r"mov\.u32 (%r\d+), %ctaid\.x;\n\tmul\.wide\.u32 %rd\d+, \1, 4096;", ptx)
    assert "mul.lo.u32 %r" not in ptx
