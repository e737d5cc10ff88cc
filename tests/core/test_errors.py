"""Every misuse caught while tracing names the user's file:line (ptxdsl.core.errors).

Sixteen mistakes with register operators, helpers of ``ptx`` and grid callables.
Each offending line carries a ``# <- name`` marker; the error must be a PtxdslError
whose location is that line of this file, and say what would be right. The CLI test
at the end checks that ``ptxdsl ptx`` prints the location.
"""
from __future__ import annotations

import os
import re
import textwrap

import numpy as np
import pytest

import located
from ptxdsl import PtxdslError, Tile, kernel, ptx, reg, smem
from ptxdsl.cli import command as cli
from ptxdsl.core.errors import SourceLoc, TraceError, location_from_traceback
from ptxdsl.core.types import f16, f32, pred, u16, u32, u64

HERE = os.path.abspath(__file__)


line_of = located.marked_lines(HERE, "# <- ")


def assert_at(err: BaseException, marker: str, *must_say: str) -> None:
    assert isinstance(err, PtxdslError), repr(err)
    line = line_of(marker)
    assert err.loc is not None, str(err)
    assert (os.path.abspath(err.loc.file), err.loc.line) == (HERE, line), str(err)
    assert str(err).startswith(f"{err.loc.file}:{line}: "), str(err)
    for phrase in must_say:
        assert re.search(phrase, str(err)), f"{phrase!r} not in: {err}"


def trace_error(body, tiles=(), marker="", *must_say):
    k = kernel(in_specs=tiles)(body)
    with pytest.raises(PtxdslError) as info:
        k.ptx()
    assert_at(info.value, marker, *must_say)
    return info.value


def regs():
    return reg.scalar(f32, init=1.0), reg.scalar(u32, init=2)


# ---------------------------------------------------------------- register operators
def test_mul_of_f32_and_u32():
    def body():
        a, b = regs()
        a * b  # <- mul-mix
    trace_error(body, (), "mul-mix", r"cannot mul \.f32 and \.u32", r"ptx\.cvt")


def test_wide_of_a_sum():
    def body():
        _, b = regs()
        (b + b).wide  # <- wide-sum
    trace_error(body, (), "wide-sum", r"\.wide", r"product")


def test_add_predicate_and_register():
    def body():
        _, b = regs()
        p = b < 3
        p + b  # <- pred-add
    trace_error(body, (), "pred-add", r"predicate", r"ptx\.select")


def test_register_and_a_string():
    def body():
        _, b = regs()
        b + "1"  # <- str-operand
    trace_error(body, (), "str-operand", r"str")


def test_integer_register_and_fractional_float():
    def body():
        _, b = regs()
        b * 1.5  # <- int-float
    trace_error(body, (), "int-float", r"ptx\.cvt")


def test_half_register_and_immediate():
    def body():
        h = reg.scalar(f16, init=1.0)
        h + 1.0  # <- half-imm
    trace_error(body, (), "half-imm", r"no \.f16 immediates", r"reg\.scalar")


def test_true_division_of_integers():
    def body():
        _, b = regs()
        b / b  # <- int-div
    trace_error(body, (), "int-div", r"'//'")


def test_bitwise_and_of_floats():
    def body():
        a, _ = regs()
        a & a  # <- float-and
    trace_error(body, (), "float-and", r"float registers")


def test_shift_by_a_64_bit_register():
    def body():
        _, b = regs()
        c = reg.scalar(u64, init=1)
        b << c  # <- shift-64
    trace_error(body, (), "shift-64", r"32-bit")


def test_in_place_narrowing():
    def body():
        _, b = regs()
        c = reg.scalar(u64, init=1)
        b += c  # <- narrow-inplace
    trace_error(body, (), "narrow-inplace", r"in place")


def test_mixed_16_and_32_bit_integers():
    def body():
        _, b = regs()
        h = reg.scalar(u16, init=1)
        b + h  # <- u16-u32
    trace_error(body, (), "u16-u32", r"cvt")


def test_comparing_predicates():
    def body():
        _, b = regs()
        p = b < 3
        p < p  # <- cmp-pred
    trace_error(body, (), "cmp-pred", r"xor")


def test_invert_a_float():
    def body():
        a, _ = regs()
        ~a  # <- inv-float
    trace_error(body, (), "inv-float", r"bitwise")


# ---------------------------------------------------------------- helpers of ptx
def test_fma_of_python_numbers():
    def body():
        ptx.fma(1.0, 2.0, 3.0)  # <- fma-numbers
    trace_error(body, (), "fma-numbers", r"ptx\.fma", r"register")


def test_select_of_two_numbers():
    def body():
        _, b = regs()
        ptx.select(b < 3, 1, 2)  # <- select-numbers
    trace_error(body, (), "select-numbers", r"ptx\.select", r"register")


def test_max_of_a_number_first():
    def body():
        a, _ = regs()
        ptx.max(0.0, 1.0)  # <- max-number
    trace_error(body, (), "max-number", r"ptx\.max", r"register")


def test_dim_of_an_axis_the_tile_lacks():
    def body(X):
        ptx.dim(X, 3)  # <- dim-axis
    trace_error(body, (Tile("B", 8, f32),), "dim-axis", r"axis 3", r"2 dimensions")


def test_register_array_index_out_of_range():
    def body():
        r = reg.array(f32, 4)
        r[4]  # <- array-range
    err = trace_error(body, (), "array-range", r"out of range")
    assert isinstance(err, IndexError)


def test_shared_index_out_of_range():
    def body():
        s = smem.alloc(f32, (4,))
        s.addr(4)  # <- smem-range
    err = trace_error(body, (), "smem-range", r"out of bounds")
    assert isinstance(err, IndexError)


def test_error_in_a_user_helper_names_the_helper_line():
    def helper(a, b):
        return a * b  # <- helper-line

    def body():
        a, b = regs()
        helper(a, b)
    trace_error(body, (), "helper-line", r"cannot mul")


# ---------------------------------------------------------------- grid callables
def test_grid_lambda_parameter_that_is_no_dim():
    with pytest.raises(PtxdslError) as info:
        @kernel(in_specs=(Tile("B", 8, f32),),
                grid=lambda rows: (rows, 1, 1))  # <- grid-param
        def k(X):
            pass
    assert_at(info.value, "grid-param", r"rows", r"B")


def test_grid_lambda_returning_nonsense():
    @kernel(in_specs=(Tile("B", 8, f32),),
            grid=lambda B: (B, 0, 1))  # <- grid-zero
    def k(X):
        pass
    with pytest.raises(PtxdslError) as info:
        k.interpret(np.zeros((2, 8), np.float32))
    assert_at(info.value, "grid-zero", r"positive")


def test_grid_lambda_that_raises():
    @kernel(in_specs=(Tile("B", 8, f32),),
            grid=lambda B: (B // 0, 1, 1))  # <- grid-raises
    def k(X):
        pass
    with pytest.raises(PtxdslError) as info:
        k.grid_for({"B": 2})
    assert_at(info.value, "grid-raises", r"ZeroDivisionError")


# ---------------------------------------------------------------- machinery and CLI
def test_location_from_traceback_picks_the_innermost_user_frame():
    def inner():
        raise ValueError("x")  # <- tb-inner
    try:
        inner()
    except ValueError as e:
        loc = location_from_traceback(e.__traceback__)
    assert loc == SourceLoc(HERE, line_of("tb-inner")) or (
        os.path.abspath(loc.file), loc.line) == (HERE, line_of("tb-inner"))


def test_cli_prints_the_location_and_the_line(tmp_path, capsys):
    f = tmp_path / "op_mix.py"
    f.write_text(textwrap.dedent("""\
        from ptxdsl import kernel, reg
        from ptxdsl.types import f32, u32

        @kernel()
        def op_mix():
            a = reg.scalar(f32, init=1.0)
            b = reg.scalar(u32, init=2)
            c = a * b
        """))
    code = cli.main(["ptx", str(f)])
    _, err = capsys.readouterr()
    assert code == 1
    assert err.startswith(f"ptxdsl: error: {f}:8: cannot mul .f32 and .u32")
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_foreign_error_inside_a_helper_becomes_a_trace_error():
    def body():
        ptx.cvt("f32", reg.scalar(u32, init=1))  # <- cvt-str
    err = trace_error(body, (), "cvt-str", r"ptx\.cvt")
    assert isinstance(err, TraceError)
