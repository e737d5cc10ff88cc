"""dQ's f32 accumulator in fragment order (``BwdConfig.dq_frag``): the main kernel stages each
warpgroup's dQ accumulator as its registers lie (16 bytes a thread's four consecutive
registers, ``st.shared.v4.f32``) and adds the stage to dq_acc by one 1-D
``cp.reduce.async.bulk``, so each block of dq_acc holds that order, and its postprocess
here turns it back into dQ's rows: head dim 64's 64 x 64 blocks (:mod:`.bwd`'s 128-query
step, a warpgroup's rows) and head dim 128's 80 x 128 blocks (:mod:`.bwd_m80`, dQᵀ: a
warpgroup's 64 columns, queries on the accumulator's columns). FlashAttention-4's sm90
backward keeps its dQ accumulator in the same kind of order."""
from __future__ import annotations

from ... import Tile, kernel
from ...core.types import PtxType, b32, f32, pred, u32
from ...dsl import ptx, reg
from .._common.rowio import load_chunk, narrow, store_chunk
from .bwd_prepw import THREADS

BLOCK80 = 320      # dq_acc rows with dq_swap: a multiple of 80 (its blocks) and of 64


def build_postprocess_frag(dtype: PtxType, d: int, scale: float, *, arch: str = "sm_90a"):
    """:func:`.bwd_prepw.build_postprocess_wide` for ``BwdConfig.dq_frag``'s accumulator: each 64 rows
    of a (batch, head) row hold their 64 x 64 f32 in a warpgroup accumulator's fragment
    order (16 bytes ``(128 k + t)``: thread ``t``'s registers ``4k .. 4k + 3``, rows ``r``,
    ``r + 8``, columns ``8k + 2 (t % 4)`` and the next). A CTA converts one block: thread
    ``T`` loads the pieces of ``k = 4 (T // 128) + j`` (each ``j`` a coalesced 2 KB a
    warpgroup), packs each row's pair, and the four lanes of a quad (one row's 8 columns of
    each ``k`` between them) trade pairs over ``shfl.sync.bfly`` so that lane ``q`` holds
    whole 16-byte rows of ``k = 4 (T // 128) + q``: a quad stores 64 contiguous bytes of a
    row by one ``st.global.v4`` a lane, where 4-byte stores would take eight."""
    if d != 64 or dtype == f32:
        raise ValueError(f"dq_frag's postprocess writes head dim 64's 16-bit dq, got head dim "
                         f"{d}, {dtype.name}")

    @kernel(in_specs=(Tile("B", "H", "SQP", d, f32),), out_specs=(Tile("B", "SQ", "H", d, dtype),),
            arg_names=("dq_acc", "dq"), grid=lambda B, H, SQP: (B * H * SQP // 64, 1, 1),
            block=(THREADS, 1, 1), arch=arch, name=f"attention_bwd_post_{dtype.name}_d{d}_frag")
    def postprocess(dq_acc, dq):
        pacc, pdq = ptx.global_ptrs(dq_acc, dq)
        sq, nh, sqp = ptx.dim("SQ"), ptx.dim("H"), ptx.dim("SQP")
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        blk = reg.scalar(u32); ptx.inst.mov.u32(blk, ptx.special.ctaid.x())
        bh, m0 = blk // (sqp // 64), (blk % (sqp // 64)) * 64
        t, q = tid % 128, tid & 3
        # thread T's pieces: k = 4 (T // 128) + j, so a quad's rows are 64 contiguous bytes
        pieces = [load_chunk(pacc + (blk * 4096 + (tid // 128) * 2048 + t * 4) * 4,
                             16 * 128 * j, f32, 4) for j in range(4)]     # all loads first
        is_q = [None] + [reg.scalar(pred) for _ in range(3)]
        for n in range(1, 4):
            ptx.inst.setp.eq.u32(is_q[n], q, n)
        for half in range(2):                          # rows r, r + 8
            for x in (v for p in pieces for v in p[2 * half:2 * half + 2]):
                ptx.inst.mul.f32(x, x, float(scale))
            pairs = [narrow(p[2 * half:2 * half + 2], dtype)[0] for p in pieces]
            got = [_pick(pairs, is_q, i) for i in range(4)]     # lane q ^ i's pair q
            for i in range(1, 4):
                ptx.inst("shfl.sync.bfly.b32", got[i], got[i], i, 0x1F, 0xFFFFFFFF)
            row = [_pick(got, is_q, p) for p in range(4)]       # columns of lanes 0 .. 3
            s = m0 + (t >> 5) * 16 + ((t & 31) >> 2) + 8 * half
            valid = reg.scalar(pred)
            ptx.inst.setp.lt.u32(valid, s, sq)
            col = (4 * (tid // 128) + q) * 8
            dst = (((bh // nh) * sq + s) * nh + bh % nh) * d + col
            store_chunk(pdq + dst * dtype.bytes, 0, dtype, row, pred=valid)

    return postprocess


def _pick(regs, is_q, i: int):
    """A copy of ``regs[q ^ i]`` (``q`` this lane's place in its quad; ``is_q[n]``: q == n)."""
    out = reg.scalar(regs[0].dtype)
    ptx.inst(f"mov.{regs[0].dtype.name}", out, regs[i])
    for n in range(1, 4):
        ptx.inst(f"selp.{regs[0].dtype.name}", out, regs[n ^ i], out, is_q[n])
    return out


def build_postprocess_frag80(dtype: PtxType, d: int, scale: float, *, arch: str = "sm_90a"):
    """:mod:`.bwd_m80`'s accumulator: each 80 rows of a (batch, head) row hold the two
    warpgroups' dQᵀ (64 head-dim columns x 80 queries each, warpgroup ``w``'s at piece
    ``1280 w``) in fragment order: piece ``128 k + t`` holds columns ``c``, ``c + 8``
    (``c = 16 (t // 32) + t % 32 // 4``) of queries ``q``, ``q + 1`` (``q = 8k + 2 (t % 4)``).
    Thread ``T`` takes warpgroup ``T // 128``'s pieces of its ``t``, ten of them: each
    column's query pair packed, ``movmatrix.trans`` turns the warp's 8 x 8 (columns x
    queries) into query rows of column pairs, and a quad trades pairs by ``shfl.sync.idx``
    so that each lane stores 4 columns (8 bytes; a quad 32 contiguous bytes of a row)."""
    if d != 128 or dtype == f32:
        raise ValueError(f"dq_frag's 80-row postprocess writes head dim 128's 16-bit dq, got "
                         f"head dim {d}, {dtype.name}")

    @kernel(in_specs=(Tile("B", "H", "SQP", d, f32),), out_specs=(Tile("B", "SQ", "H", d, dtype),),
            arg_names=("dq_acc", "dq"), grid=lambda B, H, SQP: (B * H * SQP // 80, 1, 1),
            block=(THREADS, 1, 1), arch=arch, name=f"attention_bwd_post_{dtype.name}_d{d}_frag80")
    def postprocess(dq_acc, dq):
        pacc, pdq = ptx.global_ptrs(dq_acc, dq)
        sq, nh, sqp = ptx.dim("SQ"), ptx.dim("H"), ptx.dim("SQP")
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        blk = reg.scalar(u32); ptx.inst.mov.u32(blk, ptx.special.ctaid.x())
        bh, m0 = blk // (sqp // 80), (blk % (sqp // 80)) * 80
        t, lane = tid % 128, tid & 31
        at = pacc + (blk * (80 * 128) + (tid // 128) * (80 * 64) + t * 4) * 4
        pieces = [load_chunk(at, 16 * 128 * k, f32, 4) for k in range(10)]   # loads first
        qo, cp = lane >> 2, lane & 3              # after the transpose: query, column pair
        upper = reg.scalar(pred)
        ptx.inst.setp.ge.u32(upper, cp, 2)
        src = lane - cp + 2 * (cp & 1)            # the quad lanes holding this lane's pairs
        col = (tid // 128) * 64 + ((t >> 5) << 4) + 4 * cp
        for k, vals in enumerate(pieces):
            for x in vals:
                ptx.inst.mul.f32(x, x, float(scale))
            # (c, q), (c, q+1) -> one column's query pair; the same for c + 8
            moved = []
            for half in range(2):
                m = reg.scalar(b32)
                ptx.inst("movmatrix.sync.aligned.m8n8.trans.b16", m,
                         narrow(vals[2 * half:2 * half + 2], dtype)[0])
                moved.append(m)          # query qo: columns 2 cp, 2 cp + 1 (+ 8 for half 1)
            out = []
            for j in range(2):           # lane cp: pairs 2 cp, 2 cp + 1 of the row's 8
                got = [reg.scalar(b32) for _ in moved]
                for g, m in zip(got, moved):
                    ptx.inst("shfl.sync.idx.b32", g, m, src + j, 0x1F, 0xFFFFFFFF)
                pick = reg.scalar(b32)
                ptx.inst("selp.b32", pick, got[1], got[0], upper)
                out.append(pick)
            s = m0 + 8 * k + qo
            valid = reg.scalar(pred)
            ptx.inst.setp.lt.u32(valid, s, sq)
            dst = (((bh // nh) * sq + s) * nh + bh % nh) * d + col
            store_chunk(pdq + dst * dtype.bytes, 0, dtype, out, pred=valid)

    return postprocess


__all__ = ["build_postprocess_frag", "build_postprocess_frag80", "BLOCK80"]
