"""The PTX front end's parser and API: directives, declarations, scopes, operands, the
instruction table's checks with PTX file:line errors, raw lines on request, canonical
emission, interpreting with arrays / scalars / null pointers, to_python."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl
from ptxdsl.core import ir
from ptxdsl.core.errors import InterpreterError, LaunchError, PtxdslError

from ptx_samples import COPY, HEAD


def test_a_kernel_parses_into_the_tracers_ir():
    mod = ptxdsl.parse_ptx(COPY, filename="copy.ptx")
    k = mod.kernels["copy"]
    assert [(p.name, p.type) for p in k.params] == [
        ("copy_param_0", "u64"), ("copy_param_1", "u64"), ("copy_param_2", "u32")]
    assert k.params[0].ptr == ("global", 16)
    prog = k.program()
    assert isinstance(prog, ir.Program) and prog.max_threads == 64
    instrs = list(prog.walk())
    assert instrs[0].opcode == "ld.param.u64" and instrs[0].loc.line == 17
    assert any(isinstance(n, ir.Label) and n.name == "$L__done" for n in prog.body)


def test_canonical_emission_is_a_fixed_point():
    once = ptxdsl.parse_ptx(COPY).emit()
    assert ".maxntid 64, 1, 1" in once and "comment" not in once
    assert ptxdsl.parse_ptx(once).emit() == once


def test_from_ptx_interprets_with_arrays_scalars_and_null_pointers(tmp_path):
    path = tmp_path / "copy.ptx"
    path.write_text(COPY)
    k = ptxdsl.from_ptx(str(path))
    x = np.arange(64, dtype=np.float32)
    y = np.full(64, -1, np.float32)
    k.interpret(x, y, 40, block=64)
    np.testing.assert_array_equal(y, np.where(np.arange(64) < 40, x, -1))
    with pytest.raises(InterpreterError, match="out of bounds"):
        k.interpret(x, None, 40, block=64)          # a store through a null pointer
    with pytest.raises(LaunchError, match="takes 3 arguments"):
        k.interpret(x, y, block=64)


def test_unknown_instruction_names_the_ptx_line_unless_kept_raw():
    text = COPY.replace("\tret;", "\tfrobnicate.b32 %r3, %r2;\n\tret;")
    with pytest.raises(PtxdslError, match=r"copy\.ptx:29: frobnicate\.b32 %r3, %r2: unknown "
                                          r"PTX instruction.*keep_unknown=True"):
        ptxdsl.parse_ptx(text, filename="copy.ptx")
    mod = ptxdsl.parse_ptx(text, filename="copy.ptx", keep_unknown=True)
    (u,) = mod.unchecked
    assert u.loc.line == 29 and "unknown PTX instruction" in u.reason
    assert "\tfrobnicate.b32 %r3, %r2;" in mod.emit()
    k = mod.kernels["copy"]
    with pytest.raises(InterpreterError, match="unchecked"):
        k.interpret(np.zeros(64, np.float32), np.zeros(64, np.float32), 1, block=64)


def test_invalid_form_is_an_error_at_its_line():
    text = COPY.replace("ld.global.f32 \t%f1, [%rd4];", "ld.global.f32 \t%rd3, [%rd4];")
    with pytest.raises(PtxdslError, match=r"x\.ptx:25: ld.global.f32 %rd3, \[%rd4\]: .*\.f32"):
        ptxdsl.parse_ptx(text, filename="x.ptx")


def test_scopes_flatten_with_renamed_registers_and_labels():
    text = HEAD + """
.visible .entry k(.param .u64 k_param_0)
{
	.reg .b32 %r<3>;
	mov.u32 %r1, 0;
	{
	.reg .pred P1;
	.reg .b32 %r<2>;
	mov.u32 %r1, 5;
	setp.eq.u32 P1, %r1, 5;
wait:
	@!P1 bra wait;
	}
	{
	.reg .pred P1;
	setp.eq.u32 P1, %r1, 0;
wait:
	@!P1 bra.uni wait;
	}
	ret;
}
"""
    mod = ptxdsl.parse_ptx(text)
    out = mod.emit()
    assert ".reg .b32 %rS1_<2>;" in out and "mov.u32 %rS1_1, 5;" in out
    assert "mov.u32 %r1, 0x0;" in out or "mov.u32 %r1, 0;" in out
    assert "waitS1_:" in out and "@!%P1S1_ bra.uni waitS2_;" in out
    assert ptxdsl.parse_ptx(out).emit() == out


def test_triton_spellings():
    text = HEAD + """
.extern .shared .align 16 .b8 global_smem[];
.visible .entry k(.param .u64 k_param_0)
{
	.reg .pred %p<3>;
	.reg .b32 %r<5>;
	.reg .b64 %rd<2>;
	mov.pred %p1, -1;
	mov.b32 %r1, 0fFF800000;
	mov.b32 %r2, global_smem;
	ld.param.u64 %rd1, [k_param_0];
	// begin inline asm
	@%p1 red.global.gpu.relaxed.add.f32 [ %rd1 + 0 ], %r1;
	// end inline asm
	ret;
}
"""
    out = ptxdsl.parse_ptx(text).emit()
    assert "mov.pred %p1, 1;" in out and "mov.b32 %r1, 0xff800000;" in out
    assert "red.relaxed.gpu.global.add.f32 [%rd1], %r1;" in out   # the ISA's order
    assert ".extern .shared .align 16 .b8 global_smem[];" in out


def test_registers_without_sigil_and_parameters_of_the_same_name():
    text = HEAD + """
.visible .entry k(.param .u64 ptrA)
{
	.reg .b64 %ptrA;
	.reg .b32 count;
	ld.param.u64 %ptrA, [ptrA];
	mov.u32 count, 3;
	ret;
}
"""
    out = ptxdsl.parse_ptx(text).emit()
    assert "ld.param.u64 %ptrA, [ptrA];" in out and "mov.u32 %count, 3;" in out


def test_functions_and_calls_parse_strictly():
    text = HEAD + """
.func (.reg .b32 rv) one(.reg .b32 x)
{
	add.s32 rv, x, 1;
	ret;
}
.visible .entry k()
{
	.reg .b32 %r<3>;
	mov.b32 %r0, 41;
	call (%r1), one, (%r0);
	ret;
}
"""
    mod = ptxdsl.parse_ptx(text)
    assert not mod.unchecked
    assert [f.kind for f in mod.functions] == ["func", "entry"]
    assert "call (%r1), one, (%r0);" in mod.emit()
    assert ".func (.reg .b32 %rv) one(" in mod.emit()


def test_from_ptx_names_its_entry():
    two = COPY + COPY.split(".address_size 64\n", 1)[1].replace("copy", "copy2")
    with pytest.raises(LaunchError, match="2 kernels"):
        ptxdsl.from_ptx(two)
    assert ptxdsl.from_ptx(two, entry="copy2").name == "copy2"
    with pytest.raises(LaunchError, match="no kernel 'x'"):
        ptxdsl.from_ptx(two, entry="x")


def test_syntax_errors_name_the_line():
    with pytest.raises(PtxdslError, match=r"<ptx>:4: .*expected"):
        ptxdsl.parse_ptx(HEAD + ".visible .entry k( {\n")
    with pytest.raises(PtxdslError, match="no .version"):
        ptxdsl.parse_ptx("// nothing here\n")


def test_to_python_records_the_same_instructions():
    k = ptxdsl.from_ptx(COPY)
    src = k.to_python()
    ns: dict = {}
    exec(compile(src, "<translated>", "exec"), ns)
    (dk,) = [v for v in ns.values() if isinstance(v, ptxdsl.Kernel)]
    back = ptxdsl.parse_ptx(dk.ptx()).kernels["copy"].program()
    assert [i.opcode for i in back.walk()] == [i.opcode for i in k.program().walk()]


def test_ptxas_check_and_resources():
    from ptxdsl import toolchain
    try:
        if toolchain.find_ptxas() is None:
            pytest.skip("no ptxas")
    except PtxdslError:
        pytest.skip("no ptxas")
    k = ptxdsl.from_ptx(COPY)
    res = k.resources()
    assert res.registers > 0 and res.spill_stores == 0
    assert k.check().unchecked == ()


def test_byte_array_parameters_take_bytes():
    text = HEAD + """
.visible .entry k(.param .u64 k_param_0, .param .align 8 .b8 k_param_1[16])
{
	.reg .b32 %r<3>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [k_param_0];
	ld.param.u32 %r1, [k_param_1+4];
	st.global.u32 [%rd1], %r1;
	ret;
}
"""
    k = ptxdsl.from_ptx(text)
    assert (k.params[1].count, k.params[1].align) == (16, 8)
    out = np.zeros(1, np.uint32)
    k.interpret(out, np.array([1, 7, 0, 0], np.uint32).tobytes())
    assert out[0] == 7
    with pytest.raises(LaunchError, match="16-byte parameter"):
        k.interpret(out, b"short")


WARP_STORE = HEAD + """
.visible .entry k(.param .u64 k_param_0)
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<2>;
	.shared .align 4 .b8 buf[4];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, VALUE;
	st.shared.u32 [buf], %r2;
	bar.sync 0;
	ld.shared.u32 %r3, [buf];
	ld.param.u64 %rd1, [k_param_0];
	st.global.u32 [%rd1], %r3;
	ret;
}
"""


def test_a_warp_storing_one_value_to_one_address_is_one_write():
    """Triton stores a warp-reduced value from every lane: the same bits, one write;
    lanes storing different values to one address are still a race."""
    out = np.zeros(1, np.uint32)
    ptxdsl.from_ptx(WARP_STORE.replace("VALUE", "7")).interpret(out, block=32)
    assert out[0] == 7
    with pytest.raises(InterpreterError, match="race"):
        ptxdsl.from_ptx(WARP_STORE.replace("VALUE", "%r1")).interpret(out, block=32)
    with pytest.raises(InterpreterError, match="race"):   # two warps: two instructions
        ptxdsl.from_ptx(WARP_STORE.replace("VALUE", "7")).interpret(out, block=64)


LOOP = HEAD + """
.visible .entry k(.param .u64 x_ptr, .param .u32 n_dim, .param .u64 k_param_2)
{
	.reg .pred %p<3>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [x_ptr];
	ld.param.u32 %r5, [n_dim];
	mov.u32 %r1, 0;
	mov.u32 %r2, 0;
$loop:
	add.s32 %r2, %r2, %r1;
	add.s32 %r1, %r1, 1;
	setp.lt.s32 %p1, %r1, %r5;
	@%p1 bra $loop;
	cvta.to.global.u64 %rd2, %rd1;
	st.global.u32 [%rd2], %r2;
	ret;
}
"""


def test_to_python_keeps_parameter_names_and_raises_loops():
    k = ptxdsl.from_ptx(LOOP)
    src = k.to_python()
    assert "def k(x, k_param_2):" in src and "Tile('n', u8)" in src
    assert "# counted loop: r1 steps by 1 while lt r5" in src
    assert "    with ptx.loop('$loop', pred=p1):\n        ptx.inst('add.s32', r2, r2, r1)" in src
    ns: dict = {}
    exec(compile(src, "<translated>", "exec"), ns)
    (dk,) = [v for v in ns.values() if isinstance(v, ptxdsl.Kernel)]
    text = dk.ptx()
    assert ".param .u64 x_ptr," in text and ".param .u32 n_dim" in text
    back = ptxdsl.parse_ptx(text).kernels["k"].program()
    assert [i.opcode for i in back.walk()] == [i.opcode for i in k.program().walk()]
