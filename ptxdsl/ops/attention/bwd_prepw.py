"""The backward's preprocess and postprocess (:mod:`.bwd_prep`'s contract, dense layout)
in 16-byte accesses: ``BwdConfig.prep_wide``.

:mod:`.bwd_prep` gives a whole warp to one row, so at head dim 64 a lane moves 4 bytes of
O and of dO, one lane then reads the LSE behind the row's reduction, and the f32 dQ
accumulator is zeroed 8 bytes a lane; its CTAs are 8 rows. At the FA3 grid's S = 1k
(16k tokens, H·D = 2048) these two kernels move the same bytes at every S while the main
kernel's work shrinks with S (and halves under the causal mask), so their speed weighs most
there. Here ``T = D / 8`` threads share a row (8 columns, one ``ld.global.v4.b32`` of O and
of dO each), each thread takes ``ROWS`` rows whose loads (and the LSE's) are all issued
before the first sum, a ``shfl.sync.bfly`` over the ``T`` lanes reduces, and dq_acc's row
is zeroed by ``st.global.v4.f32`` (32 bytes a thread). The postprocess reads 8 f32 of
dq_acc a thread (two ``ld.global.v4.f32``) and writes 16 bytes of dq. Head dims 64, 128,
256 (``T`` a power of two dividing 32); padded rows (``s >= SQ``) get ``D = 0`` and
``-inf``, as :mod:`.bwd_prep`'s.
"""
from __future__ import annotations

import contextlib

from ... import Tile, kernel
from ...core.types import PtxType, b32, f32, pred, u32
from ...dsl import ptx, reg
from .._common.rowio import load_chunk, narrow, store_chunk
from .bwd_config import BLOCK_M_SWAP
from .bwd_prep import BLOCK_M
from .softmax import LOG2E, NEG_INF

THREADS = 256      # a CTA
ROWS = 2           # rows a thread takes (their loads all in flight together)
WIDE_HEAD_DIMS = (64, 128, 192, 256)


def _lanes(d: int) -> int:
    """The threads a row (a power of two dividing a warp); ``d / 8 / T`` chunks a thread."""
    if d not in WIDE_HEAD_DIMS:
        raise ValueError(f"prep_wide gives a row D / 8 threads (192: 8 threads of three "
                         f"16-byte chunks): head dims {WIDE_HEAD_DIMS}, got {d}")
    return 8 if d == 192 else d // 8


def _cols(col, t: int, d: int):
    """This thread's chunks' first columns (one chunk but at head dim 192)."""
    return [col + j * 8 * t if j else col for j in range(d // (8 * t))]


def _rows(t: int):
    """This thread's ``ROWS`` padded rows (row ``i`` of the CTA's ``ROWS`` groups of
    ``THREADS / t`` consecutive rows) and its first column."""
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
    per = THREADS // t
    first = cta * (per * ROWS) + tid // t
    return [first + i * per for i in range(ROWS)], (tid % t) * 8, tid % t


def _grid(t: int, whole: bool = True):
    per = THREADS // t * ROWS
    return (lambda B, H, SQP: (B * H * SQP // per, 1, 1)) if whole else \
        (lambda B, H, SQP: (-(-B * H * SQP // per), 1, 1))


def build_preprocess_wide(dtype: PtxType, d: int, *, deterministic: bool = False,
                          arch: str = "sm_90a", unit: int = BLOCK_M):
    """:func:`.bwd_prep.build_preprocess`'s arguments and results (dense), 8 columns a
    thread. SQP (a multiple of ``unit``: 64 is one of the ``ROWS · 256 / T`` rows a CTA
    takes, so no CTA runs past it; else, as dq_swap's 80 at head dim 128's 32, the grid
    rounds up and the rows past ``B · H · SQP`` are skipped)."""
    t = _lanes(d)
    whole = unit % (THREADS // t * ROWS) == 0
    ins = (Tile("B", "SQ", "H", d, dtype), Tile("B", "SQ", "H", d, dtype),
           Tile("B", "H", "SQ", f32))
    outs = [Tile("B", "H", "SQP", f32), Tile("B", "H", "SQP", f32),
            Tile("B", "H", "SQP", d, f32)]
    names = ["o", "do", "lse", "dpsum", "nlse2", "dq_acc"]
    if deterministic:
        outs.append(Tile("B", "H", "NMB", u32))
        names.append("sem")

    def body(o, do, lse, dpsum, nlse2, dq_acc, sem=None):
        po, pdo, plse, pds, pnl, pdq = ptx.global_ptrs(o, do, lse, dpsum, nlse2, dq_acc)
        sq, nh, sqp = ptx.dim("SQ"), ptx.dim("H"), ptx.dim("SQP")
        rows, col, part = _rows(t)
        loaded = []
        for row in rows:               # every load first: ROWS x 32 bytes and an LSE
            s, bh = row % sqp, row // sqp
            valid = reg.scalar(pred)
            ptx.inst.setp.lt.u32(valid, s, sq)
            inside = None
            if not whole:              # (the last CTA's rows past the last (batch, head))
                inside = reg.scalar(pred)
                ptx.inst.setp.lt.u32(inside, bh, ptx.dim("B") * nh)
                ptx.inst.and_.pred(valid, valid, inside)
            src = (((bh // nh) * sq + s) * nh + bh % nh) * d
            ov, dv = [], []
            for cc in _cols(col, t, d):
                at = src + cc
                ov += load_chunk(po + at * dtype.bytes, 0, dtype, 8, pred=valid)
                dv += load_chunk(pdo + at * dtype.bytes, 0, dtype, 8, pred=valid)
            lv = reg.scalar(f32, init=NEG_INF)
            ptx.inst("ld.global.f32", lv, ptx.addr(plse + (bh * sq + s) * 4), pred=valid)
            loaded.append((row, s, ov, dv, lv, inside))
        zero = [reg.scalar(f32, init=0.0) for _ in range(4)]
        for row, s, ov, dv, lv, inside in loaded:
            total = reg.scalar(f32, init=0.0)
            for x, y in zip(ov, dv):
                ptx.inst("fma.rn.f32", total, x, y, total)
            sh = t // 2
            while sh:
                y = reg.scalar(f32)
                ptx.inst("shfl.sync.bfly.b32", y, total, sh, 0x1F, 0xFFFFFFFF)
                ptx.inst.add.f32(total, total, y)
                sh //= 2
            with ptx.if_(inside) if inside is not None else contextlib.nullcontext():
                _store_row(row, s, total, lv, part, (pds, pnl, pdq), col, t, d, zero,
                           deterministic and (sem, sqp))

    deco = kernel(in_specs=ins, out_specs=tuple(outs), arg_names=tuple(names),
                  grid=_grid(t, whole), block=(THREADS, 1, 1), arch=arch,
                  name=f"attention_bwd_pre_{dtype.name}_d{d}_w{'' if whole else f'_r{unit}'}"
                       f"{'_det' if deterministic else ''}")
    if deterministic:
        return deco(lambda o, do, lse, dpsum, nlse2, dq_acc, sem:
                    body(o, do, lse, dpsum, nlse2, dq_acc, sem))
    return deco(lambda o, do, lse, dpsum, nlse2, dq_acc:
                body(o, do, lse, dpsum, nlse2, dq_acc))


def _store_row(row, s, total, lv, part, ptrs, col, t: int, d: int, zero, sem) -> None:
    """A row's D and -LSE·log2e (its first thread) and its zeroed dq_acc; ``sem``: the
    deterministic mode's semaphore tile and SQP (each 64-row block's word zeroed)."""
    pds, pnl, pdq = ptrs
    with ptx.if_(part == 0):
        ptx.inst("st.global.f32", ptx.addr(pds + row * 4), total)
        fin = reg.scalar(pred)
        ptx.inst.setp.gt.f32(fin, lv, NEG_INF)
        v = reg.scalar(f32)
        ptx.inst.mul.f32(v, lv, -LOG2E)
        ptx.inst.selp.f32(v, v, NEG_INF, fin)
        ptx.inst("st.global.f32", ptx.addr(pnl + row * 4), v)
        if sem:
            tile, sqp = sem
            with ptx.if_(s % BLOCK_M == 0):
                ptx.inst("st.global.u32", ptx.addr(ptx.global_ptr(tile) + (
                    (row // sqp) * (sqp // BLOCK_M) + s // BLOCK_M) * 4), 0)
    for cc in _cols(col, t, d):
        at = pdq + (row * d + cc) * 4
        ptx.inst("st.global.v4.f32", ptx.addr(at), zero)
        ptx.inst("st.global.v4.f32", ptx.addr(at, 16), zero)


def build_postprocess_wide(dtype: PtxType, d: int, scale: float, *, arch: str = "sm_90a"):
    """:func:`.bwd_prep.build_postprocess` (dense): dq = dq_acc · scale, 8 columns a
    thread (32 bytes read, 16 written), the padded rows skipped."""
    t = _lanes(d)

    @kernel(in_specs=(Tile("B", "H", "SQP", d, f32),), out_specs=(Tile("B", "SQ", "H", d, dtype),),
            arg_names=("dq_acc", "dq"), grid=_grid(t), block=(THREADS, 1, 1), arch=arch,
            name=f"attention_bwd_post_{dtype.name}_d{d}_w")
    def postprocess(dq_acc, dq):
        pacc, pdq = ptx.global_ptrs(dq_acc, dq)
        sq, nh, sqp = ptx.dim("SQ"), ptx.dim("H"), ptx.dim("SQP")
        rows, col, _ = _rows(t)
        loaded = []
        for row in rows:
            s, bh = row % sqp, row // sqp
            valid = reg.scalar(pred)
            ptx.inst.setp.lt.u32(valid, s, sq)
            vals = [load_chunk(pacc + (row * d + cc) * 4, 0, f32, 8, pred=valid)
                    for cc in _cols(col, t, d)]
            loaded.append((((bh // nh) * sq + s) * nh + bh % nh, valid, vals))
        for dst, valid, chunks in loaded:
            for cc, vals in zip(_cols(col, t, d), chunks):
                for x in vals:
                    ptx.inst.mul.f32(x, x, float(scale))
                store_chunk(pdq + (dst * d + cc) * dtype.bytes, 0, dtype, narrow(vals, dtype),
                            pred=valid)

    return postprocess


def build_postprocess_frag(dtype: PtxType, d: int, scale: float, *, arch: str = "sm_90a"):
    """:func:`build_postprocess_wide` for ``BwdConfig.dq_frag``'s accumulator: each 64 rows
    of a (batch, head) row hold ``d / 64`` blocks of 64 x 64 f32 (head dim 64: one; 128's
    dq_split and wg3's 192: one a warpgroup's columns), each in a warpgroup accumulator's fragment order (16
    bytes ``(128 k + t)``: thread ``t``'s registers ``4k .. 4k + 3``, rows ``r``, ``r + 8``,
    columns ``8k + 2 (t % 4)`` and the next). A CTA converts one block: thread ``T`` loads
    the pieces of ``k = 4 (T // 128) + j`` (each ``j`` a coalesced 2 KB a warpgroup),
    packs each row's pair, and the four lanes of a quad (one row's 8 columns of each ``k``
    between them) trade pairs over ``shfl.sync.bfly`` so that lane ``q`` holds whole
    16-byte rows of ``k = 4 (T // 128) + q``: a quad stores 64 contiguous bytes of a row
    by one ``st.global.v4`` a lane, where 4-byte stores would take eight."""
    if d not in (64, 128, 192) or dtype == f32:
        raise ValueError(f"dq_frag's postprocess writes head dim 64's, 128's or 192's 16-bit "
                         f"dq, got head dim {d}, {dtype.name}")
    n = d // 64                               # blocks a 64-row block of a head

    @kernel(in_specs=(Tile("B", "H", "SQP", d, f32),), out_specs=(Tile("B", "SQ", "H", d, dtype),),
            arg_names=("dq_acc", "dq"), grid=lambda B, H, SQP: (B * H * SQP // 64 * n, 1, 1),
            block=(THREADS, 1, 1), arch=arch, name=f"attention_bwd_post_{dtype.name}_d{d}_frag")
    def postprocess(dq_acc, dq):
        pacc, pdq = ptx.global_ptrs(dq_acc, dq)
        sq, nh, sqp = ptx.dim("SQ"), ptx.dim("H"), ptx.dim("SQP")
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        blk = reg.scalar(u32); ptx.inst.mov.u32(blk, ptx.special.ctaid.x())
        rows = blk // n if n > 1 else blk        # the 64-row block (its blocks in turn)
        bh, m0 = rows // (sqp // 64), (rows % (sqp // 64)) * 64
        t, q = tid % 128, tid & 3
        # thread T's pieces: k = 4 (T // 128) + j, so a quad's rows are 64 contiguous bytes
        pieces = [load_chunk(pacc + (blk * 4096 + (tid // 128) * 2048 + t * 4) * 4,
                             16 * 128 * j, f32, 4) for j in range(4)]     # all loads first
        is_q = _quad_place(q)
        for half in range(2):                          # rows r, r + 8
            for x in (v for p in pieces for v in p[2 * half:2 * half + 2]):
                ptx.inst.mul.f32(x, x, float(scale))
            pairs = [narrow(p[2 * half:2 * half + 2], dtype)[0] for p in pieces]
            row = _quad_transpose(pairs, is_q)         # columns of lanes 0 .. 3
            s = m0 + (t >> 5) * 16 + ((t & 31) >> 2) + 8 * half
            valid = reg.scalar(pred)
            ptx.inst.setp.lt.u32(valid, s, sq)
            col = (4 * (tid // 128) + q) * 8 + ((blk % n) * 64 if n > 1 else 0)
            dst = (((bh // nh) * sq + s) * nh + bh % nh) * d + col
            store_chunk(pdq + dst * dtype.bytes, 0, dtype, row, pred=valid)

    return postprocess


def build_postprocess_frag80(dtype: PtxType, d: int, scale: float, *, arch: str = "sm_90a"):
    """:func:`build_postprocess_frag` for dq_swap's accumulator (:mod:`.bwd_m80`): each 80
    rows of a (batch, head) row hold the two warpgroups' dQᵀ (64 head-dim columns x 80
    queries each, warpgroup ``w``'s at piece ``1280 w``) in fragment order: piece ``128 k +
    t`` holds columns ``c``, ``c + 8`` (``c = 16 (t // 32) + t % 32 // 4``) of queries
    ``q``, ``q + 1`` (``q = 8k + 2 (t % 4)``). A CTA converts one 80-row block; thread ``T``
    loads warpgroup ``T // 128``'s ten pieces of its ``t``, packs each column's query pair,
    ``movmatrix.trans`` turns the warp's 8 x 8 (columns x queries) into query rows of
    column pairs, and the quad's four such pairs of two ``k`` (two queries, columns ``c``
    and ``c + 8``) are transposed over ``shfl.sync.bfly``, so that each lane holds 8
    contiguous columns of one query: a quad stores 32 contiguous bytes of each of two rows
    by one ``st.global.v4`` a lane."""
    if d != 128 or dtype == f32:
        raise ValueError(f"dq_frag's 80-row postprocess writes head dim 128's 16-bit dq, got "
                         f"head dim {d}, {dtype.name}")
    bm = BLOCK_M_SWAP                          # dq_swap's rows a block

    @kernel(in_specs=(Tile("B", "H", "SQP", d, f32),), out_specs=(Tile("B", "SQ", "H", d, dtype),),
            arg_names=("dq_acc", "dq"), grid=lambda B, H, SQP: (B * H * SQP // bm, 1, 1),
            block=(THREADS, 1, 1), arch=arch, name=f"attention_bwd_post_{dtype.name}_d{d}_frag80")
    def postprocess(dq_acc, dq):
        pacc, pdq = ptx.global_ptrs(dq_acc, dq)
        sq, nh, sqp = ptx.dim("SQ"), ptx.dim("H"), ptx.dim("SQP")
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        blk = reg.scalar(u32); ptx.inst.mov.u32(blk, ptx.special.ctaid.x())
        bh, m0 = blk // (sqp // bm), (blk % (sqp // bm)) * bm
        t, q = tid % 128, tid & 3
        at = pacc + (blk * (bm * d) + (tid // 128) * (bm * 64) + t * 4) * 4
        pieces = [load_chunk(at, 16 * 128 * k, f32, 4) for k in range(bm // 8)]  # loads first
        is_q = _quad_place(q)
        # after the transposes: query 8 (2j + q // 2) + t % 32 // 4, columns c0 .. c0 + 7
        c0 = (tid // 128) * 64 + ((t >> 5) << 4) + ((q & 1) << 3)
        qo = ((t & 31) >> 2) + ((q >> 1) << 3)
        for j in range(bm // 16):
            moved = []                     # (k, half) = (2j, 0), (2j, 1), (2j + 1, 0), ..
            for vals in pieces[2 * j:2 * j + 2]:
                for x in vals:
                    ptx.inst.mul.f32(x, x, float(scale))
                for half in range(2):      # columns c (+ 8): a query pair -> a column pair
                    m = reg.scalar(b32)
                    ptx.inst("movmatrix.sync.aligned.m8n8.trans.b16", m,
                             narrow(vals[2 * half:2 * half + 2], dtype)[0])
                    moved.append(m)
            row = _quad_transpose(moved, is_q)     # (k, half) q's pairs of lanes 0 .. 3
            s = m0 + 16 * j + qo
            valid = reg.scalar(pred)
            ptx.inst.setp.lt.u32(valid, s, sq)
            dst = (((bh // nh) * sq + s) * nh + bh % nh) * d + c0
            store_chunk(pdq + dst * dtype.bytes, 0, dtype, row, pred=valid)

    return postprocess


def _quad_place(q):
    """``is_q[n]`` (n = 1, 2, 3): this lane's place ``q`` in its quad is ``n``."""
    is_q = [None] + [reg.scalar(pred) for _ in range(3)]
    for i in range(1, 4):
        ptx.inst.setp.eq.u32(is_q[i], q, i)
    return is_q


def _quad_transpose(vals, is_q):
    """Four b32 a lane to four a lane, transposed over the quad: lane ``q`` gets ``vals[q]``
    of lanes 0 .. 3, in order (``shfl.sync.bfly`` by 1, 2, 3, selects around them)."""
    got = [_pick(vals, is_q, i) for i in range(4)]      # lane q ^ i's value q
    for i in range(1, 4):
        ptx.inst("shfl.sync.bfly.b32", got[i], got[i], i, 0x1F, 0xFFFFFFFF)
    return [_pick(got, is_q, p) for p in range(4)]


def _pick(regs, is_q, i: int):
    """A copy of ``regs[q ^ i]`` (``q`` this lane's place in its quad; ``is_q[n]``: q == n)."""
    out = reg.scalar(regs[0].dtype)
    ptx.inst(f"mov.{regs[0].dtype.name}", out, regs[i])
    for n in range(1, 4):
        ptx.inst(f"selp.{regs[0].dtype.name}", out, regs[n ^ i], out, is_q[n])
    return out


__all__ = ["build_preprocess_wide", "build_postprocess_wide", "build_postprocess_frag",
           "build_postprocess_frag80", "WIDE_HEAD_DIMS"]
