"""The head-dim-192 backward in FlashAttention-4's sm90 tile (``BwdConfig.wg2``): 96 keys a
CTA, two consumer warpgroups of 240 registers, every GEMM done once.

Why: :mod:`.bwd_wg3`'s three warpgroups of 160 registers split S and dP into m64n32
GEMMs, whose shared-memory operand bytes per FLOP are the highest of the step; with two
warpgroups S and dP are m64n48, dQ one m64n96 chain a warpgroup (96 of its columns over
all 96 keys) and dKᵀ, dVᵀ three m64n48 each (all 192 columns of the warpgroup's 48 keys,
FA4's ``dKV_swapAB`` with ``AtomLayoutNdKV=2``). Those extents need narrower swizzles, as
FA4 picks them: K in 64-byte swizzled 32-column panels (dQ's B reads 96 columns from
column 96: three whole panels), P and dS in 32-byte swizzled 16-key panels (dV's and dK's
B read 48 keys from key 48: three whole panels; dQ's A one panel a k-step).

::

    warpgroup 0 (producer)                   warpgroups 1, 2 (w = 0, 1; keys 48w .. 48w+47)
    TMA K (64B swizzle), V ─▶ kvfull          per step: wait qfull[s]; S = Q·K_wᵀ (m64n48)
    per head, per 64-row block:                 wait dofull; dP = dO·V_wᵀ (m64n48)
      wait qempty[s]: Q, -LSE·log2e            P = ex2(S·scale·log2e - LSE·log2e), dS
      wait doempty:   dO, D                    bar(256); P, dS -> shared (64 x 96)
                                               dVᵀ_w += dOᵀ·P_w (3 x m64n48; overlap 2:
                                                 between P's and dS's stores)
                                               dQ_w = dS·K[:, 96w:] (m64n96), dKᵀ_w += Qᵀ·dS_w
                                               dQ staged, TMA reduce-add (dq_warp: by
                                                 the producer's warp 1)
                                             epilogue: dK·scale, dV transposed by stmatrix
                                               through the dQ stage, 16-byte st.global

Shared memory: K (six 64-byte panels of 96 rows), V (three 128-byte panels), 2 stages of
Q and 1 of dO (128-byte panels), P and dS (six 32-byte panels of 64 rows each), two
64 x 96 f32 dQ stages (32-column 128-byte swizzled panels, the reduce's box), -LSE·log2e
and D, the barriers: 222008 bytes. Softcap and varlen as :mod:`.bwd_wg3`.
"""
from __future__ import annotations

import itertools

from ... import Tile, kernel
from ...core.tensormap import TMA
from ...core.types import PtxType, b32, f32, u32
from ...dsl import ptx, reg
from .._common.ring import Ring, wait
from .bwd import specs
from .bwd_config import BLOCK_M as BM, BwdConfig
from .bwd_ring96 import EMPTY, FULL, WTHREADS, barriers, finish_step, place
from .bwd_scores import cap_and_mask, cap_grad
from .bwd_steps import row_blocks
from .bwd_wg3 import _Coords, _mask, _stage, _store_t
from .config import Mask, register_pool
from .softmax import LOG2E, row_of
from .varlen_tiles import find_seq, load_u32

BN = 96              # keys a CTA
D = 192              # the head dim this layout is for
WGS = 2              # consumer warpgroups
KW = BN // WGS       # 48: keys of S, dP, dKᵀ, dVᵀ a warpgroup
QC = D // WGS        # 96: dQ columns a warpgroup
ROW = 128            # bytes of a 128-byte swizzled row (Q, dO, V; the f32 dQ stage)
KROW = 64            # bytes of a K row (64-byte swizzle: 32 columns a panel)
PROW = 32            # bytes of a P / dS row (32-byte swizzle: 16 keys a panel)
XBAR = (1, WGS * 128)   # the P / dS exchange barrier; 2 + w: a warpgroup's dQ stage


class Layout:
    """Byte offsets in the CTA's dynamic shared memory (each tile on its swizzle's
    pattern: 1024, 512, 256 bytes)."""

    def __init__(self, c: BwdConfig, es: int = 2):
        self.kv_bytes = BN * D * es
        self.q_bytes = BM * D * es
        self.kpanel = BN * KROW                     # 6144: 32 columns of the 96 keys
        self.ppanel = BM * PROW                     # 2048: 16 keys of the 64 queries
        place(self, c, BM * BN * es, BM * QC * 4, WGS)


def smem_bytes(c: BwdConfig) -> int:
    """The layout's shared memory (the plan's fit check)."""
    return Layout(c).total


def check(c: BwdConfig, d: int, deterministic: bool) -> None:
    """What the layout takes, as a ValueError naming what would be right."""
    if d != D:
        raise ValueError(f"wg2 is head dim 192's tile (two warpgroups of 96 dQ columns), "
                         f"got {d}")
    if deterministic:
        raise ValueError("wg2 has no deterministic mode: use wg3 with dq_warp (the plan's "
                         "deterministic row)")
    if c.producer_regs + WGS * c.consumer_regs > register_pool(WGS):
        raise ValueError(f"wg2: producer_regs + 2 x consumer_regs = {c.producer_regs} + 2 x "
                         f"{c.consumer_regs} exceeds the {register_pool(WGS)} of three "
                         f"warpgroups (e.g. 24 and 240)")


def _specs(dtype: PtxType, varlen: bool):
    """:func:`.bwd.specs` with K's TMA box 32 columns wide in the 64-byte swizzle."""
    ins, outs = specs(dtype, D, False, True, True, BN, varlen, BM)
    if varlen:
        kt = Tile("TK", "HK", D, dtype, tma=TMA(box=(BN, 1, 32), swizzle=KROW))
    else:
        kt = Tile("B", "SK", "HK", D, dtype, tma=TMA(box=(1, BN, 1, 32), swizzle=KROW))
    return (ins[0], kt) + tuple(ins[2:]), outs


def _desc(at, leading, stride, swizzle):
    return ptx.wgmma.descriptor(at, leading=leading, stride=stride, swizzle=swizzle)


def _mma(n: int, dt: str) -> str:
    return f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dt}.{dt}"


def _off(d, o):
    return d + (o >> 4) if o else d


def _scores(acc, a_at, b_at, b_row: int, mma) -> None:
    """``acc = A·Bᵀ`` over the head dim, one group: A 64 query rows of Q or dO (128-byte
    panels), B 48 key rows of K (``b_row`` 64: 64-byte panels) or V (128), K-major."""
    a, b = _desc(a_at, 16, 1024, 128), _desc(b_at, 16, 8 * b_row, b_row)
    per = b_row // 32                                  # k-steps a B panel row holds
    for ks in range(D // 16):
        ao = (ks // 4) * BM * ROW + (ks % 4) * 32
        bo = (ks // per) * BN * b_row + (ks % per) * 32
        ptx.inst(mma, list(acc), _off(a, ao), _off(b, bo), 0 if ks == 0 else 1, 1, 1, 0, 0)
    ptx.inst("wgmma.commit_group.sync.aligned")


def _kv_t(accs, a_at, t_at, mma) -> None:
    """``accᵀ[p] += A[:, panel p]ᵀ·T`` over the step's 64 queries, k-step outer: A Q or
    dO (MN-major, a 128-byte panel a column tile), T the warpgroup's 48 keys of P or dS
    (MN-major, three 32-byte panels), one group."""
    b = _desc(t_at, BM * PROW, 8 * PROW, PROW)
    a = _desc(a_at, BM * ROW, 1024, 128)
    for ks in range(BM // 16):
        for p, acc in enumerate(accs):
            ptx.inst(mma, list(acc), _off(a, p * BM * ROW + ks * 16 * ROW),
                     _off(b, ks * 16 * PROW), 1, 1, 1, 1, 1)
    ptx.inst("wgmma.commit_group.sync.aligned")


def _dq(acc, ds_at, k_at, mma) -> None:
    """``dQ_w = dS·K[:, 96w:]`` over the 96 keys, one group: dS K-major (a 32-byte panel a
    k-step), K MN-major (three 64-byte panels of 32 columns from ``k_at``)."""
    a, b = _desc(ds_at, 16, 8 * PROW, PROW), _desc(k_at, BN * KROW, 8 * KROW, KROW)
    for ks in range(BN // 16):
        ptx.inst(mma, list(acc), _off(a, ks * BM * PROW), _off(b, ks * 16 * KROW),
                 0 if ks == 0 else 1, 1, 1, 0, 1)
    ptx.inst("wgmma.commit_group.sync.aligned")


def build_backward_wg2(c: BwdConfig, dtype: PtxType, d: int, mask: Mask = Mask(), *,
                       scale: float, softcap: float = 0.0, deterministic: bool = False,
                       arch: str = "sm_90a", varlen: bool = False):
    """The main backward kernel in FA4's head-dim-192 sm90 tile (the arguments as
    :func:`.bwd.build_backward`'s; dK leaves scaled by ``scale``, dq_acc holds dQ / scale)."""
    check(c, d, deterministic)
    S, dt, es = c.stages, dtype.name, dtype.bytes
    L = Layout(c, es)
    scale_log2 = float(softcap if softcap else scale) * LOG2E
    ins, outs = _specs(dtype, varlen)
    names = ("q", "k", "v", "do", "nlse2", "dpsum") + (("cu_q", "cu_k") if varlen else ()) \
        + ("dq_acc", "dk", "dv")
    name = (f"attention_bwd_{dt}_d{D}_s{S}_{mask.tag}{'_cap' if softcap else ''}{c.tag}"
            f"{'_varlen' if varlen else ''}")

    def body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv, cu_q=None, cu_k=None):
        labels = itertools.count()
        tq, tk, tv, tdo = q.tma_desc(), k.tma_desc(), v.tma_desc(), do.tma_desc()
        tl, td, tdq = nlse2.tma_desc(), dpsum.tma_desc(), dq_acc.tma_desc()
        pdk, pdv = ptx.global_ptrs(dk, dv)
        nh, nhk = ptx.dim("H"), ptx.dim("HK")
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        wg, lane = tid >> 7, tid & 127
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        if varlen:       # the sequence of this key block (as bwd.py numbers them)
            pcq, pck = ptx.global_ptrs(cu_q, cu_k)
            nseq = ptx.dim("NS1") - 1
            nvb = nseq + ptx.dim("TK") // BN
            vb, hk = cta % nvb, cta // nvb
            seq = find_seq(pck, nseq, vb, BN)
            k0, q0 = load_u32(pck, seq), load_u32(pcq, seq)
            sk, sq = load_u32(pck, seq + 1) - k0, load_u32(pcq, seq + 1) - q0
            nb = vb - (seq + k0 // BN)
            pq0 = (seq + q0 // BM) * BM                 # the sequence's first padded row
            X = _Coords(lambda m0, head: [head, q0 + m0], lambda n: [hk, k0 + n],
                        lambda m0, head: [pq0 + m0, head], lambda key: k0 + key, None)
        else:
            sq, sk = ptx.dim("SQ"), ptx.dim("SK")
            nblk = (sk + (BN - 1)) // BN
            nb, rest = cta % nblk, cta // nblk
            hk, batch = rest % nhk, rest // nhk
            X = _Coords(lambda m0, head: [head, m0, batch], lambda n: [hk, n, batch],
                        lambda m0, head: [m0, head, batch], lambda key: batch * sk + key,
                        None)
        group = nh // nhk
        n0 = nb * BN
        off, m_lo, m_hi = row_blocks(n0, sq, sk, mask, BN, BM, varlen)
        base, kvfull, qfull, qempty, dofull, doempty = barriers(L, tid, S, WGS)

        with ptx.if_(wg == 0):
            # ------------------------------------------------------------ producer
            ptx.inst("setmaxnreg.dec.sync.aligned.u32", c.producer_regs)
            with ptx.if_(tid == 0):
                ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink,
                         ptx.addr(kvfull), 2 * L.kv_bytes)
                for p in range(D // 32):                # K: six 32-column panels
                    ptx.tma.load(base + (L.k + p * L.kpanel), tk, [p * 32] + X.k(n0), kvfull)
                for p in range(D // 64):                # V: three 64-column panels
                    ptx.tma.load(base + (L.v + p * BN * ROW), tv, [p * 64] + X.k(n0), kvfull)
                qr, dr = Ring(S), Ring(1)
                for gi in ptx.range_(0, group):
                    head = hk * group + gi
                    for mb in ptx.range_(m_lo, m_hi):
                        m0 = mb * BM
                        for r, full, empty, tmap, dst, rt, rdst in (
                                (qr, qfull, qempty, tq, L.q, tl, L.lse),
                                (dr, dofull, doempty, tdo, L.do, td, L.dpsum)):
                            wait(labels, empty + r.slot * 8, r.phase ^ 1)
                            fb = full + r.slot * 8
                            ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink,
                                     ptx.addr(fb), L.q_bytes + BM * 4)
                            at = base + dst + r.slot * L.q_bytes
                            for p in range(D // 64):
                                ptx.tma.load(at + p * BM * ROW if p else at, tmap,
                                             [p * 64] + X.q(m0, head), fb)
                            ptx.tma.load(base + rdst + r.slot * (BM * 4), rt,
                                         X.row(m0, head), fb)
                            r.advance()
            if c.dq_warp:           # warp 1: dQ's reduce-adds
                with ptx.if_((tid >> 5) == 1):
                    _writer(tdq, tid & 31, base + L.dqs, L.wg_stage, group, hk, X,
                            (m_lo, m_hi))
        with ptx.else_():
            # ------------------------------------------------------------ consumers
            ptx.inst("setmaxnreg.inc.sync.aligned.u32", c.consumer_regs)
            _consumer(c, L, dt, mask, scale, softcap, scale_log2, labels, base, tid, wg,
                      lane, tdq, pdk, pdv, X, n0, sk, off, m_lo, m_hi, group, hk, nhk,
                      varlen)

    grid = (lambda NS1, TK, HK: ((NS1 - 1 + TK // BN) * HK, 1, 1)) if varlen else \
        (lambda B, SK, HK: ((SK + BN - 1) // BN * HK * B, 1, 1))
    deco = kernel(in_specs=ins, out_specs=outs, arg_names=names, grid=grid,
                  block=((1 + WGS) * 128, 1, 1), arch=arch, name=name, min_ctas_per_sm=1)
    if varlen:
        return deco(lambda q, k, v, do, nlse2, dpsum, cu_q, cu_k, dq_acc, dk, dv:
                    body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv, cu_q, cu_k))
    return deco(lambda q, k, v, do, nlse2, dpsum, dq_acc, dk, dv:
                body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv))


def _consumer(c, L, dt, mask, scale, softcap, scale_log2, labels, base, tid, wg, lane,
              tdq, pdk, pdv, X, n0, sk, off, m_lo, m_hi, group, hk, nhk, varlen) -> None:
    """A consumer warpgroup's steps and its dK, dV epilogue."""
    w = wg - 1
    warp, lw = lane >> 5, lane & 31
    fcol = (lw & 3) * 2
    r0 = warp * 16 + (lw >> 2)               # this thread's query rows r0, r0 + 8
    xr = lw >> 2                             # (r0 % 8: the dQ stage's 128-byte swizzle)
    kw0 = n0 + w * KW                        # this warpgroup's first key
    dv_acc = [ptx.wgmma.accumulator(KW, init=0.0) for _ in range(D // 64)]   # dVᵀ, dKᵀ:
    dk_acc = [ptx.wgmma.accumulator(KW, init=0.0) for _ in range(D // 64)]   # columns x keys
    qr, dr = Ring(c.stages), Ring(1)
    k_w, v_w = base + L.k + w * (KW * KROW), base + L.v + w * (KW * ROW)
    t_w = w * (3 * L.ppanel)                 # the warpgroup's 48 keys: P / dS panels 3w..
    # P / dS by stmatrix.x4: lane lw addresses row t of 8 x 8 matrix mat (query row
    # 16 warp + 8 (mat & 1) + t, keys 48w + 8 (j + (mat >> 1)) for key groups j, j + 1):
    # panel 3w + j // 2, 16-byte chunk (mat >> 1) of the 32-byte row, swizzled by row bit 2
    t, mat = lw & 7, lw >> 3
    pt_at = base + t_w + (warp * 16 + (mat & 1) * 8 + t) * PROW + \
        (((mat >> 1) ^ ((t >> 2) & 1)) << 4)
    stage_w = base + L.dqs + w * L.wg_stage
    mma48, mma96 = _mma(KW, dt), _mma(QC, dt)
    doempty, dofull = base + L.doempty, base + L.dofull
    wait(labels, base + L.kvfull, 0)
    if varlen:      # the next sequence's keys in the last block: K rows zeroed
        _zero_other_keys(base + L.k, n0, sk, tid - 128)
    for gi in ptx.range_(0, group):
        head = hk * group + gi
        for mb in ptx.range_(m_lo, m_hi):
            m0 = mb * BM
            q_at = base + L.q + qr.slot * L.q_bytes
            do_at = base + L.do
            s_acc, dp_acc = ptx.wgmma.accumulator(KW), ptx.wgmma.accumulator(KW)
            wait(labels, base + L.qfull + qr.slot * 8, qr.phase)
            ptx.inst("wgmma.fence.sync.aligned")
            _scores(s_acc, q_at, k_w, KROW, mma48)
            wait(labels, dofull, dr.phase)
            _scores(dp_acc, do_at, v_w, ROW, mma48)
            lse_at = base + L.lse + qr.slot * (BM * 4)
            nl = [reg.scalar(f32) for _ in range(2)]
            dd = [reg.scalar(f32) for _ in range(2)]
            for r in range(2):
                ptx.inst("ld.shared.f32", nl[r], ptx.addr(lse_at + r0 * 4, 32 * r))
            ptx.inst("wgmma.wait_group.sync.aligned", 1)
            s = list(s_acc)
            # softcap: s = tanh(s·scale/cap), its tanh kept for dS (before the mask)
            caps = cap_and_mask(s, None, m0, fcol, off, Mask(), None, scale, softcap)
            if mask.any:
                _mask(s, mask, m0, r0, kw0, fcol, off, KW)
            for i, x in enumerate(s):
                ptx.inst("fma.rn.f32", x, x, scale_log2, nl[row_of(i)])
                ptx.inst("ex2.approx.ftz.f32", x, x)
            for r in range(2):
                ptx.inst("ld.shared.f32", dd[r], ptx.addr(base + L.dpsum + r0 * 4, 32 * r))
            dp = list(dp_acc)

            def grads():              # dP -> dS = P ∘ (dP - D) (· (1 - tanh²))
                for i, y in enumerate(dp):
                    ptx.inst.sub.f32(y, y, dd[row_of(i)])
                    ptx.inst.mul.f32(y, y, s[i])
                    if caps:
                        cap_grad(y, caps[i])

            def put(tile, vals):      # into the P or dS tile: two key groups a stmatrix
                for j in range(0, KW // 8, 2):
                    words = []
                    for i in range(4 * j, 4 * j + 8, 2):
                        wd = reg.scalar(b32)
                        ptx.inst(f"cvt.rn.{dt}x2.f32", wd, vals[i + 1], vals[i])
                        words.append(wd)
                    ptx.inst("stmatrix.sync.aligned.m8n8.x4.shared.b16",
                             ptx.addr(pt_at, tile + (j // 2) * L.ppanel), words)
                ptx.inst("fence.proxy.async.shared::cta")

            def sync():               # every warpgroup's stores, for our wgmmas
                ptx.inst("bar.sync", *XBAR)
                ptx.inst("fence.proxy.async.shared::cta")

            def issue_dv():
                ptx.inst("wgmma.fence.sync.aligned")
                _kv_t(dv_acc, do_at, base + L.p + t_w, mma48)
            if c.overlap == 2:        # dV runs while dS is made and stored
                ptx.inst("bar.sync", *XBAR)     # the last step's wgmmas read the tiles
                put(L.p, s)
                sync()
                issue_dv()
                ptx.inst("wgmma.wait_group.sync.aligned", 1)   # dP (dV may run)
                grads()
                put(L.ds, dp)
                sync()
            else:
                ptx.inst("wgmma.wait_group.sync.aligned", 0)
                grads()
                ptx.inst("bar.sync", *XBAR)     # the last step's wgmmas read the tiles
                put(L.p, s)
                put(L.ds, dp)
                sync()
                issue_dv()
            dq = ptx.wgmma.accumulator(QC)
            ptx.inst("wgmma.fence.sync.aligned")
            _dq(dq, base + L.ds, base + L.k + w * (3 * L.kpanel), mma96)
            _kv_t(dk_acc, q_at, base + L.ds + t_w, mma48)
            finish_step(c, w, lane, doempty, lambda: base + L.qempty + qr.slot * 8,
                        lambda: _stage(dq, stage_w, r0, lw, xr),
                        lambda: _reduce(tdq, w, X.row(m0, head), stage_w))
            qr.advance()
            dr.advance()
    if c.dq_warp:        # the writer's last arrival (its first was before any)
        ptx.inst("bar.sync", EMPTY + w, WTHREADS)
    else:
        with ptx.if_(lane == 0):
            ptx.inst("cp.async.bulk.wait_group", 0)
        ptx.inst("bar.sync", 2 + w, 128)
    # dKᵀ, dVᵀ (64 columns x 48 keys a tile) transposed through the warpgroup's dQ stage,
    # 128-byte rows of keys to global
    for accs, ptr, sc in ((dk_acc, pdk, scale), (dv_acc, pdv, None)):
        for p, acc in enumerate(accs):
            _store_t(list(acc), ptr, stage_w, lane, kw0, sk, X.key(kw0), hk, nhk, w, dt, sc,
                     col=64 * p)


def _zero_other_keys(k_at, n0, sk, t) -> None:
    """Varlen, the sequence's last key block: K's rows past its keys (the next sequence's,
    read by the TMA box) zeroed by the 256 consumer threads (whole 64-byte rows: the
    swizzle only permutes within a row), so that dQ = dS·K does not see them."""
    with ptx.if_(n0 + BN > sk):
        zero = [reg.scalar(b32, init=0) for _ in range(4)]
        first = sk - n0
        for i in ptx.range_(t, (D // 32) * BN * 4, WGS * 128):
            row = (i >> 2) % BN
            with ptx.if_(row >= first):
                ptx.inst("st.shared.v4.b32",
                         ptx.addr(k_at + (i // (BN * 4)) * (BN * KROW) + row * KROW
                                  + (i & 3) * 16), zero)
        ptx.inst("fence.proxy.async.shared::cta")   # for the wgmmas that read K
        ptx.inst("bar.sync", *XBAR)
        ptx.inst("fence.proxy.async.shared::cta")


def _reduce(tdq, w, row, stage_w) -> None:
    """Warpgroup ``w``'s staged dQ (three 32-column boxes from column 96w) added into
    dq_acc's rows at ``row`` by TMA reduce-add, one bulk group."""
    for h in range(QC // 32):
        ptx.tma.reduce(tdq, [w * QC + 32 * h] + row, stage_w + h * BM * ROW)
    ptx.inst("cp.async.bulk.commit_group")


def _writer(tdq, lane, dqs, wg_stage, group, hk, X, m_range) -> None:
    """``dq_warp``: the producer's warp 1 takes each consumer warpgroup's staged dQ in
    turn (``FULL + w``), adds it and hands the stage back once read (``EMPTY + w``); one
    arrival ahead of the first step, so the consumers' waits and its arrivals pair up."""
    for w in range(WGS):
        ptx.inst("bar.arrive", EMPTY + w, WTHREADS)
    for gi in ptx.range_(0, group):
        head = hk * group + gi
        for mb in ptx.range_(*m_range):
            for w in range(WGS):
                ptx.inst("bar.sync", FULL + w, WTHREADS)
                with ptx.if_(lane == 0):
                    ptx.inst("fence.proxy.async.shared::cta")
                    _reduce(tdq, w, X.row(mb * BM, head), dqs + w * wg_stage)
                    ptx.inst("cp.async.bulk.wait_group.read", 0)
                ptx.inst("bar.arrive", EMPTY + w, WTHREADS)
    with ptx.if_(lane == 0):
        ptx.inst("cp.async.bulk.wait_group", 0)


__all__ = ["build_backward_wg2", "smem_bytes", "check", "Layout", "BN"]
