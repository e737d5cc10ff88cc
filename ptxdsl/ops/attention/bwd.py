"""The attention backward's main kernel on Hopper: a CTA keeps one block of 128 keys (K and
V) of one (batch, K/V head) in shared memory and streams every query block that sees them,
for each query head of the GQA group, through a TMA + mbarrier ring; dK and dV stay in
registers (so the group's sum is free), dQ is added in f32 to a global accumulator.

::

    warpgroup 0 (producer, setmaxnreg.dec)      warpgroups 1, 2 (consumers; keys w·64 .. w·64+63)
    TMA K, V (128 x D) ─▶ kvfull                wait kvfull; dK = dV = 0
    per head of the group, per 64-row block m:   per step: wait full[s]
      wait empty[s]; expect_tx full[s];           Sᵀ = K_w·Qᵀ, dPᵀ = V_w·dOᵀ (smem descriptors,
      TMA Q, dO (64 x D), -LSE·log2e, D (64)        m64n64k16; overlap: a group each)
                                                  Pᵀ = ex2(Sᵀ·scale·log2e - LSE·log2e) (mask on
                                                    boundary blocks only; softcap: tanh), with
                                                    overlap while dPᵀ runs (wait_group 1)
                                                  [overlap 2: dV += Pᵀ·dO issued here]
                                                  dSᵀ = Pᵀ ∘ (dPᵀ - D)
                                                  dV += Pᵀ·dO, dK += dSᵀ·Q (Pᵀ, dSᵀ from
                                                    registers: the accumulator of Sᵀ packed is
                                                    wgmma's A fragment; dO, Q MN-major B)
                                                  dSᵀ -> shared (st.shared.b32, 128-byte swizzle)
                                                  dQ_w = dS_w·K_w per 64 columns (A = dSᵀ read
                                                    transposed, B = K MN-major); after the
                                                    wait_group 0 that covers dV, dK arrive
                                                    empty[s]; dQ staged in shared memory and
                                                    added by TMA reduce-add (dq_tma) or
                                                    red.global.add.f32 into dq_acc
                                                epilogue: dK·scale, dV -> st.global

Shared memory: :mod:`.bwd_layout`. With ``deterministic``, dQ's adds to each 64-row block
follow one fixed order through a per-block semaphore (:mod:`.bwd_det`). The step's orderings
are the plan's (:class:`.bwd_config.BwdConfig`; ``dq_warp``'s writer: :mod:`.bwd_dqwarp`;
``s_ahead``: :mod:`.bwd_ahead`). With ``col_split`` (head
dims 192, 256) a CTA owns 64 keys and both consumer warpgroups compute the same Sᵀ and dPᵀ,
each keeping half of dK's, dV's and dQ's columns (:mod:`.bwd_cols`). Head dim 96: 128's
panels (TMA zero-fills the second's half), GEMMs 96 wide."""
from __future__ import annotations

import itertools

from ... import kernel
from ...core.types import PtxType, u8, u32
from ...dsl import ptx, reg, smem
from .._common.ring import Ring, wait
from .bwd_config import BLOCK_M as BM, BLOCK_N as BN, BwdConfig, kernel_checks
from .bwd_layout import PANEL, ROW, Smem, specs
from .config import Mask, padded
from .fwd import _s32
from .varlen_tiles import find_seq, load_u32
from .bwd_ahead import Ahead
from .bwd_cols import col_pieces
from .bwd_dqwarp import (frag_block, hand_stage, reduce_boxes, stage_frag, take_stage, writer,
                         writer_end, writer_start)
from .bwd_pair import KvLoad, Owner, pair_cta, release_kv, store_kv_stage, unit_nb, \
    grid as pair_grid
from .bwd_epi import store_kv_tma
from .bwd_scores import dscores, grad_scores, probs, row_pairs
from .bwd_det import Turns, det_cta, m_blocks, pass_turn, spin, turn_of
from .bwd_steps import (kv_gemms, load_kv, load_slot, row_blocks, score_gemm, store,
                        zero_other_keys)
from .._common.warpgroup import consumer_index
from .softmax import LOG2E, col_of, p_registers, pack_p, row_of

def build_backward(c: BwdConfig, dtype: PtxType, d: int, mask: Mask = Mask(), *,
                   scale: float, softcap: float = 0.0, deterministic: bool = False,
                   arch: str = "sm_90a", varlen: bool = False):
    """The main backward kernel for one (plan, dtype, head dim, mask, scale, softcap, mode).
    dK leaves scaled by ``scale``; dq_acc holds dQ / scale (the postprocess scales it).
    ``varlen``: packed sequences, one CTA per (64 or 128 keys of a sequence, K/V head):
    key blocks of sequence ``i`` are numbered from ``i + cu_k[i] // block_n`` (the grid
    needs no read of the offsets), and the f32 rows are :mod:`.bwd_prep`'s padded ones."""
    kernel_checks(c, d, deterministic, varlen)
    bm, rows = c.block_m, c.block_m > BM   # rows: dQ split by query rows (block_m 128)
    bn, cs, sh = c.block_n, c.col_split, c.pds_smem
    bw = BM // 2 if sh else bm          # queries of Sᵀ, dPᵀ a warpgroup computes per step
    # col_split: a warpgroup's columns in pieces that stay inside one 64-column panel (an
    # MN-major B operand's extent), 64 wide at head dim 256, 32 at 192 (panel_split: 64, 32)
    pieces = col_pieces(c, d) if cs else ((d, 0, 0),)
    npc = len(pieces)
    nch = 1 if c.dq_split else npc if cs else padded(d) // 64  # dQ chains per warpgroup, step
    # each chain's columns: 64 (a K panel), the last 32 at head dim 96; the pieces' widths
    qcols = [p[0] for p in pieces] if cs else [min(64, d - 64 * ch) for ch in range(nch)]
    qoff = [sum(qcols[:ch]) for ch in range(nch)]   # a chain's first column in the stage
    # the barrier around dSᵀ's stores: both consumer warpgroups' when each reads both tiles
    xbar = (3, 256) if c.dq_split or sh or rows else None
    es = dtype.bytes
    L = Smem(c, d, es)
    S, P = c.stages, padded(d) // PANEL       # 96: TMA fills the second panel's half with 0
    dt = dtype.name
    scale_log2 = float(softcap if softcap else scale) * LOG2E
    ins, outs = specs(dtype, d, deterministic, c.dq_tma, c.dq_swizzle, bn, varlen, bm, c.dkv_tma,
                      64 if c.dkv_stage else 0)
    names = ["q", "k", "v", "do", "nlse2", "dpsum"] + (["cu_q", "cu_k"] if varlen else []) \
        + ["dq_acc", "dk", "dv"]
    names += ["sem"] if deterministic else []
    mma_s = f"wgmma.mma_async.sync.aligned.m64n{bw}k16.f32.{dt}.{dt}"
    mma_q = lambda n: f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dt}.{dt}"
    mma_kv = [mma_q(p[0]) for p in pieces]           # one per piece
    name = (f"attention_bwd_{dt}_d{d}_s{S}_{mask.tag}{'_cap' if softcap else ''}{c.tag}"
            f"{'_varlen' if varlen else ''}{'_det' if deterministic else ''}")

    def body(q, k, v, do, nlse2, dpsum, dq_acc, dk, dv, sem=None, cu_q=None, cu_k=None):
        labels = itertools.count()
        tq, tk, tv, tdo = q.tma_desc(), k.tma_desc(), v.tma_desc(), do.tma_desc()
        tl, td = nlse2.tma_desc(), dpsum.tma_desc()
        pdq, pdk, pdv = ptx.global_ptrs(dq_acc, dk, dv)
        tdq = dq_acc.tma_desc() if c.dq_tma else None
        if varlen:
            nh, nhk = ptx.dim("H"), ptx.dim("HK")
        else:
            sq, nh, sk, nhk = ptx.dim("SQ"), ptx.dim("H"), ptx.dim("SK"), ptx.dim("HK")
        sqp = ptx.dim("SQP")
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        wg, lane = tid >> 7, tid & 127
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        if varlen:       # the sequence of this key block, its offsets and lengths
            pcq, pck = ptx.global_ptrs(cu_q, cu_k)
            nseq = ptx.dim("NS1") - 1
            nvb = nseq + ptx.dim("TK") // bn
            vb, hk = cta % nvb, cta // nvb
            seq = find_seq(pck, nseq, vb, bn)
            k0, q0 = load_u32(pck, seq), load_u32(pcq, seq)
            sk, sq = load_u32(pck, seq + 1) - k0, load_u32(pcq, seq + 1) - q0
            nb = vb - (seq + k0 // bn)
            pq0 = (seq + q0 // BM) * BM                 # the sequence's first padded row
            batch = None
            # (rows, the K/V head's keys) of this CTA's TMA boxes, dQ's reduce-add
            qc = lambda p, head, m0: [p * PANEL, head, q0 + m0]
            kc = lambda p: [p * PANEL, hk, k0 + n0]
            rc = lambda m0, head: [pq0 + m0, head]
            dqc = lambda col, m0, head: [col, pq0 + m0, head]
        else:
            nblk = (sk + (bn - 1)) // bn
            if deterministic or c.lpt_units:   # key block-major sections of (batch, K/V
                # head) units (lpt_units: a causal section's longest key blocks first)
                nb, hk, batch = det_cta(cta, nblk, nhk, ptx.dim("B") * nhk, sq, nh // nhk, d,
                                        c.det_units if deterministic else c.lpt_units,
                                        deterministic and c.det_desc)
            elif c.kv_pair:      # (bwd_pair: key blocks p, nblk - 1 - p; walk 0's first)
                pair_p, rest, nwalks = pair_cta(cta, nblk, c.pair_max)
                nb, hk, batch = pair_p, rest % nhk, rest // nhk
            else:
                nb = cta % nblk
                rest = cta // nblk
                hk, batch = rest % nhk, rest // nhk
            qc = lambda p, head, m0: [p * PANEL, head, m0, batch]
            kc = lambda p: [p * PANEL, hk, n0, batch]
            rc = lambda m0, head: [m0, head, batch]
            dqc = lambda col, m0, head: [col, m0, head, batch]
        group = nh // nhk
        n0 = nb * bn
        off, m_lo, m_hi = row_blocks(n0, sq, sk, mask, bn, bm, varlen)
        # deterministic: row blocks last to first (bwd_det: each block's key blocks come
        # to it together or in their turns' order)
        desc = bm if deterministic and c.det_desc and not varlen else None  # (bwd_det)
        m_range = m_blocks(m_lo, m_hi, bool(desc)) if deterministic else (m_lo, m_hi)
        # kv_pair: each role walks its key blocks in a loop of its own (walk(t) rebinds
        # the key block's values; the ones above are then walk 0's, unused)
        walks = (lambda: ptx.range_(0, nwalks)) if c.kv_pair else (lambda: [None])

        def walk(t):
            nonlocal nb, n0, off, m_lo, m_hi, m_range
            nb = unit_nb(t, pair_p, nblk)
            n0 = nb * bn
            off, m_lo, m_hi = row_blocks(n0, sq, sk, mask, bn, bm, varlen)
            m_range = (m_lo, m_hi)
        # (deterministic: each consumer warpgroup's bwd_det.Turns words, or det_poll's, last)
        base = smem.alloc(u8, (L.total + (16 if deterministic else 0),), align=1024,
                          dynamic=True).base
        kvfull, full, empty = base + L.kvfull, base + L.full, base + L.empty
        with ptx.if_(tid == 0):
            ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(kvfull), 1)
            if c.kv_pair:
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(base + L.kvempty),
                         1 if c.dkv_tma and not c.dkv_stage else 256)   # (release_kv)
            for s in range(S):
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(full, 8 * s), 1)
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(empty, 8 * s), 2)
            ptx.inst("fence.mbarrier_init.release.cluster")
        ptx.inst("bar.sync", 0)

        with ptx.if_(wg == 0):
            # ------------------------------------------------------------ producer
            ptx.inst("setmaxnreg.dec.sync.aligned.u32", c.producer_regs)
            with ptx.if_(tid == 0):
                if not c.kv_pair:
                    load_kv(base, ((tk, L.k), (tv, L.v)), P, bn, kc, kvfull, L.kv_bytes)
                ring = Ring(S)
                for t in walks():
                    kv = None
                    if c.kv_pair:   # (bwd_pair: K, V after the walk's first slot)
                        walk(t)
                        kv = KvLoad(labels, t, base, ((tk, L.k), (tv, L.v)), P, bn, kc,
                                    kvfull, base + L.kvempty, L.kv_bytes)
                    for gi in ptx.range_(0, group):
                        head = hk * group + gi
                        for mb in ptx.range_(*m_range):
                            m0 = mb * bm
                            wait(labels, empty + ring.slot * 8, ring.phase ^ 1)
                            load_slot(base=base, slot=ring.slot, full=full, q_bytes=L.q_bytes,
                                      bm=bm, panels=P, tiles=((tq, L.q), (tdo, L.do)),
                                      rows=((tl, L.lse), (td, L.dpsum)),
                                      qc=lambda p: qc(p, head, m0), rc=lambda: rc(m0, head))
                            ring.advance()
                            if kv:
                                kv()
                    if kv:            # (a walk with no step)
                        kv()
            if c.dq_warp:           # warp 1: dQ's reduce-adds (bwd_dqwarp)
                with ptx.if_((tid >> 5) == 1):
                    if c.kv_pair:       # (the stages handed on across the walks)
                        writer_start()
                    for t in walks():
                        if c.kv_pair:
                            walk(t)
                        writer(c, d, lane=tid & 31, tdq=tdq, dqc=dqc,
                               stage_of=lambda w: base + L.dqs + w * L.wg_stage, group=group,
                               hk=hk, heads=lambda gi: (hk * group + gi, hk * group + gi
                                                        if varlen else
                                                        batch * nh + hk * group + gi),
                               m_range=m_range, bm=bm,
                               det=(sem, (lambda mb: pq0 // BM + mb) if varlen else
                                    (lambda mb: mb), nb, off, mask, labels, bn, desc,
                                    c.det_poll and (lambda: base + L.total))
                               if deterministic else None,
                               start=not c.kv_pair, end=not c.kv_pair,
                               frag=(lambda m0, bh, w: frag_block(
                                   dq_acc, bh, m0, d, w if c.dq_split else None))
                               if c.dq_frag else None)
                    if c.kv_pair:
                        writer_end(c, tid & 31)
        with ptx.else_():
            # ------------------------------------------------------------ consumers
            ptx.inst("setmaxnreg.inc.sync.aligned.u32", c.consumer_regs)
            w = consumer_index(wg, c.uniform_cons)
            warp, lw = lane >> 5, lane & 31
            fcol = (lw & 3) * 2
            r0 = warp * 16 + (lw >> 2)               # this thread's keys r0, r0 + 8 of 64
            if not c.kv_pair:        # (kv_pair: each walk's, below)
                kw0 = n0 if cs else n0 + w * 64
                keys = [_s32(kw0 + r0), _s32(kw0 + r0 + 8)]
            if cs:      # piece j: columns c0 = first + w·step, c0's offset in a panelled tile
                c0s = [w * step + first for _, first, step in pieces]
                coff = [(x >> 6) * (BM * ROW) + (x & 63) * 2 for x in c0s]
            dv_acc = [ptx.wgmma.accumulator(p[0], init=0.0) for p in pieces]
            dk_acc = [ptx.wgmma.accumulator(p[0], init=0.0) for p in pieces]
            p_regs, ds_regs = p_registers(bw), p_registers(bw)
            qh = w * bw if sh else 0         # pds_smem: this warpgroup's first query
            ring = Ring(S)
            k_w = base + L.k if cs else base + L.k + w * (64 * ROW)
            v_w = base + L.v if cs else base + L.v + w * (64 * ROW)
            ds_w = base + L.ds + w * L.ds_bytes
            # dSᵀ's st.shared.b32 addresses: key row r0 (+8), 128-byte swizzle by r0 % 8
            xr = lw >> 2
            ds_row = ds_w + r0 * ROW + (lw & 3) * 4
            ds_cols = lambda: [((xr ^ ch) << 4) for ch in range(8)]
            if sh:      # both tiles whole (Pᵀ, then dSᵀ), this warpgroup's 32 query columns
                ds_row = base + L.ds + r0 * ROW + (lw & 3) * 4
                xrw = xr ^ (w << 2)
                ds_cols = lambda: [((xrw ^ ch) << 4) for ch in range(4)]
            # with overlap (or 128 rows), recomputed in each step: fewer registers live
            # across the loop
            ds_col = None if c.overlap or rows else ds_cols()
            # dQ's stage (64 rows of 64 f32 per chunk, unswizzled: the TMA box's layout)
            stage_w = base + L.dqs + w * L.wg_stage
            dq_stage = stage_w + (r0 * 64 + fcol) * 4
            owner = Owner() if c.dkv_stage else None    # (who holds the dQ stage)
            for t in walks():       # (kv_pair: a key block a walk, bwd_pair)
                if c.kv_pair:
                    walk(t)
                    kw0 = n0 + w * 64
                    keys = [_s32(kw0 + r0), _s32(kw0 + r0 + 8)]
                    for r in [x for acc in dv_acc + dk_acc for x in acc]:
                        ptx.inst.mov.f32(r, 0.0)
                wait(labels, kvfull, t & 1 if c.kv_pair else 0)
                if varlen:
                    zero_other_keys(base + L.k, n0, sk, bn, P, tid - 128)
                turns = Turns(sem, labels, lambda: base + L.total + w * 8) \
                    if deterministic and c.dq_tma and not c.dq_warp else None
                if turns:
                    with ptx.if_(lane == 0):
                        turns.start()
                # the semaphore read early in the step, but where ptxas would spill its registers
                poll = not (rows or softcap)
                ahead = Ahead(c.s_ahead, labels=labels, full=full, stages=S, ring=ring, bw=bw,
                              q_of=lambda s: base + L.q + s * L.q_bytes, score=(mma_s, k_w, d, bn, bm),
                              steps=_s32(group) * ptx.max(m_hi - m_lo, 0),
                              k_tile=base + L.k if c.ahead_k else None) if c.s_ahead else None
                if ahead:            # the first step's Sᵀ (bwd_ahead)
                    ahead.first(*((ring.slot, ring.phase) if c.kv_pair else ()))
                def step(mb):         # one step: the rows from mb·bm
                    m0 = mb * bm
                    sem_of = lambda: pq0 // BM + mb if varlen else 2 * mb + w if rows else mb

                    def early():      # deterministic: under the step's first GEMMs
                        if turns:
                            turns.early(lane, lane == 0 if poll else None, bh, sem_of())
                    if not ahead:    # (s_ahead: waited for where its Sᵀ was issued)
                        wait(labels, full + ring.slot * 8, ring.phase)
                    q_at = base + L.q + ring.slot * L.q_bytes
                    do_at = base + L.do + ring.slot * L.q_bytes
                    row_at = lambda o, _s=ring.slot: base + o + _s * (2 * bm * 4) + w * (bm * 4)
                    if sh:                            # this warpgroup's queries' LSE and D
                        row_at = lambda o, _r=row_at: _r(o) + qh * 4
                    s_acc = ahead.acc if ahead else ptx.wgmma.accumulator(bw)
                    dp_acc = ptx.wgmma.accumulator(bw)
                    # lse_early: -LSE·log2e in registers before any wait for Sᵀ (the slot
                    # is full: waited for above, or where s_ahead issued this Sᵀ)
                    lse = row_pairs(row_at(L.lse), fcol, min(c.lse_early, bw // 8)) \
                        if c.lse_early else None
                    if ahead:
                        ahead.top()
                    ptx.inst("wgmma.fence.sync.aligned")
                    for acc, a_at, b_at in (((dp_acc, v_w, do_at),) if ahead else
                                            ((s_acc, k_w, q_at), (dp_acc, v_w, do_at))):
                        if sh:                        # queries qh .. qh + 31 of the tile
                            b_at = b_at + qh * ROW
                        score_gemm(mma_s, acc, a_at, b_at, d, bn, bm)
                        if c.overlap:                 # Sᵀ and dPᵀ: a group each
                            ptx.inst("wgmma.commit_group.sync.aligned")
                    # dV += Pᵀ·dO, dK += dSᵀ·Q: B is dO / Q as stored (rows = K dim), MN-major
                    at_pc = (lambda t: [t + o for o in coff]) if cs else (lambda t: [t])
                    kv_mmas = ((dv_acc, p_regs, at_pc(do_at)), (dk_acc, ds_regs, at_pc(q_at)))
                    if c.overlap:
                        # Pᵀ while dPᵀ runs; (2:) dV queued behind dPᵀ while dSᵀ is computed
                        early()
                        ptx.inst("wgmma.wait_group.sync.aligned", 1)
                        caps = probs(list(s_acc), keys, m0, fcol, off, mask, kw0,
                                     row_at(L.lse), scale, softcap, scale_log2, bm, lse)
                        pack_p(list(s_acc), p_regs, dt)
                        if c.overlap > 1:
                            kv_gemms(mma_kv, *kv_mmas[0], fence=True, bm=bm)
                            ptx.inst("wgmma.wait_group.sync.aligned", 1)
                        else:
                            ptx.inst("wgmma.wait_group.sync.aligned", 0)
                        dscores(list(s_acc), list(dp_acc), caps, fcol, row_at(L.dpsum))
                        pack_p(list(dp_acc), ds_regs, dt)
                        ptx.inst("wgmma.fence.sync.aligned")
                        for kv in kv_mmas[c.overlap - 1:1 if c.dk_last else 2]:
                            kv_gemms(mma_kv, *kv, commit=False, bm=bm)
                        ptx.inst("wgmma.commit_group.sync.aligned")
                    else:
                        ptx.inst("wgmma.commit_group.sync.aligned")
                        early()
                        ptx.inst("wgmma.wait_group.sync.aligned", 0)
                        if rows and not softcap:   # Pᵀ whole, then dSᵀ: fewer live at once
                            probs(list(s_acc), keys, m0, fcol, off, mask, kw0, row_at(L.lse),
                                  scale, softcap, scale_log2, bm)
                            pack_p(list(s_acc), p_regs, dt)
                            dscores(list(s_acc), list(dp_acc), [], fcol, row_at(L.dpsum))
                        else:
                            grad_scores(list(s_acc), list(dp_acc), keys, m0 + qh if sh else m0,
                                         fcol, off, mask, kw0, row_at(L.lse), row_at(L.dpsum),
                                         scale, softcap, scale_log2, cap_inline=cs or rows,
                                         bm=bm)
                            pack_p(list(s_acc), p_regs, dt)
                        pack_p(list(dp_acc), ds_regs, dt)
                        if not sh:    # (pds_smem: from shared memory, once both are stored)
                            # the A fragments were just written by ordinary instructions
                            ptx.inst("wgmma.fence.sync.aligned")
                            for acc, a_regs, b_at in kv_mmas:
                                kv_gemms(mma_kv, acc, a_regs, b_at, commit=False, bm=bm)
                            ptx.inst("wgmma.commit_group.sync.aligned")
                    # dSᵀ into shared memory: register j of chunk kc holds keys r0 + 8
                    # (j % 2), queries 16 kc + 8 (j // 2) + 2 (lane % 4) and the next one
                    if c.dq_tma and not c.dq_warp:   # the last reduce has read the stage
                        with ptx.if_(lane == 0):
                            ptx.inst("cp.async.bulk.wait_group.read", 0)
                    # the last step's dQ wgmmas have read it (dq_split: both warpgroups');
                    # ds_double: the pair of two steps ago, which the last step's second
                    # barrier ordered, so only this warpgroup's dQ stage is waited for here
                    # (dq_warp: the stage is take_stage's; with ds_double, no barrier)
                    if not (c.dq_warp and c.ds_double):
                        ptx.inst("bar.sync",
                                 *((1 + w, 128) if c.ds_double else xbar or (1 + w, 128)))
                    dsb = ring.slot * ((4 if rows else 2) * L.ds_bytes) \
                        if c.ds_double else None
                    ds_at = ds_row + dsb if c.ds_double else ds_row
                    cols = ds_col or ds_cols()
                    # (block_m 128: queries 64 h .. 64 h + 63 in the 128-key panel h)
                    for t, regs in ((1, ds_regs), (0, p_regs)) if sh else ((0, ds_regs),):
                        for kc in range(bw // 16):
                            for j in range(4):
                                ptx.inst("st.shared.b32",
                                         ptx.addr(ds_at + cols[2 * (kc % 4) + j // 2],
                                                  t * L.ds_bytes + (j % 2) * 8 * ROW +
                                                  (kc // 4) * 2 * L.ds_bytes),
                                         regs[kc][j])
                    ptx.inst("fence.proxy.async.shared::cta")
                    ptx.inst("bar.sync", *(xbar or (1 + w, 128)))
                    if xbar:                          # the other tile's writes, for our wgmma
                        ptx.inst("fence.proxy.async.shared::cta")
                    if sh:    # dV += Pᵀ·dO, dK += dSᵀ·Q with A the whole tiles (K-major)
                        ptx.inst("wgmma.fence.sync.aligned")
                        for t, (accs, _, b_ats) in enumerate(kv_mmas):
                            kv_gemms(mma_kv, accs, base + L.ds + t * L.ds_bytes, b_ats,
                                     commit=False)
                        ptx.inst("wgmma.commit_group.sync.aligned")
                    # dq_split: dQ[:, 64 w : 64 w + 64] over all 128 keys (both dSᵀ tiles, one
                    # after the other in shared memory, and K's panel w); rows (block_m 128):
                    # dQ[64 w : 64 w + 64, :] over all 128 keys (panel w); else dQ over this
                    # warpgroup's 64 keys, a 64-column chunk of K at a time
                    a_desc = ptx.wgmma.descriptor(base + L.ds + L.ds_bytes if sh else
                                                  base + L.ds + dsb + w * (2 * L.ds_bytes)
                                                  if c.ds_double and rows else
                                                  base + L.ds + dsb if c.ds_double else
                                                  base + L.ds + w * (2 * L.ds_bytes) if rows else
                                                  base + L.ds if c.dq_split else ds_w,
                                                  leading=64 * ROW, stride=1024, swizzle=128)
                    dq_row = None if varlen else (bh * sqp + m0 + r0) * d + fcol
                    sem_mb = sem_of()
                    # dk_last: dK queues behind dQ's first chunk, staged while it runs
                    late = kv_mmas[1:] if c.dk_last else ()
                    for ch in range(nch):
                        dq = ahead.dq_acc(qcols[ch]) if ahead else \
                            ptx.wgmma.accumulator(qcols[ch])
                        b_at = base + L.k + w * (BN * ROW) if c.dq_split else \
                            base + L.k if rows else \
                            k_w + coff[ch] if cs else k_w + ch * BN * ROW
                        b_desc = ptx.wgmma.descriptor(b_at, leading=bn * ROW,
                                                      stride=1024, swizzle=128)
                        ptx.inst("wgmma.fence.sync.aligned")
                        for ks in range((BN if c.dq_split or rows else 64) // 16):
                            o = (ks * 16 * ROW) >> 4
                            ptx.inst(mma_q(qcols[ch]), list(dq), a_desc + o if o else a_desc,
                                     b_desc + o if o else b_desc, 0 if ks == 0 else 1,
                                     1, 1, 1, 1)
                        ptx.inst("wgmma.commit_group.sync.aligned")
                        if ch == 0 and late:
                            if ahead:
                                ahead.after_dq()
                            for kv in late:
                                kv_gemms(mma_kv, *kv, commit=False, bm=bm)
                            ptx.inst("wgmma.commit_group.sync.aligned")
                            if ahead:         # (1: the next step's Sᵀ behind dK)
                                ahead.after_dk()
                        ptx.inst("wgmma.wait_group.sync.aligned", ahead.wait_dq if ahead else
                                 1 if ch == 0 and late else 0)
                        if ch == (1 if late else 0):  # Q, dO, LSE, D of this step are read
                            with ptx.if_(lane == 0):
                                ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink,
                                         ptx.addr(empty + ring.slot * 8))
                            if deterministic and not c.dq_tma:
                                with ptx.if_(lane == 0):
                                    spin(ptx.global_ptr(sem) + (bh * ptx.dim("NMB") + sem_mb)
                                         * 4, turn_of(nb, m0, off, mask, w, False, bn, 2, desc),
                                         False, labels)
                                ptx.inst("bar.sync", 1 + w, 128)
                        if c.dq_warp and ch == 0:
                            if owner:    # (dkv_stage: unless the epilogue freed it)
                                owner.take(w)
                            else:
                                take_stage(w)
                        if c.dq_frag:                # (bwd_dqwarp: as the registers lie)
                            stage_frag(dq.regs, stage_w, lane)
                        elif c.dq_tma:               # stage the chunk (st.shared.v2.f32);
                            # swizzled: 32-column panels of 128-byte rows, 16-byte chunk ^ row % 8
                            sw_at = [stage_w + r0 * ROW + (lw & 1) * 8 +
                                     (((((lw & 3) >> 1) + 2 * k) ^ xr) << 4)
                                     for k in range(4)] if c.dq_swizzle else \
                                [dq_stage + ch * L.dqs_bytes]
                            for i in range(0, len(dq.regs), 2):
                                col = qoff[ch] + col_of(i)
                                if c.dq_swizzle:
                                    at = sw_at[(col // 8) % 4]
                                    o = (col // 32) * BM * ROW + row_of(i) * 8 * ROW
                                else:
                                    at = sw_at[0]
                                    o = (row_of(i) * 8 * 64 + col % 64) * 4
                                ptx.inst("st.shared.v2.f32", ptx.addr(at, o),
                                         [dq.regs[i], dq.regs[i + 1]])
                        if c.dq_tma:
                            if late and nch == 1:
                                if ahead:     # (2: the next step's Sᵀ behind the stage;
                                    ahead.after_stage()    # the stage handed over under dK)
                                    if c.dq_warp:
                                        hand_stage(w)
                                ptx.inst("wgmma.wait_group.sync.aligned",
                                         ahead.wait_dk if ahead else 0)
                                with ptx.if_(lane == 0):
                                    ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink,
                                             ptx.addr(empty + ring.slot * 8))
                            continue
                        at = pdq + (dq_row + ch * 64) * 4    # (not with col_split)
                        for i, x in enumerate(dq):
                            o = (row_of(i) * 8 * d + col_of(i)) * 4
                            ptx.inst("red.global.add.f32", ptx.addr(at, o), x)
                    if c.dq_warp:
                        if not ahead:
                            hand_stage(w)
                    elif c.dq_tma:                   # one thread adds the staged chunks
                        ptx.inst("fence.proxy.async.shared::cta")
                        ptx.inst("bar.sync", 1 + w, 128)
                        # rows: this warpgroup's 64 rows, none when all are past SQP (the
                        # last block's second half: no rows, no semaphore to take)
                        m0w = m0 + w * BM if rows else m0
                        adder = (lane == 0) & (_s32(m0w) < _s32(sqp)) if rows else lane == 0
                        with ptx.if_(adder):
                            if deterministic:    # (turns.early read the semaphore)
                                split = c.dq_split or cs or rows
                                turns.wait(bh, sem_mb, turn_of(nb, m0, off, mask, w, split, bn,
                                                               1 if rows else 2, desc), split,
                                           early=poll)
                            reduce_boxes(c, d, tdq, dqc, w, m0w, head, stage_w)
                            ptx.inst("cp.async.bulk.commit_group")
                            if deterministic:  # its turn passes once it lands (next step)
                                turns.added(bh, sem_mb)
                    elif deterministic:
                        ptx.inst("bar.sync", 1 + w, 128)
                        with ptx.if_(lane == 0):
                            pass_turn(ptx.global_ptr(sem) + (bh * ptx.dim("NMB") + sem_mb) * 4)
                    ring.advance()
                for gi in ptx.range_(0, group):
                    head = hk * group + gi
                    bh = head if varlen else batch * nh + head
                    for mb in ptx.range_(*m_range):
                        step(mb)
                if ahead:
                    ahead.drain()
                if c.kv_pair and (c.dkv_stage or not c.dkv_tma):   # K, V read by the last
                    release_kv(None, base + L.kvempty)   # wgmmas: the next load under the
                    # stores
                if c.dq_warp:
                    if not c.kv_pair:    # the writer's last arrival (its first was before
                        take_stage(w)    # any; kv_pair: after the last walk)
                elif c.dq_tma:
                    with ptx.if_(lane == 0):
                        if turns:
                            turns.land()
                        else:
                            ptx.inst("cp.async.bulk.wait_group", 0)
                if c.dkv_stage:          # (bwd_pair: through this warpgroup's dQ stage)
                    owner.end(w)
                    store_kv_stage((dk_acc[0], dv_acc[0]), stage_w, r0, lane, w, (dk, dv),
                                   lambda p: [p * PANEL, hk, n0 + w * 64, batch], d, dtype,
                                   scale)
                elif c.dkv_tma:          # (bwd_epi: through K's and V's tiles, TMA stores)
                    store_kv_tma((dk_acc[0], dv_acc[0]), base, L, (dk, dv), w * 64 + r0, lane,
                                 tid, lambda p: [p * PANEL, hk, n0, batch], d, dtype, scale)
                for j in range(0 if c.dkv_tma else npc):   # (one piece without col_split)
                    f = fcol + c0s[j] if cs else fcol
                    kb = k0 if varlen else None
                    store(dk_acc[j], pdk, keys, batch, hk, sk, nhk, d, f, dtype, scale, kb)
                    store(dv_acc[j], pdv, keys, batch, hk, sk, nhk, d, f, dtype, None, kb)
                if c.kv_pair and c.dkv_tma and not c.dkv_stage:   # K's, V's tiles read
                    # out: the next K, V
                    release_kv(tid, base + L.kvempty)
            if owner:             # the writer's last arrival (its first was before any)
                owner.last(w)
            elif c.kv_pair:
                take_stage(w)

    grid = (lambda NS1, TK, HK: ((NS1 - 1 + TK // bn) * HK, 1, 1)) if varlen else \
        pair_grid(bn, c.pair_max) if c.kv_pair else \
        (lambda B, SK, HK: ((SK + bn - 1) // bn * HK * B, 1, 1))
    deco = kernel(in_specs=ins, out_specs=outs, arg_names=tuple(names), grid=grid,
                  block=(3 * 128, 1, 1), arch=arch, name=name, min_ctas_per_sm=1)
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


__all__ = ["build_backward", "specs", "Smem"]
