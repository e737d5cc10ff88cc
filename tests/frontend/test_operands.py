"""Operand forms of imported PTX: negated predicate sources (``!%p``), vector registers
(``.reg .v4 .f32 %v``, ``%v.x``), constant expressions (``[%r+288*2]``)."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl
from ptxdsl.core.errors import PtxdslError

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"

NEG = HEAD + """
.visible .entry k(.param .u64 k_param_0)
{
	.reg .pred %p<4>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [k_param_0];
	mov.u32 %r1, %tid.x;
	setp.lt.u32 %p1, %r1, 4;
	setp.lt.u32 %p2, %r1, 6;
	and.pred %p3, !%p1, %p2;
	selp.b32 %r2, 7, 9, !%p3;
	vote.sync.ballot.b32 %r3, !%p1, -1;
	add.s32 %r2, %r2, %r3;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r1, 4;
	add.s64 %rd2, %rd2, %rd3;
	st.global.u32 [%rd2+(2*2-4)], %r2;
	ret;
}
"""


def test_negated_predicate_sources_print_and_run():
    mod = ptxdsl.parse_ptx(NEG)
    text = mod.emit()
    assert "and.pred %p3, !%p1, %p2;" in text and "selp.b32 %r2, 7, 9, !%p3;" in text
    assert ptxdsl.parse_ptx(text).emit() == text
    out = np.zeros(32, np.uint32)
    mod.kernels["k"].interpret(out, grid=1, block=32)
    want = np.where((np.arange(32) >= 4) & (np.arange(32) < 6), 9, 7) + 0xFFFFFFF0
    np.testing.assert_array_equal(out, want.astype(np.uint64) & 0xFFFFFFFF)


def test_a_negated_destination_or_non_predicate_is_refused():
    with pytest.raises(PtxdslError, match="negates a predicate"):
        ptxdsl.parse_ptx(NEG.replace("and.pred %p3, !%p1, %p2;", "and.pred !%p3, %p1, %p2;"))
    with pytest.raises(PtxdslError, match="negates a predicate register only"):
        ptxdsl.parse_ptx(NEG.replace("selp.b32 %r2, 7, 9, !%p3;", "selp.b32 %r2, 7, !%r1, %p3;"))


VEC = HEAD + """
.visible .entry k(.param .u64 k_param_0)
{
	.reg .v4 .f32 %v;
	.reg .f32 %f<2>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [k_param_0];
	cvta.to.global.u64 %rd2, %rd1;
	ld.global.v4.f32 %v, [%rd2];
	add.f32 %f1, %v.x, %v.a;
	mov.f32 %v.y, %f1;
	st.global.v4.f32 [%rd2], %v;
	ret;
}
"""


def test_vector_registers_become_their_elements():
    mod = ptxdsl.parse_ptx(VEC)
    text = mod.emit()
    assert "ld.global.v4.f32 {%v_x, %v_y, %v_z, %v_w}, [%rd2];" in text
    assert "add.f32 %f1, %v_x, %v_w;" in text
    assert ptxdsl.parse_ptx(text).emit() == text
    out = np.array([1, 2, 3, 4], np.float32)
    mod.kernels["k"].interpret(out, grid=1, block=1)
    np.testing.assert_array_equal(out, [1, 5, 3, 4])


def test_a_sink_in_an_unpacking_mov_keeps_the_other_part():
    text = HEAD + """
.visible .entry k(.param .u64 k_param_0)
{
	.reg .b16 %rs<2>;
	.reg .b32 %r<3>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [k_param_0];
	cvta.to.global.u64 %rd2, %rd1;
	mov.b32 %r1, 0x12345678;
	mov.b32 {_, %rs1}, %r1;
	cvt.u32.u16 %r2, %rs1;
	st.global.u32 [%rd2], %r2;
	ret;
}
"""
    mod = ptxdsl.parse_ptx(text)
    assert "mov.b32 {_, %rs1}, %r1;" in mod.emit()
    out = np.zeros(1, np.uint32)
    mod.kernels["k"].interpret(out, grid=1, block=1)
    assert out[0] == 0x1234
