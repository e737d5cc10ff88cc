"""The backward's two small kernels around the main one (:mod:`.bwd`).

* :func:`build_preprocess` — one warp per query row ``(b, h, s)`` of the padded length
  ``SQP`` (a multiple of the main kernel's 64-row blocks): ``D = rowsum(dO ∘ O)`` in f32
  (``ld.global.b32`` pairs, ``shfl.sync.bfly`` sum), ``-lse · log2 e`` (``-inf`` for a row
  that saw no key, and for the padding rows, so that their ``P`` is 0), zeros for the
  row of the f32 dQ accumulator and, for the deterministic mode, the m-block's semaphore.
* :func:`build_postprocess` — one warp per row of dQ: the f32 accumulator times the
  softmax scale, rounded (``cvt.rn.{bf16,f16}x2.f32``) into dq's ``(B, SQ, H, D)``.

``varlen=True``: packed sequences (``(TQ, H, D)``, lse ``(H, TQ)``, ``cu_q`` int32). The
f32 rows are ``(H, SQP)`` with each sequence's rows from a multiple of 64 on: sequence
``i``'s row ``r`` is padded row ``(i + cu_q[i] // 64) · 64 + r`` (the numbering the
forward's :class:`~.tiles.Varlen` gives its m-blocks), so ``SQP = (NSEQ + TQ // 64) · 64``
is known without reading the offsets. A warp per padded row finds its sequence
(:func:`~.varlen_tiles.find_seq`); padding rows get ``D = 0`` and ``-inf``.
"""
from __future__ import annotations

from ... import Tile, kernel
from ...core.types import PtxType, f32, pred, s32, u32
from ...dsl import ptx, reg
from .._common.rowio import load_chunk, narrow, store_chunk
from .softmax import LOG2E, NEG_INF
from .varlen_tiles import find_seq, load_u32

WARPS = 8          # rows per CTA
BLOCK_M = 64       # the main kernel's query rows per step: SQP is a multiple


def _row_warp():
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
    return cta * WARPS + (tid >> 5), tid & 31


def _varlen_row(pcq, prow):
    """Padded row ``prow`` -> (packed row t, whether the sequence has it)."""
    seq = find_seq(pcq, ptx.dim("NS1") - 1, prow // BLOCK_M, BLOCK_M)
    q0 = load_u32(pcq, seq)
    r = prow - (seq + q0 // BLOCK_M) * BLOCK_M
    valid = reg.scalar(pred)
    ptx.inst.setp.lt.u32(valid, r, load_u32(pcq, seq + 1) - q0)
    return q0 + r, valid


def _pieces(d: int, lane):
    """A lane's (column, count) pieces of a row of ``d``: two columns of each 64, and one
    of a last 32 (head dim 96); each column made as its piece is taken."""
    for i in range(d // 64):
        yield lane * 2 + 64 * i, 2
    if d % 64:
        yield 64 * (d // 64) + lane, 1


def build_preprocess(dtype: PtxType, d: int, *, deterministic: bool = False,
                     arch: str = "sm_90a", varlen: bool = False):
    """o, do ``(B, SQ, H, D)``, lse ``(B, H, SQ)`` -> dpsum, nlse2 ``(B, H, SQP)``, dq_acc
    ``(B, H, SQP, D)`` zeroed (and sem ``(B, H, NMB)`` zeroed when ``deterministic``);
    ``varlen``: o, do ``(TQ, H, D)``, lse ``(H, TQ)``, cu_q -> ``(H, SQP)`` rows."""
    bq = () if varlen else ("B",)
    ins = (Tile(*bq, "TQ" if varlen else "SQ", "H", d, dtype),
           Tile(*bq, "TQ" if varlen else "SQ", "H", d, dtype),
           Tile(*bq, "H", "TQ" if varlen else "SQ", f32)) + ((Tile("NS1", s32),) if varlen else ())
    outs = [Tile(*bq, "H", "SQP", f32), Tile(*bq, "H", "SQP", f32),
            Tile(*bq, "H", "SQP", d, f32)]
    names = ["o", "do", "lse"] + (["cu_q"] if varlen else []) + ["dpsum", "nlse2", "dq_acc"]
    if deterministic:
        outs.append(Tile(*bq, "H", "NMB", u32))
        names.append("sem")
    name = (f"attention_bwd_pre_{dtype.name}_d{d}{'_varlen' if varlen else ''}"
            f"{'_det' if deterministic else ''}")

    def body(o, do, lse, dpsum, nlse2, dq_acc, sem=None, cu_q=None):
        po, pdo, plse, pds, pnl, pdq = ptx.global_ptrs(o, do, lse, dpsum, nlse2, dq_acc)
        sq = None if varlen else ptx.dim("SQ")
        nh, sqp = ptx.dim("H"), ptx.dim("SQP")
        row, lane = _row_warp()
        s = row % sqp
        bh = row // sqp
        if varlen:                       # bh is the head; t the packed row
            t, valid = _varlen_row(ptx.global_ptr(cu_q), s)
            src = (t * nh + bh) * d
            lse_at = bh * ptx.dim("TQ") + t
        else:
            b, h = bh // nh, bh % nh
            valid = reg.scalar(pred)
            ptx.inst.setp.lt.u32(valid, s, sq)
            src = ((b * sq + s) * nh + h) * d
            lse_at = None
        total = reg.scalar(f32, init=0.0)
        for col, n in _pieces(d, lane):
            off = (src + col) * dtype.bytes
            ov = load_chunk(po + off, 0, dtype, n, pred=valid)
            dv = load_chunk(pdo + off, 0, dtype, n, pred=valid)
            for x, y in zip(ov, dv):
                ptx.inst("fma.rn.f32", total, x, y, total)
        for sh in (16, 8, 4, 2, 1):
            y = reg.scalar(f32)
            ptx.inst("shfl.sync.bfly.b32", y, total, sh, 0x1F, 0xFFFFFFFF)
            ptx.inst.add.f32(total, total, y)
        with ptx.if_(lane == 0):
            ptx.inst("st.global.f32", ptx.addr(pds + row * 4), total)
            l = reg.scalar(f32, init=NEG_INF)
            at = lse_at if varlen else bh * sq + s
            ptx.inst("ld.global.f32", l, ptx.addr(plse + at * 4), pred=valid)
            fin = reg.scalar(pred)
            ptx.inst.setp.gt.f32(fin, l, NEG_INF)
            v = reg.scalar(f32)
            ptx.inst.mul.f32(v, l, -LOG2E)
            ptx.inst.selp.f32(v, v, NEG_INF, fin)
            ptx.inst("st.global.f32", ptx.addr(pnl + row * 4), v)
            if deterministic:
                psem = ptx.global_ptr(sem)
                with ptx.if_(s % BLOCK_M == 0):
                    ptx.inst("st.global.u32", ptx.addr(psem + (bh * (sqp // BLOCK_M) +
                                                               s // BLOCK_M) * 4), 0)
        zero = [reg.scalar(f32, init=0.0) for _ in range(2)]
        for i in range(d // 64):
            ptx.inst("st.global.v2.f32",
                     ptx.addr(pdq + (row * d + lane * 2 + 64 * i) * 4), zero)
        if d % 64:                       # head dim 96's last 32 columns, one a lane
            ptx.inst("st.global.f32", ptx.addr(pdq + (row * d + 64 * (d // 64) + lane) * 4),
                     zero[0])

    deco = kernel(in_specs=ins, out_specs=tuple(outs), arg_names=tuple(names),
                  grid=(lambda H, SQP: (H * SQP // WARPS, 1, 1)) if varlen else
                  (lambda B, H, SQP: (B * H * SQP // WARPS, 1, 1)),
                  block=(32 * WARPS, 1, 1), arch=arch, name=name)
    if varlen and deterministic:
        return deco(lambda o, do, lse, cu_q, dpsum, nlse2, dq_acc, sem:
                    body(o, do, lse, dpsum, nlse2, dq_acc, sem, cu_q))
    if varlen:
        return deco(lambda o, do, lse, cu_q, dpsum, nlse2, dq_acc:
                    body(o, do, lse, dpsum, nlse2, dq_acc, None, cu_q))
    if deterministic:
        return deco(lambda o, do, lse, dpsum, nlse2, dq_acc, sem:
                    body(o, do, lse, dpsum, nlse2, dq_acc, sem))
    return deco(lambda o, do, lse, dpsum, nlse2, dq_acc:
                body(o, do, lse, dpsum, nlse2, dq_acc))


def build_postprocess(dtype: PtxType, d: int, scale: float, *, arch: str = "sm_90a",
                      varlen: bool = False):
    """dq_acc ``(B, H, SQP, D)`` f32 -> dq ``(B, SQ, H, D)`` = dq_acc · scale in ``dtype``;
    ``varlen``: dq_acc ``(H, SQP, D)``, cu_q -> dq ``(TQ, H, D)``."""
    if varlen:
        return _varlen_postprocess(dtype, d, scale, arch)
    ins = (Tile("B", "H", "SQP", d, f32),)
    outs = (Tile("B", "SQ", "H", d, dtype),)

    @kernel(in_specs=ins, out_specs=outs, arg_names=("dq_acc", "dq"),
            grid=lambda B, SQ, H: ((B * SQ * H + WARPS - 1) // WARPS, 1, 1),
            block=(32 * WARPS, 1, 1), arch=arch, name=f"attention_bwd_post_{dtype.name}_d{d}")
    def postprocess(dq_acc, dq):
        pacc, pdq = ptx.global_ptrs(dq_acc, dq)
        sq, nh, sqp = ptx.dim("SQ"), ptx.dim("H"), ptx.dim("SQP")
        row, lane = _row_warp()
        with ptx.if_(row < ptx.dim("B") * sq * nh):
            h = row % nh
            s = (row // nh) % sq
            b = row // (nh * sq)
            src = ((b * nh + h) * sqp + s) * d
            for col, n in _pieces(d, lane):
                vals = load_chunk(pacc + (src + col) * 4, 0, f32, n)
                for x in vals:
                    ptx.inst.mul.f32(x, x, float(scale))
                store_chunk(pdq + (row * d + col) * dtype.bytes, 0, dtype, narrow(vals, dtype))

    return postprocess


def _varlen_postprocess(dtype: PtxType, d: int, scale: float, arch: str):
    """One warp per padded row ``(h, prow)``: a row its sequence has goes to dq."""

    @kernel(in_specs=(Tile("H", "SQP", d, f32), Tile("NS1", s32)),
            out_specs=(Tile("TQ", "H", d, dtype),), arg_names=("dq_acc", "cu_q", "dq"),
            grid=lambda H, SQP: (H * SQP // WARPS, 1, 1), block=(32 * WARPS, 1, 1),
            arch=arch, name=f"attention_bwd_post_{dtype.name}_d{d}_varlen")
    def postprocess(dq_acc, cu_q, dq):
        pacc, pdq, pcq = ptx.global_ptrs(dq_acc, dq, cu_q)
        nh, sqp = ptx.dim("H"), ptx.dim("SQP")
        row, lane = _row_warp()
        h = row // sqp
        t, valid = _varlen_row(pcq, row % sqp)
        with ptx.if_(valid):
            for col, n in _pieces(d, lane):
                vals = load_chunk(pacc + (row * d + col) * 4, 0, f32, n)
                for x in vals:
                    ptx.inst.mul.f32(x, x, float(scale))
                store_chunk(pdq + ((t * nh + h) * d + col) * dtype.bytes, 0, dtype,
                            narrow(vals, dtype))

    return postprocess


__all__ = ["build_preprocess", "build_postprocess", "BLOCK_M"]
