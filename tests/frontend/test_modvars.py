"""Module-level ``.global`` / ``.const`` variables on the interpreter: initialised from
their declarations, addressed by name or through a register, checked for bounds."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl
from ptxdsl.core.errors import InterpreterError

VARS = """
.version 8.5
.target sm_90a
.address_size 64
.global .align 4 .u32 table[8] = {10, 20, 30, 40};
.const .align 4 .f32 scale = 0f40000000;
.global .align 4 .u32 counter;
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
{
	.reg .b32 %r<8>;
	.reg .f32 %f<4>;
	.reg .b64 %rd<8>;
	ld.param.u64 %rd1, [k_param_0];
	ld.param.u64 %rd6, [k_param_1];
	mov.u32 %r1, %tid.x;
	mul.wide.u32 %rd2, %r1, 4;
	mov.u64 %rd3, table;
	add.s64 %rd4, %rd3, %rd2;
	ld.global.u32 %r2, [%rd4];
	ld.const.f32 %f1, [scale];
	cvt.rn.f32.u32 %f2, %r2;
	mul.f32 %f3, %f2, %f1;
	cvta.to.global.u64 %rd5, %rd1;
	add.s64 %rd5, %rd5, %rd2;
	st.global.f32 [%rd5], %f3;
	atom.global.add.u32 %r3, [counter], 1;
	bar.sync 0;
	setp.ne.s32 %p1, %r1, 0;
	@%p1 bra $done;
	ld.global.u32 %r4, [counter];
	cvta.to.global.u64 %rd7, %rd6;
	st.global.u32 [%rd7], %r4;
$done:
	ret;
}
""".replace("\t.reg .b32 %r<8>;", "\t.reg .pred %p<2>;\n\t.reg .b32 %r<8>;")


def test_global_and_const_variables_start_from_their_initialisers():
    k = ptxdsl.from_ptx(VARS)
    out, count = np.zeros(8, np.float32), np.zeros(1, np.uint32)
    k.interpret(out, count, grid=1, block=8)
    np.testing.assert_array_equal(out, [20, 40, 60, 80, 0, 0, 0, 0])
    assert count[0] == 8     # .global without an initialiser starts at zero


def test_reading_past_a_module_variable_is_out_of_bounds():
    k = ptxdsl.from_ptx(VARS)
    with pytest.raises(InterpreterError, match=r"ld.global.u32: out of bounds .*table"):
        k.interpret(np.zeros(8, np.float32), np.zeros(1, np.uint32), grid=1, block=512)
