"""The two descriptors ``tcgen05.mma`` reads, as named fields (PTX ISA, "Shared memory
descriptor" and "Instruction descriptor" of the tcgen05 chapter).

Shared-memory matrix descriptor (64 bits; the A and B operands, and ``tcgen05.cp``'s
source):

=========  =======================================================================
bits       field
=========  =======================================================================
0-13       start address >> 4
16-29      leading dimension byte offset >> 4
32-45      stride dimension byte offset >> 4
46-47      version: 1 on sm_100
49-51      matrix base offset (swizzle row phase, 0..7)
52         leading-offset mode (0 relative, 1 absolute)
61-63      layout: 0 no swizzle, 1 128-byte with 32-byte atoms, 2 128-byte, 4 64-byte,
           6 32-byte
=========  =======================================================================

Instruction descriptor (32 bits, the ``idesc`` operand) for ``kind::f16 / tf32 /
f8f6f4 / i8``: bits 0-1 sparsity selector, 2 sparse, 3 saturate (i8), 4-5 D format,
7-9 A format, 10-12 B format, 13/14 negate A/B, 15/16 A/B MN-major (transposed), 17-22
N >> 3, 24-28 M >> 4, 30-31 max shift (.ws only).

Nothing else spells these bit positions; :mod:`ptxdsl.dsl.tcgen05` builds both with them.
"""
from __future__ import annotations

from dataclasses import dataclass

LAYOUTS = {"none": 0, "128B_base32B": 1, "128B": 2, "64B": 4, "32B": 6}
_FIELD_14 = (1 << 14) - 1
# element formats per kind (A/B), and the accumulator (D) formats each kind allows
AB_FORMATS = {
    "f16": {"f16": 0, "bf16": 1},
    "tf32": {"tf32": 2},
    "f8f6f4": {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5},
    "i8": {"u8": 0, "s8": 1},
}
D_FORMATS = {"f16": 0, "f32": 1, "s32": 2}
KIND_D = {"f16": ("f16", "f32"), "tf32": ("f32",), "f8f6f4": ("f16", "f32"), "i8": ("s32",)}
MAJORS = {"K": 0, "MN": 1}


@dataclass(frozen=True)
class SmemDescriptor100:
    """A tcgen05 shared-memory matrix descriptor. Byte fields are multiples of 16."""

    start: int = 0
    leading: int = 16
    stride: int = 1024
    base_offset: int = 0
    layout: str = "128B"
    leading_absolute: bool = False
    version: int = 1

    def __post_init__(self):
        for name in ("start", "leading", "stride"):
            v = getattr(self, name)
            if v < 0 or v % 16 or (v >> 4) > _FIELD_14:
                raise ValueError(f"tcgen05 descriptor {name}={v}: a multiple of 16 bytes "
                                 f"below 256 KiB")
        if not 0 <= self.base_offset <= 7:
            raise ValueError(f"tcgen05 descriptor base_offset={self.base_offset}: 0..7")
        if self.layout not in LAYOUTS:
            raise ValueError(f"tcgen05 descriptor layout {self.layout!r}: one of "
                             f"{', '.join(LAYOUTS)}")
        if not 0 <= self.version <= 3:
            raise ValueError(f"tcgen05 descriptor version={self.version}: two bits")

    def encode(self) -> int:
        return ((self.start >> 4) | (self.leading >> 4) << 16 | (self.stride >> 4) << 32
                | self.version << 46 | self.base_offset << 49
                | int(self.leading_absolute) << 52 | LAYOUTS[self.layout] << 61)

    @classmethod
    def decode(cls, word: int) -> "SmemDescriptor100":
        word = int(word)
        layout = {v: k for k, v in LAYOUTS.items()}[word >> 61 & 7]
        return cls((word & _FIELD_14) << 4, (word >> 16 & _FIELD_14) << 4,
                   (word >> 32 & _FIELD_14) << 4, word >> 49 & 7, layout,
                   bool(word >> 52 & 1), word >> 46 & 3)

    def constant_bits(self) -> int:
        """Every field but the start address (OR-ed onto ``start >> 4`` at run time)."""
        return SmemDescriptor100(0, self.leading, self.stride, self.base_offset, self.layout,
                                 self.leading_absolute, self.version).encode()


@dataclass(frozen=True)
class InstrDescriptor:
    """A tcgen05.mma instruction descriptor: the MMA's shape, formats and majors."""

    kind: str = "f16"
    m: int = 128
    n: int = 256
    a: str = "bf16"
    b: str = "bf16"
    d: str = "f32"
    a_major: str = "K"
    b_major: str = "K"
    negate_a: bool = False
    negate_b: bool = False
    saturate: bool = False
    sparse: bool = False
    max_shift: int = 0

    def __post_init__(self):
        if self.kind not in AB_FORMATS:
            raise ValueError(f"kind {self.kind!r}: one of {', '.join(AB_FORMATS)}")
        fmts = AB_FORMATS[self.kind]
        for name in ("a", "b"):
            if getattr(self, name) not in fmts:
                raise ValueError(f"kind::{self.kind} takes {name} of "
                                 f"{', '.join(fmts)}, got {getattr(self, name)!r}")
        if self.d not in KIND_D[self.kind]:
            raise ValueError(f"kind::{self.kind} accumulates in "
                             f"{', '.join(KIND_D[self.kind])}, got {self.d!r}")
        if self.m not in (64, 128, 256):
            raise ValueError(f"M={self.m}: 64, 128 or 256 (256 with cta_group::2)")
        step = 8 if self.m == 64 else 16
        if self.n % step or not step <= self.n <= 256:
            raise ValueError(f"N={self.n}: a multiple of {step} from {step} to 256 for "
                             f"M={self.m}")
        for name in ("a_major", "b_major"):
            if getattr(self, name) not in MAJORS:
                raise ValueError(f"{name}={getattr(self, name)!r}: 'K' or 'MN'")
        if self.saturate and self.kind != "i8":
            raise ValueError("saturate applies to kind::i8")
        if not 0 <= self.max_shift <= 3:
            raise ValueError(f"max_shift={self.max_shift}: 0..3")

    def encode(self) -> int:
        fmts = AB_FORMATS[self.kind]
        return (int(self.sparse) << 2 | int(self.saturate) << 3 | D_FORMATS[self.d] << 4
                | fmts[self.a] << 7 | fmts[self.b] << 10 | int(self.negate_a) << 13
                | int(self.negate_b) << 14 | MAJORS[self.a_major] << 15
                | MAJORS[self.b_major] << 16 | (self.n >> 3) << 17 | (self.m >> 4) << 24
                | self.max_shift << 30)
