"""``cvt`` (every type pair the table allows) and ``mov`` (including pack/unpack).

Float-to-integer conversions saturate to the destination range whether or not
``.sat`` is written. NaN becomes 0 only on the GPU's 32-bit path (an f16, bf16 or
f32 source into an integer of at most 32 bits); an f64 source or a 64-bit
destination gives the "integer indefinite" pattern instead, the destination's
top bit alone (INT_MIN for signed types, 0x80.., 0x8000.., ... for unsigned), as
measured on an H100 by the edge sweep.
Float results follow :mod:`.floatmath` (exact rounding, canonical
NaN, ``.ftz`` when an f32 is the source or destination).
"""
from __future__ import annotations

import numpy as np

from ...core import ir
from ...core.fp8 import fp8_decode, fp8_encode
from ...core.types import ALL_TYPES, int_range
from .. import fround as fr
from ..values import UINT
from .floatmath import flush_in, fmt_for, unpack

_IRND = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}


def nan_to_int(src, dst) -> int:
    """What a NaN of float type ``src`` converts to in integer type ``dst``."""
    if src.bits <= 32 and dst.bits <= 32:
        return 0
    return -(1 << (dst.bits - 1)) if dst.kind == "s" else 1 << (dst.bits - 1)


def _to_int(x64, dst, irnd, src):
    """f64 values -> integers of ``dst``: round, saturate, NaN as :func:`nan_to_int`."""
    with np.errstate(all="ignore"):
        r = _IRND[irnd](x64) if irnd else np.trunc(x64)
        lo, hi = int_range(dst)
        nan = np.isnan(r)
        r = np.where(nan, 0.0, r)
        big = r >= float(hi)
        small = r <= float(lo)
        mid = np.where(big | small, 0.0, r)
        out = mid.astype(np.int64).astype(dst.np_dtype) if dst.kind == "s" or dst.bits < 64 \
            else mid.astype(np.uint64)
        out = np.where(big, np.array(hi).astype(dst.np_dtype), out)
        out = np.where(small, np.array(lo).astype(dst.np_dtype), out)
        out = np.where(nan, np.array(nan_to_int(src, dst)).astype(dst.np_dtype), out)
        return out.astype(dst.np_dtype)


def _int_to_int(x, dst, sat):
    x = np.asarray(x)
    if not sat:
        return x.astype(dst.np_dtype)
    lo, hi = int_range(dst)
    xs = x.astype(np.int64) if x.dtype.kind == "i" or x.dtype.itemsize < 8 else x
    if xs.dtype.kind == "u":
        out = np.where(xs > np.uint64(hi), np.uint64(hi), xs)
        return out.astype(dst.np_dtype)
    hi_c = min(hi, 2 ** 63 - 1)
    out = np.clip(xs, max(lo, -2 ** 63), hi_c)
    return out.astype(dst.np_dtype)


def _finish_float(bits, f, m, dst):
    bits = fr.canonical_nan(bits, f)
    if m.has("ftz") and dst.name == "f32":
        bits = fr.flush_subnormal(bits, f)
    if m.has("relu"):
        v = fr.decode(bits, f)
        bits = np.where(v < 0, f.udtype(0), bits).astype(f.udtype)
    if m.has("satfinite"):
        v = fr.decode(bits, f)
        bits = np.where(np.isinf(v), fr.encode_rn(np.copysign(f.max, v), f), bits).astype(f.udtype)
    if m.has("sat"):
        bits = fr.saturate(bits, f)
    return bits


def cvt_fp8(m, a, b=None) -> np.ndarray:
    """cvt to/from e4m3x2 / e5m2x2 (the formats: :mod:`ptxdsl.core.fp8`); returns result bits."""
    dst, src = m.types
    relu = m.has("relu")
    if dst.name in ("e4m3x2", "e5m2x2"):
        name = dst.name[:-2]
        if src.name == "f32":   # a goes to the upper byte, b to the lower (as f16x2)
            hi = fp8_encode(np.asarray(a, np.float32), name, relu)
            lo = fp8_encode(np.asarray(b, np.float32), name, relu)
        else:
            u = np.asarray(a).view(np.uint32) if np.asarray(a).dtype != np.uint32 else a
            lo = fp8_encode((u & 0xFFFF).astype(np.uint16).view(np.float16), name, relu)
            hi = fp8_encode((u >> 16).astype(np.uint16).view(np.float16), name, relu)
        return lo.astype(np.uint16) | (hi.astype(np.uint16) << np.uint16(8))
    name = src.name[:-2]
    u = np.asarray(a).astype(np.uint16)
    out = []
    for byte in (u & 0xFF, u >> 8):
        v = fp8_decode(byte, name)
        if relu:
            v = np.where(v < 0, 0.0, v)
        h = v.astype(np.float16).view(np.uint16)
        out.append(np.where(np.isnan(v), np.uint16(0x7FFF), h).astype(np.uint32))
    return out[0] | (out[1] << np.uint32(16))


def cvt_value(m, a, b=None):
    dst, src = m.types
    irnd, frnd = m.chosen.get("irnd"), m.chosen.get("frnd")
    if dst.lanes == 2 and dst.bits == 16 or src.lanes == 2 and src.bits == 16:
        return cvt_fp8(m, a, b)  # packed 8-bit floats (e4m3x2, e5m2x2)
    if dst.name in ("f16x2", "bf16x2"):
        f = fmt_for(dst)
        hi = _finish_float(fr.from_f64(np.asarray(a, np.float64), frnd, f), f, m, dst)
        lo = _finish_float(fr.from_f64(np.asarray(b, np.float64), frnd, f), f, m, dst)
        return lo.astype(np.uint32) | (hi.astype(np.uint32) << np.uint32(16))
    if dst.name == "tf32":
        u = np.asarray(a).view(np.uint32)
        nan = np.isnan(np.asarray(a))
        u64 = u.astype(np.uint64)
        if frnd == "rz":      # truncate the 13 low mantissa bits
            r = u64 & 0xFFFFE000
        elif frnd == "rn":    # nearest, ties to even
            r = (u64 + 0xFFF + ((u64 >> 13) & 1)) & 0xFFFFE000
        else:                 # .rna: nearest, ties away from zero
            r = (u64 + 0x1000) & 0xFFFFE000
        r = r.astype(np.uint32)
        r = np.where(np.isinf(np.asarray(a)), u, r)
        # .rna truncates NaNs to tf32's 10 mantissa bits, nothing more (measured on an
        # H200: 0x7fffffff -> 0x7fffe000, and 0x7f800001 -> 0x7f800000, an infinity);
        # .rn and .rz give the canonical 0x7fffe000 for every NaN (H100 edge sweep).
        nan_bits = u & np.uint32(0xFFFFE000) if frnd == "rna" else np.uint32(0x7FFFE000)
        return np.where(nan, nan_bits, r).astype(np.uint32)
    if src.is_float:
        x = unpack(a, src)[0]
        if m.has("ftz") and src.name == "f32":
            x = flush_in(x, fr.FMTS["f32"])
        if not dst.is_float:
            return _to_int(x, dst, irnd, src)
        f = fmt_for(dst)
        if irnd:  # round to an integral value in the same type
            with np.errstate(all="ignore"):
                x = _IRND[irnd](x)
        bits = fr.from_f64(x, frnd or "rn", f)
        return _finish_float(bits, f, m, dst).view(dst.np_dtype)
    if dst.is_float:
        f = fmt_for(dst)
        bits = fr.from_int(np.asarray(a), frnd or "rn", f)
        return _finish_float(bits, f, m, dst).view(dst.np_dtype)
    return _int_to_int(a, dst, m.has("sat"))


def cvt(mach, instr, mask):
    m = instr.match
    srcs = [mach.src(instr, i, mask) for i in range(1, len(instr.operands))]
    mach.dst(instr, 0, cvt_value(m, *srcs), mask)


def mov(mach, instr, mask):
    t = instr.match.type
    d, a = instr.operands
    if isinstance(a, ir.Vec):  # pack halves into one register, first item lowest
        w = t.bits // len(a.items)
        # Each part is read as bits of its own width (a .b16 or .e4m3x2 register into
        # a .b32), not as the instruction's type.
        parts = [mach.value(x, ALL_TYPES[f"b{w}"], mask, instr) for x in a.items]
        acc = np.zeros((), UINT[t.bits])
        for k, p in enumerate(parts):
            pu = np.asarray(p)
            pu = pu.view(UINT[pu.dtype.itemsize * 8]).astype(UINT[t.bits])
            acc = acc | (pu << UINT[t.bits](w * k))
        mach.dst(instr, 0, acc, mask)
        return
    v = mach.src(instr, 1, mask)
    if isinstance(d, ir.Vec):  # unpack
        n = len(d.items)
        w = t.bits // n
        u = np.asarray(v).view(UINT[t.bits])
        parts = [(u >> UINT[t.bits](w * k)).astype(UINT[w]) for k in range(n)]
        mach.dst(instr, 0, parts, mask)
        return
    mach.dst(instr, 0, v, mask)


HANDLERS = {
    "cvt": cvt,
    "mov": mov,
}
