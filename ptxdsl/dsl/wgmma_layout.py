"""pyptx's ``wgmma_layout``: the canonical shared-memory layout of a wgmma operand tile,
as descriptor fields (``pick_gmma_layout``, ``layout_for_a``, ``layout_for_b``).

A thin view of :func:`ptxdsl.dsl.wgmma.operand_layout` (which ``smem.wgmma_operand``,
``ptx.wgmma.descriptor`` and TMA boxes use) in pyptx's vocabulary: ``LayoutType`` (the
descriptor's bits 63:62), ``Major.K`` / ``Major.MN``, byte LBO/SBO, and the TMA/smem
swizzle names (``"NONE"``, ``"32B"``, ``"64B"``, ``"128B"``). Two shapes
``operand_layout`` does not take are described here as pyptx describes them: a K-major
tile of 16-byte rows (no swizzle: LBO 16, SBO 8 rows of 16 bytes) and K-major or
MN-major rows wider than 128 bytes (128-byte swizzled stripes: LBO is the distance
between stripes, ``rows * 128`` bytes, SBO 1024). Errors are ``ValueError``
(``TraceError``).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from .wgmma import canonical_layout

__all__ = ["LayoutType", "Major", "GmmaLayout", "pick_gmma_layout", "layout_of", "layout_for_a",
           "layout_for_b"]


class LayoutType(enum.IntEnum):
    """The descriptor's layout field (bits 63:62)."""

    INTERLEAVE = 0
    B128 = 1
    B64 = 2
    B32 = 3


class Major(enum.IntEnum):
    """``K``: K contiguous (row-major A, column-major B); ``MN``: M/N contiguous."""

    K = 0
    MN = 1


_BY_SWIZZLE = {0: LayoutType.INTERLEAVE, 32: LayoutType.B32, 64: LayoutType.B64,
               128: LayoutType.B128}


@dataclass(frozen=True)
class GmmaLayout:
    """One canonical layout: descriptor fields in bytes and the matching swizzle names
    (``smem_swizzle`` is ``None`` for the unswizzled layout)."""

    layout_type: LayoutType
    leading_byte_offset: int
    stride_byte_offset: int
    tma_swizzle: str
    smem_swizzle: str | None

    @property
    def swizzle_code(self) -> int:
        return int(self.layout_type)

    @property
    def swizzle_bytes(self) -> int:
        """The same swizzle as ptxdsl spells it (``smem.alloc(swizzle=)``, 0 for none)."""
        return {v: k for k, v in _BY_SWIZZLE.items()}[self.layout_type]


def layout_of(swizzle: int, lbo: int, sbo: int) -> GmmaLayout:
    """The :class:`GmmaLayout` of ``swizzle`` bytes (0, 32, 64, 128) and these LBO/SBO."""
    name = f"{swizzle}B" if swizzle else None
    return GmmaLayout(_BY_SWIZZLE[swizzle], lbo, sbo, name or "NONE", name)


def pick_gmma_layout(*, elem_bytes: int, m_or_n: int, k: int, major: Major) -> GmmaLayout:
    """The canonical layout of an ``m_or_n`` x ``k`` operand tile of ``elem_bytes``-byte
    elements, K-major or MN-major (rows of ``k`` or ``m_or_n`` elements)."""
    major = Major(major)
    swz, lbo, sbo = canonical_layout(elem_bytes, m_or_n, k, major.name)
    return layout_of(swz, lbo, sbo)


def layout_for_a(*, dtype, m: int, k: int) -> GmmaLayout:
    """Operand A, ``m`` x ``k``, K-major."""
    return pick_gmma_layout(elem_bytes=dtype.bytes, m_or_n=m, k=k, major=Major.K)


def layout_for_b(*, dtype, k: int, n: int) -> GmmaLayout:
    """Operand B, ``k`` x ``n``, MN-major (row-major K x N)."""
    return pick_gmma_layout(elem_bytes=dtype.bytes, m_or_n=n, k=k, major=Major.MN)
