"""Interpreter semantics of mma.sync, ldmatrix, stmatrix, movmatrix and the fp8 cvt forms.

Every mma form (shape x types x layouts) runs on the interpreter against a
float64 / int64 numpy reference built with the test's own packing; integer
forms must match bit for bit, float forms within the bound documented in
``ptxdsl/interp/semantics/tensorcore.py``. Layouts are also checked against the
formulas written out in the PTX ISA, independently of ``ptxdsl.dsl.tensorcore``.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from ptxdsl import kernel, ptx, reg, Tile
from ptxdsl.core.errors import InterpreterError
from ptxdsl.dsl.tensorcore import layout
from ptxdsl.core.fp8 import fp8_encode
from ptxdsl.core.types import b32, f32, u16, u32
from tensorcore_kernels import (ALL_MMA, build_matrix_ops, build_mma, chain, fp8_value,
                                matrix_expect, mma_case)


@pytest.mark.parametrize("form", ALL_MMA, ids=[chain(f)[17:] for f in ALL_MMA])
def test_mma_matches_numpy(form):
    args, check = mma_case(form, seed=zlib.crc32(chain(form).encode()))
    d = build_mma(form).interpret(*args)
    excess, _ = check(d)
    assert excess <= 0, f"{chain(form)}: off by {excess} beyond the documented bound"


def test_mma_several_warps_and_satfinite_saturates():
    form = ("m16n8k32", "s8", "s8", "s32", "s32", "row", "col", "")
    args, check = mma_case(form, seed=3, warps=4)
    d = build_mma(form, warps=4).interpret(*args)
    assert check(d)[0] == 0
    # C near the top of s32 plus positive products: wraps without .satfinite
    sat = ("m16n8k16", "u8", "u8", "s32", "s32", "row", "col", "")
    a = np.full((32, 2), 0xFFFFFFFF, np.uint32)
    b = np.full((32, 1), 0xFFFFFFFF, np.uint32)
    c = np.full((32, 4), 2 ** 31 - 10, np.uint32)
    d = build_mma(sat).interpret(a, b, c)
    assert (d.view(np.int32) == np.int32(-2 ** 31 + 255 * 255 * 16 - 10)).all()


# ---------------------------------------------------------------- layouts vs the PTX ISA
def test_layouts_match_the_ptx_isa_formulas():
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        a = layout("a", "m16n8k16", "bf16")
        for i in range(8):
            row = g if i in (0, 1, 4, 5) else g + 8
            col = t * 2 + (i & 1) + (8 if i >= 4 else 0)
            assert a.coord(lane, i) == (0, row, col)
        b = layout("b", "m16n8k16", "f16")
        for i in range(4):
            assert b.coord(lane, i) == (0, t * 2 + (i & 1) + (8 if i >= 2 else 0), g)
        c = layout("c", "m16n8k8", "f32")
        for i in range(4):
            assert c.coord(lane, i) == (0, g if i < 2 else g + 8, t * 2 + (i & 1))
        a8 = layout("a", "m16n8k32", "s8")
        for i in range(16):
            row = g if i < 4 or 8 <= i < 12 else g + 8
            assert a8.coord(lane, i) == (0, row, t * 4 + (i & 3) + (16 if i >= 8 else 0))
        tf = layout("a", "m16n8k8", "tf32")
        assert [tf.coord(lane, i)[1:] for i in range(4)] == [
            (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)]
        d64 = layout("c", "m8n8k4", "f64")
        assert [d64.coord(lane, i)[1:] for i in range(2)] == [(g, 2 * t), (g, 2 * t + 1)]


def test_fragment_origin_plus_offset_and_owner():
    lay = layout("c", "m16n8k16", "f32")
    assert lay.offsets() == [(0, 0), (0, 1), (8, 0), (8, 1)]
    assert lay.lane_bits() == ([(2, 7, 1)], [(0, 3, 2)])
    assert lay.owner(9, 5) == (4 * 1 + 2, 3)
    with pytest.raises(IndexError):
        lay.owner(16, 0)


def test_fragment_epilogue_writes_every_element_once():
    """A kernel stores its accumulator by (row, col) from Fragment.origin/items."""
    from ptxdsl.dsl.tensorcore import fragment

    @kernel(out_specs=(Tile(16, 8, f32),), grid=(1, 1, 1), block=(32, 1, 1), arch="sm_80")
    def epi(Y):
        (py,) = ptx.global_ptrs(Y)
        acc = fragment("c", "m16n8k16", "f32")
        lane = reg.scalar(u32)
        ptx.inst.mov.u32(lane, ptx.special.laneid())
        for j, r in enumerate(acc):
            ptx.inst.cvt.rn.f32.u32(r, lane * 4 + j)
        row, col = acc.origin()
        base = py + (row * 8 + col) * 4
        for (dr, dc), r, _ in acc.items():
            ptx.inst.st.global_.f32(ptx.addr(base, (dr * 8 + dc) * 4), r)

    y = epi.interpret()
    lay = layout("c", "m16n8k16", "f32")
    want = np.zeros((16, 8), np.float32)
    for lane in range(32):
        for i in range(4):
            _, r, c = lay.coord(lane, i)
            want[r, c] = lane * 4 + i
    assert (y == want).all()


# ---------------------------------------------------------------- ldmatrix / stmatrix / movmatrix
@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_stmatrix_movmatrix(num, trans):
    x = np.random.default_rng(num).integers(0, 1 << 16, num * 64).astype(np.uint16)
    r, s, m = build_matrix_ops(num, trans).interpret(x)
    want, mov = matrix_expect(x, num, trans)
    assert (r == want).all()
    assert (s == x).all()                # stmatrix with the same .trans undoes ldmatrix
    assert (m == mov).all()


def _mma_body(guarded: bool):
    lane = reg.scalar(u32)
    ptx.inst.mov.u32(lane, ptx.special.laneid())
    a = [reg.scalar(b32, init=0) for _ in range(4)]
    b = [reg.scalar(b32, init=0) for _ in range(2)]
    c = [reg.scalar(f32, init=0.0) for _ in range(4)]
    if guarded:
        with ptx.if_(lane < 16):
            ptx.inst.mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32(c, a, b, c)
    else:
        ptx.inst.mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32(c, a, b, c)


def test_partial_warp_is_refused():
    """48 threads: the second warp has lanes 0-15 only (no branch for the verifier to see)."""
    k = kernel(grid=(1, 1, 1), block=(48, 1, 1), arch="sm_80")(lambda: _mma_body(False))
    with pytest.raises(InterpreterError, match=r"warp-collective .*lanes \[16, 17"):
        k.interpret()


def test_divergent_mma_is_refused_by_the_verifier():
    from ptxdsl.core.errors import VerifyError
    k = kernel(grid=(1, 1, 1), block=(32, 1, 1), arch="sm_80")(lambda: _mma_body(True))
    with pytest.raises(VerifyError, match=r"mma\.sync.*needs every thread of its warp"):
        k.ptx()


# ---------------------------------------------------------------- fp8 conversions
def _nearest_fp8(x: float, name: str) -> int:
    """Brute force over all codes: nearest finite, ties to the even code, saturated."""
    if np.isnan(x):
        return 0x7F
    top = 448.0 if name == "e4m3" else 57344.0
    x = min(max(x, -top), top)              # .satfinite: infinities and overflow clamp
    best = None
    for code in range(256):
        v = fp8_value(code, name)
        if not np.isfinite(v) or (v == 0 and (code >> 7) != (np.signbit(x))):
            continue
        key = (abs(v - x), code & 1)
        if best is None or key < best[0]:
            best = (key, code)
    return best[1]


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_fp8_encode_matches_brute_force(name):
    rng = np.random.default_rng(1)
    xs = np.concatenate([rng.standard_normal(300) * np.exp2(rng.integers(-18, 18, 300)),
                         [0.0, -0.0, 448.0, 464.0, 1e9, -1e9, np.inf, -np.inf, np.nan,
                          57344.0, 0.0009765625 * 1.5]])
    got = fp8_encode(xs, name)
    want = [_nearest_fp8(float(x), name) for x in xs]
    assert list(got) == want


def test_cvt_fp8_round_trip_on_the_interpreter():
    @kernel(in_specs=(Tile(32, 2, f32),), out_specs=(Tile(32, u16), Tile(32, u32)),
            grid=(1, 1, 1), block=(32, 1, 1), arch="sm_90a")
    def conv(X, P, H):
        px, pp, ph = ptx.global_ptrs(X, P, H)
        lane = reg.scalar(u32)
        ptx.inst.mov.u32(lane, ptx.special.laneid())
        hi, lo = reg.scalar(f32), reg.scalar(f32)
        ptx.inst.ld.global_.v2.f32([hi, lo], ptx.addr(px + lane * 8))
        from ptxdsl.core.types import e4m3x2, f16x2
        p = reg.scalar(e4m3x2)
        ptx.inst.cvt.rn.satfinite.e4m3x2.f32(p, hi, lo)
        ptx.inst.st.global_.b16(ptx.addr(pp + lane * 2), p)
        h = reg.scalar(f16x2)
        ptx.inst.cvt.rn.f16x2.e4m3x2(h, p)
        ptx.inst.st.global_.b32(ptx.addr(ph + lane * 4), h)

    x = (np.random.default_rng(2).standard_normal((32, 2)) * 40).astype(np.float32)
    p, h = conv.interpret(x)
    want = np.array([_nearest_fp8(float(x[i, 1]), "e4m3") | _nearest_fp8(float(x[i, 0]), "e4m3")
                     << 8 for i in range(32)])
    assert (p == want).all()
    back = h.view(np.float16).reshape(32, 2).astype(np.float64)
    assert (back[:, 0] == [fp8_value(int(c) & 0xFF, "e4m3") for c in p]).all()
    assert (back[:, 1] == [fp8_value(int(c) >> 8, "e4m3") for c in p]).all()


def test_fp8_encode_agrees_with_ml_dtypes_at_every_tie_and_between():
    """Every midpoint between neighbouring finite e4m3 values (the ties, to the even
    code), a value just either side of each, and random f32 values: the interpreter's
    cvt.rn.satfinite rounding is ml_dtypes' float8_e4m3fn rounding of the same f32
    (inside the finite range, where saturation plays no part)."""
    import ml_dtypes
    vals = np.array([fp8_value(c, "e4m3") for c in range(0x7F)])  # 0 .. 448
    mids = ((vals[:-1] + vals[1:]) / 2).astype(np.float32)
    near = np.concatenate([mids, np.nextafter(mids, np.float32(0)),
                           np.nextafter(mids, np.float32(np.inf)), vals.astype(np.float32)])
    rng = np.random.default_rng(4)
    rand = (rng.standard_normal(4000) * np.exp2(rng.integers(-12, 9, 4000))).astype(np.float32)
    xs = np.concatenate([near, -near, rand])
    xs = xs[np.abs(xs) <= 448]
    want = xs.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(fp8_encode(xs, "e4m3"), want)


def test_mov_packs_16_bit_registers_into_a_32_bit_one():
    """mov.b32 d, {a, b} of two 16-bit registers (.b16, .e4m3x2): a is the low half."""
    from ptxdsl.core.types import b16, e4m3x2

    @kernel(in_specs=(Tile(32, 2, f32),), out_specs=(Tile(32, u32), Tile(32, u32)),
            grid=(1, 1, 1), block=(32, 1, 1), arch="sm_90a")
    def packs(X, P, Q):
        px, pp, pq = ptx.global_ptrs(X, P, Q)
        lane = reg.scalar(u32)
        ptx.inst.mov.u32(lane, ptx.special.laneid())
        hi, lo = reg.scalar(f32), reg.scalar(f32)
        ptx.inst.ld.global_.v2.f32([hi, lo], ptx.addr(px + lane * 8))
        a, b = reg.scalar(e4m3x2), reg.scalar(e4m3x2)
        ptx.inst.cvt.rn.satfinite.e4m3x2.f32(a, hi, lo)
        ptx.inst.cvt.rn.satfinite.e4m3x2.f32(b, lo, hi)
        ptx.inst.st.global_.b32(ptx.addr(pp + lane * 4), ptx.pack(b32, a, b))
        h0, h1 = reg.scalar(b16), reg.scalar(b16)
        ptx.inst.mov.b16(h0, 0x1234)
        ptx.inst.mov.b16(h1, 0xABCD)
        ptx.inst.st.global_.b32(ptx.addr(pq + lane * 4), ptx.pack(b32, h0, h1))

    x = (np.random.default_rng(5).standard_normal((32, 2)) * 30).astype(np.float32)
    p, q = packs.interpret(x)
    lo = fp8_encode(x[:, 1], "e4m3").astype(np.uint32) | \
        fp8_encode(x[:, 0], "e4m3").astype(np.uint32) << 8
    np.testing.assert_array_equal(p, lo | (((lo >> 8) | ((lo & 0xFF) << 8)) << 16))
    assert (q == 0xABCD1234).all()
