"""Integer, bit and comparison semantics (bit-exact, wrap-around as PTX); add, sub,
mul, mad, div, abs, neg, min, max and setp / set take the float forms of
:mod:`.floatmath` for float types.

Division by zero is "unspecified, machine-specific" in PTX; the interpreter
returns all ones for ``div`` and the dividend for ``rem`` (what current
NVIDIA GPUs give for unsigned operands). ``add.cc``/``sub.cc`` compute the
sum; the carry flag they set is only readable by ``addc``/``subc``, which the
table does not have.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..values import SINT, UINT
from . import floatmath
from .alu import alu


def _np(x):
    return np.asarray(x)


def _u(x):
    """Unsigned view of an integer array of the same width."""
    x = _np(x)
    return x.view(UINT[x.dtype.itemsize * 8]) if x.dtype.kind == "i" else x


def _cast(x, t):
    return _np(x).astype(t.np_dtype)


def _float_or_int(int_fn, float_fn):
    def fn(m, *xs):
        if m.type.is_float:
            return float_fn(m, *xs)
        with np.errstate(all="ignore"):
            return int_fn(m, *xs)
    return fn


# ------------------------------------------------------------------------ arithmetic
def mulhi64(a, b, signed: bool):
    ua, ub = _u(a).astype(np.uint64), _u(b).astype(np.uint64)
    m32 = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    a0, a1, b0, b1 = ua & m32, ua >> s32, ub & m32, ub >> s32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> s32) + (p01 & m32) + (p10 & m32)
    hi = p11 + (p01 >> s32) + (p10 >> s32) + (mid >> s32)
    if signed:
        hi = hi - np.where(_np(a) < 0, ub, np.uint64(0)) - np.where(_np(b) < 0, ua, np.uint64(0))
        return hi.view(np.int64)
    return hi


def _wide_type(t):
    return SINT[t.bits * 2] if t.kind == "s" else UINT[t.bits * 2]


def product(m, a, b):
    t = m.type
    mode = m.chosen.get("mode", "lo")
    if mode == "lo":
        return _cast(_np(a) * _np(b), t)
    if mode == "wide":
        w = _wide_type(t)
        return _np(a).astype(w) * _np(b).astype(w)
    if t.bits == 64:
        return _cast(mulhi64(a, b, t.kind == "s"), t)
    w = _wide_type(t)
    return _cast((_np(a).astype(w) * _np(b).astype(w)) >> t.bits, t)


def iadd(m, a, b):
    if m.has("sat"):
        return np.clip(_np(a).astype(np.int64) + _np(b).astype(np.int64),
                       -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    return _cast(_np(a) + _np(b), m.type)


def isub(m, a, b):
    if m.has("sat"):
        return np.clip(_np(a).astype(np.int64) - _np(b).astype(np.int64),
                       -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    return _cast(_np(a) - _np(b), m.type)


def imad(m, a, b, c):
    p = product(m, a, b)
    if m.has("sat"):  # mad.hi.sat.s32
        return np.clip(p.astype(np.int64) + _np(c).astype(np.int64),
                       -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    return (p + _np(c).astype(p.dtype)).astype(p.dtype)


def idiv(m, a, b):
    t = m.type
    a, b = _np(a), _np(b)
    zero = b == 0
    ones = np.array(-1).astype(t.np_dtype) if t.kind == "s" else np.iinfo(t.np_dtype).max
    bs = np.where(zero, 1, b).astype(t.np_dtype)
    if t.kind == "u":
        q = a // bs
    else:
        r = np.fmod(a, bs)
        q = np.where(bs == -1, -a, (a - r) // np.where(bs == -1, 1, bs))
    return _cast(np.where(zero, ones, q), t)


def irem(m, a, b):
    t = m.type
    a, b = _np(a), _np(b)
    bs = np.where(b == 0, 1, b).astype(t.np_dtype)
    r = a % bs if t.kind == "u" else np.where(bs == -1, 0, np.fmod(a, bs))
    # x % 0 is all ones, signed or not (measured on an H100 by the edge sweep)
    ones = np.array(-1).astype(t.np_dtype) if t.kind == "s" else np.iinfo(t.np_dtype).max
    return _cast(np.where(b == 0, ones, r), t)


# ------------------------------------------------------------------------ bits
@alu
def and_(m, a, b):
    return np.bitwise_and(a, b) if m.type.is_pred else _cast(np.bitwise_and(a, b), m.type)


@alu
def or_(m, a, b):
    return np.bitwise_or(a, b) if m.type.is_pred else _cast(np.bitwise_or(a, b), m.type)


@alu
def xor_(m, a, b):
    return np.bitwise_xor(a, b) if m.type.is_pred else _cast(np.bitwise_xor(a, b), m.type)


@alu
def not_(m, a):
    return np.logical_not(a) if m.type.is_pred else _cast(np.invert(a), m.type)


def _amount(b, w):
    b = _np(b).astype(np.int64)
    return np.minimum(b, w - 1), b >= w


@alu
def shl(m, a, b):
    w = m.type.bits
    s, big = _amount(b, w)
    ua = _u(a)
    r = np.where(big, 0, ua << s.astype(ua.dtype))
    return _cast(_np(r).astype(ua.dtype), m.type)


@alu
def shr(m, a, b):
    t = m.type
    s, big = _amount(b, t.bits)
    a = _np(a)
    if t.kind == "s":
        return _cast(a >> s.astype(a.dtype), t)
    ua = _u(a)
    return _cast(np.where(big, 0, ua >> s.astype(ua.dtype)).astype(ua.dtype), t)


def _lowmask(n):
    n = _np(n).astype(np.uint64)
    return np.where(n >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                    (np.uint64(1) << np.minimum(n, 63)) - np.uint64(1))


def _pos_len(b, c, w):
    """bfe/bfi position and length. The 32-bit forms take the low 8 bits of each (the
    PTX ISA's rule); the 64-bit forms take the whole u32 operands, so 0x100 is past
    the end rather than 0 (measured on an H100 by the edge sweep: bfi.b64 with pos
    0x3210 leaves b unchanged, with len 0x80000000 fills to bit 63)."""
    pos = _np(b).astype(np.int64) & 0xFFFFFFFF
    ln = _np(c).astype(np.int64) & 0xFFFFFFFF
    if w < 64:
        pos, ln = pos & 0xFF, ln & 0xFF
    return np.minimum(pos, 255), np.minimum(ln, 255)


@alu
def bfe(m, a, b, c):
    t = m.type
    w = t.bits
    pos, ln = _pos_len(b, c, w)
    ua = _u(a).astype(np.uint64)
    eff = np.where(pos >= w, 0, np.minimum(ln, w - pos))
    field = (ua >> np.minimum(pos, w - 1).astype(np.uint64)) & _lowmask(eff)
    field = np.where(pos >= w, np.uint64(0), field)
    if t.kind == "s":
        sb = np.minimum(pos + ln - 1, w - 1).astype(np.uint64)
        sbit = (ln != 0) & (((ua >> sb) & np.uint64(1)) == 1)
        field = np.where(sbit, field | ~_lowmask(eff), field)
    return field.astype(UINT[w]).view(t.np_dtype)


@alu
def bfi(m, a, b, c, d):
    t = m.type
    w = t.bits
    pos, ln = _pos_len(c, d, w)
    eff = np.where(pos >= w, 0, np.minimum(ln, w - pos))
    sh = np.minimum(pos, w - 1).astype(np.uint64)
    mask = (_lowmask(eff) << sh) & _lowmask(w)
    ua, ub = _u(a).astype(np.uint64), _u(b).astype(np.uint64)
    r = (ub & ~mask) | ((ua << sh) & mask)
    return r.astype(UINT[w]).view(t.np_dtype)


@alu
def popc(m, a):
    return np.bitwise_count(_u(a)).astype(np.uint32)


def _clz32(x):
    x = _np(x).astype(np.uint64)
    _, e = np.frexp(x.astype(np.float64))
    return np.where(x == 0, 32, 32 - e).astype(np.uint32)


@alu
def clz(m, a):
    ua = _u(a).astype(np.uint64)
    if m.type.bits == 32:
        return _clz32(ua)
    hi, lo = ua >> np.uint64(32), ua & np.uint64(0xFFFFFFFF)
    return np.where(hi != 0, _clz32(hi), 32 + _clz32(lo)).astype(np.uint32)


_REV8 = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], np.uint8)


@alu
def brev(m, a):
    a = _np(a)
    k = a.dtype.itemsize
    flat = np.ascontiguousarray(np.atleast_1d(a)).view(np.uint8).reshape(-1, k)
    out = np.ascontiguousarray(_REV8[flat[:, ::-1]]).view(a.dtype).reshape(a.shape)
    return out


# byte selectors (d.b0, d.b1, d.b2, d.b3) of prmt's special modes, per c[1:0]
PRMT_MODES = {
    "f4e": [(0, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (3, 4, 5, 6)],
    "b4e": [(0, 7, 6, 5), (1, 0, 7, 6), (2, 1, 0, 7), (3, 2, 1, 0)],
    "rc8": [(0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)],
    "ecl": [(0, 1, 2, 3), (1, 1, 2, 3), (2, 2, 2, 3), (3, 3, 3, 3)],
    "ecr": [(0, 0, 0, 0), (0, 1, 1, 1), (0, 1, 2, 2), (0, 1, 2, 3)],
    "rc16": [(0, 1, 0, 1), (2, 3, 2, 3), (0, 1, 0, 1), (2, 3, 2, 3)],
}


@alu
def prmt(m, a, b, c):
    src = (_u(b).astype(np.uint64) << np.uint64(32)) | _u(a).astype(np.uint64)
    c = _u(c).astype(np.int64)
    mode = m.chosen.get("mode")
    out = np.zeros(np.broadcast(src, c).shape, np.uint64)
    for i in range(4):
        if mode is None:
            ctl = (c >> (4 * i)) & 0xF
            sel = ctl & 7
        else:
            table = np.array([row[i] for row in PRMT_MODES[mode]], np.int64)
            sel = table[c & 3]
            ctl = sel
        byte = (src >> (8 * sel).astype(np.uint64)) & np.uint64(0xFF)
        if mode is None:
            sign = (ctl & 8) != 0
            byte = np.where(sign, np.where(byte & np.uint64(0x80), np.uint64(0xFF),
                                           np.uint64(0)), byte)
        out |= byte << np.uint64(8 * i)
    return out.astype(np.uint32)


# ------------------------------------------------------------------------ compare / select
def compare(m, a, b):
    t = m.type
    cmp = m.chosen["cmp"]
    if t.is_float:
        return floatmath.fcompare(m, cmp, a, b)
    a, b = _np(a), _np(b)
    if cmp in ("lo", "ls", "hi", "hs"):
        a, b = _u(a), _u(b)
        cmp = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}[cmp]
    return {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}[cmp](a, b)


def _combine(m, r, c):
    op = m.chosen.get("bool")
    if op is None or c is None:
        return r
    return {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op](r, c)


@alu
def setp(m, a, b, c=None):
    return _combine(m, compare(m, a, b), c)


@alu
def set_(m, a, b, c=None):
    sub = dataclasses.replace(m, types=m.types[1:])
    r = _combine(m, compare(sub, a, b), c)
    dst = m.types[0]
    if dst.is_float:
        return np.where(r, np.float32(1.0), np.float32(0.0))
    return np.where(r, np.uint32(0xFFFFFFFF), np.uint32(0)).view(dst.np_dtype)


@alu
def selp(m, a, b, c):
    return np.where(c, a, b).astype(m.type.np_dtype)


# add ... max: the integer form, or floatmath's for float types
HANDLERS = {
    "add": alu(_float_or_int(iadd, floatmath.fadd)),
    "sub": alu(_float_or_int(isub, floatmath.fsub)),
    "mul": alu(_float_or_int(product, floatmath.fmul)),
    "mad": alu(_float_or_int(imad, floatmath.ffma)),
    "div": alu(_float_or_int(idiv, floatmath.fdiv)),
    "rem": alu(lambda m, a, b: irem(m, a, b)),
    "abs": alu(_float_or_int(lambda m, a: _cast(np.abs(_np(a)), m.type), floatmath.fabs)),
    "neg": alu(_float_or_int(lambda m, a: _cast(np.negative(_np(a)), m.type), floatmath.fneg)),
    "min": alu(_float_or_int(lambda m, a, b: _cast(np.minimum(a, b), m.type), floatmath.fmin)),
    "max": alu(_float_or_int(lambda m, a, b: _cast(np.maximum(a, b), m.type), floatmath.fmax)),
    "and": and_,
    "or": or_,
    "xor": xor_,
    "not": not_,
    "shl": shl,
    "shr": shr,
    "bfe": bfe,
    "bfi": bfi,
    "popc": popc,
    "clz": clz,
    "brev": brev,
    "prmt": prmt,
    "setp": setp,
    "set": set_,
    "selp": selp,
}
