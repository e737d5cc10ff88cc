"""The attention forward's layout choices: where Q, the K/V ring, the barriers and the
optional buffers sit in a CTA's shared memory (:class:`Smem`), which tile schedule a
layout takes (:func:`schedule`) and how many CTAs a grid launches (:func:`grid_for`)."""
from __future__ import annotations

from ...core.types import PtxType
from .config import Config, Mask, padded
from .tiles import Dense, Packed
from .varlen_tiles import Varlen

class Smem:
    """Byte offsets in the CTA's dynamic shared memory."""

    def __init__(self, c: Config, d: int, es: int):
        d = padded(d)                               # whole 64-column panels
        self.q = 0
        self.kv = self.q_bytes = c.block_m * d * es  # Q; then one K or V block
        self.kv_bytes = c.block_n * d * es
        self.k = self.q + self.kv
        self.v = self.k + c.stages * self.kv_bytes
        self.qfull = self.v + c.stages * self.kv_bytes
        self.qempty = self.qfull + 8
        self.kfull = self.qempty + 8
        self.vfull = self.kfull + 8 * c.stages
        self.kempty = self.vfull + 8 * c.stages
        self.vempty = self.kempty + 8 * c.stages
        self.total = self.vempty + 8 * c.stages
        if c.dynamic:                 # Config.dynamic: the tile number, a word per consumer
            self.tile = self.total    # (q_double: 16 bytes more, the second Q's tile's)
            self.total += 16 * (1 + c.q_double)
        if c.tma_store and c.o_in_q:                # O's staging: Q's buffer
            self.o = self.q
        elif c.tma_store:                           # O's staging: 128 rows of every panel
            self.o = -(-self.total // 1024) * 1024
            self.total = self.o + c.block_m * d * es
        if c.q_double:                # Config.q_double: full, empty, then the second Q
            self.qbar2 = self.total
            self.q2 = -(-(self.total + 16) // 1024) * 1024
            self.total = self.q2 + self.q_bytes


def schedule(c: Config, dtype: PtxType, d: int, mask: Mask, layout: str = "dense",
             group: int = 1):
    """The tile schedule (:mod:`.tiles`) of a layout: ``dense`` (B, S, H, D), ``packed``
    (the ``group`` query heads of a GQA group in one tile's rows), ``varlen`` (packed
    sequences, tiles longest first from :mod:`.varlen_order`'s order; ``group`` > 1: GQA
    packed as in ``packed``) or ``varlen_unordered`` (the same in numbering order)."""
    if layout == "dense":
        return Dense(dtype, d, c.block_n, mask.right >= 0, tma_out=c.tma_store,
                     block_m=c.block_m, sections=c.head_sections, section_mb=c.section_mb)
    if layout == "packed":
        return Packed(dtype, d, c.block_n, mask.right >= 0, group, block_m=c.block_m,
                      sections=c.head_sections, section_mb=c.section_mb,
                      tma_out=c.tma_store)
    if layout in ("varlen", "varlen_unordered"):
        return Varlen(dtype, d, c.block_n, block_m=c.block_m, group=group,
                      ordered=layout == "varlen", tma_out=c.tma_store)
    raise ValueError(f"layout is dense, packed, varlen or varlen_unordered, got {layout!r}")


def grid_for(c: Config, sms: int, sched):
    """One CTA per tile of the schedule; with ``Config.persistent`` at most ``sms`` CTAs,
    each looping over tiles ``ctaid, ctaid + nctaid, ...``."""
    return sched.grid(lambda tiles: max(1, min(tiles, sms) if c.persistent else tiles))


__all__ = ["Smem", "schedule", "grid_for"]
