"""Helpers shared by the interpreter tests: one-instruction kernels and exact float references.

``run_op`` traces a kernel of ``n`` threads in which thread ``i`` loads
element ``i`` of each input array, runs one instruction, and stores its
result; the result comes back as a numpy array. ``ref_round`` rounds an exact
rational to a float format with a mode, written independently of
``ptxdsl.interp.fround`` (integer quantum arithmetic) so the two check each
other.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.types import by_name, pred, u32

_MEM = {"pred": "u32"}
# ld/st move half-precision values through their bit-width forms
_LDST = {"f16": "b16", "bf16": "b16", "f16x2": "b32", "bf16x2": "b32"}


def _load(p, tid, t):
    if t.is_pred:
        raw = reg.scalar(u32)
        ptx.inst.ld.global_.u32(raw, ptx.addr(p + tid * 4))
        r = reg.scalar(pred)
        ptx.inst.setp.ne.u32(r, raw, 0)
        return r
    r = reg.scalar(t)
    ptx.inst(f"ld.global.{_LDST.get(t.name, t.name)}", r, ptx.addr(p + tid * t.bytes))
    return r


def _store(p, tid, r, t):
    if t.is_pred:
        v = reg.scalar(u32)
        ptx.inst.selp.u32(v, 1, 0, r)
        ptx.inst.st.global_.u32(ptx.addr(p + tid * 4), v)
        return
    ptx.inst(f"st.global.{_LDST.get(t.name, t.name)}", ptx.addr(p + tid * t.bytes), r)


def make_op_kernel(chain: str, in_types, out_types, n: int, imms=(), arch="sm_90a"):
    """A kernel: load one element per input, ``chain d..., a..., *imms``, store each dest."""
    in_types = [by_name(t) for t in in_types]
    out_types = [by_name(t) for t in out_types]
    mem = lambda t: by_name(_MEM.get(t.name, t.name))  # noqa: E731
    nin = len(in_types)

    def body(*tensors):
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        ptrs = ptx.global_ptrs(*tensors)
        srcs = [_load(p, tid, t) for p, t in zip(ptrs[:nin], in_types)]
        dsts = [reg.scalar(t) for t in out_types]
        ptx.inst(chain, *dsts, *srcs, *imms)
        for p, r, t in zip(ptrs[nin:], dsts, out_types):
            _store(p, tid, r, t)

    names = [f"t{i}" for i in range(nin + len(out_types))]
    src = f"def op_kernel({', '.join(names)}):\n    body({', '.join(names)})\n"
    scope = {"body": body}
    exec(src, scope)
    fn = scope["op_kernel"]
    return kernel(in_specs=[Tile(n, mem(t)) for t in in_types],
                  out_specs=[Tile(n, mem(t)) for t in out_types],
                  grid=1, block=(n, 1, 1), arch=arch)(fn)


_CACHE: dict = {}


def run_op(chain: str, in_types, out_type, *inputs, imms=()):
    """Run ``chain`` over equal-length input arrays; returns the output array (or tuple)."""
    n = len(inputs[0])
    outs = out_type if isinstance(out_type, (list, tuple)) else [out_type]
    key = (chain, tuple(in_types), tuple(outs), n, tuple(imms))
    k = _CACHE.get(key)
    if k is None:
        k = _CACHE[key] = make_op_kernel(chain, in_types, outs, n, imms)
    arrays = []
    for a, t in zip(inputs, in_types):
        dt = by_name(_MEM.get(t, t)).np_dtype
        arrays.append(np.asarray(a).astype(dt) if t == "pred" else np.asarray(a).view(dt)
                      if np.asarray(a).dtype.itemsize == dt.itemsize else np.asarray(a, dt))
    return k.interpret(*arrays)


# ---------------------------------------------------------------------- exact references
FORMATS = {  # name: (stored mantissa bits, emin, emax, numpy bits dtype)
    "f16": (10, -14, 15, np.uint16),
    "bf16": (7, -126, 127, np.uint16),
    "f32": (23, -126, 127, np.uint32),
    "f64": (52, -1022, 1023, np.uint64),
}


def to_fraction(v: float) -> Fraction:
    return Fraction(float(v))


def ref_round(x: Fraction, mode: str, fmt: str) -> float:
    """Round the exact rational ``x`` to ``fmt`` with ``mode``; returns a Python float."""
    man, emin, emax, _ = FORMATS[fmt]
    if x == 0:
        return 0.0
    sign = -1 if x < 0 else 1
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, emin)
    q = Fraction(2) ** (e - man)
    n = a / q
    lo = math.floor(n)
    hi = lo if lo == n else lo + 1
    if mode == "rz" or (mode == "rm" and sign > 0) or (mode == "rp" and sign < 0):
        k = lo
    elif mode in ("rm", "rp"):
        k = hi
    else:
        d = n - lo
        k = lo if d < Fraction(1, 2) else hi if d > Fraction(1, 2) else (lo if lo % 2 == 0 else hi)
    val = k * q
    top = Fraction(2) ** (emax + 1)
    big = (2 - Fraction(2) ** -man) * Fraction(2) ** emax
    if val >= top:
        if mode == "rn" or (mode == "rp" and sign > 0) or (mode == "rm" and sign < 0):
            return sign * math.inf
        val = big
    return sign * float(val)


def bits_of(v: float, fmt: str) -> int:
    if fmt == "f64":
        return int(np.array(v, np.float64).view(np.uint64))
    if fmt == "f32":
        return int(np.array(v, np.float32).view(np.uint32))
    if fmt == "f16":
        return int(np.array(v, np.float16).view(np.uint16))
    return int(np.array(v, np.float32).view(np.uint32)) >> 16  # exact for bf16 values


def values_of(bits: np.ndarray, fmt: str) -> np.ndarray:
    bits = np.asarray(bits)
    if fmt == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    dt = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[fmt]
    return bits.view(dt).astype(np.float64)
