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

from ... import Tile, kernel
from ...core.types import PtxType, f32, pred, u32
from ...dsl import ptx, reg
from .._common.rowio import load_chunk, narrow, store_chunk
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


def _grid(t: int):
    return lambda B, H, SQP: (B * H * SQP // (THREADS // t * ROWS), 1, 1)


def build_preprocess_wide(dtype: PtxType, d: int, *, deterministic: bool = False,
                          arch: str = "sm_90a"):
    """:func:`.bwd_prep.build_preprocess`'s arguments and results (dense), 8 columns a
    thread. SQP (a multiple of 64) is a multiple of the ``ROWS · 256 / T`` rows a CTA
    takes, so no CTA runs past it."""
    t = _lanes(d)
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
            src = (((bh // nh) * sq + s) * nh + bh % nh) * d
            ov, dv = [], []
            for cc in _cols(col, t, d):
                at = src + cc
                ov += load_chunk(po + at * dtype.bytes, 0, dtype, 8, pred=valid)
                dv += load_chunk(pdo + at * dtype.bytes, 0, dtype, 8, pred=valid)
            lv = reg.scalar(f32, init=NEG_INF)
            ptx.inst("ld.global.f32", lv, ptx.addr(plse + (bh * sq + s) * 4), pred=valid)
            loaded.append((row, s, ov, dv, lv))
        zero = [reg.scalar(f32, init=0.0) for _ in range(4)]
        for row, s, ov, dv, lv in loaded:
            total = reg.scalar(f32, init=0.0)
            for x, y in zip(ov, dv):
                ptx.inst("fma.rn.f32", total, x, y, total)
            sh = t // 2
            while sh:
                y = reg.scalar(f32)
                ptx.inst("shfl.sync.bfly.b32", y, total, sh, 0x1F, 0xFFFFFFFF)
                ptx.inst.add.f32(total, total, y)
                sh //= 2
            with ptx.if_(part == 0):
                ptx.inst("st.global.f32", ptx.addr(pds + row * 4), total)
                fin = reg.scalar(pred)
                ptx.inst.setp.gt.f32(fin, lv, NEG_INF)
                v = reg.scalar(f32)
                ptx.inst.mul.f32(v, lv, -LOG2E)
                ptx.inst.selp.f32(v, v, NEG_INF, fin)
                ptx.inst("st.global.f32", ptx.addr(pnl + row * 4), v)
                if deterministic:
                    with ptx.if_(s % BLOCK_M == 0):
                        ptx.inst("st.global.u32", ptx.addr(
                            ptx.global_ptr(sem) + ((row // sqp) * (sqp // BLOCK_M) +
                                                   s // BLOCK_M) * 4), 0)
            for cc in _cols(col, t, d):
                at = pdq + (row * d + cc) * 4
                ptx.inst("st.global.v4.f32", ptx.addr(at), zero)
                ptx.inst("st.global.v4.f32", ptx.addr(at, 16), zero)

    deco = kernel(in_specs=ins, out_specs=tuple(outs), arg_names=tuple(names), grid=_grid(t),
                  block=(THREADS, 1, 1), arch=arch,
                  name=f"attention_bwd_pre_{dtype.name}_d{d}_w"
                       f"{'_det' if deterministic else ''}")
    if deterministic:
        return deco(lambda o, do, lse, dpsum, nlse2, dq_acc, sem:
                    body(o, do, lse, dpsum, nlse2, dq_acc, sem))
    return deco(lambda o, do, lse, dpsum, nlse2, dq_acc:
                body(o, do, lse, dpsum, nlse2, dq_acc))


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
    dq_split and wg3's 192: one a warpgroup's columns), each in a warpgroup accumulator's
    fragment order (16 bytes ``(128 k + t)``: thread ``t``'s registers ``4k .. 4k + 3``,
    rows ``r``, ``r + 8``, columns ``8k + 2 (t % 4)`` and the next). A CTA converts one
    block: thread ``T`` loads the pieces of ``k = 4 (T // 128) + j`` (each ``j`` a coalesced
    2 KB a warpgroup), packs each row's pair, and the four lanes of a quad (one row's 8
    columns of each ``k`` between them) trade pairs over ``shfl.sync.bfly`` so that lane
    ``q`` holds whole 16-byte rows of ``k = 4 (T // 128) + q``: a quad stores 64
    contiguous bytes of a row by one ``st.global.v4`` a lane, where 4-byte stores would
    take eight."""
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
        is_q = [None] + [reg.scalar(pred) for _ in range(3)]
        for i in range(1, 4):
            ptx.inst.setp.eq.u32(is_q[i], q, i)
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
            col = (4 * (tid // 128) + q) * 8 + ((blk % n) * 64 if n > 1 else 0)
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


__all__ = ["build_preprocess_wide", "build_postprocess_wide", "build_postprocess_frag",
           "WIDE_HEAD_DIMS"]
