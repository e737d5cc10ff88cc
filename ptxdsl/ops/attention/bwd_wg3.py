"""The head-dim-192 backward in FlashAttention-3's hopper tile (``BwdConfig.wg3``): 96 keys
a CTA, three consumer warpgroups, every GEMM done once.

Why: a 64-key CTA (``col_split``) loads the step's Q and dO and adds 64 x D f32 of dQ per
64 keys, so its L2 traffic per FLOP is 1.5x that of a 96-key CTA; 96 keys do not split
into wgmma's M of 64, so the scores are S = Q·Kᵀ (queries on M, as FA3's
``SdP_swapAB=false``) and dK, dV are accumulated transposed (``dKV_swapAB``: M = 64 of
the head dim's columns, N = the 96 keys), which is what makes three warpgroups of 64
columns each cover 192 (FA3's ``NumMmaWarpGroups=3``, ``AtomLayoutNdKV=1``).

::

    warpgroup 0 (producer)                   warpgroups 1..3 (w = 0..2; keys 32w .. 32w+31)
    TMA K, V (96 x 192) ─▶ kvfull             per step: wait qfull[s]; S = Q·K_wᵀ (m64n32)
    per head, per 64-row block:                 wait dofull; dP = dO·V_wᵀ (m64n32)
      wait qempty[s]: Q, -LSE·log2e            P = ex2(S·scale·log2e - LSE·log2e) (mask on
      wait doempty:   dO, D                      boundary blocks), dS = P ∘ (dP - D)
                                               bar(384); P, dS -> shared (64 x 96); bar(384)
                                               dVᵀ_w += dO[:, w]ᵀ·P, dQ_w = dS·K[:, w],
                                                 dKᵀ_w += Q[:, w]ᵀ·dS (m64n96, m64n64, m64n96)
                                               dO's slot freed once dV is done; dQ staged
                                                 (swizzled 32-column panels) under dK and
                                                 added by TMA reduce-add; Q's slot freed
                                             epilogue: dK·scale, dV transposed by stmatrix
                                               into the dQ stage, 16-byte st.global
                                               (dkv_tma: into the warpgroup's panel of K's
                                               and V's tiles, two TMA stores)

Shared memory (1024-byte aligned panels of 128-byte swizzled rows): K, V (3 panels of 96
rows), 2 stages of Q and 1 of dO (FA3's ``Stages_dO=1``: 2 would not fit beside the dQ
stages), P and dS (64 queries x 96 keys in two 64-key panels), three 64 x 64 f32 dQ
stages, -LSE·log2e and D, the barriers: 230200 bytes. Softcap; varlen as :mod:`.bwd`
numbers its key blocks (the next sequence's K rows in the last block zeroed); the
deterministic mode (with ``dq_warp``: the writer warp takes :mod:`.bwd_det`'s semaphore
turns) visits the row blocks last to first. Schedule options: ``wg3_ahead`` (the next
step's S issued before this step ends, :mod:`.bwd_wg3ahead`), ``wg3_pfree`` (P's stores
behind dO's empty barrier, not the first exchange barrier), ``wg3_fence1`` (the
exchanges' proxy fence by the readers only).
"""
from __future__ import annotations

import itertools

from ... import kernel
from ...core.types import PtxType, b32, f32, s32, u32
from ...dsl import ptx, reg
from .._common.ring import Ring, wait
from .bwd import specs
from .bwd_config import BLOCK_M as BM, BwdConfig
from .bwd_ring96 import EMPTY, FULL, WTHREADS, barriers, finish_step, place
from .bwd_wg3ahead import Ahead3, finish_ahead
from .bwd_det import det_cta, m_blocks, pass_turn, spin, turn_of
from .bwd_dqwarp import add_frag, frag_block, stage_frag
from .bwd_scores import cap_and_mask, cap_grad
from .config import Mask, register_pool
from .fwd import _s32
from .bwd_steps import load_kv, row_blocks, zero_other_keys
from .softmax import LOG2E, col_of, mask_block, row_of
from .varlen_tiles import find_seq, load_u32
from .._common.warpgroup import consumer_index

BN = 96              # keys a CTA
D = 192              # the head dim this layout is for
PANEL = 64           # 16-bit elements per 128-byte swizzle row
ROW = 128            # bytes per swizzled panel row
WGS = 3              # consumer warpgroups
PANELS = D // PANEL  # 3: warpgroup w owns column panel w of dK, dV and dQ
XBAR = (1, WGS * 128)   # the P / dS exchange barrier; 2 + w: a warpgroup's dQ stage


class Layout:
    """Byte offsets in the CTA's dynamic shared memory."""

    def __init__(self, c: BwdConfig, es: int = 2):
        self.kv_bytes = BN * D * es
        self.q_bytes = BM * D * es
        place(self, c, BM * 2 * PANEL * es, BM * PANEL * 4, WGS)   # P, dS: two 64-key panels


def smem_bytes(c: BwdConfig) -> int:
    """The layout's shared memory (the plan's fit check)."""
    return Layout(c).total


def check(c: BwdConfig, d: int, mask: Mask, softcap: float, deterministic: bool,
          varlen: bool = False) -> None:
    """What the layout takes, as a ValueError naming what would be right."""
    if d != D:
        raise ValueError(f"wg3 is head dim 192's tile (three 64-column panels), got {d}")
    if deterministic and not c.dq_warp:
        raise ValueError("wg3's deterministic mode takes the semaphore turns in the writer "
                         "warp: it needs dq_warp")
    if varlen and c.dq_frag:
        raise ValueError("dq_frag's blocks are the dense layout's: not with varlen")
    if c.producer_regs + WGS * c.consumer_regs > register_pool(WGS):
        raise ValueError(f"wg3: producer_regs + 3 x consumer_regs = {c.producer_regs} + 3 x "
                         f"{c.consumer_regs} exceeds the {register_pool(WGS)} of four "
                         f"warpgroups (e.g. 24 and 160)")


def _desc(at, leading):
    return ptx.wgmma.descriptor(at, leading=leading, stride=1024, swizzle=128)


def _mma(n: int, dt: str) -> str:
    return f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dt}.{dt}"


def _scores(acc, a_at, b_at, mma) -> None:
    """``acc = A·Bᵀ`` over the head dim: A 64 rows, B 32 rows of a 96-row tile, both
    K-major in 64-column panels."""
    a, b = _desc(a_at, 16), _desc(b_at, 16)
    for ks in range(D // 16):
        pnl, kin = divmod(ks, 4)
        ao, bo = (pnl * BM * ROW + kin * 32) >> 4, (pnl * BN * ROW + kin * 32) >> 4
        ptx.inst(mma, list(acc), a + ao if ao else a, b + bo if bo else b,
                 0 if ks == 0 else 1, 1, 1, 0, 0)
    ptx.inst("wgmma.commit_group.sync.aligned")


def _kv_t(acc, a_at, pt_at, mma) -> None:
    """``accᵀ += Aᵀ·T`` over the step's 64 queries: A a 64-column panel of Q or dO
    (MN-major, read transposed), T the P or dS tile (MN-major, 96 keys in two panels)."""
    a, b = _desc(a_at, BM * ROW), _desc(pt_at, BM * ROW)
    for ks in range(BM // 16):
        o = (ks * 16 * ROW) >> 4
        ptx.inst(mma, list(acc), a + o if o else a, b + o if o else b, 1, 1, 1, 1, 1)


def build_backward_wg3(c: BwdConfig, dtype: PtxType, d: int, mask: Mask = Mask(), *,
                       scale: float, softcap: float = 0.0, deterministic: bool = False,
                       arch: str = "sm_90a", varlen: bool = False):
    """The main backward kernel in FA3's head-dim-192 tile (the arguments as
    :func:`.bwd.build_backward`'s; dK leaves scaled by ``scale``, dq_acc holds dQ / scale)."""
    check(c, d, mask, softcap, deterministic, varlen)
    S, dt, es = c.stages, dtype.name, dtype.bytes
    L = Layout(c, es)
    scale_log2 = float(softcap if softcap else scale) * LOG2E
    ins, outs = specs(dtype, D, deterministic, True, True, BN, varlen, BM, c.dkv_tma)
    names = ("q", "k", "v", "do", "nlse2", "dpsum") + (("cu_q", "cu_k") if varlen else ()) \
        + ("dq_acc", "dk", "dv") + (("sem",) if deterministic else ())
    name = (f"attention_bwd_{dt}_d{D}_s{S}_{mask.tag}{'_cap' if softcap else ''}{c.tag}"
            f"{'_varlen' if varlen else ''}{'_det' if deterministic else ''}")

    def body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv, sem=None, cu_q=None, cu_k=None):
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
                        lambda m0, head: [pq0 + m0, head], lambda key: k0 + key,
                        lambda head, mb: head * ptx.dim("NMB") + pq0 // BM + mb)
        else:
            sq, sk = ptx.dim("SQ"), ptx.dim("SK")
            nblk = (sk + (BN - 1)) // BN
            if deterministic or c.lpt_units:   # a unit's key blocks in launch order
                # (bwd_det; lpt_units: a causal section's longest key blocks first)
                nb, hk, batch = det_cta(cta, nblk, nhk, ptx.dim("B") * nhk, sq, nh // nhk,
                                        D, c.det_units if deterministic else c.lpt_units,
                                        c.det_desc if deterministic else False)
            else:
                nb, rest = cta % nblk, cta // nblk
                hk, batch = rest % nhk, rest // nhk
            X = _Coords(lambda m0, head: [head, m0, batch], lambda n: [hk, n, batch],
                        lambda m0, head: [m0, head, batch], lambda key: batch * sk + key,
                        lambda head, mb: (batch * nh + head) * ptx.dim("NMB") + mb,
                        # (dq_frag: warpgroup w's 64 x 64 block of rows m0 .. of head)
                        (lambda m0, head, w: frag_block(dq_acc, batch * nh + head, m0, d, w))
                        if c.dq_frag else None)
        group = nh // nhk
        n0 = nb * BN
        off, m_lo, m_hi = row_blocks(n0, sq, sk, mask, BN, BM, varlen)
        # deterministic: row blocks last to first (bwd_det), in all three roles
        desc = BM if deterministic and c.det_desc and not varlen else None
        m_range = m_blocks(m_lo, m_hi, bool(desc)) if deterministic else (m_lo, m_hi)
        base, kvfull, qfull, qempty, dofull, doempty = barriers(L, tid, S, WGS)

        with ptx.if_(wg == 0):
            # ------------------------------------------------------------ producer
            ptx.inst("setmaxnreg.dec.sync.aligned.u32", c.producer_regs)
            with ptx.if_(tid == 0):
                load_kv(base, ((tk, L.k), (tv, L.v)), PANELS, BN,
                        lambda p: [p * PANEL] + X.k(n0), kvfull, L.kv_bytes)
                qr, dr = Ring(S), Ring(1)
                for gi in ptx.range_(0, group):
                    head = hk * group + gi
                    for mb in ptx.range_(*m_range):
                        m0 = mb * BM
                        for r, full, empty, tmap, dst, rt, rdst in (
                                (qr, qfull, qempty, tq, L.q, tl, L.lse),
                                (dr, dofull, doempty, tdo, L.do, td, L.dpsum)):
                            wait(labels, empty + r.slot * 8, r.phase ^ 1)
                            fb = full + r.slot * 8
                            ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink,
                                     ptx.addr(fb), L.q_bytes + BM * 4)
                            at = base + dst + r.slot * L.q_bytes
                            for p in range(PANELS):
                                ptx.tma.load(at + p * BM * ROW if p else at, tmap,
                                             [p * PANEL] + X.q(m0, head), fb)
                            ptx.tma.load(base + rdst + r.slot * (BM * 4), rt,
                                         X.row(m0, head), fb)
                            r.advance()
            if c.dq_warp:           # warp 1: dQ's reduce-adds
                with ptx.if_((tid >> 5) == 1):
                    det = (sem, nb, off, mask, labels, desc) if deterministic else None
                    _writer(tdq, tid & 31, base + L.dqs, L.wg_stage, group, hk, X,
                            m_range, det, c.det_pipe, c.dq_exit_read,
                            (lambda: base + L.poll) if c.det_poll else None)
        with ptx.else_():
            # ------------------------------------------------------------ consumers
            ptx.inst("setmaxnreg.inc.sync.aligned.u32", c.consumer_regs)
            w = consumer_index(wg, c.uniform_cons)
            warp, lw = lane >> 5, lane & 31
            fcol = (lw & 3) * 2
            r0 = warp * 16 + (lw >> 2)               # this thread's query rows r0, r0 + 8
            xr = lw >> 2                             # (r0 % 8: the 128-byte swizzle's)
            kw0 = n0 + w * 32                        # this warpgroup's first key
            dv_acc = ptx.wgmma.accumulator(BN, init=0.0)      # dVᵀ, dKᵀ: columns x keys
            dk_acc = ptx.wgmma.accumulator(BN, init=0.0)
            qr, dr = Ring(S), Ring(1)
            k_w, v_w = base + L.k + w * (32 * ROW), base + L.v + w * (32 * ROW)
            # P / dS element (row r0 (+8), key 32w + c): panel (32w + c) // 64, 16-byte
            # chunk ((32w + c) % 64) // 8 swizzled by the row
            pt_row = base + (w >> 1) * (BM * ROW) + r0 * ROW + (lw & 3) * 4
            pt_at = [pt_row + ((((w & 1) * 4 + j) ^ xr) << 4) for j in range(4)]
            stage_w = base + L.dqs + w * L.wg_stage
            mma32, mma64, mma96 = _mma(32, dt), _mma(64, dt), _mma(BN, dt)
            wait(labels, kvfull, 0)
            if varlen:      # the next sequence's keys in the last block: K rows zeroed
                zero_other_keys(base + L.k, n0, sk, BN, PANELS, tid - 128,
                                threads=WGS * 128, bar=XBAR[0])
            ahead = _ahead(c, labels, qfull, qr, L, base, k_w, mma32, group, m_lo, m_hi)
            for gi in ptx.range_(0, group):
                head = hk * group + gi
                for mb in ptx.range_(*m_range):
                    m0 = mb * BM
                    q_at = base + L.q + qr.slot * L.q_bytes
                    do_at = base + L.do
                    s_acc = ahead.acc if ahead else ptx.wgmma.accumulator(32)
                    dp_acc = ptx.wgmma.accumulator(32)
                    if ahead:        # S issued by the step before (bwd_wg3ahead)
                        ahead.top()
                    else:
                        wait(labels, qfull + qr.slot * 8, qr.phase)
                        ptx.inst("wgmma.fence.sync.aligned")
                        _scores(s_acc, q_at, k_w, mma32)
                    wait(labels, dofull, dr.phase)
                    if ahead:
                        ptx.inst("wgmma.fence.sync.aligned")
                    _scores(dp_acc, do_at, v_w, mma32)
                    lse_at = base + L.lse + qr.slot * (BM * 4)
                    nl = [reg.scalar(f32) for _ in range(2)]
                    dd = [reg.scalar(f32) for _ in range(2)]
                    for r in range(2):
                        ptx.inst("ld.shared.f32", nl[r], ptx.addr(lse_at + r0 * 4, 32 * r))
                    if not ahead:
                        ptx.inst("wgmma.wait_group.sync.aligned", 1)
                    s = list(s_acc)
                    # softcap: s = tanh(s·scale/cap), its tanh kept for dS (before the mask)
                    caps = cap_and_mask(s, None, m0, fcol, off, Mask(), None, scale, softcap)
                    if mask.any:
                        _mask(s, mask, m0, r0, kw0, fcol, off)
                    for i, x in enumerate(s):
                        ptx.inst("fma.rn.f32", x, x, scale_log2, nl[row_of(i)])
                        ptx.inst("ex2.approx.ftz.f32", x, x)
                    for r in range(2):
                        ptx.inst("ld.shared.f32", dd[r],
                                 ptx.addr(base + L.dpsum + r0 * 4, 32 * r))
                    dp = list(dp_acc)

                    def grads():              # dP -> dS = P ∘ (dP - D) (· (1 - tanh²))
                        for i, y in enumerate(dp):
                            ptx.inst.sub.f32(y, y, dd[row_of(i)])
                            ptx.inst.mul.f32(y, y, s[i])
                            if caps:
                                cap_grad(y, caps[i])

                    def put(t, vals):         # into the P or dS tile, then visible to all
                        for i in range(0, len(vals), 2):
                            wd = reg.scalar(b32)
                            ptx.inst(f"cvt.rn.{dt}x2.f32", wd, vals[i + 1], vals[i])
                            ptx.inst("st.shared.b32",
                                     ptx.addr(pt_at[i // 4] + t, row_of(i) * 8 * ROW), wd)
                        if not c.wg3_fence1:  # (fence1: the readers' after the barrier)
                            ptx.inst("fence.proxy.async.shared::cta")

                    def sync():               # every warpgroup's stores, for our wgmmas
                        ptx.inst("bar.sync", *XBAR)
                        ptx.inst("fence.proxy.async.shared::cta")

                    def issue_dv():
                        ptx.inst("wgmma.fence.sync.aligned")
                        _kv_t(dv_acc, do_at + w * (BM * ROW), base + L.p, mma96)
                        ptx.inst("wgmma.commit_group.sync.aligned")
                    if c.overlap == 2:        # FA3's order: dV runs while dS is made and stored
                        if c.wg3_pfree:     # every warpgroup's last dV has read P (dS: the
                            wait(labels, doempty, dr.phase ^ 1)   # barrier below)
                        else:
                            ptx.inst("bar.sync", *XBAR)  # the last step's wgmmas read the tiles
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
                    dq = ptx.wgmma.accumulator(PANEL)
                    ptx.inst("wgmma.fence.sync.aligned")
                    a, b = _desc(base + L.ds, 16), _desc(base + L.k + w * (BN * ROW), BN * ROW)
                    for ks in range(BN // 16):               # dQ_w = dS·K[:, panel w]
                        pnl, kk = divmod(ks, 4)
                        ao, bo = (pnl * BM * ROW + kk * 32) >> 4, (ks * 16 * ROW) >> 4
                        ptx.inst(mma64, list(dq), a + ao if ao else a, b + bo if bo else b,
                                 0 if ks == 0 else 1, 1, 1, 0, 1)
                    ptx.inst("wgmma.commit_group.sync.aligned")
                    _kv_t(dk_acc, q_at + w * (BM * ROW), base + L.ds, mma96)
                    ptx.inst("wgmma.commit_group.sync.aligned")
                    ends = (c, w, lane, doempty, lambda: qempty + qr.slot * 8,
                            lambda: _stage(dq, stage_w, r0, lw, xr, lane if c.dq_frag else None),
                            lambda: _reduce(tdq, w, X.row(m0, head), stage_w,
                                            X.frag and X.frag(m0, head, w)))
                    if ahead:
                        finish_ahead(*ends, ahead)
                    else:
                        finish_step(*ends)
                    qr.advance()
                    dr.advance()
            if ahead:            # (dkv_tma: the discarded S read every warpgroup's
                ahead.drain()    # panel of K's tile, which the stores below rewrite)
                if c.dkv_tma:
                    ptx.inst("bar.sync", *XBAR)
            if c.dkv_tma:        # (through K's and V's tiles; one last wait for lane 0)
                _store_kv_tma((dk_acc, dv_acc), base, L, (dk, dv), lane, w,
                              [w * PANEL] + X.k(n0), dt, scale,
                              full=not (c.dq_warp or c.dq_exit_read))
                if c.dq_warp:    # the writer's last arrival (its first was before any)
                    ptx.inst("bar.sync", EMPTY + w, WTHREADS)
            else:
                if c.dq_warp:    # the writer's last arrival (its first was before any)
                    ptx.inst("bar.sync", EMPTY + w, WTHREADS)
                else:            # (dq_exit_read: the stage's reads, the adds land by the exit)
                    with ptx.if_(lane == 0):
                        ptx.inst("cp.async.bulk.wait_group.read" if c.dq_exit_read else
                                 "cp.async.bulk.wait_group", 0)
                # dKᵀ, dVᵀ transposed through the warpgroup's dQ stage (its last reduce has
                # read it), 128-byte rows of keys to global
                if not c.dq_warp:
                    ptx.inst("bar.sync", 2 + w, 128)
                for acc, ptr, sc in ((dk_acc, pdk, scale), (dv_acc, pdv, None)):
                    _store_t(list(acc), ptr, stage_w, lane, n0, sk, X.key(n0), hk, nhk, w,
                             dt, sc)

    grid = (lambda NS1, TK, HK: ((NS1 - 1 + TK // BN) * HK, 1, 1)) if varlen else \
        (lambda B, SK, HK: ((SK + BN - 1) // BN * HK * B, 1, 1))
    deco = kernel(in_specs=ins, out_specs=outs, arg_names=names, grid=grid,
                  block=((1 + WGS) * 128, 1, 1), arch=arch, name=name, min_ctas_per_sm=1)
    if varlen and deterministic:
        return deco(lambda q, k, v, do, nlse2, dpsum, cu_q, cu_k, dq_acc, dk, dv, sem:
                    body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv, sem, cu_q, cu_k))
    if varlen:
        return deco(lambda q, k, v, do, nlse2, dpsum, cu_q, cu_k, dq_acc, dk, dv:
                    body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv, None, cu_q, cu_k))
    if deterministic:
        return deco(lambda q, k, v, do, nlse2, dpsum, dq_acc, dk, dv, sem:
                    body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv, sem))
    return deco(lambda q, k, v, do, nlse2, dpsum, dq_acc, dk, dv:
                body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv))


def _ahead(c: BwdConfig, labels, qfull, qr, L, base, k_w, mma, group, m_lo, m_hi):
    """``wg3_ahead``: the carried S (:mod:`.bwd_wg3ahead`), its first issued here, before
    the loop; None without."""
    if not c.wg3_ahead:
        return None

    def gemm(acc, q_tile):
        ptx.inst("wgmma.fence.sync.aligned")
        _scores(acc, q_tile, k_w, mma)
    ahead = Ahead3(c.wg3_ahead, labels=labels, full=qfull, stages=c.stages, ring=qr,
                   q_of=lambda slot: base + L.q + slot * L.q_bytes, gemm=gemm,
                   steps=_s32(group) * (m_hi - m_lo), k_tile=base + L.k)
    ahead.first()
    return ahead


def _mask(s, mask: Mask, m0, r0, kw0, fcol, off, keys: int = 32) -> None:
    """The causal / window mask on S (query rows, key columns), where the warpgroup's
    ``keys`` keys cross it: key j of query i is out if j > i + off + right or
    j < i + off - left."""
    need = None
    if mask.right >= 0:
        need = _s32(kw0) + (keys - 1) > _s32(m0) + off + mask.right
    if mask.left >= 0:
        early = _s32(kw0) < _s32(m0) + off + (BM - 1 - mask.left)
        need = early if need is None else need | early
    with ptx.if_(need):
        qi = [_s32(m0 + r0) + 8 * r - _s32(kw0 + fcol) + off for r in range(2)]
        hi = [qi[r] + (mask.right + 1) if mask.right >= 0 else None for r in range(2)]
        lo = [qi[r] - mask.left if mask.left >= 0 else None for r in range(2)]
        mask_block(s, hi, lo)


class _Coords:
    """The layout's (dense or varlen) TMA coordinates after the column: ``q(m0, head)``
    (Q, dO rows), ``k(n)`` (K, V rows), ``row(m0, head)`` (the padded f32 rows: LSE, D,
    dQ), and ``key(n)`` the global row of key ``n`` (dK, dV), ``sem(head, mb)`` the
    deterministic mode's semaphore index, ``frag(m0, head, w)`` dq_frag's global address
    of warpgroup ``w``'s block (None without it)."""

    def __init__(self, q, k, row, key, sem, frag=None):
        self.q, self.k, self.row, self.key, self.sem = q, k, row, key, sem
        self.frag = frag


def _reduce(tdq, w, row, stage_w, frag_at=None) -> None:
    """Warpgroup ``w``'s staged dQ (two 32-column boxes) added into dq_acc's rows at
    ``row`` (coordinates after the column) by TMA reduce-add, one bulk group; ``frag_at``
    (``BwdConfig.dq_frag``): the stage in fragment order, one 1-D bulk reduction there."""
    if frag_at is not None:
        add_frag(frag_at, stage_w, BM * 64 * 4)
    else:
        for h in range(2):
            ptx.tma.reduce(tdq, [w * PANEL + 32 * h] + row, stage_w + h * BM * 128)
    ptx.inst("cp.async.bulk.commit_group")


def _writer(tdq, lane, dqs, wg_stage, group, hk, X, m_range, det=None, pipe=False,
            exit_read=False, poll=None) -> None:
    """``dq_warp``: the producer's warp 1 takes each consumer warpgroup's staged dQ in
    turn (``FULL + w``), adds it and hands the stage back once read (``EMPTY + w``), as
    :mod:`.bwd_dqwarp` does for two warpgroups; one arrival ahead of the first step, so
    the consumers' waits and its arrivals pair up. ``det``: ``(sem, nb, off, mask,
    labels, desc)``, the deterministic mode's turns (:mod:`.bwd_det`): the three warpgroups add
    disjoint columns, so key block ``nb``'s adds to a row block wait until the earlier key
    blocks' three each have landed, and each passes one turn once its own has.
    ``exit_read`` (``dq_exit_read``): the last wait is for the stage's reads only.
    ``poll`` (``det_poll``, with ``pipe``): the shared word where the next row block's
    semaphore, read while this block's adds land, waits for the next step's first poll."""
    for w in range(WGS):
        ptx.inst("bar.arrive", EMPTY + w, WTHREADS)
    if det and pipe and poll:        # nothing read ahead of the first step
        with ptx.if_(lane == 0):
            ptx.inst("st.shared.u32", ptx.addr(poll()), 0)
    for gi in ptx.range_(0, group):
        head = hk * group + gi
        for mb in ptx.range_(*m_range):
            if det and pipe:         # det_pipe: bwd_detpipe's order, the block's 3 turns at once
                from .bwd_detpipe import det_step      # (here: the kernel's lines stay put)
                sem, nb, off, mask, labels, desc = det
                det_step(WGS, lane, words=lambda: [(
                    ptx.global_ptr(sem) + X.sem(head, mb) * 4, turn_of(
                        nb, mb * BM, off, mask, reg.scalar(s32, init=0), True, BN, WGS, desc),
                    WGS, None)], add=lambda w: _reduce(tdq, w, X.row(mb * BM, head),
                                                      dqs + w * wg_stage,
                                                      X.frag and X.frag(mb * BM, head, w)),
                    full=FULL, empty=EMPTY, threads=WTHREADS, labels=labels,
                    ahead=(poll, lambda: [_next_word(sem, X, head, mb, m_range)])
                    if poll else None)
                continue
            for w in range(WGS):
                ptx.inst("bar.sync", FULL + w, WTHREADS)
                with ptx.if_(lane == 0):
                    ptx.inst("fence.proxy.async.shared::cta")
                    if det:
                        sem, nb, off, mask, labels, desc = det
                        at = ptx.global_ptr(sem) + X.sem(head, mb) * 4
                        spin(at, turn_of(nb, mb * BM, off, mask, reg.scalar(s32, init=w),
                                         True, BN, WGS, desc), True, labels)
                    _reduce(tdq, w, X.row(mb * BM, head), dqs + w * wg_stage,
                            X.frag and X.frag(mb * BM, head, w))
                    if det:                  # the adds land before the turn passes
                        ptx.inst("cp.async.bulk.wait_group", 0)
                        pass_turn(at)
                    ptx.inst("cp.async.bulk.wait_group.read", 0)
                ptx.inst("bar.arrive", EMPTY + w, WTHREADS)
    with ptx.if_(lane == 0):     # (exit_read: the kernel's end makes the adds visible)
        ptx.inst("cp.async.bulk.wait_group.read" if exit_read else "cp.async.bulk.wait_group", 0)


def _next_word(sem, X, head, mb, m_range):
    """``det_poll``: the walk's next row block's semaphore (``m_range`` descending, or
    ascending with det_desc) and whether there is one (none after a head's last block: the
    next head's first step polls)."""
    if len(m_range) == 3:
        mn, has = mb - 1, _s32(mb) > _s32(m_range[1]) + 1
    else:
        mn, has = mb + 1, _s32(mb) + 1 < _s32(m_range[1])
    return ptx.global_ptr(sem) + X.sem(head, mn) * 4, has


def _stage(dq, stage_w, r0, lw, xr, frag_lane=None) -> None:
    """dQ (64 queries x 64 columns) into two 32-column f32 panels of 128-byte swizzled
    rows, what the reduce's box reads (``st.shared.v2.f32``); ``frag_lane`` (dq_frag: the
    thread's lane in its warpgroup): in fragment order, registers ``4k .. 4k + 3`` at
    16-byte piece ``128 k + lane`` (``st.shared.v4.f32``)."""
    if frag_lane is not None:
        return stage_frag(dq, stage_w, frag_lane)
    at = [stage_w + r0 * ROW + (lw & 1) * 8 + (((((lw & 3) >> 1) + 2 * k) ^ xr) << 4)
          for k in range(4)]
    regs = list(dq)
    for i in range(0, len(regs), 2):
        col = col_of(i)
        ptx.inst("st.shared.v2.f32",
                 ptx.addr(at[(col // 8) % 4], (col // 32) * BM * ROW + row_of(i) * 8 * ROW),
                 [regs[i], regs[i + 1]])


def _store_t(elems, ptr, stage, lane, n0, sk, krow, hk, nhk, w, dt: str, scale, *,
             col=None, bar: int | None = None) -> None:
    """dKᵀ or dVᵀ of warpgroup ``w`` (M: its 64 head-dim columns, from ``col`` (default
    ``64 w``), N: ``2 len(elems)`` keys from ``n0``, global row ``krow``) to
    (B, SK, HK, D): rounded pairs (``cvt.rn``) transposed into ``stage`` as key rows of
    128 bytes (``stmatrix.x4.trans``, 16-byte chunks swizzled by key % 8), then 16 bytes a
    thread to global (``ld.shared.v4``, ``st.global.v4``), keys past SK skipped; ``bar``
    the warpgroup's named barrier (default ``2 + w``)."""
    nkeys = 2 * len(elems)           # (64 x N f32 over 128 threads)
    _put_t(elems, stage, lane, dt, scale)
    ptx.inst("bar.sync", 2 + w if bar is None else bar, 128)
    sk_s = _s32(sk)
    for it in range(nkeys * 8 // 128):
        row, ch = (lane >> 3) + it * 16, lane & 7
        with ptx.if_(_s32(n0 + row) < sk_s):
            v4 = [reg.scalar(b32) for _ in range(4)]
            ptx.inst("ld.shared.v4.b32", v4, ptx.addr(stage + row * ROW + ((ch ^ (row & 7)) << 4)))
            at = ptr + (((krow + row) * nhk + hk) * D
                        + (w * PANEL if col is None else col) + ch * 8) * 2
            ptx.inst("st.global.v4.b32", ptx.addr(at), v4)
    ptx.inst("bar.sync", 2 + w if bar is None else bar, 128)  # (rewritten next)


def _put_t(elems, stage, lane, dt: str, scale) -> None:
    """:func:`_store_t`'s first half: dKᵀ or dVᵀ (times ``scale`` unless None) rounded to
    pairs and transposed into ``stage`` as key rows of 128 bytes, 16-byte chunk ``c`` of key
    ``r`` at ``c ^ (r % 8)`` (``stmatrix.x4.trans``): a 128-byte-swizzled TMA box of 64
    columns when ``stage`` is 1024-byte aligned."""
    warp, lw = lane >> 5, lane & 31
    t, mat = lw & 7, lw >> 3          # this lane's row address: row t of matrix mat
    if scale is not None:
        for x in elems:
            ptx.inst.mul.f32(x, x, float(scale))
    row_at = stage + ((mat >> 1) * 8 + t) * ROW + ((((warp << 1) + (mat & 1)) ^ t) << 4)
    for j in range(0, len(elems) // 4, 2):      # 8-key groups j, j + 1: four 8 x 8 matrices
        words = []
        for i in range(4 * j, 4 * j + 8, 2):
            wd = reg.scalar(b32)
            ptx.inst(f"cvt.rn.{dt}x2.f32", wd, elems[i + 1], elems[i])
            words.append(wd)
        ptx.inst("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                 ptx.addr(row_at, 8 * j * ROW), words)


def _store_kv_tma(accs, base, L, outs, lane, w, coords, dt: str, scale, full: bool) -> None:
    """``dkv_tma``: warpgroup ``w``'s dKᵀ·scale and dVᵀ transposed (:func:`_put_t`) into
    column panel ``w`` of K's and V's tiles (96 key rows of 128 bytes: the TMA box's
    layout), then lane 0 stores both panels by TMA (keys past SK clipped by the tensor map)
    and waits, the CTA's last wait for its bulk groups (``full``: for the landing of its dQ
    adds too, else for reads). No CTA-wide barrier first: the other warpgroups read K and
    V only in S and dP, which each has waited for before the last step's dS exchange
    barrier, and panel ``w``'s last reader after that, dQ_w, is this warpgroup's own."""
    tiles = [base + at + w * (BN * ROW) for at in (L.k, L.v)]
    for acc, tile, sc in zip(accs, tiles, (scale, None)):
        _put_t(list(acc), tile, lane, dt, sc)
    ptx.inst("fence.proxy.async.shared::cta")
    ptx.inst("bar.sync", 2 + w, 128)
    with ptx.if_(lane == 0):
        for t, tile in zip(outs, tiles):
            ptx.tma.store(t.tma_desc(), coords, tile)
        ptx.tma.commit()
        ptx.tma.wait(0, read=not full)


__all__ = ["build_backward_wg3", "smem_bytes", "check", "Layout", "BN"]
