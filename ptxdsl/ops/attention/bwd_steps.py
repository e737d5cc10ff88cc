"""The main backward kernel's (:mod:`.bwd`) steps that are not the consumer loop's order:
the producer's loads, the register-A GEMMs of dV and dK, the varlen K clear and the dK / dV
stores (the deterministic mode's turns are :mod:`.bwd_det`'s)."""
from __future__ import annotations

from ...core.types import b32, pred, s32, u32
from ...dsl import ptx, reg
from .bwd_config import BLOCK_M as BM
from .fwd import _s32

ROW = 128            # bytes per swizzled panel row


def kv_gemms(mma, accs, a_regs, b_ats, *, fence=False, commit=True, bm: int = BM) -> None:
    """``acc += A·B`` over the ``bm`` queries of a step, for each column piece (``accs``,
    ``b_ats``, ``mma`` the pieces' instructions, or one for all): A from registers (Pᵀ or
    dSᵀ packed) or, given an address, from a 64 x 64 K-major tile in shared memory
    (128-byte swizzle); B (dO or Q) MN-major from the ring;
    ``fence``: ``wgmma.fence`` first (A was just written), ``commit``: a group of its own."""
    if fence:
        ptx.inst("wgmma.fence.sync.aligned")
    smem_a = not isinstance(a_regs, list)
    if smem_a:
        a_desc = ptx.wgmma.descriptor(a_regs, leading=16, stride=1024, swizzle=128)
    mmas = [mma] * len(accs) if isinstance(mma, str) else mma
    for acc, b_at, mma in zip(accs, b_ats, mmas):
        b_desc = ptx.wgmma.descriptor(b_at, leading=bm * ROW, stride=1024, swizzle=128)
        for ks in range(bm // 16):
            bo = (ks * 16 * ROW) >> 4
            b = b_desc + bo if bo else b_desc
            if smem_a:
                ao = (ks * 32) >> 4
                ptx.inst(mma, list(acc), a_desc + ao if ao else a_desc, b, 1, 1, 1, 0, 1)
            else:
                ptx.inst(mma, list(acc), a_regs[ks], b, 1, 1, 1, 1)
    if commit:
        ptx.inst("wgmma.commit_group.sync.aligned")


def zero_other_keys(k_at, n0, sk, bn: int, panels: int, t, *, threads: int = 256,
                    bar: int = 3) -> None:
    """Varlen, the sequence's last key block: the K rows past its keys (the next
    sequence's, read by the TMA box) zeroed in shared memory by the ``threads`` consumer
    threads (``t``; named barrier ``bar``), so that dQ = dS·K does not see them, as
    TMA's zero fill past SK does for the dense layout (whole 128-byte rows: the swizzle
    only permutes within a row). Their Sᵀ, dPᵀ and dK, dV rows are computed and never
    stored."""
    with ptx.if_(n0 + bn > sk):                     # the same branch in every thread
        zero = [reg.scalar(b32, init=0) for _ in range(4)]
        first = sk - n0                             # the first row to clear
        for i in ptx.range_(t, panels * bn * 8, threads):
            row = (i >> 3) % bn
            with ptx.if_(row >= first):
                ptx.inst("st.shared.v4.b32",
                         ptx.addr(k_at + (i // (bn * 8)) * (bn * ROW) + row * ROW
                                  + (i & 7) * 16), zero)
        ptx.inst("fence.proxy.async.shared::cta")   # for the wgmmas that read K
        ptx.inst("bar.sync", bar, threads)
        ptx.inst("fence.proxy.async.shared::cta")   # (and the other warpgroups' rows)


def store(acc, ptr, keys, batch, hk, sk, nhk, d, fcol, dtype, scale, k0=None) -> None:
    """dK (times ``scale``) or dV: 16-bit pairs (``cvt.rn``) by ``st.global.b32``; keys past
    SK are not written (``k0``: varlen, the sequence's first packed key row)."""
    sk_s = _s32(sk)
    elems = list(acc)
    for r in range(2):
        with ptx.if_(keys[r] < sk_s):
            row = ((k0 if k0 is not None else batch * sk) + u32_of(keys[r])) * nhk + hk
            at = ptr + (row * d + fcol) * dtype.bytes
            for g in range(0, len(elems), 4):
                i = g + 2 * r
                lo, hi = elems[i], elems[i + 1]
                if scale is not None:
                    ptx.inst.mul.f32(lo, lo, float(scale))
                    ptx.inst.mul.f32(hi, hi, float(scale))
                wd = reg.scalar(b32)
                ptx.inst(f"cvt.rn.{dtype.name}x2.f32", wd, hi, lo)
                ptx.inst("st.global.b32", ptx.addr(at, (8 * (i // 4)) * dtype.bytes), wd)


def load_kv(base, maps, panels: int, bn: int, coords, bar, kv_bytes: int) -> None:
    """The producer's one K and V load: ``bar`` expects both tiles' bytes, then each of
    ``maps`` (tensor map, shared offset) lands its ``panels`` 64-column panels of ``bn``
    rows; ``coords(p)``: panel ``p``'s TMA coordinates."""
    ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink, ptx.addr(bar), 2 * kv_bytes)
    for tmap, dst in maps:
        for p in range(panels):
            ptx.tma.load(base + (dst + p * bn * ROW), tmap, coords(p), bar)


def load_slot(*, base, slot, full, q_bytes: int, bm: int, panels: int, tiles, rows, qc,
              rc) -> None:
    """The producer's loads of one ring step into ``slot``, all on its ``full`` barrier:
    ``tiles`` ((tmap, offset) of Q, dO), ``rows`` ((tmap, offset) of -LSE·log2e, D: one copy
    per consumer warpgroup, each reads its own, so a warpgroup's reads are all ordered
    before its release); ``qc(p)``, ``rc()``: the boxes' coordinates."""
    fb = full + slot * 8
    ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink, ptx.addr(fb),
             2 * q_bytes + 4 * bm * 4)
    for tmap, dst in tiles:
        at = base + dst + slot * q_bytes
        for p in range(panels):
            ptx.tma.load(at + p * bm * ROW if p else at, tmap, qc(p), fb)
    for tmap, dst in rows:
        for cw in range(2):
            ptx.tma.load(base + dst + slot * (2 * bm * 4) + cw * bm * 4, tmap, rc(), fb)


def row_blocks(n0, sq, sk, mask, bn: int, bm: int, varlen: bool):
    """``(off, m_lo, m_hi)`` for the key block at ``n0``: the keys' offset past the queries
    (aligned bottom-right) and the ``bm``-row query blocks ``[m_lo, m_hi)`` whose rows
    can see one of its ``bn`` keys under ``mask``; past a varlen sequence's keys, none."""
    nmb = (sq + (bm - 1)) // bm
    off = _s32(sk) - _s32(sq)
    zero = reg.scalar(s32, init=0)
    m_lo, m_hi = zero, _s32(nmb)
    if mask.right >= 0:                            # rows i >= n0 - off - right
        m_lo = ptx.max(_s32(n0) - off - mask.right, zero) // bm
    if mask.left >= 0:                             # rows i <= n0 + bn - 1 - off + left
        m_hi = ptx.min(ptx.max(_s32(n0) - off + (bn - 1 + mask.left + bm), zero) // bm,
                       m_hi)
    if varlen:
        live = reg.scalar(pred)
        ptx.inst.setp.lt.u32(live, n0, sk)
        hi = reg.scalar(s32)
        ptx.inst.selp.s32(hi, m_hi, m_lo, live)
        m_hi = hi
    return off, m_lo, m_hi


def score_gemm(mma, acc, a_at, b_at, d: int, bn: int, bm: int) -> None:
    """``acc = A·Bᵀ`` over ``d`` (Sᵀ = K·Qᵀ or dPᵀ = V·dOᵀ): A the ``bn``-row K or V
    tile's rows from ``a_at``, B the ring's ``bm``-row Q or dO tile's rows from ``b_at``,
    both K-major in 64-column panels (128-byte swizzle); no fence, no commit."""
    a_desc = ptx.wgmma.descriptor(a_at, leading=16, stride=1024, swizzle=128)
    b_desc = ptx.wgmma.descriptor(b_at, leading=16, stride=1024, swizzle=128)
    for ks in range(d // 16):
        pnl, kin = divmod(ks, 4)
        ao = (pnl * bn * ROW + kin * 32) >> 4
        bo = (pnl * bm * ROW + kin * 32) >> 4
        ptx.inst(mma, list(acc), a_desc + ao if ao else a_desc,
                 b_desc + bo if bo else b_desc, 0 if ks == 0 else 1, 1, 1, 0, 0)


def u32_of(x):
    r = reg.scalar(u32)
    ptx.inst.cvt.u32.s32(r, x)
    return r


__all__ = ["kv_gemms", "score_gemm", "zero_other_keys", "store", "load_kv", "load_slot",
           "row_blocks", "u32_of"]
