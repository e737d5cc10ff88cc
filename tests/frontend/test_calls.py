"""``call`` and ``.func`` bodies: parsed against the table, printed as a fixed point,
accepted by ptxas, and run on the interpreter by inlining (``.param`` arguments and
results, ``.reg`` parameters, a struct passed by value, a guarded and a nested call)."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl
from ptxdsl import toolchain
from ptxdsl.core.errors import InterpreterError, PtxdslError, ToolchainError

CALLS = """
.version 8.5
.target sm_90a
.address_size 64

.func (.reg .b32 %rv) twice(.reg .b32 %x)
{
	add.s32 %rv, %x, %x;
	ret;
}

.func (.param .b32 func_retval0) addpair(.param .b32 addpair_param_0,
                                         .param .align 8 .b8 addpair_param_1[16],
                                         .param .b8 addpair_param_2)
{
	.reg .pred %p<2>;
	.reg .b16 %rs<2>;
	.reg .b32 %r<6>;
	ld.param.b32 %r1, [addpair_param_0];
	ld.param.v2.b32 {%r2, %r3}, [addpair_param_1+8];
	ld.param.s8 %r5, [addpair_param_2];
	add.s32 %r4, %r2, %r3;
	add.s32 %r4, %r4, %r5;
	setp.lt.s32 %p1, %r1, 4;
	@%p1 bra $early;
	call (%r4), twice, (%r4);
$early:
	add.s32 %r4, %r4, %r1;
	st.param.b32 [func_retval0], %r4;
	ret;
}

.visible .entry k(.param .u64 k_param_0)
{
	.reg .pred %p<2>;
	.reg .b16 %rs<2>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [k_param_0];
	mov.u32 %r1, %tid.x;
	mov.u32 %r5, 0;
	add.s32 %r2, %r1, 100;
	{
	.param .b32 param0;
	.param .align 8 .b8 param1[16];
	.param .b8 param2;
	.param .b32 retval0;
	st.param.b32 [param0], %r1;
	st.param.v2.b32 [param1+8], {%r1, %r2};
	mov.b16 %rs1, 0xfffe;
	st.param.b8 [param2], %rs1;
	call.uni (retval0), addpair, (param0, param1, param2);
	ld.param.b32 %r3, [retval0];
	}
	setp.eq.s32 %p1, %r1, 7;
	{
	.param .b32 param0;
	.param .align 8 .b8 param1[16];
	.param .b8 param2;
	.param .b32 retval0;
	st.param.b32 [param0], 0;
	st.param.v2.b32 [param1+8], {%r5, %r5};
	st.param.b8 [param2], %rs1;
	@%p1 call.uni (retval0), addpair, (param0, param1, param2);
	@!%p1 bra $skip;
	ld.param.b32 %r5, [retval0];
	}
$skip:
	add.s32 %r3, %r3, %r5;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r1, 4;
	add.s64 %rd2, %rd2, %rd3;
	st.global.u32 [%rd2], %r3;
	ret;
}
"""


def _expected(n):
    out = []
    for t in range(n):
        v = t + (t + 100) - 2
        if t >= 4:
            v *= 2
        v += t
        w = (0 + 0 - 2) + 0 if t == 7 else 0
        out.append(v + w)
    return np.array(out, np.int32).view(np.uint32)


def test_calls_parse_print_a_fixed_point_and_run_inlined():
    mod = ptxdsl.parse_ptx(CALLS, filename="calls.ptx")
    text = mod.emit()
    assert "call.uni (retval0), addpair, (param0, param1, param2);" in text
    assert "call (%r4), twice, (%r4);" in text
    assert ".param .b32 param0S1_;" in text          # the second scope's variables renamed
    assert ptxdsl.parse_ptx(text).emit() == text
    out = np.zeros(32, np.uint32)
    mod.kernels["k"].interpret(out, grid=1, block=32)
    np.testing.assert_array_equal(out, _expected(32))


def _have_ptxas():
    try:
        return toolchain.find_ptxas() is not None
    except ToolchainError:
        return False


@pytest.mark.ptxas
@pytest.mark.skipif(not _have_ptxas(), reason="no ptxas")
def test_ptxas_takes_the_canonical_calls_with_the_originals_resources():
    mod = ptxdsl.parse_ptx(CALLS)
    assert toolchain.assemble(mod.emit(), "sm_90a").resources == \
        toolchain.assemble(CALLS, "sm_90a").resources


def test_st_param_to_a_kernel_parameter_is_refused_at_its_line():
    bad = CALLS.replace("st.param.b32 [param0], %r1;", "st.param.b32 [k_param_0], %r1;")
    with pytest.raises(PtxdslError, match=r"calls.ptx:\d+: .*read-only"):
        ptxdsl.parse_ptx(bad, filename="calls.ptx")


def test_recursion_is_refused_by_the_interpreter_naming_the_call():
    rec = """
.version 8.5
.target sm_90a
.address_size 64
.func (.reg .b32 %rv) f(.reg .b32 %x)
{
	call (%rv), f, (%x);
	ret;
}
.visible .entry k()
{
	.reg .b32 %r<3>;
	mov.b32 %r1, 1;
	call (%r2), f, (%r1);
	ret;
}
"""
    k = ptxdsl.from_ptx(rec)
    with pytest.raises(InterpreterError, match="calls itself"):
        k.interpret(grid=1, block=1)


def test_a_load_that_splits_a_stored_value_is_refused():
    bad = CALLS.replace("ld.param.v2.b32 {%r2, %r3}, [addpair_param_1+8];",
                        "ld.param.b32 %r2, [addpair_param_1+4];\n\tmov.b32 %r3, 0;")
    k = ptxdsl.from_ptx(bad)
    with pytest.raises(InterpreterError, match=r"loads 4 bytes at param1\+4"):
        k.interpret(np.zeros(32, np.uint32), grid=1, block=32)


def test_to_python_refuses_a_kernel_that_calls():
    from ptxdsl.core.errors import TraceError
    with pytest.raises(TraceError, match="calls .func addpair"):
        ptxdsl.parse_ptx(CALLS).kernels["k"].to_python()
