"""The wgmma shared-memory matrix descriptor, as named fields.

A descriptor is the 64-bit operand ``wgmma.mma_async`` reads A and B through
(PTX ISA, "Matrix Descriptor Format"):

=========  =======================================================================
bits       field
=========  =======================================================================
0-13       start address, in 16-byte units (shared-memory byte address >> 4)
16-29      leading dimension byte offset >> 4
32-45      stride dimension byte offset >> 4
49-51      matrix base offset (the row phase of a swizzle pattern, 0..7)
62-63      swizzle mode: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
=========  =======================================================================

:class:`SmemDescriptor` encodes and decodes that word. The DSL builds
descriptors with it (:mod:`ptxdsl.dsl.wgmma`), the interpreter decodes the bits a
kernel computed with it (:mod:`ptxdsl.interp.semantics.wgmma`), and the tests check both
against each other; nothing else spells these bit positions.
"""
from __future__ import annotations

from dataclasses import dataclass

# swizzle span in bytes -> the 2-bit mode in bits 62-63
SWIZZLE_MODE = {0: 0, 128: 1, 64: 2, 32: 3}
MODE_SWIZZLE = {v: k for k, v in SWIZZLE_MODE.items()}
_FIELD_14 = (1 << 14) - 1


@dataclass(frozen=True)
class SmemDescriptor:
    """A wgmma shared-memory matrix descriptor.

    ``start``: the matrix's shared-memory byte address (16-byte aligned, < 256 KiB);
    ``leading``: the leading dimension byte offset (LBO) — between core matrices
    along K for K-major operands without swizzle; ``stride``: the stride dimension
    byte offset (SBO) — between 8-row groups; ``base_offset``: the swizzle pattern's
    row phase when the matrix does not start on a pattern boundary (0..7);
    ``swizzle``: the swizzle span in bytes (0, 32, 64 or 128).
    """

    start: int = 0
    leading: int = 0
    stride: int = 0
    base_offset: int = 0
    swizzle: int = 0

    def __post_init__(self):
        for name in ("start", "leading", "stride"):
            v = getattr(self, name)
            if v < 0 or v % 16 or (v >> 4) > _FIELD_14:
                raise ValueError(f"descriptor {name}={v}: a multiple of 16 bytes below 256 KiB")
        if not 0 <= self.base_offset <= 7:
            raise ValueError(f"descriptor base_offset={self.base_offset}: 0..7")
        if self.swizzle not in SWIZZLE_MODE:
            raise ValueError(f"descriptor swizzle={self.swizzle}: one of 0, 32, 64, 128 bytes")

    def encode(self) -> int:
        """The 64-bit descriptor word."""
        return ((self.start >> 4) | (self.leading >> 4) << 16 | (self.stride >> 4) << 32
                | self.base_offset << 49 | SWIZZLE_MODE[self.swizzle] << 62)

    @classmethod
    def decode(cls, word: int) -> "SmemDescriptor":
        """The fields of a descriptor word (the bits the hardware reads; others ignored)."""
        word = int(word)
        return cls(start=(word & _FIELD_14) << 4, leading=(word >> 16 & _FIELD_14) << 4,
                   stride=(word >> 32 & _FIELD_14) << 4, base_offset=word >> 49 & 7,
                   swizzle=MODE_SWIZZLE[word >> 62 & 3])

    def constant_bits(self) -> int:
        """Every field but the start address: OR-ed onto ``start >> 4`` at run time."""
        return SmemDescriptor(0, self.leading, self.stride, self.base_offset,
                              self.swizzle).encode()


def swizzle_offset(byte_offset: int, swizzle: int) -> int:
    """Where the byte at ``byte_offset`` of a swizzled region really lives.

    The ``swizzle``-byte pattern (32, 64, 128) XORs the 16-byte chunk index
    (address bits 4-6) with the row index within the pattern (address bits 7-9),
    limited to the chunks one span holds. TMA writes and wgmma reads through the
    same function of the address, which is why the two agree by construction.
    """
    if not swizzle:
        return byte_offset
    chunks = swizzle // 16 - 1          # 1, 3 or 7: the chunk bits a span swaps
    return byte_offset ^ (((byte_offset >> 7) & chunks) << 4)
