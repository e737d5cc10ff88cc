"""The varlen forward's tile schedule (:func:`~.varlen.attention_varlen`): packed sequences
``(total, H, D)`` whose offsets ``cu_seqlens_q/k`` the kernel reads itself, so that the
grid depends only on shapes (no host read of the offsets; a CUDA graph may replay with
new ones).

* **Numbering.** A tile is ``block_m`` packed rows of one sequence: with GQA packing
  (``group = G > 1``) the ``G`` query heads of a group share a tile's rows, heads fastest
  (q read as ``(TQ, HK, G, D)`` through a 4-d tensor map whose box ``(block_m / G, 1, G,
  64)`` lands them), as :class:`~.tiles.Packed` does for the dense layout; else a tile is
  ``block_m`` rows of one head. Sequence ``i``'s m-blocks are numbered from ``i + cu_q[i] *
  G // block_m`` on (at least ``ceil(len_i * G / block_m)`` numbers before sequence ``i +
  1``'s), so ``NV = NSEQ + TQ * G // block_m`` numbers cover them all; :func:`find_block`
  maps a number to its sequence by a binary search of those starts, and a number no
  m-block has is an empty tile.
* **Order** (``ordered``): :mod:`.varlen_order` sorts the NV numbers by descending key-block
  count into ``order`` (``(sequence, first packed row)`` pairs, empty ones last), and tile
  ``t`` is entry ``rank // heads``, head ``rank % heads``, so the longest tiles go first.
  ``rank`` snakes over the rounds of a persistent grid (round ``r = t / nctaid`` takes its
  ranks forwards when even, backwards when odd), so that the CTA given the
  longest tile of a round gets the shortest of the next. A grid of one CTA per tile is
  one round: the hardware hands the tiles out in rank order as SMs free up.

Rows past a sequence's end that a ``block_m``-row box reads (another sequence's, or zeros
past the tensor) are computed and never stored; keys past its end are masked like a
ragged ``SK``.
"""
from __future__ import annotations

from ... import Tile
from ...core.tensormap import TMA
from ...core.types import PtxType, f32, pred, s32, u32
from ...dsl import ptx, reg
from .config import BLOCK_M
from .steps import snake
from .tiles import PANEL, ROW, Dense, Work, _tma

SEQ_BITS = 20          # at most 2**20 sequences (the binary search's probes)
EMPTY = 0x7FFFFFFF     # the first row of an order entry that holds no rows


def load_u32(ptr, i):
    """``ptr[i]`` of an array of 32-bit words (``ld.global.nc.u32``)."""
    x = reg.scalar(u32)
    ptx.inst.ld.global_.nc.u32(x, ptx.addr(ptr + i * 4))
    return x


def find_seq(pcq, nseq, v, block_m: int, group: int = 1):
    """The sequence holding block number ``v`` when sequence ``i``'s blocks of ``block_m``
    rows are numbered from ``i + cu_q[i] * group // block_m``: the last ``i`` whose first
    number is at most ``v`` (a binary search, one probe per bit of NSEQ, probes past NSEQ
    skipped; numbers past a sequence's blocks belong to it, the caller finds them past its
    length). The varlen forward's m-blocks, the backward's key and row blocks."""
    seq = reg.scalar(u32, init=0)
    for bit in range(SEQ_BITS - 1, -1, -1):
        probe = seq + (1 << bit)
        with ptx.if_(nseq >= (1 << bit)):
            with ptx.if_(probe < nseq):
                rows = load_u32(pcq, probe)
                start = probe + (rows * group if group > 1 else rows) // block_m
                with ptx.if_(start <= v):
                    ptx.inst.mov.u32(seq, probe)
    return seq


def find_block(pcq, nseq, v, block_m: int, group: int):
    """``(sequence, first packed row)`` of m-block number ``v`` (:func:`find_seq`)."""
    seq = find_seq(pcq, nseq, v, block_m, group)
    q0 = load_u32(pcq, seq)
    m0 = (v - (seq + (q0 * group if group > 1 else q0) // block_m)) * block_m
    return seq, m0


class Varlen(Dense):
    """q ``(TQ, H, D)`` (``(TQ, HK, G, D)`` with GQA packing), k and v ``(TK, HK, D)``,
    ``cu_q`` / ``cu_k`` ``(NSEQ + 1,)`` int32, with ``ordered`` the ``order`` ``(NV, 2)``
    int32 that :mod:`.varlen_order` wrote; out like q, lse ``(H, TQ)`` (``(HK, G, TQ)``).
    ``tma_out`` (``Config.tma_store``): a consumer's 64 rows of O go out by TMA where they
    all lie in the sequence (:meth:`whole`), by ``st.global`` where its last rows end it (a
    box would write the next sequence's rows); with GQA packing a box of ``64 / G``
    positions of the group's ``G`` heads, the same rows in the same order."""

    def __init__(self, dtype: PtxType, d: int, block_n: int, *, block_m: int = BLOCK_M,
                 group: int = 1, ordered: bool = True, tma_out: bool = False):
        super().__init__(dtype, d, block_n, False, block_m=block_m,
                         tma_out=tma_out and 64 % group == 0)
        if group < 1 or block_m % group:
            raise ValueError(f"varlen packs a GQA group of heads dividing {block_m}, got "
                             f"{group}")
        self.group, self.ordered = group, ordered
        self.arg_names = ("q", "k", "v", "cu_q", "cu_k") + (("order",) if ordered else ()) \
            + ("out", "lse")

    def specs(self):
        d, dt, g = self.d, self.dtype, self.group
        if g > 1:
            q = Tile("TQ", "HK", g, d, dt, tma=_tma(self.bm // g, 1, g, PANEL))
            outs = (Tile("TQ", "HK", g, d, dt, tma=TMA(box=(64 // g, 1, g, PANEL), swizzle=ROW)
                         if self.tma_out else None), Tile("HK", g, "TQ", f32))
        else:
            q = Tile("TQ", "H", d, dt, tma=_tma(self.bm, 1, PANEL))
            outs = (Tile("TQ", "H", d, dt, tma=TMA(box=(64, 1, PANEL), swizzle=ROW)
                         if self.tma_out else None), Tile("H", "TQ", f32))
        kv = [Tile("TK", "HK", d, dt, tma=_tma(self.bn, 1, PANEL)) for _ in range(2)]
        cu = [Tile("NS1", s32) for _ in range(2)]
        order = [Tile("NV", 2, s32)] if self.ordered else []
        return (q, *kv, *cu, *order), outs

    def blocks(self, nseq: int, tq: int) -> int:
        """NV: the m-block numbers of ``nseq`` sequences of ``tq`` query rows in all."""
        return nseq + tq * self.group // self.bm

    def grid(self, cap):
        if self.ordered:
            if self.group > 1:
                return lambda NV, HK: (cap(NV * HK), 1, 1)
            return lambda NV, H: (cap(NV * H), 1, 1)
        if self.group > 1:
            return lambda NS1, TQ, HK: (cap(self.blocks(NS1 - 1, TQ) * HK), 1, 1)
        return lambda NS1, TQ, H: (cap(self.blocks(NS1 - 1, TQ) * H), 1, 1)

    def prologue(self, args):
        if self.ordered:
            q, k, v, cu_q, cu_k, order, o, lse = args
            self.pcq, self.pck, self.pord, self.po, self.pl = ptx.global_ptrs(
                cu_q, cu_k, order, o, lse)
            self.ncta = reg.scalar(u32)
            ptx.inst.mov.u32(self.ncta, ptx.special.nctaid.x())
        else:
            q, k, v, cu_q, cu_k, o, lse = args
            self.pcq, self.pck, self.po, self.pl = ptx.global_ptrs(cu_q, cu_k, o, lse)
        self.tq, self.tk, self.tv = q.tma_desc(), k.tma_desc(), v.tma_desc()
        if self.tma_out:
            self.to = o.tma_desc()
        self.tq_rows, self.nhk = ptx.dim("TQ"), ptx.dim("HK")
        self.heads = self.nhk if self.group > 1 else ptx.dim("H")   # tile heads
        self.nh = self.nhk * self.group if self.group > 1 else self.heads
        self.nseq = ptx.dim("NS1") - 1

    def count(self):
        if self.ordered:
            self.nvb = ptx.dim("NV")
        else:
            self.nvb = self.nseq + self.tq_rows * self.group // self.bm
        self.total = self.nvb * self.heads
        return self.total

    def locate(self, t) -> Work:
        if self.ordered:
            # odd rounds run backwards over their ranks (the last round's may be fewer)
            rank = snake(t, t % self.ncta, self.ncta, self.total)
            e, head = rank // self.heads, rank % self.heads
            seq, m0 = reg.scalar(u32), reg.scalar(u32)
            ptx.inst("ld.global.nc.v2.u32", [seq, m0], ptx.addr(self.pord + e * 8))
            q0 = load_u32(self.pcq, seq)
        else:
            v, head = t % self.nvb, t // self.nvb
            seq, m0 = find_block(self.pcq, self.nseq, v, self.bm, self.group)
            q0 = load_u32(self.pcq, seq)
        q1 = load_u32(self.pcq, seq + 1)
        k0, k1 = load_u32(self.pck, seq), load_u32(self.pck, seq + 1)
        sq, sk = q1 - q0, k1 - k0
        valid = reg.scalar(pred)
        ptx.inst.setp.lt.u32(valid, m0, sq * self.group if self.group > 1 else sq)
        hkv = head if self.group > 1 else head // (self.nh // self.nhk)
        return Work(m0, head, seq, hkv, sq, sk, q0, k0, valid)

    def pos(self, packed):
        return packed // self.group if self.group > 1 else packed

    def row_bound(self, w: Work):
        return w.sq * self.group if self.group > 1 else w.sq

    def q_coords(self, p, w: Work):
        if self.group > 1:
            return [p * PANEL, 0, w.hkv, w.q0 + w.m0 // self.group]
        return [p * PANEL, w.head, w.q0 + w.m0]

    def kv_coords(self, p, w: Work, j):
        return [p * PANEL, w.hkv, w.k0 + j * self.bn]

    def o_coords(self, p, w: Work, cons):
        if self.group > 1:
            return [p * PANEL, 0, w.hkv, w.q0 + (w.m0 + cons * 64) // self.group]
        return [p * PANEL, w.head, w.q0 + w.m0 + cons * 64]

    def whole(self, w: Work, cons):
        return w.m0 + cons * 64 + 64 <= self.row_bound(w)

    def out_row(self, w: Work, r):
        g = self.group
        if g > 1:                       # (TQ, HK, G) rows: position r / G, head r % G
            return ((w.q0 + r // g) * self.nhk + w.hkv) * g + r % g
        return (w.q0 + r) * self.nh + w.head

    def lse_at(self, w: Work, r):
        g = self.group
        if g > 1:
            return (w.hkv * g + r % g) * self.tq_rows + w.q0 + r // g
        return w.head * self.tq_rows + w.q0 + r


__all__ = ["Varlen", "find_block", "find_seq", "load_u32", "SEQ_BITS", "EMPTY"]
