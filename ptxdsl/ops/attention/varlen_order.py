"""The varlen forward's order pass: the m-blocks of packed sequences sorted by descending
key-block count, on the device from ``cu_seqlens_q/k`` (no host read of the offsets, so
a CUDA graph replays it with new ones), for the forward's longest-first tile order
(:mod:`.varlen_tiles`).

One CTA of :data:`THREADS` threads, a counting sort in shared memory:

1. every m-block number ``v < NV`` (:func:`~.varlen_tiles.find_block`) gets its slot: the
   key blocks its tile sees (what the forward computes, :func:`~.steps.key_blocks`, with
   the call's mask) as ``SLOTS - 2 - min(blocks, SLOTS - 2)``, so the longest come first;
   a number no m-block has takes the last slot; ``red.shared.add`` counts each slot;
2. an exclusive scan of the ``SLOTS`` counts (four per thread, ``shfl.sync.up`` within a
   warp, the warps' totals through shared memory) gives each slot's first position;
3. every number again: ``atom.shared.add`` on its slot's cursor is its position in
   ``order``, where it writes ``(sequence, first packed row)`` (``(0, EMPTY)`` for an
   empty number).

Tiles of one slot come in no fixed order (the atomics'); the forward's result does not
depend on the order, only its balance does. Tiles of more than ``SLOTS - 2`` key blocks
share the first slot.
"""
from __future__ import annotations

from ... import Tile, kernel
from ...core.types import pred, s32, u32
from ...dsl import ptx, reg, smem
from .._common.launch_order import after_previous_kernel, pdl_for
from .config import Mask
from .steps import key_blocks
from .varlen_tiles import EMPTY, find_block, load_u32

THREADS = 256
SLOTS = 4 * THREADS      # key-block counts 0 .. SLOTS - 3 apart, then "more"; "empty"
WARPS = THREADS // 32


class _Positions:
    """What :func:`~.steps.key_blocks` asks of a schedule: a packed row's position."""

    def __init__(self, group: int):
        self.group = group

    def pos(self, packed):
        return packed // self.group if self.group > 1 else packed


def build_order(group: int, block_m: int, block_n: int, mask: Mask = Mask(), *,
                arch: str = "sm_90a"):
    """The order pass for tiles of ``block_m`` packed rows (``group`` query heads each)
    and key blocks of ``block_n`` under ``mask``: cu_q, cu_k ``(NSEQ + 1,)`` int32 in,
    order ``(NV, 2)`` int32 out (NV: :meth:`~.varlen_tiles.Varlen.blocks`)."""
    pdl = pdl_for(arch)
    rows = _Positions(group)

    @kernel(in_specs=(Tile("NS1", s32), Tile("NS1", s32)), out_specs=(Tile("NV", 2, s32),),
            arg_names=("cu_q", "cu_k", "order"), grid=(1, 1, 1), block=(THREADS, 1, 1),
            arch=arch, name=f"attention_varlen_order_m{block_m}_n{block_n}_g{group}_"
                            f"{mask.tag}", pdl=pdl)
    def attention_varlen_order(cu_q, cu_k, order):
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        lane, warp = tid & 31, tid >> 5
        hist = smem.alloc(u32, (SLOTS,), align=16).base
        wtot = smem.alloc(u32, (WARPS,), align=16).base
        ptx.inst("st.shared.v4.u32", ptx.addr(hist + tid * 16), [0, 0, 0, 0])
        after_previous_kernel(pdl, THREADS)
        pcq, pck, pord = ptx.global_ptrs(cu_q, cu_k, order)
        nseq, nv = ptx.dim("NS1") - 1, ptx.dim("NV")
        ptx.inst("bar.sync", 0)

        def slot_of(v):
            seq, m0 = find_block(pcq, nseq, v, block_m, group)
            q0, q1 = load_u32(pcq, seq), load_u32(pcq, seq + 1)
            k0, k1 = load_u32(pck, seq), load_u32(pck, seq + 1)
            sq = q1 - q0
            valid = reg.scalar(pred)
            ptx.inst.setp.lt.u32(valid, m0, sq * group if group > 1 else sq)
            _, n_lo, n_hi = key_blocks(rows, mask, block_m, block_n, m0, sq, k1 - k0)
            slot = (SLOTS - 2) - ptx.min(n_hi - n_lo, reg.scalar(s32, init=SLOTS - 2))
            ptx.inst.selp.s32(slot, slot, SLOTS - 1, valid)
            return slot, seq, m0, valid

        for v in ptx.range_(tid, nv, THREADS):
            slot, _, _, _ = slot_of(v)
            ptx.inst("red.shared.add.u32", ptx.addr(hist + slot * 4), 1)
        ptx.inst("bar.sync", 0)
        # exclusive scan of the counts: this thread's four slots, then the warp, then
        # the warps before this one
        cnt = [reg.scalar(u32) for _ in range(4)]
        ptx.inst("ld.shared.v4.u32", cnt, ptx.addr(hist + tid * 16))
        total = cnt[0] + cnt[1] + cnt[2] + cnt[3]
        inc = reg.scalar(u32, init=total)
        for d in (1, 2, 4, 8, 16):
            y = reg.scalar(u32)
            ptx.inst("shfl.sync.up.b32", y, inc, d, 0, 0xFFFFFFFF)
            with ptx.if_(lane >= d):
                ptx.inst.add.u32(inc, inc, y)
        with ptx.if_(lane == 31):
            ptx.inst("st.shared.u32", ptx.addr(wtot + warp * 4), inc)
        ptx.inst("bar.sync", 0)
        first = inc - total
        for w in range(WARPS - 1):
            x = reg.scalar(u32)
            ptx.inst("ld.shared.u32", x, ptx.addr(wtot, w * 4))
            with ptx.if_(warp > w):
                ptx.inst.add.u32(first, first, x)
        starts = [first, first + cnt[0], first + cnt[0] + cnt[1],
                  first + cnt[0] + cnt[1] + cnt[2]]
        ptx.inst("st.shared.v4.u32", ptx.addr(hist + tid * 16), starts)
        ptx.inst("bar.sync", 0)
        for v in ptx.range_(tid, nv, THREADS):
            slot, seq, m0, valid = slot_of(v)
            at = reg.scalar(u32)
            ptx.inst("atom.shared.add.u32", at, ptx.addr(hist + slot * 4), 1)
            ptx.inst.selp.u32(seq, seq, 0, valid)
            ptx.inst.selp.u32(m0, m0, EMPTY, valid)
            ptx.inst("st.global.v2.u32", ptx.addr(pord + at * 8), [seq, m0])

    return attention_varlen_order


__all__ = ["build_order", "THREADS", "SLOTS"]
