"""CPU semantics of the warp tensor-core instructions (mma.sync, ldmatrix, stmatrix, movmatrix).

All four are warp-collective: every lane of a warp must execute them together
(``.aligned``); a warp with only some lanes active stops the run with an
:class:`~ptxdsl.core.errors.InterpreterError` naming the missing lanes.

``mma.sync`` reads each operand's registers, unpacks them into elements and
places them in their tiles with the same :class:`ptxdsl.dsl.tensorcore.Layout`
objects that kernels and the docs use, multiplies in float64 (int64 for
integer forms), and packs the result back.

Exactness
---------
* Integer forms (s8/u8/s4/u4 -> s32, and .b1 with .xor/.and .popc) are bit-exact: products and sums are
  exact in int64; the result wraps modulo 2^32, or clamps to the s32 range
  with ``.satfinite``.
* Float forms compute the exact value ``sum_k a_ik b_kj + c_ij`` (exact in
  float64 for f16/bf16/tf32/fp8 inputs: every product fits in 48 bits and K <=
  32 terms of a similar scale add exactly unless their exponents differ by more
  than ~50) and round it once, to nearest even, into the result type. Tensor
  cores add in a fixed internal order with truncating alignment, so a GPU
  result may differ from the interpreter's by at most
  ``(K + 1) * 2^-p * (sum_k |a_ik b_kj| + |c_ij|)`` where ``p`` is 23 for .f32
  results (13 for e4m3/e5m2 inputs, whose sums H100/H200 keep with about 13
  fraction bits) and ``p = 10`` plus one half-ulp of .f16 for .f16 results;
  ``tests/gpu/test_tensorcore_gpu.py`` checks this bound on the device.
* .tf32 inputs are read as the hardware reads them: the low 13 bits of each
  32-bit pattern are ignored.
* .f64 forms multiply and add in float64 (numpy's order): within ``K * 2^-52``
  of ``sum_k |a b| + |c|``.
"""
from __future__ import annotations

import numpy as np

from ...core import ir
from ...core.fp8 import fp8_decode
from ...dsl.tensorcore import operand_layouts
from ...core.types import bf16_bits_to_f32
from ..addressing import addresses, check, space_of
from ..warps import full_warps


def _threads(warps) -> np.ndarray:
    return (warps[:, None] * 32 + np.arange(32)).reshape(-1)


def _regs(mach, instr, i, mask, threads, width) -> np.ndarray:
    """(len(threads), nregs) raw register bits of list operand ``i``."""
    vals = mach.src(instr, i, mask)
    vals = vals if isinstance(vals, list) else [vals]
    u = np.uint64 if width == 64 else np.uint32
    cols = []
    for v in vals:
        a = np.asarray(v)
        if a.dtype.itemsize * 8 != width:  # an immediate of another width (never for mma)
            a = a.astype(np.float32 if width == 32 else np.float64)
        a = np.broadcast_to(a.view(u) if a.dtype != u else a, (mach.T,))
        cols.append(a[threads])
    return np.stack(cols, axis=1)


def _write_list(mach, instr, i, mask, threads, bits) -> None:
    """Write (len(threads), nregs) bits into list operand ``i``."""
    dest = instr.operands[i]
    regs = dest.items if isinstance(dest, ir.Vec) else (dest,)
    for j, r in enumerate(regs):
        full = np.zeros(mach.T, bits.dtype)
        full[threads] = bits[:, j]
        mach.write_reg(r, full, mask)


# ---------------------------------------------------------------------- element codecs
def _decode(bits: np.ndarray, elem: str) -> np.ndarray:
    """Element bit patterns (uint) -> float64 / int64 values."""
    if elem == "f16":
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    if elem == "bf16":
        return bf16_bits_to_f32(bits.astype(np.uint16)).astype(np.float64)
    if elem == "tf32":   # the tensor core reads the upper 19 bits only
        return (bits.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(
            np.float64)
    if elem == "f32":
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    if elem == "f64":
        return bits.astype(np.uint64).view(np.float64)
    if elem == "s32":
        return bits.astype(np.uint32).view(np.int32).astype(np.int64)
    if elem in ("e4m3", "e5m2"):
        return fp8_decode(bits, elem)
    b = bits.astype(np.int64)
    if elem == "b1":
        return b & 1
    if elem == "s8":
        return (b ^ 0x80) - 0x80
    if elem == "s4":
        return (b ^ 0x8) - 0x8
    return b  # u8, u4


def _unpack(regs: np.ndarray, lay) -> np.ndarray:
    """(n, nregs) register bits -> (n, elems) element values."""
    per, w = lay.per_reg, lay.bits
    if per == 1:
        return _decode(regs, lay.elem)
    shifts = (np.arange(per) * w).astype(regs.dtype)
    parts = (regs[:, :, None] >> shifts) & regs.dtype.type((1 << w) - 1)
    return _decode(parts.reshape(len(regs), -1), lay.elem)


def _encode(vals: np.ndarray, elem: str, sat: bool) -> np.ndarray:
    """Result values (float64 / int64) -> element bits."""
    if elem == "f32":
        with np.errstate(over="ignore", invalid="ignore"):
            return vals.astype(np.float32).view(np.uint32)
    if elem == "f16":
        with np.errstate(over="ignore", invalid="ignore"):
            return vals.astype(np.float16).view(np.uint16).astype(np.uint32)
    if elem == "f64":
        return vals.astype(np.float64).view(np.uint64)
    if sat:
        vals = np.clip(vals, -2 ** 31, 2 ** 31 - 1)
    return (vals & 0xFFFFFFFF).astype(np.uint32)


def _pack(elems: np.ndarray, lay) -> np.ndarray:
    per, w = lay.per_reg, lay.bits
    if per == 1:
        return elems
    e = elems.reshape(len(elems), -1, per).astype(np.uint32)
    shifts = (np.arange(per) * w).astype(np.uint32)
    return np.bitwise_or.reduce(e << shifts, axis=2).astype(np.uint32)


# ---------------------------------------------------------------------- mma.sync
def mma(mach, instr, mask):
    ch = instr.match.chosen
    lays = operand_layouts(ch["shape"], ch["atype"], ch["btype"], ch["ctype"], ch["dtype"],
                           ch["alayout"], ch.get("blayout", "col"))
    warps = full_warps(mach, instr, mask)
    if not len(warps):
        return
    th = _threads(warps)
    nw = len(warps)
    tiles = {}
    for key, idx in (("a", 1), ("b", 2), ("c", 3)):
        lay = lays[key]
        regs = _regs(mach, instr, idx, mask, th, 64 if lay.bits == 64 else 32)
        tiles[key] = lay.scatter(_unpack(regs, lay).reshape(nw, 32, lay.elems))
    integer = ch["dtype"] == "s32"
    with np.errstate(all="ignore"):
        prod = np.matmul(tiles["a"], tiles["b"])
        if ch.get("bitop") == "xor":   # popc(a XOR b) = popc(a) + popc(b) - 2 popc(a AND b)
            prod = tiles["a"].sum(-1)[..., :, None] + tiles["b"].sum(-2)[..., None, :] - 2 * prod
        d = prod + tiles["c"]
    lay_d = lays["d"]
    elems = lay_d.gather(d).reshape(nw * 32, lay_d.elems)
    bits = _pack(_encode(elems if integer else elems.astype(np.float64), ch["dtype"],
                         "satfinite" in ch), lay_d)
    _write_list(mach, instr, 0, mask, th, bits)


# ---------------------------------------------------------------------- ldmatrix & co
_LANE = np.arange(32)
_ROW, _COL = _LANE // 4, 2 * (_LANE % 4)


def _row_threads(warps, n) -> np.ndarray:
    """Threads giving the row addresses: lane 8i + r names row r of matrix i."""
    return (warps[:, None, None] * 32 + 8 * np.arange(n)[None, :, None]
            + np.arange(8)[None, None, :]).reshape(-1)


def _to_regs(mat: np.ndarray) -> np.ndarray:
    """(W, n, 8, 8) uint16 matrices -> (W*32, n) .b32 fragments (two columns per lane)."""
    lo = mat[:, :, _ROW, _COL].astype(np.uint32)
    hi = mat[:, :, _ROW, _COL + 1].astype(np.uint32)
    return (lo | (hi << np.uint32(16))).transpose(0, 2, 1).reshape(-1, mat.shape[1])


def _from_regs(regs: np.ndarray, nw: int) -> np.ndarray:
    """(W*32, n) .b32 fragments -> (W, n, 8, 8) uint16 matrices."""
    n = regs.shape[1]
    r = regs.reshape(nw, 32, n).transpose(0, 2, 1)
    mat = np.zeros((nw, n, 8, 8), np.uint16)
    mat[:, :, _ROW, _COL] = (r & 0xFFFF).astype(np.uint16)
    mat[:, :, _ROW, _COL + 1] = (r >> 16).astype(np.uint16)
    return mat


def ldmatrix(mach, instr, mask):
    m = instr.match
    n = int(m.chosen["num"][1:])
    warps = full_warps(mach, instr, mask)
    if not len(warps):
        return
    rows = _row_threads(warps, n)
    addr = addresses(mach, instr, instr.operands[1], mask)[rows]
    data = np.zeros((len(rows), 8), np.uint16)
    for sp, sel, off in check(mach, instr, rows, addr, space_of(m), 16, False):
        data[sel] = sp.read(off, np.uint16, 8)
    mat = data.reshape(len(warps), n, 8, 8)
    if m.has("trans"):
        mat = mat.transpose(0, 1, 3, 2)
    _write_list(mach, instr, 0, mask, _threads(warps), _to_regs(mat))


def stmatrix(mach, instr, mask):
    m = instr.match
    n = int(m.chosen["num"][1:])
    warps = full_warps(mach, instr, mask)
    if not len(warps):
        return
    regs = _regs(mach, instr, 1, mask, _threads(warps), 32)
    mat = _from_regs(regs, len(warps))
    if m.has("trans"):
        mat = mat.transpose(0, 1, 3, 2)
    rows = _row_threads(warps, n)
    addr = addresses(mach, instr, instr.operands[0], mask)[rows]
    data = np.ascontiguousarray(mat).reshape(-1, 8)
    for sp, sel, off in check(mach, instr, rows, addr, space_of(m), 16, True):
        sp.write(off, data[sel])


def movmatrix(mach, instr, mask):
    warps = full_warps(mach, instr, mask)
    if not len(warps):
        return
    th = _threads(warps)
    a = np.broadcast_to(np.asarray(mach.src(instr, 1, mask)).astype(np.uint32), (mach.T,))
    mat = _from_regs(a[th][:, None], len(warps)).transpose(0, 1, 3, 2)
    out = np.zeros(mach.T, np.uint32)
    out[th] = _to_regs(mat)[:, 0]
    mach.write_reg(instr.operands[0], out, mask)


HANDLERS = {
    "mma.sync": mma,
    "ldmatrix.sync": ldmatrix,
    "stmatrix.sync": stmatrix,
    "movmatrix.sync": movmatrix,
}
