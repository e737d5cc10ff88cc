"""PTX scalar types: name, width, kind, numpy dtype and literal encoding.

``from ptxdsl.types import f32, u32`` gives the objects kernels use for
``reg.scalar(f32)``, ``Tile(B, N, f32)`` and ``smem.alloc(f32, ...)``.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

from .fp8 import fp8_encode


@dataclass(frozen=True)
class PtxType:
    """One PTX fundamental type, e.g. ``.f32`` or ``.u64``.

    ``kind`` is one of ``"u"`` (unsigned), ``"s"`` (signed), ``"b"``
    (untyped bits), ``"f"`` (float, including packed x2 forms) and
    ``"pred"``.
    """

    name: str
    bits: int
    kind: str
    np_name: str | None = None
    lanes: int = 1  # 2 for packed f16x2 / bf16x2

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    @property
    def ptx(self) -> str:
        """The PTX spelling, e.g. ``.f32``."""
        return "." + self.name

    @property
    def bytes(self) -> int:
        return max(self.bits // 8, 1)

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy dtype holding one value of this type (bit patterns for bf16)."""
        if self.np_name is None:
            raise TypeError(f"{self.name} has no numpy dtype")
        return np.dtype(self.np_name)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in ("u", "s", "b")

    @property
    def is_signed(self) -> bool:
        return self.kind == "s"

    @property
    def is_pred(self) -> bool:
        return self.kind == "pred"

    def literal(self, value: int | float) -> str:
        """Encode a Python number as a PTX immediate of this type.

        Floats use PTX's exact hex forms (``0f3F800000``, ``0d...``) so
        that no decimal rounding happens between Python and ptxas.
        """
        if self.name in ("f32", "tf32"):
            return "0f" + struct.pack(">f", float(value)).hex().upper()
        if self.name == "f64":
            return "0d" + struct.pack(">d", float(value)).hex().upper()
        if self.kind == "f":
            raise TypeError(
                f"PTX has no {self.name} literal; use bits_of({self.name}, value) "
                f"with a .b16 mov, or keep the constant in an f32 register"
            )
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{self.name} immediate must be an int, got {value!r}")
        value = int(value)
        lo, hi = int_range(self)
        if not lo <= value <= hi:
            raise ValueError(f"{value} does not fit in {self.name} (range {lo}..{hi})")
        return str(value) if value >= 0 else str(value)


def int_range(t: PtxType) -> tuple[int, int]:
    """The values an immediate of an integer type may take.

    ``.b`` types accept both signed and unsigned spellings, as ptxas does.
    """
    if t.kind == "u":
        return 0, (1 << t.bits) - 1
    if t.kind == "s":
        return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1
    return -(1 << (t.bits - 1)), (1 << t.bits) - 1


def float_bits(t: PtxType, value: float) -> int:
    """The bit pattern of ``value`` rounded (to nearest even) to float type ``t`` (f32,
    f64, f16, bf16, e4m3, e5m2)."""
    if t.name == "f32":
        return int(np.array(value, np.float32).view(np.uint32))
    if t.name == "f64":
        return int(np.array(value, np.float64).view(np.uint64))
    if t.name == "f16":
        with np.errstate(over="ignore"):  # out of range rounds to inf, as cvt.rn does
            return int(np.array(value, np.float16).view(np.uint16))
    if t.name == "bf16":
        return int(f32_to_bf16_bits(np.array(value, np.float32)))
    if t.name in ("e4m3", "e5m2"):  # saturated to the finite range, as cvt.rn.satfinite
        return int(fp8_encode(value, t.name))
    raise TypeError(f"{t.name} is not a scalar float type")


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round f32 values to bf16 (nearest even), returned as uint16 bit patterns."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    nan = np.isnan(np.asarray(x, np.float32))
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    return np.where(nan, np.uint16(0x7FC0), out)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    """Widen bf16 bit patterns (uint16) to f32 exactly."""
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


pred = PtxType("pred", 1, "pred", "bool")
b8 = PtxType("b8", 8, "b", "uint8")
b16 = PtxType("b16", 16, "b", "uint16")
b32 = PtxType("b32", 32, "b", "uint32")
b64 = PtxType("b64", 64, "b", "uint64")
b128 = PtxType("b128", 128, "b", None)
u8 = PtxType("u8", 8, "u", "uint8")
u16 = PtxType("u16", 16, "u", "uint16")
u32 = PtxType("u32", 32, "u", "uint32")
u64 = PtxType("u64", 64, "u", "uint64")
s8 = PtxType("s8", 8, "s", "int8")
s16 = PtxType("s16", 16, "s", "int16")
s32 = PtxType("s32", 32, "s", "int32")
s64 = PtxType("s64", 64, "s", "int64")
f16 = PtxType("f16", 16, "f", "float16")
# bf16 values live in numpy as their uint16 bit patterns (numpy has no bf16).
bf16 = PtxType("bf16", 16, "f", "uint16")
f16x2 = PtxType("f16x2", 32, "f", "uint32", lanes=2)
bf16x2 = PtxType("bf16x2", 32, "f", "uint32", lanes=2)
tf32 = PtxType("tf32", 32, "f", "uint32")
f32 = PtxType("f32", 32, "f", "float32")
f64 = PtxType("f64", 64, "f", "float64")
# 8-bit floats (sm_89+): e4m3 (bias 7, no infinities, max 448) and e5m2 (bias 15,
# IEEE-like, max 57344), as bit patterns. They are mma.sync operand types; in
# registers they travel packed, two to a .b16 (e4m3x2/e5m2x2, first value in
# the low byte) or four to a .b32.
e4m3 = PtxType("e4m3", 8, "f", "uint8")
e5m2 = PtxType("e5m2", 8, "f", "uint8")
e4m3x2 = PtxType("e4m3x2", 16, "f", "uint16", lanes=2)
e5m2x2 = PtxType("e5m2x2", 16, "f", "uint16", lanes=2)
# single bits: mma.sync's .b1 operands (32 to a .b32 register).
b1 = PtxType("b1", 1, "b", None)
# 4-bit integers: mma.sync operand types only (eight to a .b32 register).
s4 = PtxType("s4", 4, "s", None)
u4 = PtxType("u4", 4, "u", None)

ALL_TYPES: dict[str, PtxType] = {
    t.name: t
    for t in (pred, b8, b16, b32, b64, b128, u8, u16, u32, u64, s8, s16, s32, s64,
              f16, bf16, f16x2, bf16x2, tf32, f32, f64, e4m3, e5m2, e4m3x2, e5m2x2, s4, u4, b1)
}

# Register declarations: PTX has no 8-bit registers, so 8-bit types live in
# 16-bit registers (ld.u8 into a .u16/.u32 register is the PTX idiom).
REG_PREFIX: dict[str, str] = {
    "pred": "p", "b16": "rs", "u16": "rs", "s16": "rs",
    "b32": "r", "u32": "r", "s32": "r", "b64": "rd", "u64": "rd", "s64": "rd",
    "b128": "rq", "f16": "h", "bf16": "hb", "f16x2": "hh", "bf16x2": "hhb",
    "tf32": "tf", "f32": "f", "f64": "fd", "e4m3x2": "rs", "e5m2x2": "rs",
}
# The other way: a prefix -> the type its registers are declared with (the first
# type of REG_PREFIX with that prefix: the .b type where several share one).
PREFIX_TYPE: dict[str, str] = {}
for _name, _prefix in REG_PREFIX.items():
    PREFIX_TYPE.setdefault(_prefix, _name)
del _name, _prefix
# Generated register names: a type prefix and a number (``%f12``). User-named
# registers must not look like these, or two registers could print alike.
GENERATED_NAME = re.compile(r"^(%s)(\d+)$" % "|".join(
    sorted(PREFIX_TYPE, key=len, reverse=True)))


def move_type(t: PtxType) -> PtxType:
    """The type that ld/st/mov/selp use for a value of type ``t``.

    PTX moves half-precision (and tf32) values as raw bits: ``ld.shared.b16``
    into an ``.f16`` register, ``mov.b32`` of an ``.f16x2``. Other types move as
    themselves.
    """
    if t.is_float and t.name not in ("f32", "f64"):
        return ALL_TYPES[f"b{t.bits}"]
    return t


def by_name(name: str) -> PtxType:
    """Look a type up by its PTX name (``"f32"`` or ``".f32"``)."""
    key = name.lstrip(".")
    try:
        return ALL_TYPES[key]
    except KeyError:
        raise ValueError(
            f"unknown PTX type {name!r}; known types: {', '.join(sorted(ALL_TYPES))}"
        ) from None


def from_numpy(dtype) -> PtxType:
    """The PTX type for a numpy dtype (float32 -> f32, int64 -> s64, ...)."""
    dt = np.dtype(dtype)
    table = {"float32": f32, "float64": f64, "float16": f16, "int8": s8, "int16": s16,
             "int32": s32, "int64": s64, "uint8": u8, "uint16": u16, "uint32": u32,
             "uint64": u64, "bool": u8}
    try:
        return table[dt.name]
    except KeyError:
        raise ValueError(f"no PTX type for numpy dtype {dt}") from None


def compatible(reg_type: PtxType, inst_type: PtxType) -> bool:
    """Whether a register of ``reg_type`` may be an operand of an ``inst_type`` instruction.

    PTX's operand rules: ``.b`` registers fit any type of the same size;
    ``.u`` and ``.s`` of one size fit each other; float instructions take
    only float registers of that exact type (or ``.b`` of the same size).
    """
    if reg_type == inst_type:
        return True
    if reg_type.kind == "pred" or inst_type.kind == "pred":
        return False
    if reg_type.bits != inst_type.bits:
        return False
    if reg_type.kind == "b" or inst_type.kind == "b":
        return True
    return reg_type.kind in ("u", "s") and inst_type.kind in ("u", "s")


__all__ = [
    "PtxType", "int_range", "float_bits", "f32_to_bf16_bits", "bf16_bits_to_f32", "pred", "b8",
    "b16", "b32", "b64", "b128", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f16",
    "bf16", "f16x2", "bf16x2", "tf32", "f32", "f64", "e4m3", "e5m2", "e4m3x2", "e5m2x2", "b1",
    "s4", "u4", "ALL_TYPES", "REG_PREFIX", "PREFIX_TYPE", "GENERATED_NAME", "move_type",
    "by_name", "from_numpy", "compatible",
]
