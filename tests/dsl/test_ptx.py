"""The ``ptx`` namespace: inst chains, control flow, value helpers, warp and barrier helpers.

Exact PTX is asserted where the docstring promises it; ptxas assembles the
control-flow kernels (skipped without ptxas).
"""
from __future__ import annotations

import pytest

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.errors import IsaError, TraceError
from ptxdsl import toolchain
from ptxdsl.core.types import bf16, bf16x2, f16, f16x2, f32, f64, s32, u16, u32, u64
from ptx_lines import body_lines

needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas found")


def lines_of(fn, arch="sm_90a", tiles=()):
    text = kernel(in_specs=tiles, arch=arch)(fn).ptx()
    return [ln for ln in text[text.index("{\n"):].splitlines()[1:] if ln.strip()
            and not ln.strip().startswith((".reg", ".shared")) and ln != "}"]


# ---------------------------------------------------------------- ptx.inst
def test_inst_spellings():
    def body():
        r = reg.scalar(u32)
        ptx.inst.mov.u32(r, 5)
        ptx.inst("add.u32", r, r, 1)
        ptx.inst.ld.global_.L1__evict_last.u32(r, ptx.addr(reg.scalar(u64, init=0)))
    lines = body_lines(body)
    assert lines == ["mov.u32 %r0, 5;", "add.u32 %r0, %r0, 1;", "mov.u64 %rd0, 0;",
                     "ld.global.L1::evict_last.u32 %r0, [%rd0];"]


def test_inst_returns_its_destination_and_takes_a_guard():
    def body():
        a = reg.scalar(u32, init=1)
        p = a < 4
        got = ptx.inst.add.u32(a, a, 2, pred=p)
        assert got is a
        ptx.inst.bra("L_x", pred=p)
        ptx.label("L_x")
    lines = body_lines(body)
    assert "@%p0 add.u32 %r0, %r0, 2;" in lines
    assert "@%p0 bra L_x;" in lines


def test_inst_comment():
    def body():
        a = reg.scalar(u32, init=1)
        ptx.inst.add.u32(a, a, 2, comment="bump")
    assert "add.u32 %r0, %r0, 2;  // bump" in body_lines(body)


def test_vector_load_store_and_addr_offsets():
    def body(X):
        (px,) = ptx.global_ptrs(X)
        v = reg.array(f32, 4)
        ptx.inst.ld.global_.v4.f32(list(v), ptx.addr(px, 16))
        ptx.inst.st.global_.v2.f32(ptx.addr(px, 32), [v[0], v[1]])
        ptx.inst.st.global_.v2.f32(ptx.addr(px), [v[2], 0.5])
    lines = body_lines(body, tiles=(Tile(64, f32),))
    assert lines[2:] == ["ld.global.v4.f32 {%f0, %f1, %f2, %f3}, [%rd1+16];",
                         "st.global.v2.f32 [%rd1+32], {%f0, %f1};",
                         "st.global.v2.f32 [%rd1], {%f2, 0f3F000000};"]


# ---------------------------------------------------------------- control flow
def test_if_and_else():
    def body():
        t = reg.scalar(u32)
        ptx.inst.mov.u32(t, ptx.special.tid.x())
        with ptx.if_(t < 16):
            ptx.inst.add.u32(t, t, 1)
        with ptx.else_():
            ptx.inst.add.u32(t, t, 2)
        with ptx.if_(t == 3):
            ptx.inst.add.u32(t, t, 3)
    assert lines_of(body) == [
        "\tmov.u32 %r0, %tid.x;",
        "\tsetp.lt.u32 %p0, %r0, 16;",
        "\t@!%p0 bra $L__else1;",
        "\tadd.u32 %r0, %r0, 1;",
        "\tbra.uni $L__endif1;",
        "$L__else1:",
        "\tadd.u32 %r0, %r0, 2;",
        "$L__endif1:",
        "\tsetp.eq.b32 %p1, %r0, 3;",
        "\t@!%p1 bra $L__endif2;",
        "\tadd.u32 %r0, %r0, 3;",
        "$L__endif2:",
        "\tret;",
    ]


def test_else_must_follow_an_if():
    def body():
        with ptx.else_():
            pass
    with pytest.raises(TraceError, match=r"must directly follow a `with ptx.if_"):
        kernel()(body).ptx()


def test_range_with_int_bounds():
    def body():
        acc = reg.scalar(u32, init=0)
        for i in ptx.range_(2, 10, 3):
            acc += i
    assert lines_of(body) == [
        "\tmov.u32 %r0, 0;",
        "\tmov.u32 %r1, 2;",
        "$L__loop1:",
        "\tsetp.ge.u32 %p0, %r1, 10;",
        "\t@%p0 bra $L__endloop1;",
        "\tadd.u32 %r0, %r0, %r1;",
        "\tadd.u32 %r1, %r1, 3;",
        "\tbra.uni $L__loop1;",
        "$L__endloop1:",
        "\tret;",
    ]


def test_range_with_register_bounds():
    def body():
        n = reg.scalar(u32, init=7)
        s = reg.scalar(u32, init=2)
        acc = reg.scalar(u32, init=0)
        for i in ptx.range_(s, n, s):
            acc += i
    lines = lines_of(body)
    assert "\tmov.u32 %r3, %r1;" in lines           # i = start
    assert "\tsetp.ge.u32 %p0, %r3, %r0;" in lines  # i >= stop ends it
    assert "\tadd.u32 %r3, %r3, %r1;" in lines      # i += step


def test_range_counting_down_is_signed():
    def body():
        acc = reg.scalar(s32, init=0)
        for i in ptx.range_(10, -1, -2):
            acc += i
    lines = lines_of(body)
    assert "\tmov.s32 %r1, 10;" in lines
    assert "\tsetp.le.s32 %p0, %r1, -1;" in lines
    assert "\tadd.s32 %r1, %r1, -2;" in lines


def test_range_bounded_by_a_signed_register_is_signed():
    def body():
        n = reg.scalar(s32, init=-3)
        for _ in ptx.range_(n):
            pass
    assert "\tsetp.ge.s32 %p0, %r1, %r0;" in lines_of(body)


def test_range_refuses_zero_step_and_wide_bounds():
    def zero():
        for _ in ptx.range_(0, 4, 0):
            pass

    def wide():
        n = reg.scalar(u64, init=4)
        for _ in ptx.range_(n):
            pass
    with pytest.raises(TraceError, match="step must not be 0"):
        kernel()(zero).ptx()
    with pytest.raises(TraceError, match="bounds must be 32-bit integers"):
        kernel()(wide).ptx()


def test_labels_and_bra():
    def body():
        a = reg.scalar(u32, init=0)
        top = ptx.label("L_top")
        a += 1
        ptx.bra(top, pred=a < 4)
        ptx.bra("L_end", uni=True)
        ptx.label("L_end")
    lines = lines_of(body)
    assert lines == ["\tmov.u32 %r0, 0;", "L_top:", "\tadd.u32 %r0, %r0, 1;",
                     "\tsetp.lt.u32 %p0, %r0, 4;", "\t@%p0 bra L_top;", "\tbra.uni L_end;",
                     "L_end:", "\tret;"]


def test_label_errors():
    def twice():
        ptx.label("L_a")
        ptx.label("L_a")

    def bad_name():
        ptx.new_label("1x")

    def placed_twice():
        lbl = ptx.new_label("L_b")
        ptx.place(lbl)
        ptx.place(lbl)
    with pytest.raises(TraceError, match="already exists"):
        kernel()(twice).ptx()
    with pytest.raises(TraceError, match="must be letters"):
        kernel()(bad_name).ptx()
    with pytest.raises(TraceError, match="was already placed at"):
        kernel()(placed_twice).ptx()


def test_body_that_falls_off_its_end_returns():
    def body():
        reg.scalar(u32, init=0)
    assert lines_of(body)[-1] == "\tret;"

    def explicit():
        reg.scalar(u32, init=0)
        ptx.exit()
    assert lines_of(explicit)[-1] == "\texit;"


@needs_ptxas
def test_control_flow_assembles():
    @kernel(in_specs=(Tile(256, f32),), arch="sm_80")
    def k(X):
        (px,) = ptx.global_ptrs(X)
        t = reg.scalar(u32)
        ptx.inst.mov.u32(t, ptx.special.tid.x())
        acc = reg.scalar(f32, init=0.0)
        n = reg.scalar(u32, init=8)
        for i in ptx.range_(n):
            v = reg.scalar(f32)
            ptx.inst.ld.global_.f32(v, ptx.addr(px + (i * 32 + t) * 4))
            acc += v
        for i in ptx.range_(7, -1, -1):
            with ptx.if_(t == i):
                acc += 1.0
            with ptx.else_():
                acc -= 1.0
        end = ptx.new_label("L_done")
        ptx.bra(end, pred=t > 100)
        ptx.inst.st.global_.f32(ptx.addr(px + t * 4), acc)
        ptx.place(end)
    k.check()


# ---------------------------------------------------------------- conversions and packing
@pytest.mark.parametrize("dst,src,want", [
    (f32, u32, "cvt.rn.f32.u32"),      # int -> float rounds to nearest
    (f32, s32, "cvt.rn.f32.s32"),
    (s32, f32, "cvt.rzi.s32.f32"),     # float -> int truncates (C semantics)
    (u32, f64, "cvt.rzi.u32.f64"),
    (f16, f32, "cvt.rn.f16.f32"),      # narrowing float rounds to nearest
    (bf16, f32, "cvt.rn.bf16.f32"),
    (f32, f64, "cvt.rn.f32.f64"),
    (f64, f32, "cvt.f64.f32"),         # widening is exact
    (f32, f16, "cvt.f32.f16"),
    (f32, bf16, "cvt.f32.bf16"),
    (u64, u32, "cvt.u64.u32"),         # integers: no rounding
    (u16, u32, "cvt.u16.u32"),
])
def test_cvt_defaults(dst, src, want):
    def body():
        x = reg.scalar(src, init=1 if not src.is_float else 1.0)
        ptx.cvt(dst, x)
    assert body_lines(body)[-1].startswith(want + " ")


def test_cvt_explicit_rounding_and_sat():
    def body():
        x = reg.scalar(f32, init=1.5)
        ptx.cvt(s32, x, "rni")
        ptx.cvt(u16, x, sat=True)
    assert body_lines(body)[-2:] == ["cvt.rni.s32.f32 %r0, %f0;", "cvt.rzi.sat.u16.f32 %rs0, %f0;"]


def test_cvt_refuses_bad_combinations_at_the_call():
    def body():
        x = reg.scalar(u32, init=1)
        ptx.cvt(u64, x, "rn")
    with pytest.raises(IsaError, match="integer to integer conversions take no rounding"):
        kernel()(body).ptx()


def test_pack_and_unpack():
    def body():
        a = reg.scalar(f16, init=1.0)
        b = reg.scalar(f16, init=-2.0)
        ab = ptx.pack(f16x2, a, b)
        s = ab + ab                       # packed math on f16x2
        lo, hi = ptx.unpack(s, f16)
        ptx.cvt(f32, hi)
        w = ptx.pack(bf16x2, reg.scalar(bf16, init=1.0), reg.scalar(bf16, init=2.0))
        assert w.dtype is bf16x2
    lines = body_lines(body)
    assert "mov.b32 %hh0, {%h0, %h1};" in lines
    assert "add.f16x2 %hh1, %hh0, %hh0;" in lines
    assert "mov.b32 {%h2, %h3}, %hh1;" in lines
    assert "cvt.f32.f16 %f0, %h3;" in lines
    assert "mov.b32 %hhb0, {%hb0, %hb1};" in lines


def test_packing_two_f32_with_cvt():
    def body():
        hi, lo = reg.scalar(f32, init=1.0), reg.scalar(f32, init=2.0)
        d = reg.scalar(f16x2)
        ptx.inst.cvt.rn.f16x2.f32(d, hi, lo)
    assert body_lines(body)[-1] == "cvt.rn.f16x2.f32 %hh0, %f0, %f1;"


@needs_ptxas
def test_half_precision_kernel_assembles():
    @kernel(in_specs=(Tile(64, f16),), arch="sm_80")
    def k(X):
        (px,) = ptx.global_ptrs(X)
        h = reg.scalar(f16)
        ptx.inst.ld.global_.b16(h, ptx.addr(px))
        h2 = ptx.pack(f16x2, h, h)
        h2 = ptx.fma(h2, h2, h2)
        lo, hi = ptx.unpack(h2, f16)
        s = ptx.select(lo < hi, lo, hi)
        sh = smem.alloc(f16, 32)
        sh[0] = s
        ptx.inst.st.global_.b16(ptx.addr(px), sh[0])
    text = k.ptx()
    assert "selp.b16" in text and "st.shared.b16" in text and "ld.shared.b16" in text
    k.check()


# ---------------------------------------------------------------- value helpers
def test_select_fma_min_max():
    def body():
        a, b = reg.scalar(f32, init=1.0), reg.scalar(f32, init=2.0)
        ptx.select(a < b, a, b)
        ptx.fma(a, b, a)
        ptx.min(a, b)
        ptx.max(a, 3.0)
    assert body_lines(body)[-5:] == ["setp.lt.f32 %p0, %f0, %f1;", "selp.f32 %f2, %f0, %f1, %p0;",
                                     "fma.rn.f32 %f3, %f0, %f1, %f0;", "min.f32 %f4, %f0, %f1;",
                                     "max.f32 %f5, %f0, 0f40400000;"]


def test_special_registers():
    def body():
        for sp in (ptx.special.tid.y(), ptx.special.ntid.x(), ptx.special.ctaid.z(),
                   ptx.special.nctaid.x(), ptx.special.laneid(), ptx.special.warpid(),
                   ptx.special.clock()):
            ptx.inst.mov.u32(reg.scalar(u32), sp)
        ptx.inst.mov.u64(reg.scalar(u64), ptx.special.clock64())
    lines = body_lines(body)
    assert lines == ["mov.u32 %r0, %tid.y;", "mov.u32 %r1, %ntid.x;", "mov.u32 %r2, %ctaid.z;",
                     "mov.u32 %r3, %nctaid.x;", "mov.u32 %r4, %laneid;",
                     "mov.u32 %r5, %warpid;", "mov.u32 %r6, %clock;",
                     "mov.u64 %rd0, %clock64;"]


def test_global_ptrs():
    def body(X, Y):
        px, py = ptx.global_ptrs(X, Y)
    assert body_lines(body, tiles=(Tile(4, f32), Tile(4, f32))) == [
        "ld.param.u64 %rd0, [X_ptr];", "cvta.to.global.u64 %rd1, %rd0;",
        "ld.param.u64 %rd2, [Y_ptr];", "cvta.to.global.u64 %rd3, %rd2;"]


# ---------------------------------------------------------------- warp and barrier helpers
@pytest.mark.parametrize("op,width,dtype", [("sum", 32, f32), ("max", 16, u32), ("min", 4, s32)])
def test_warp_reduce(op, width, dtype):
    def body():
        x = reg.scalar(dtype, init=1 if dtype is not f32 else 1.0)
        getattr(ptx.warp, f"reduce_{op}")(x, width=width)
    lines = body_lines(body)[1:]
    p = "f" if dtype is f32 else "r"
    ins = {"sum": "add", "max": "max", "min": "min"}[op]
    want = []
    off = width // 2
    while off:
        want += [f"shfl.sync.bfly.b32 %{p}1, %{p}0, {off}, 31, 0xffffffff;",
                 f"{ins}.{dtype.name} %{p}0, %{p}0, %{p}1;"]
        off //= 2
    assert lines == want


def test_warp_reduce_refuses_other_types():
    def body():
        ptx.warp.reduce_sum(reg.scalar(f64, init=1.0))
    with pytest.raises(TraceError, match="f32, u32 or s32"):
        kernel()(body).ptx()


def test_bar_helpers():
    def body():
        ptx.bar.sync(0)
        ptx.bar.sync(1, 64)
        ptx.bar.arrive(2, 128)
    assert body_lines(body) == ["bar.sync 0;", "bar.sync 1, 64;", "bar.arrive 2, 128;"]


@pytest.mark.parametrize("args,msg", [((16,), "barriers 0 to 15"), ((0, 48), "multiple of the warp")])
def test_bar_helper_checks_numbers(args, msg):
    def body():
        ptx.bar.sync(*args)
    with pytest.raises(TraceError, match=msg):
        kernel()(body).ptx()


# ---------------------------------------------------------------- shared memory
def test_smem_indexing():
    def body():
        a = smem.alloc(f32, (4, 8))
        t = reg.scalar(u32)
        ptx.inst.mov.u32(t, ptx.special.tid.x())
        a[1, 2] = reg.scalar(f32, init=1.0)   # constant index folds into the address
        a[t, 3] = a[0, t]                     # register indices: shift and add
    assert body_lines(body) == [
        "mov.u32 %r0, smem0;  // base of smem0",  # read once, at entry, because some access needs it
        "mov.u32 %r1, %tid.x;",
        "mov.f32 %f0, 0f3F800000;",
        "st.shared.f32 [smem0+40], %f0;",          # a[1, 2]: (1*8 + 2) * 4 bytes
        "shl.b32 %r2, %r1, 2;",                    # a[0, t]: t * 4
        "add.u32 %r3, %r0, %r2;",
        "ld.shared.f32 %f1, [%r3];",
        "shl.b32 %r4, %r1, 5;",                    # a[t, 3]: t * 32, + 12 folded
        "add.u32 %r5, %r0, %r4;",
        "st.shared.f32 [%r5+12], %f1;",
    ]


def test_smem_without_register_index_reads_no_base():
    def body():
        a = smem.alloc(u32, 4)
        a[3] = reg.scalar(u32, init=1)
    assert body_lines(body) == ["mov.u32 %r0, 1;", "st.shared.u32 [smem0+12], %r0;"]


def test_smem_errors():
    def oob():
        smem.alloc(f32, (2, 2))[2, 0]

    def rank():
        smem.alloc(f32, (2, 2))[1, 0, 0]
    with pytest.raises(IndexError, match="out of bounds for axis 0"):
        kernel()(oob).ptx()
    with pytest.raises(TraceError, match=r"has 2 dimensions \(2, 2\), indexed with 3"):
        kernel()(rank).ptx()
