"""How register contents are stored and viewed.

Every register holds the raw bits of its declared width (``uint16/32/64``,
``bool`` for predicates), one element per thread. An instruction views
those bits as its own type (``add.f32`` views a ``.b32`` register as
float32, ``ld.u8`` into a ``.u32`` register truncates and extends), so the
bit-level rules of PTX's operand typing hold without copies.
"""
from __future__ import annotations

import numpy as np

from ..core.types import PtxType

UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
SINT = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


def storage_dtype(t: PtxType) -> np.dtype:
    if t.is_pred:
        return np.dtype(bool)
    if t.bits not in (16, 32, 64):
        raise TypeError(f"no register storage for .{t.name}")
    return np.dtype(UINT[t.bits])


def np_type(t: PtxType) -> np.dtype:
    """The numpy dtype an instruction of type ``t`` computes with (bf16/x2: bit patterns)."""
    if t.is_pred:
        return np.dtype(bool)
    return t.np_dtype


def view(bits: np.ndarray, t: PtxType) -> np.ndarray:
    """Register bits seen as type ``t``; narrower types take the low bits."""
    if t.is_pred:
        return bits
    w = bits.dtype.itemsize * 8
    if t.bits == w:
        return bits.view(t.np_dtype)
    if t.bits < w:
        return bits.astype(UINT[t.bits]).view(t.np_dtype)
    raise TypeError(f"a {w}-bit register cannot be read as .{t.name}")


def to_bits(value, store: np.dtype) -> np.ndarray:
    """A typed result -> the bits a register of dtype ``store`` keeps.

    Narrow results are sign-extended when their numpy type is signed and
    zero-extended otherwise (PTX: ``ld.s8`` into ``.s32`` sign-extends).
    """
    v = np.asarray(value)
    if store == np.bool_:
        return v.astype(bool)
    w = store.itemsize * 8
    if v.dtype == np.bool_:
        return v.astype(store)
    ib = v.dtype.itemsize * 8
    if ib == w:
        return v.view(store) if v.dtype != store else v
    if ib < w:
        if v.dtype.kind == "i":
            return v.astype(SINT[w]).view(store)
        u = v.view(UINT[ib]) if v.dtype.kind != "u" else v
        return u.astype(store)
    u = v.view(UINT[ib]) if v.dtype.kind != "u" else v
    return u.astype(store)


def immediate(value, t: PtxType):
    """A numpy scalar of type ``t`` for an immediate (integers wrap to the width)."""
    if t.is_float:
        if t.name == "f64":
            return np.float64(value)
        if t.name == "f32":
            return np.float32(value)
        raise TypeError(f"no .{t.name} immediates")
    if t.is_pred:
        return np.bool_(value)
    bits = int(value) & ((1 << t.bits) - 1)
    return np.array(bits, UINT[t.bits]).view(t.np_dtype)[()]
