"""Which tile of query rows a CTA works on, and where that tile's rows live: the
forward's three layouts as tile schedules the kernel body (:mod:`.fwd`) asks. A tile is
``block_m`` rows (``Config.block_m``: 128, or 192 with three consumers; 128 below).

* :class:`Dense`: q ``(B, SQ, H, D)``, a tile is 128 rows of one (batch, head);
* :class:`Packed` (``pack_gqa``): the ``G = H / HK`` query heads of a GQA group share
  their K/V head, so a tile is 128 (row, head-of-the-group) pairs, the group's heads
  fastest: q is read as ``(B, SQ, HK, G, D)`` through a 5-d tensor map whose box is
  ``(1, 128 / G, 1, G, 64)``, one K/V stream serves ``G`` heads (what pays when ``SQ`` is
  too short to fill 128 rows of one head);
* varlen (packed sequences ``(total, H, D)``, the kernel reading ``cu_seqlens_q/k``):
  :mod:`.varlen_tiles`.

Each ``locate`` returns a :class:`Work`; rows past a sequence's end that a 128-row TMA box
reads (another sequence's, or zeros past the tensor) are computed and never stored, keys
past its end are masked like ragged ``SK``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import Tile
from ...core.tensormap import TMA
from ...core.types import PtxType, f32, s32, u32
from ...dsl import ptx, reg
from .config import BLOCK_M, padded

PANEL = 64           # 16-bit elements per 128-byte swizzle row
ROW = 128            # bytes per swizzled panel row
# Config.head_sections: the K/V bytes of the heads one section of the causal order holds,
# well inside an H100/H200's 50/60 MB L2 (read at trace time)
L2_KV_BYTES = 24 << 20


def s32_of(x):
    """A ``.s32`` copy of a ``.u32`` value (``cvt.s32.u32``)."""
    r = reg.scalar(s32)
    ptx.inst.cvt.s32.u32(r, x)
    return r


def _tma(*box):
    """128-byte swizzled boxes of 64 columns; the kernel reads q, k and v only through
    their maps, so they may have any strides (a slice of a packed qkv tensor)."""
    return TMA(box=box, swizzle=ROW, strided=True)


@dataclass
class Work:
    """One tile: its first (packed) row ``m0``, query head (the K/V head when packed),
    batch, K/V head, the sequence's query and key lengths (``.u32``), the sequence's first
    row in q and k (varlen, else None) and whether it has rows at all (varlen, else None)."""

    m0: object
    head: object
    batch: object
    hkv: object
    sq: object
    sk: object
    q0: object = None
    k0: object = None
    valid: object = None


class Dense:
    """q ``(B, SQ, H, D)``, k and v ``(B, SK, HK, D)``, out like q, lse ``(B, H, SQ)``."""

    group = 1

    def __init__(self, dtype: PtxType, d: int, block_n: int, causal_order: bool, *,
                 tma_out: bool = False, block_m: int = BLOCK_M, sections: bool = False,
                 section_mb: int = 0):
        self.dtype, self.d, self.bn, self.causal_order = dtype, d, block_n, causal_order
        self.tma_out = tma_out          # out through TMA stores of (1, 64, 1, 64) boxes
        self.bm = block_m               # query rows per tile
        self.sections = sections        # Config.head_sections (causal order only)
        self.section_mb = section_mb    # Config.section_mb (0: L2_KV_BYTES)

    def specs(self):
        q = Tile("B", "SQ", "H", self.d, self.dtype,
                 tma=_tma(1, self.bm, 1, PANEL))
        kv = [Tile("B", "SK", "HK", self.d, self.dtype,
                   tma=_tma(1, self.bn, 1, PANEL)) for _ in range(2)]
        out = Tile("B", "SQ", "H", self.d, self.dtype,
                   tma=TMA(box=(1, 64, 1, PANEL), swizzle=ROW) if self.tma_out else None)
        return (q, *kv), (out, Tile("B", "H", "SQ", f32))

    arg_names = ("q", "k", "v", "out", "lse")

    def tiles(self, B, SQ, H):
        return (SQ + self.bm - 1) // self.bm * H * B

    def grid(self, cap):
        """The launch grid of the named dims; ``cap(tiles)``: the CTAs for that many."""
        return lambda B, SQ, H: (cap(self.tiles(B, SQ, H)), 1, 1)

    def prologue(self, args):
        q, k, v, o, lse = args
        self.tq, self.tk, self.tv = q.tma_desc(), k.tma_desc(), v.tma_desc()
        self.po, self.pl = ptx.global_ptrs(o, lse)
        self.sq, self.nh, self.sk, self.nhk = (ptx.dim("SQ"), ptx.dim("H"), ptx.dim("SK"),
                                               ptx.dim("HK"))
        if self.tma_out:
            self.to = o.tma_desc()

    def count(self):
        self.nmb = (self.sq + (self.bm - 1)) // self.bm
        self.hb = self.nh * ptx.dim("B")
        return self.nmb * self.hb

    def locate(self, t) -> Work:
        """Causal: the tiles with the most keys first (longest-first); otherwise the
        tiles of one (batch, head) side by side, so that they share K/V in L2. With
        ``sections``, causal tiles go longest-first within sections of heads whose K/V
        fit :data:`L2_KV_BYTES`, one section after another: longest-first over every head
        at once keeps all heads' K/V in flight, more than L2 holds at S = 1k with many
        heads, or at 16k. A section counts K/V heads: under GQA it holds the query heads
        of that many whole groups (the heads of a group are neighbours in ``rest``)."""
        if self.causal_order and self.sections:
            g = _section_heads(self, self.nh // self.nhk)
            mblk, rest = _in_sections(t, g, self.nmb, self.hb)
        elif self.causal_order:
            mblk, rest = self.nmb - 1 - t // self.hb, t % self.hb
        else:
            mblk, rest = t % self.nmb, t // self.nmb
        head, batch = rest % self.nh, rest // self.nh
        hkv = head // (self.nh // self.nhk)     # GQA: the K/V head of this query head's group
        return Work(mblk * self.bm, head, batch, hkv, self.sq, self.sk)

    def q_coords(self, p, w: Work):
        return [p * PANEL, w.head, w.m0, w.batch]

    def o_coords(self, p, w: Work, cons):
        """Consumer ``cons``'s TMA box of O (its 64 rows, panel ``p``)."""
        return [p * PANEL, w.head, w.m0 + cons * 64, w.batch]

    def whole(self, w: Work, cons):
        """Where the TMA box of :meth:`o_coords` may be stored (None: always; TMA clips
        rows past SQ)."""
        return None

    def kv_coords(self, p, w: Work, j):
        return [p * PANEL, w.hkv, j * self.bn, w.batch]

    def pos(self, packed):
        """The sequence position of (packed) row ``packed`` (.s32), what masks compare."""
        return packed

    def row_bound(self, w: Work):
        return w.sq

    def out_row(self, w: Work, r):
        return (w.batch * w.sq + r) * self.nh + w.head

    def lse_at(self, w: Work, r):
        return (w.batch * self.nh + w.head) * w.sq + r


class Packed(Dense):
    """The query heads of a GQA group in one tile's rows (see the module docstring); q
    and out are ``(B, SQ, HK, G, D)`` views, lse ``(B, HK, G, SQ)``. ``tma_out``: a
    consumer's 64 rows are ``64 / G`` positions of the group's heads, one box of out."""

    def __init__(self, dtype, d, block_n, causal_order, group: int, *, block_m: int = BLOCK_M,
                 sections: bool = False, section_mb: int = 0, tma_out: bool = False):
        super().__init__(dtype, d, block_n, causal_order, block_m=block_m, sections=sections,
                         section_mb=section_mb, tma_out=tma_out and 64 % group == 0)
        if group < 2 or block_m % group:
            raise ValueError(f"pack_gqa packs a group of heads dividing {block_m}, got {group}")
        self.group = group

    def specs(self):
        g, d, dt = self.group, self.d, self.dtype
        q = Tile("B", "SQ", "HK", g, d, dt,
                 tma=_tma(1, self.bm // g, 1, g, PANEL))
        kv = [Tile("B", "SK", "HK", d, dt, tma=_tma(1, self.bn, 1, PANEL))
              for _ in range(2)]
        out = Tile("B", "SQ", "HK", g, d, dt, tma=TMA(box=(1, 64 // g, 1, g, PANEL), swizzle=ROW)
                   if self.tma_out else None)
        return (q, *kv), (out, Tile("B", "HK", g, "SQ", f32))

    def tiles(self, B, SQ, HK):
        return (SQ * self.group + self.bm - 1) // self.bm * HK * B

    def grid(self, cap):
        return lambda B, SQ, HK: (cap(self.tiles(B, SQ, HK)), 1, 1)

    def prologue(self, args):
        q, k, v, o, lse = args
        self.tq, self.tk, self.tv = q.tma_desc(), k.tma_desc(), v.tma_desc()
        self.po, self.pl = ptx.global_ptrs(o, lse)
        self.sq, self.sk, self.nhk = ptx.dim("SQ"), ptx.dim("SK"), ptx.dim("HK")
        self.nh = self.nhk * self.group
        if self.tma_out:
            self.to = o.tma_desc()

    def count(self):
        self.nmb = (self.sq * self.group + (self.bm - 1)) // self.bm
        self.hb = self.nhk * ptx.dim("B")
        return self.nmb * self.hb

    def locate(self, t) -> Work:
        """As :meth:`Dense.locate` over (batch, K/V head) pairs: a section is K/V heads."""
        if self.causal_order and self.sections:
            mblk, rest = _in_sections(t, _section_heads(self), self.nmb, self.hb)
        elif self.causal_order:
            mblk, rest = self.nmb - 1 - t // self.hb, t % self.hb
        else:
            mblk, rest = t % self.nmb, t // self.nmb
        hkv, batch = rest % self.nhk, rest // self.nhk
        return Work(mblk * self.bm, hkv, batch, hkv, self.sq, self.sk)

    def q_coords(self, p, w: Work):
        return [p * PANEL, 0, w.hkv, w.m0 // self.group, w.batch]

    def o_coords(self, p, w: Work, cons):
        return [p * PANEL, 0, w.hkv, (w.m0 + cons * 64) // self.group, w.batch]

    def pos(self, packed):
        return packed // self.group

    def row_bound(self, w: Work):
        return w.sq * self.group

    def out_row(self, w: Work, r):
        # (B, SQ, HK, G) rows: position r / G, head r % G of the group
        g = self.group
        return ((w.batch * w.sq + r // g) * self.nhk + w.hkv) * g + r % g

    def lse_at(self, w: Work, r):
        g = self.group
        return ((w.batch * self.nhk + w.hkv) * g + r % g) * w.sq + r // g


def _section_heads(sched, per_kv=None):
    """``Config.head_sections``: how many of ``sched.hb`` heads one section holds: as many
    K/V heads as ``Config.section_mb`` MiB (else :data:`L2_KV_BYTES`) holds (at least
    one), times ``per_kv`` (Dense: the query heads per K/V head) where given."""
    kv_bytes = ptx.min(sched.sk, 1 << 20) * (2 * padded(sched.d) * sched.dtype.bytes)
    budget = sched.section_mb << 20 or L2_KV_BYTES
    heads = ptx.max(reg.scalar(u32, init=budget) // kv_bytes, 1)
    return ptx.min(heads if per_kv is None else heads * per_kv, sched.hb)


def _in_sections(t, g, nmb, hb):
    """``(mblk, rest)`` of causal tile ``t``: longest-first within sections of ``g`` of the
    ``hb`` heads (``nmb`` m-blocks each), one section after another."""
    sec = t // (g * nmb)
    first = sec * g                                       # the section's first head
    u = t - first * nmb
    heads = ptx.min(hb - first, g)                        # the last may hold fewer
    return nmb - 1 - u // heads, first + u % heads


__all__ = ["Dense", "Packed", "Work", "s32_of", "PANEL", "ROW"]
