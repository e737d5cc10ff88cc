"""The head-dim-128 backward in FlashAttention-3's full-mask tile (``BwdConfig.dq_swap``):
128 keys a CTA, 80 queries a step, two consumer warpgroups of 240 registers.

Why: at 64 queries a step the tensor pipe waits at each step's end (dQ's wait, the slot's
barrier); 80 queries do 25% more work for the same waits and barriers. An M of 80 is no
wgmma shape, so FA3 (``run_mha_bwd_hdim128``: kBlockM 80, SdP_swapAB, dQ_swapAB) keeps the
queries on N everywhere: Sᵀ, dPᵀ are m64n80 (keys on M, as in :mod:`.bwd`), dV, dK take 5
k-steps of the registers' Pᵀ, dSᵀ, and dQ is computed transposed, dQᵀ_w = K[:, 64w:]ᵀ·dSᵀ
(m64n80 over all 128 keys: warpgroup ``w`` owns 64 of dQ's columns, as ``dq_split``).

::

    warpgroup 0 (producer)                   warpgroups 1, 2 (w = 0, 1; keys 64w .. 64w+63)
    TMA K, V ─▶ kvfull                       per step: wait full[s]
    per head, per 80-row block:              Sᵀ = K_w·Qᵀ, dPᵀ = V_w·dOᵀ (m64n80, a group
      wait empty[s]; TMA Q, dO (80 x 128),     each); Pᵀ while dPᵀ runs; dSᵀ
      -LSE·log2e, D (80)                     dSᵀ -> shared (the slot's buffer), then
    warp 1: dQ's TMA reduce-adds               dV += Pᵀ·dO (A from registers, 5 k-steps)
      (80-row boxes, 32 columns)             bar(256); dQᵀ_w = Kᵀ_w·dSᵀ (A: K MN-major,
                                               B: dSᵀ MN-major, 32-byte swizzled
                                               16-query panels), dK += dSᵀ·Q behind it
                                             wait dQ; stage dQ transposed (st.shared.f32
                                               into the reduce box's swizzled rows)
                                             wait dK; release the slot; hand the stage
                                           epilogue: dK·scale, dV -> st.global

Shared memory: K, V (two 128-byte panels of 128 rows each), 2 stages of Q and dO (80
rows a panel), two dSᵀ buffers (a ring slot's; 5 panels of 128 keys x 16 queries,
32-byte swizzle), the two warpgroups' dQ stages (80 rows x 64 f32 in two 32-column
128-byte swizzled panels), 2 stages of -LSE·log2e and D (one copy both warpgroups
read: two would not fit beside 128-byte aligned boxes), the barriers: 230952 of 232448
bytes. Rows past SQ (up to the next 80) read TMA's zero fill, or the
preprocess's -inf -LSE·log2e, so their Pᵀ or dSᵀ is 0; rows past SQP are clipped by the
reduce's box. Dense only (varlen's padded rows start every 64), no softcap.

The deterministic mode (``det_pipe``): the writer warp takes each 80-row block's turns on
the block's semaphore (word ``mb`` of the 80-row blocks, ``ceil(SQ / 80)`` of the ``NMB``
the preprocess zeroes), two a key block (the warpgroups' disjoint columns), as
:func:`.bwd_detpipe.det_step` does for ``dq_split``; the CTAs in :func:`.bwd_det.det_cta`'s
sections and the row blocks in :func:`.bwd_det.m_blocks`' order (``det_desc``,
``det_units``, ``det_poll`` as there). The default mode's ``lpt_units`` takes the same
sections (ascending key blocks: under a causal mask a section's longest first), as in
:mod:`.bwd`. ``s_ahead`` 2 (:mod:`.bwd_ahead`): the next step's Sᵀ queued behind dK in
dQ's accumulator once dQ is staged, the stage handed over under them, the step starting
with dPᵀ (``ahead_k``: the first Sᵀ without a branch, else ptxas's C7519).
"""
from __future__ import annotations

import itertools

from ... import Tile, kernel
from ...core.tensormap import TMA
from ...core.types import PtxType, f32, u8, u32
from ...dsl import ptx, reg, smem
from .._common.ring import Ring, wait
from .bwd_ahead import Ahead
from .bwd_config import BwdConfig
from .bwd_det import det_cta, m_blocks, turn_of
from .bwd_detpipe import det_step
from .bwd_dqwarp import EMPTY, FULL, THREADS, hand_stage, take_stage
from .bwd_epi import store_kv_tma
from .bwd_scores import dscores, probs, row_pairs
from .bwd_steps import kv_gemms, load_kv, row_blocks, score_gemm, store
from .config import Mask
from .fwd import _s32
from .softmax import LOG2E, col_of, p_registers, pack_p, row_of
from .._common.warpgroup import consumer_index

BM = 80              # queries a step (the swapped GEMMs' N)
BN = 128             # keys a CTA (64 a warpgroup: wgmma M)
D = 128
ROW = 128            # bytes of a 128-byte swizzled row (K, V, Q, dO; the f32 dQ stage)
QP = 16              # queries of a dSᵀ panel (32-byte swizzle: a 32-byte row a key)
DS_PANEL = BN * 2 * QP            # 4096 bytes: 128 keys x 16 queries
DS_BYTES = (BM // QP) * DS_PANEL  # 20480: one slot's dSᵀ, both warpgroups' keys
DQ_PANEL = BM * ROW               # 10240: 80 rows x 32 f32
RROW = 384           # bytes of a slot's -LSE·log2e (or D): 80 f32, 128-byte aligned boxes
XBAR = (3, 256)      # the dSᵀ exchange (both warpgroups read both halves)


class Layout:
    """Byte offsets in the CTA's dynamic shared memory (the module docstring's order)."""

    def __init__(self, c: BwdConfig, es: int):
        self.kv_bytes = BN * D * es
        self.q_bytes = BM * D * es
        self.k, self.v = 0, self.kv_bytes
        self.q = 2 * self.kv_bytes
        self.do = self.q + c.stages * self.q_bytes
        self.ds = self.do + c.stages * self.q_bytes
        self.dqs = self.ds + c.stages * DS_BYTES
        self.wg_stage = 2 * DQ_PANEL
        self.lse = self.dqs + 2 * self.wg_stage
        self.dpsum = self.lse + c.stages * RROW
        self.kvfull = self.dpsum + c.stages * RROW
        self.full = self.kvfull + 8
        self.empty = self.full + 8 * c.stages
        self.total = self.empty + 8 * c.stages


def check(c: BwdConfig, d: int, softcap: float, deterministic: bool, varlen: bool) -> None:
    """What this kernel takes, as a ValueError naming what would be right."""
    if d != D or softcap or varlen:
        raise ValueError(f"dq_swap is head dim 128's dense tile without softcap, got head "
                         f"dim {d}, softcap={softcap}, varlen={varlen}")
    if deterministic and not c.det_pipe:
        raise ValueError("dq_swap's deterministic mode is the writer warp's pipelined "
                         "turns: it needs det_pipe")


def specs(dtype: PtxType, dkv_tma: bool = False, deterministic: bool = False):
    """q, do (B, SQ, H, D), k, v (B, SK, HK, D), nlse2, dpsum (B, H, SQP): 80-row boxes;
    dq_acc (B, H, SQP, D) f32 in 80 x 32 swizzled boxes; dk, dv (B, SK, HK, D)
    [, sem (B, H, NMB): the 80-row blocks' words first]."""
    qt = lambda: Tile("B", "SQ", "H", D, dtype, tma=TMA(box=(1, BM, 1, 64), swizzle=ROW))
    kt = lambda: Tile("B", "SK", "HK", D, dtype, tma=TMA(box=(1, BN, 1, 64), swizzle=ROW))
    rt = lambda: Tile("B", "H", "SQP", f32, tma=TMA(box=(1, 1, BM)))
    dq = Tile("B", "H", "SQP", D, f32, tma=TMA(box=(1, 1, BM, 32), swizzle=ROW))
    return (qt(), kt(), kt(), qt(), rt(), rt()), \
        (dq, *(kt() if dkv_tma else Tile("B", "SK", "HK", D, dtype) for _ in range(2)),
         *([Tile("B", "H", "NMB", u32)] if deterministic else []))


def dq_swapped(acc, dt: str, a_at, ds_at) -> None:
    """``acc = Kᵀ_w·dSᵀ`` over the 128 keys (8 k-steps): A the warpgroup's 64-column K
    panel read MN-major (head dim on M), B the slot's dSᵀ MN-major (queries on N, 16-query
    panels ``DS_PANEL`` bytes apart, 8-key groups 256 bytes apart); no fence, no commit."""
    a = ptx.wgmma.descriptor(a_at, leading=BN * ROW, stride=1024, swizzle=128)
    b = ptx.wgmma.descriptor(ds_at, leading=DS_PANEL, stride=8 * 2 * QP, swizzle=32)
    for ks in range(BN // 16):
        ao, bo = (ks * 16 * ROW) >> 4, (ks * 16 * 2 * QP) >> 4
        ptx.inst(f"wgmma.mma_async.sync.aligned.m64n{BM}k16.f32.{dt}.{dt}", list(acc),
                 a + ao if ao else a, b + bo if bo else b,
                 0 if ks == 0 else 1, 1, 1, 1, 1)


def build_backward_m80(c: BwdConfig, dtype: PtxType, d: int, mask: Mask = Mask(), *,
                       scale: float, softcap: float = 0.0, deterministic: bool = False,
                       arch: str = "sm_90a", varlen: bool = False):
    """The main backward kernel in the 80-query tile (:mod:`.bwd`'s arguments and
    outputs; dK leaves scaled by ``scale``, dq_acc holds dQ / scale)."""
    check(c, d, softcap, deterministic, varlen)
    es, dt, S = dtype.bytes, dtype.name, c.stages
    L = Layout(c, es)
    scale_log2 = float(scale) * LOG2E
    ins, outs = specs(dtype, c.dkv_tma, deterministic)
    mma_s = f"wgmma.mma_async.sync.aligned.m64n{BM}k16.f32.{dt}.{dt}"
    mma_kv = f"wgmma.mma_async.sync.aligned.m64n{D}k16.f32.{dt}.{dt}"
    name = f"attention_bwd_{dt}_d{d}_s{S}_{mask.tag}{c.tag}{'_det' if deterministic else ''}"

    def body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv, sem=None):
        labels = itertools.count()
        tq, tk, tv, tdo = q.tma_desc(), k.tma_desc(), v.tma_desc(), do.tma_desc()
        tl, td, tdq = nlse2.tma_desc(), dpsum.tma_desc(), dq_acc.tma_desc()
        pdk, pdv = ptx.global_ptrs(dk, dv)
        sq, nh, sk, nhk = ptx.dim("SQ"), ptx.dim("H"), ptx.dim("SK"), ptx.dim("HK")
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        wg, lane = tid >> 7, tid & 127
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        nblk = (sk + (BN - 1)) // BN
        if deterministic or c.lpt_units:   # (bwd_det: key block-major sections; a CTA
            # waits for earlier ones, or lpt_units: a causal section's longest blocks first)
            nb, hk, batch = det_cta(cta, nblk, nhk, ptx.dim("B") * nhk, sq, nh // nhk, d,
                                    c.det_units if deterministic else c.lpt_units,
                                    deterministic and c.det_desc)
        else:
            nb, rest = cta % nblk, cta // nblk
            hk, batch = rest % nhk, rest // nhk
        n0 = nb * BN
        qc = lambda p, head, m0: [p * 64, head, m0, batch]
        kc = lambda p: [p * 64, hk, n0, batch]
        rc = lambda m0, head: [m0, head, batch]
        group = nh // nhk
        off, m_lo, m_hi = row_blocks(n0, sq, sk, mask, BN, BM, False)
        desc = BM if deterministic and c.det_desc else None     # (bwd_det.turn_of)
        m_range = m_blocks(m_lo, m_hi, bool(desc)) if deterministic else (m_lo, m_hi)
        # (det_poll: the next row block's word read early, kept past the layout)
        base = smem.alloc(u8, (L.total + (8 if deterministic else 0),), align=1024,
                          dynamic=True).base
        kvfull, full, empty = base + L.kvfull, base + L.full, base + L.empty
        with ptx.if_(tid == 0):
            ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(kvfull), 1)
            for s in range(S):
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(full, 8 * s), 1)
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(empty, 8 * s), 2)
            ptx.inst("fence.mbarrier_init.release.cluster")
        ptx.inst("bar.sync", 0)

        with ptx.if_(wg == 0):
            # ------------------------------------------------------------ producer
            ptx.inst("setmaxnreg.dec.sync.aligned.u32", c.producer_regs)
            with ptx.if_(tid == 0):
                load_kv(base, ((tk, L.k), (tv, L.v)), 2, BN, kc, kvfull, L.kv_bytes)
                ring = Ring(S)
                for gi in ptx.range_(0, group):
                    head = hk * group + gi
                    for mb in ptx.range_(*m_range):
                        m0 = mb * BM
                        wait(labels, empty + ring.slot * 8, ring.phase ^ 1)
                        fb = full + ring.slot * 8
                        ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink,
                                 ptx.addr(fb), 2 * L.q_bytes + 2 * BM * 4)
                        for tmap, dst in ((tq, L.q), (tdo, L.do)):
                            at = base + dst + ring.slot * L.q_bytes
                            for p in range(2):
                                ptx.tma.load(at + p * BM * ROW if p else at, tmap,
                                             qc(p, head, m0), fb)
                        for tmap, dst in ((tl, L.lse), (td, L.dpsum)):  # one copy for both
                            ptx.tma.load(base + dst + ring.slot * RROW, tmap, rc(m0, head), fb)
                        ring.advance()
            with ptx.if_((tid >> 5) == 1):      # warp 1: dQ's reduce-adds
                _writer(tid & 31, tdq, base + L.dqs, L.wg_stage, hk, group, batch,
                        m_range, c.dq_exit_read,
                        det=(sem, nb, off, mask, labels, desc, nh,
                             c.det_poll and (lambda: base + L.total))
                        if deterministic else None)
        with ptx.else_():
            # ------------------------------------------------------------ consumers
            ptx.inst("setmaxnreg.inc.sync.aligned.u32", c.consumer_regs)
            w = consumer_index(wg, c.uniform_cons)
            warp, lw = lane >> 5, lane & 31
            fcol = (lw & 3) * 2
            r0 = warp * 16 + (lw >> 2)               # this thread's keys r0, r0 + 8 of 64
            kw0 = n0 + w * 64
            keys = [_s32(kw0 + r0), _s32(kw0 + r0 + 8)]
            dv_acc = ptx.wgmma.accumulator(D, init=0.0)
            dk_acc = ptx.wgmma.accumulator(D, init=0.0)
            p_regs, ds_regs = p_registers(BM), p_registers(BM)
            ring = Ring(S)
            k_w, v_w = base + L.k + w * (64 * ROW), base + L.v + w * (64 * ROW)
            stage_w = base + L.dqs + w * L.wg_stage
            wait(labels, kvfull, 0)
            # s_ahead 2 (bwd_ahead): the next step's Sᵀ queued behind dK once dQ is staged,
            # in dQ's accumulator, carried across the back edge
            ahead = Ahead(2, labels=labels, full=full, stages=S, ring=ring, bw=BM,
                          q_of=lambda s: base + L.q + s * L.q_bytes,
                          score=(mma_s, k_w, D, BN, BM),
                          steps=_s32(group) * ptx.max(m_hi - m_lo, 0),
                          k_tile=base + L.k if c.ahead_k else None) if c.s_ahead else None
            if ahead:
                ahead.first()
            for gi in ptx.range_(0, group):
                for mb in ptx.range_(*m_range):
                    m0 = mb * BM
                    if not ahead:    # (s_ahead: waited for where its Sᵀ was issued)
                        wait(labels, full + ring.slot * 8, ring.phase)
                    q_at = base + L.q + ring.slot * L.q_bytes
                    do_at = base + L.do + ring.slot * L.q_bytes
                    row_at = lambda o, _s=ring.slot: base + o + _s * RROW
                    s_acc = ahead.acc if ahead else ptx.wgmma.accumulator(BM)
                    dp_acc = ptx.wgmma.accumulator(BM)
                    # lse_early: -LSE·log2e in registers before any wait for Sᵀ
                    lse = row_pairs(row_at(L.lse), fcol, min(c.lse_early, BM // 8)) \
                        if c.lse_early else None
                    if ahead:
                        ahead.top()
                    ptx.inst("wgmma.fence.sync.aligned")
                    for acc, a_at, b_at in (((dp_acc, v_w, do_at),) if ahead else
                                            ((s_acc, k_w, q_at), (dp_acc, v_w, do_at))):
                        score_gemm(mma_s, acc, a_at, b_at, D, BN, BM)
                        ptx.inst("wgmma.commit_group.sync.aligned")
                    ptx.inst("wgmma.wait_group.sync.aligned", 1)
                    probs(list(s_acc), keys, m0, fcol, off, mask, kw0, row_at(L.lse), scale,
                          0.0, scale_log2, BM, lse)
                    pack_p(list(s_acc), p_regs, dt)
                    ptx.inst("wgmma.wait_group.sync.aligned", 0)
                    dscores(list(s_acc), list(dp_acc), [], fcol, row_at(L.dpsum))
                    pack_p(list(dp_acc), ds_regs, dt)
                    # dSᵀ into the slot's buffer: A-fragment register j of chunk kc holds keys
                    # r0 + 8 (j % 2), queries 16 kc + 8 (j // 2) + fcol and the next one;
                    # 32-byte swizzle: the 16-byte half ^ key bit 2. The buffer was last read
                    # by the dQ of two steps ago, which both warpgroups waited for before
                    # the last step's exchange barrier.
                    ds_at = base + L.ds + ring.slot * DS_BYTES
                    x = (lw >> 4) & 1
                    row = ds_at + (w * 64 + r0) * (2 * QP) + fcol * 2
                    halves = [row + (x << 4), row + ((x ^ 1) << 4)]
                    for kc in range(BM // 16):
                        for j in range(4):
                            ptx.inst("st.shared.b32", ptx.addr(
                                halves[j // 2], kc * DS_PANEL + (j % 2) * 8 * 2 * QP),
                                ds_regs[kc][j])
                    ptx.inst("fence.proxy.async.shared::cta")
                    # dV once dSᵀ is stored (its registers free: issued before the stores
                    # with Pᵀ's f32 still live, ptxas serializes the wgmmas, C7512), run
                    # under the barrier
                    ptx.inst("wgmma.fence.sync.aligned")
                    kv_gemms(mma_kv, [dv_acc], p_regs, [do_at], bm=BM)
                    ptx.inst("bar.sync", *XBAR)
                    ptx.inst("fence.proxy.async.shared::cta")  # (the other half's writes)
                    dq = ahead.dq_acc(BM) if ahead else ptx.wgmma.accumulator(BM)
                    ptx.inst("wgmma.fence.sync.aligned")
                    dq_swapped(dq, dt, base + L.k + w * (BN * ROW), ds_at)
                    ptx.inst("wgmma.commit_group.sync.aligned")
                    kv_gemms(mma_kv, [dk_acc], ds_regs, [q_at], bm=BM)     # dK behind dQ
                    ptx.inst("wgmma.wait_group.sync.aligned", 1)
                    take_stage(w)
                    _stage_t(list(dq), stage_w, warp, lw, fcol)
                    if ahead:       # the next Sᵀ behind dK, the stage handed under them
                        ahead.after_stage()
                        hand_stage(w)
                    ptx.inst("wgmma.wait_group.sync.aligned", ahead.wait_dk if ahead else 0)
                    with ptx.if_(lane == 0):          # Q, dO, LSE, D of this slot are read
                        ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink,
                                 ptx.addr(empty + ring.slot * 8))
                    if not ahead:
                        hand_stage(w)
                    ring.advance()
            if ahead:
                ahead.drain()
            take_stage(w)            # the writer's last arrival (its first was before any)
            if c.dkv_tma:            # (bwd_epi: through K's and V's tiles, TMA stores)
                store_kv_tma((dk_acc, dv_acc), base, L, (dk, dv), w * 64 + r0, lane, tid,
                             lambda p: [p * 64, hk, n0, batch], D, dtype, scale)
            else:
                store(dk_acc, pdk, keys, batch, hk, sk, nhk, D, fcol, dtype, scale)
                store(dv_acc, pdv, keys, batch, hk, sk, nhk, D, fcol, dtype, None)

    grid = lambda B, SK, HK: ((SK + BN - 1) // BN * HK * B, 1, 1)
    names = ("q", "k", "v", "do", "nlse2", "dpsum", "dq_acc", "dk", "dv")
    deco = kernel(in_specs=ins, out_specs=outs,
                  arg_names=names + (("sem",) if deterministic else ()),
                  grid=grid, block=(3 * 128, 1, 1), arch=arch, name=name, min_ctas_per_sm=1)
    if deterministic:
        return deco(lambda q, k, v, do, nlse2, dpsum, dq_acc, dk, dv, sem:
                    body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv, sem))
    return deco(lambda q, k, v, do, nlse2, dpsum, dq_acc, dk, dv:
                body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv))


def _stage_t(regs, stage_w, warp, lw, fcol) -> None:
    """dQᵀ (rows: this warpgroup's 64 head-dim columns, columns: the 80 queries) into the
    reduce box's layout, transposed: element (column dc, query q) at panel dc // 32, row
    q, 16-byte chunk (dc % 32) // 4 ^ q % 8, word dc % 4 (one st.shared.f32 each; a warp's
    32 lanes hit 32 banks). A thread's dc are r0 and r0 + 8 (one panel: warp // 2)."""
    at = stage_w + (warp >> 1) * DQ_PANEL + ((lw >> 2) & 3) * 4 + fcol * ROW
    c0 = (warp & 1) * 4 + (lw >> 4)
    x = [[at + ((((c0 + 2 * ro) ^ (fcol + b)) << 4) + b * ROW) for b in range(2)]
         for ro in range(2)]
    for i, r in enumerate(regs):
        ptx.inst("st.shared.f32", ptx.addr(x[row_of(i)][i % 2], (col_of(i) - i % 2) * ROW), r)


def _writer(lane, tdq, stages, wg_stage: int, hk, group, batch, m_range,
            exit_read: bool = False, det=None) -> None:
    """Warp 1 of the producer: each step, each warpgroup's staged 80 x 64 dQ added by two
    80 x 32 TMA reduce-adds at its columns (rows past SQP clipped by the box); at the end
    the last adds landed (``exit_read``: read, as :func:`.bwd_dqwarp.writer`). ``det``: ``(sem, nb, off, mask, labels, desc, nh, poll)``, the
    row block's turns taken around the adds by :func:`.bwd_detpipe.det_step`."""
    for w in range(2):
        ptx.inst("bar.arrive", EMPTY + w, THREADS)
    if det and det[-1]:      # det_poll: nothing read ahead of the first step
        with ptx.if_(lane == 0):
            ptx.inst("st.shared.u32", ptx.addr(det[-1]()), 0)
    for gi in ptx.range_(0, group):
        head = hk * group + gi
        for mb in ptx.range_(*m_range):
            m0 = mb * BM

            def add(w, _m0=m0, _head=head):
                for ch in range(2):
                    ptx.tma.reduce(tdq, [64 * w + 32 * ch, _m0, _head, batch],
                                   stages + w * wg_stage + ch * DQ_PANEL)
            if det:
                _det_step(lane, det, add, batch, head, mb, m0, m_range)
                continue
            for w in range(2):
                ptx.inst("bar.sync", FULL + w, THREADS)
                with ptx.if_(lane == 0):
                    ptx.inst("fence.proxy.async.shared::cta")
                    add(w)
                    ptx.inst("cp.async.bulk.commit_group")
                    ptx.inst("cp.async.bulk.wait_group.read", 0)
                ptx.inst("bar.arrive", EMPTY + w, THREADS)
    with ptx.if_(lane == 0):
        ptx.inst("cp.async.bulk.wait_group.read" if exit_read else "cp.async.bulk.wait_group", 0)


def _det_step(lane, det, add, batch, head, mb, m0, m_range) -> None:
    """One 80-row block's adds in the deterministic mode: its word (recomputed where used:
    the producer's registers are few) at turn ``2 (nb - first)`` (``desc``: ``2 (last -
    nb)``), passed by 2 once both warpgroups' adds have landed; ``poll``: the walk's next
    block's word read while they land."""
    sem, nb, off, mask, labels, desc, nh, poll = det
    at = lambda b: ptx.global_ptr(sem) + ((batch * nh + head) * ptx.dim("NMB") + b) * 4
    words = lambda: [(at(mb), turn_of(nb, m0, off, mask, 0, True, BN, 2, desc), 2, None)]
    nxt = lambda: [(at(mb - 1), _s32(mb) > _s32(m_range[1]) + 1) if len(m_range) == 3 else
                   (at(mb + 1), _s32(mb) + 1 < _s32(m_range[1]))]
    det_step(2, lane, words=words, add=add, full=FULL, empty=EMPTY, threads=THREADS,
             labels=labels, ahead=(poll, nxt) if poll else None)


__all__ = ["build_backward_m80", "Layout", "specs", "BM"]
