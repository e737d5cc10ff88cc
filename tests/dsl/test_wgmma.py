"""ptx.wgmma (the user surface) and the shared-memory matrix descriptor codec."""
from __future__ import annotations

import re

import pytest

from ptxdsl import kernel, ptx, smem, toolchain
from ptxdsl.core.errors import PtxdslError
from ptxdsl.isa.descriptors import SmemDescriptor, swizzle_offset
from ptxdsl.core.types import bf16, f32
from ptxdsl.dsl.wgmma import MASKED_DESC_B128, WgmmaLayout

PTXAS = toolchain.find_ptxas()


@pytest.mark.parametrize("fields", [
    dict(start=0x1230, leading=16, stride=1024, base_offset=0, swizzle=128),
    dict(start=0, leading=4096, stride=512, base_offset=3, swizzle=64),
    dict(start=(1 << 18) - 16, leading=0, stride=256, base_offset=7, swizzle=32),
    dict(start=16, leading=128, stride=256, base_offset=0, swizzle=0),
])
def test_descriptor_round_trips(fields):
    d = SmemDescriptor(**fields)
    word = d.encode()
    assert 0 <= word < 1 << 64
    assert SmemDescriptor.decode(word) == d
    assert word == (fields["start"] >> 4) | d.constant_bits()


def test_pyptx_constant_is_lbo_16_sbo_1024_swizzle_128():
    assert SmemDescriptor.decode(MASKED_DESC_B128 | 0x40) == SmemDescriptor(
        start=0x400, leading=16, stride=1024, base_offset=0, swizzle=128)
    assert MASKED_DESC_B128 == 0x4000004000010000


def test_descriptor_rejects_bad_fields():
    for bad in (dict(start=8), dict(leading=1 << 18), dict(base_offset=8), dict(swizzle=16)):
        with pytest.raises(ValueError):
            SmemDescriptor(**bad)


@pytest.mark.parametrize("span", [32, 64, 128])
def test_swizzle_permutes_chunks_within_each_row(span):
    region = 8 * span
    seen = {swizzle_offset(x, span) for x in range(0, 8 * region, 16)}
    assert seen == set(range(0, 8 * region, 16))          # a permutation of 16-byte chunks
    for x in range(0, 8 * region, 16):
        y = swizzle_offset(x, span)
        assert y // span == x // span                      # stays in its row of `span` bytes
        assert y % 16 == 0
    assert swizzle_offset(128 + 16, 128) == 128            # row 1: chunk 1 <-> chunk 0
    assert swizzle_offset(0x3F0, 0) == 0x3F0


def test_accumulator_layout_covers_the_tile_once():
    for n in (8, 64, 256):
        lay = WgmmaLayout(n)
        cells = [lay.position(t, i) for t in range(128) for i in range(lay.elems)]
        assert len(set(cells)) == 64 * n and {r for r, _ in cells} == set(range(64))
    assert WgmmaLayout(64, "f16").nregs == 16 and WgmmaLayout(64).nregs == 32


def _gemm_body(swizzle):
    def body():
        cols = swizzle // 2 if swizzle else 64
        sa = smem.alloc(bf16, (64, cols), swizzle=swizzle)
        sb = smem.alloc(bf16, (64, cols), swizzle=swizzle)
        acc = ptx.wgmma.accumulator(64, f32, init=0.0)
        da = ptx.wgmma.descriptor(sa, leading=16, stride=1024)
        db = ptx.wgmma.descriptor(sb, leading=16, stride=1024)
        ptx.wgmma.fence()
        ptx.wgmma.mma(acc, da, db, ab_type=bf16, accumulate=False, transpose_b=1)
        d2 = ptx.wgmma.masked_descriptor(sa.base, byte_offset=32, mask=262016)
        ptx.wgmma.mma(acc, d2, db, ab_type=bf16, scale_a=-1)
        ptx.wgmma.commit()
        ptx.wgmma.wait(0)
    return body


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
def test_surface_records_the_documented_instructions(swizzle):
    text = kernel(arch="sm_90a", block=(128, 1, 1))(_gemm_body(swizzle)).ptx()
    want = SmemDescriptor(0, 16, 1024, 0, swizzle).constant_bits()
    assert f"or.b64 %rd0, %rd0, {hex(want)};" in text
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16 \{(%f\d+, ){31}"
                     r"%f\d+\}, %rd0, %rd1, 0, 1, 1, 0, 1;", text)
    assert re.search(r", %rd2, %rd1, 1, -1, 1, 0, 0;", text)
    assert "and.b32 %r5, %r4, 0x3ff80;" in text             # pyptx's masked spelling
    assert ".align 1024" in text or swizzle < 128
    if PTXAS:
        toolchain.assemble(text, "sm_90a", verbose=False, ptxas=PTXAS)


def test_surface_refuses_with_a_reason():
    def bad_transpose():
        from ptxdsl.core.types import e4m3
        acc = ptx.wgmma.accumulator(8, f32)
        sb = smem.alloc(bf16, (64, 64))
        d = ptx.wgmma.descriptor(sb)
        ptx.wgmma.mma(acc, d, d, ab_type=e4m3, transpose_b=1)
    with pytest.raises(PtxdslError, match=r"transposes only \.f16/\.bf16"):
        kernel(arch="sm_90a")(bad_transpose).ptx()

    def bad_swizzle():
        smem.alloc(bf16, (8, 128), swizzle=128)
    with pytest.raises(PtxdslError, match=r"rows of at most 128 bytes"):
        kernel(arch="sm_90a")(bad_swizzle).ptx()

    def narrow_swizzle():       # TMA would write its rows 128 bytes apart, past the end
        smem.alloc(bf16, (8, 32), swizzle=128)
    with pytest.raises(PtxdslError, match=r"needs rows of the whole span, 64 bf16; got 32"):
        kernel(arch="sm_90a")(narrow_swizzle).ptx()
