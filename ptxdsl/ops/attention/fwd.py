"""The attention forward on Hopper: a tile is 128 query rows (of one (batch, head), of a
GQA group's heads, or of one packed sequence: :mod:`.tiles`; 192 with
``Config.consumers = 3``, a fourth warpgroup); a CTA of three warpgroups takes one tile (or, with ``Config.persistent``, one CTA per SM loops over tiles); K/V
through a TMA + mbarrier ring; S = Q·Kᵀ and O += P·V on wgmma.

::

    warpgroup 0 (producer, setmaxnreg.dec)          warpgroups 1, 2 (consumers, setmaxnreg.inc)
    per tile: wait qempty; TMA Q (128 x D) ─▶ qfull  per tile: wait qfull; per K/V block j:
    per block j: wait kempty[s], expect_tx kfull[s],   wait kfull[s]; issue S(j) = Q_c·Kᵀ
      TMA K (block_n x D); wait vempty[s],               (smem descriptors, D/16 x
      expect_tx vfull[s], TMA V (block_n x D)            m64n{block_n}k16)
                                                       wait vfull[s-1]; issue O += P(j-1)·V(j-1)
                                                         (P from registers, block_n/16 x
                                                         m64n{D}k16)
                                                       wait_group 1 (S(j) retired): arrive
                                                         kempty; mask (boundary blocks only);
                                                         online softmax (ex2, one FMA) under
                                                         the P·V
                                                       wait_group 0: arrive vempty; O *= alpha;
                                                         P(j) = cvt(S) into the A registers
                                                     arrive qempty; the last P·V; epilogue:
                                                       O / l -> st.global; LSE per row

With ``Config.pingpong`` the two consumers take turns to issue their wgmmas (named barriers
1 and 2: ``bar.sync`` waits for one's turn, ``bar.arrive`` hands it over), so that one's
softmax runs while the other's GEMMs have the tensor cores.

Shared memory (1024-byte aligned; every tile in 64-column panels of 128-byte swizzled rows,
what one TMA box of (1, rows, 1, 64) writes): Q 128 rows, then ``stages`` K blocks, then
``stages`` V blocks, then the barriers. Q and K are read K-major (the descriptors step 32
bytes per k16 inside a panel, a panel per 64 of D); V is P·V's B operand in its natural
(keys, D) storage: MN-major, panels of 64 columns ``block_n * 128`` bytes apart (LBO), 8-key
groups 1024 bytes apart (SBO), a k16 step 16 keys (2048 bytes).
"""
from __future__ import annotations

import contextlib
import functools
import itertools

from ... import Tile, kernel
from ...core.types import PtxType, b32, f32, u8, u32
from ...dsl import ptx, reg, smem
from .._common.warpgroup import consumer_index
from .._common.launch_order import after_previous_kernel, pdl_for
from .._common.ring import Ring, wait as ring_wait
from .config import Config, Mask, padded
from .fwd_layout import Smem, grid_for, schedule
from .fwd_qbuf import q_buffer, q_next, tile_words
from .fwd_store import epilogue, normalizers, stage_out
from .fwd_uniform import uniform_if, wait_and_rescale
from .softmax import LOG2E, NEG_INF, online_softmax, p_registers, pack_p, rescale
from .steps import (key_blocks, mask_if_needed, mma_pv, mma_qk, release as release_stage,
                    snake)
from .tiles import PANEL, ROW, Work, s32_of as _s32


RESCALE_SLACK = 8.0    # Config.lazy_rescale: the row max moves only when it grows by > 8 (log2)


def build_forward(c: Config, dtype: PtxType, d: int, mask: Mask = Mask(), *,
                  scale: float, softcap: float = 0.0, sms: int = 132, arch: str = "sm_90a",
                  layout: str = "dense", group: int = 1):
    """The forward kernel for one (plan, dtype, head dim, mask, softmax scale, softcap,
    layout). With ``softcap``, S becomes ``softcap * tanh(S * scale / softcap)`` before the
    softmax (``mul.f32`` + ``tanh.approx.f32`` per element, the cap folded into the FMA's
    scale). ``sms``: the persistent grid's size (``Config.persistent``). ``layout``: see
    :func:`schedule` (``group``: the query heads per K/V head that ``packed`` puts in one
    tile). A head dim of 96 fills its second 64-column panel half (TMA writes zeros past
    column 96; Q·Kᵀ stops at k = 96, P·V is n96)."""
    if d % 32 or not PANEL <= d <= 256:
        raise ValueError(f"head dim {d}: this kernel takes multiples of 32 from {PANEL} "
                         f"to 256")
    es = dtype.bytes
    L = Smem(c, d, es)
    BN, S, P = c.block_n, c.stages, padded(d) // PANEL
    BM, NC = c.block_m, c.consumers
    scale_log2 = float(scale) * LOG2E
    if softcap:
        scale_log2 = float(softcap) * LOG2E
    sched = schedule(c, dtype, d, mask, layout, group)
    dyn = c.dynamic and layout in ("dense", "packed")
    # the ordered varlen kernel follows its order pass (:mod:`.varlen_order`) as a
    # programmatic dependent: its CTAs are placed and set up while that pass runs
    pdl = layout == "varlen" and pdl_for(arch)
    tma_out = getattr(sched, "tma_out", False)
    ins, outs = sched.specs()
    names = sched.arg_names
    if dyn:                     # the tile counter, last: the kernel leaves it zero
        outs, names = (*outs, Tile(1, b32)), (*names, "counter")
    s_mma = f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.{dtype.name}.{dtype.name}"
    o_mma = f"wgmma.mma_async.sync.aligned.m64n{d}k16.f32.{dtype.name}.{dtype.name}"
    late = c.late_epilogue and layout in ("dense", "packed")
    oq = c.o_in_q and tma_out     # Config.o_in_q: Q is released after the epilogue's stores
    qd = c.q_double               # Config.q_double: the tiles take Q's two buffers in turn
    wait = functools.partial(ring_wait, suspend_ns=c.suspend_ns)
    name = (f"attention_fwd_{dtype.name}_d{d}_n{BN}_s{S}_{mask.tag}"
            f"{'_pp' if c.pingpong else ''}{'_persistent' if c.persistent else ''}"
            f"{'_cap' if softcap else ''}{f'_m{BM}' if NC != 2 else ''}"
            f"{'_lazy' if c.lazy_rescale else ''}{'_l2' if c.head_sections else ''}"
            f"{f'x{c.section_mb}' if c.section_mb else ''}"
            f"{'_dyn' if dyn else ''}"
            f"{'' if layout == 'dense' else '_' + layout}{group if group > 1 else ''}"
            f"{'_tmastore' if tma_out else ''}"
            f"{'_w1' if tma_out and c.store_wait_once else ''}"
            f"{'_late' if late else ''}"
            f"{'_oq' if oq else ''}"
            f"{'_uc' if c.uniform_cons else ''}"
            f"{'_q2' if qd else ''}{'_sus' if c.suspend_ns else ''}"
            f"{'_ka' if c.k_ahead else ''}")

    @kernel(in_specs=ins, out_specs=outs, arg_names=names,
            grid=grid_for(c, sms, sched),
            block=((1 + NC) * 128, 1, 1), arch=arch, name=name, min_ctas_per_sm=1, pdl=pdl)
    def attention_fwd(*args):
        labels = itertools.count()
        if dyn:
            pcount, = ptx.global_ptrs(args[-1])
            args = args[:-1]
        sched.prologue(args)
        tq, tk, tv, po, pl = sched.tq, sched.tk, sched.tv, sched.po, sched.pl
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        wg, lane = tid >> 7, tid & 127
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        ncta = reg.scalar(u32); ptx.inst.mov.u32(ncta, ptx.special.nctaid.x())
        tiles = sched.count()
        base = smem.alloc(u8, (L.total,), align=1024, dynamic=True).base
        qfull, qempty = base + L.qfull, base + L.qempty
        kfull, vfull = base + L.kfull, base + L.vfull
        kempty, vempty = base + L.kempty, base + L.vempty
        with ptx.if_(tid == 0):
            ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(qfull), 1)
            ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(qempty), NC)
            if qd:
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(base + L.qbar2), 1)
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(base + L.qbar2, 8), NC)
            for s in range(S):
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(kfull, 8 * s), 1)
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(vfull, 8 * s), 1)
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(kempty, 8 * s), NC)
                ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(vempty, 8 * s), NC)
            ptx.inst("fence.mbarrier_init.release.cluster")
        ptx.inst("bar.sync", 0)
        after_previous_kernel(pdl)        # varlen: the order pass's entries are written

        def locate(t):
            """Tile ``t``'s :class:`.tiles.Work`."""
            if c.persistent and sched.causal_order and not dyn:   # longest-first: balance
                t = snake(t, cta, ncta, tiles)
            return sched.locate(t)

        def tile(t):
            """Tile ``t`` (:mod:`.tiles`) and its K/V blocks ``n_lo .. n_hi``."""
            w = locate(t)
            return (w, *key_blocks(sched, mask, BM, BN, w.m0, w.sq, w.sk))

        def if_valid(w):
            """Varlen: a tile number no m-block has does nothing (in every warpgroup)."""
            return ptx.if_(w.valid) if w.valid is not None else _nothing()

        with ptx.if_(wg == 0):
            # ------------------------------------------------------------ producer
            ptx.inst("setmaxnreg.dec.sync.aligned.u32", c.producer_regs)
            with ptx.if_(tid == 0):
                ring = Ring(S)
                vring = Ring(S) if c.k_ahead else None      # V's slots, a block behind K's
                qring = Ring(2) if qd else None
                qphase = qring.phase if qd else reg.scalar(u32, init=0)

                def publish(t, qe):
                    """Wait until the consumers are done with Q (its empty barrier ``qe``);
                    dynamic: then write the tile number into the buffer's words, which
                    they read once its full barrier's next phase completes."""
                    wait(labels, qe, qphase ^ 1)
                    if dyn:
                        words = base + tile_words(L, qring)
                        for i in range(NC):
                            ptx.inst("st.shared.u32", ptx.addr(words, 4 * i), t)

                def produce(t):
                    w, off, n_lo, n_hi = tile(t)
                    with if_valid(w):
                        qf, qe, q_at = q_buffer(L, qfull, qempty, qring)
                        publish(t, qe)
                        ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink,
                                 ptx.addr(qf), L.q_bytes)
                        for p in range(P):
                            ptx.tma.load(base + q_at + p * BM * ROW if qd else
                                         base + (L.q + p * BM * ROW), tq,
                                         sched.q_coords(p, w), qf)
                        q_next(qring, qphase)

                        def load(kv, rg, j):
                            """Block ``j`` of K or V into ``rg``'s slot, once it is free."""
                            full, free, tmap, dst = kv
                            wait(labels, free + rg.slot * 8, rg.phase ^ 1)
                            fb = full + rg.slot * 8
                            ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64",
                                     ptx.sink, ptx.addr(fb), L.kv_bytes)
                            at = base + dst + rg.slot * L.kv_bytes
                            for p in range(P):
                                ptx.tma.load(at + p * BN * ROW if p else at, tmap,
                                             sched.kv_coords(p, w, j), fb)
                        K, V = (kfull, kempty, tk, L.k), (vfull, vempty, tv, L.v)
                        if not c.k_ahead:
                            for j in ptx.range_(n_lo, n_hi):
                                load(K, ring, j)
                                load(V, ring, j)
                                ring.advance()
                        else:   # K(j + 1) before V(j): V(j)'s slot frees last
                            for j in ptx.range_(n_lo, n_hi):
                                load(K, ring, j)
                                ring.advance()
                                with ptx.if_(j > n_lo):
                                    load(V, vring, j - 1)
                                    vring.advance()
                            with ptx.if_(n_hi > n_lo):
                                load(V, vring, n_hi - 1)
                                vring.advance()

                if dyn:
                    t = reg.scalar(u32)
                    ptx.inst.mov.u32(t, cta)
                    top, done = (ptx.new_label(f"{x}{next(labels)}") for x in ("tile", "end"))
                    ptx.place(top)
                    ptx.bra(done, pred=t >= tiles)
                    # the next tile, on its way while this one's loads are issued
                    got = reg.scalar(u32)
                    ptx.inst.atom.relaxed.gpu.global_.add.u32(got, ptx.addr(pcount), 1)
                    produce(t)
                    # a launch makes one add per tile: the last leaves the counter zero
                    with ptx.if_(got == tiles - 1):
                        ptx.inst.st.relaxed.gpu.global_.u32(ptx.addr(pcount), 0)
                    ptx.inst.add.u32(t, got, ncta)
                    ptx.bra(top, uni=True)
                    ptx.place(done)
                    qf, qe, _ = q_buffer(L, qfull, qempty, qring)
                    publish(t, qe)                  # a number past the last tile: stop
                    ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink, ptx.addr(qf))
                else:
                    for t in ptx.range_(cta, tiles, ncta):
                        produce(t)
        with ptx.else_():
            # ------------------------------------------------------------ consumers
            ptx.inst("setmaxnreg.inc.sync.aligned.u32", c.consumer_regs)
            cons = consumer_index(wg, c.uniform_cons)
            warp, lw = lane >> 5, lane & 31
            fcol = (lw & 3) * 2
            s_acc = ptx.wgmma.accumulator(BN)
            ring = Ring(S)
            qring = Ring(2) if qd else None
            qphase = qring.phase if qd else reg.scalar(u32, init=0)
            sk_s = _s32(sched.sk) if hasattr(sched, "sk") else None   # else per tile
            p_regs = p_registers(BN)
            vslot, vphase = reg.scalar(u32), reg.scalar(u32)   # the stage P·V reads next
            if late:    # Config.late_epilogue: O's accumulator; O, m, l and the number of
                o_late = ptx.wgmma.accumulator(d, init=0.0)   # the tile whose epilogue is
                kept = ([reg.scalar(f32, init=0.0) for _ in range(len(o_late))],  # pending
                        [reg.scalar(f32, init=NEG_INF) for _ in range(2)],   # (and 1 / l)
                        [reg.scalar(f32, init=0.0) for _ in range(2)],
                        [reg.scalar(f32, init=0.0) for _ in range(2)])
                # (the Work fields the epilogue reads: no re-locating, whose registers
                # ptxas lacks beside the wgmma in flight, C7511)
                prev = {f: reg.scalar(u32, init=0) for f in ("m0", "head", "batch", "hkv")}
                pending = reg.scalar(u32, init=0)

            def rows_of(w):
                """This thread's rows ``row0`` and ``row0 + 8`` of tile ``w`` (packed) and
                their sequence positions."""
                row0 = w.m0 + cons * 64 + warp * 16 + (lw >> 2)
                urows = [row0, row0 + 8]
                return urows, [sched.pos(_s32(r)) for r in urows]

            def write_out(w, urows, rows, o_acc, m, l, late=None):
                """Tile ``w``'s epilogue: O / l (through the staging buffer and TMA
                stores, or st.global) and the LSE (``late``: see :func:`.stage_out`)."""
                packed = rows if sched.group == 1 else [_s32(r) for r in urows]
                whole = sched.whole(w, cons) if tma_out else None
                if tma_out:
                    stage_out(o_acc, l, lane, lw, warp, cons, base + L.o, sched, w, d,
                              dtype, BM, NC, late=late, whole=whole)
                epilogue(o_acc, m, l, packed, urows, fcol, lw, po, pl, sched, w, d, dtype,
                         store=~whole if whole is not None else not tma_out, late=late)

            def settle(restart=True):
                """``Config.late_epilogue``: the pending tile's epilogue, then (``restart``)
                O, m and l zero, -inf and zero for the tile under way. No divergent
                branch and no wgmma accumulator read: the tile's first Q·Kᵀ is in flight
                (ptxas would serialize every wgmma; see :func:`.fwd_store.stage_out`)."""
                o_out, m, l, inv_l = kept
                w = Work(**prev, sq=sched.sq, sk=sched.sk)   # (none yet: nothing stored)
                write_out(w, *rows_of(w), o_out, m, l, late=(inv_l, pending != 0))
                if tma_out and not c.store_wait_once:
                    ptx.tma.wait(0, read=True, pred=lane == 0)
                if restart:     # O after the Q·Kᵀ retires (see fwd_store._scaled)
                    ptx.inst("wgmma.wait_group.sync.aligned", 0)
                    for x in list(o_late) + l:
                        ptx.inst.mov.f32(x, 0.0)
                    for x in m:
                        ptx.inst.mov.f32(x, NEG_INF)

            def consume(t):
                w, off, n_lo, n_hi = tile(t)
                m0, sk_t = w.m0, sk_s if sk_s is not None else _s32(w.sk)
                with if_valid(w):
                    my_qfull, my_qempty, q_at = q_buffer(L, qfull, qempty, qring)
                    urows, rows = rows_of(w)
                    if late:
                        o_acc, (_, m, l, _) = o_late, kept
                    else:
                        o_acc = ptx.wgmma.accumulator(d, init=0.0)
                        m = [reg.scalar(f32, init=NEG_INF) for _ in range(2)]
                        l = [reg.scalar(f32, init=0.0) for _ in range(2)]
                    # Q_c: this consumer's 64 rows of every panel, as K-major descriptors.
                    q_desc = ptx.wgmma.descriptor(base + q_at + cons * (64 * ROW), leading=16,
                                                  stride=1024, swizzle=128)

                    def s_gemm():
                        """Wait for K in the ring's stage; S = Q_c·Kᵀ, d/16 wgmmas, one group."""
                        wait(labels, kfull + ring.slot * 8, ring.phase)
                        mma_qk(s_mma, s_acc, q_desc, base + L.k + ring.slot * L.kv_bytes, d,
                               BM, BN)

                    def pv_gemm():
                        """Wait for V in stage ``vslot``; O += P·V with P from registers."""
                        wait(labels, vfull + vslot * 8, vphase)
                        mma_pv(o_mma, o_acc, p_regs, base + L.v + vslot * L.kv_bytes, BN)

                    def release(bars, slot):
                        """One arrival per consumer warpgroup on the stage's empty barrier."""
                        release_stage(lane, bars, slot)

                    def scores(j):
                        """S of block j (its wgmma retired) -> P in place; returns the rows'
                        alpha."""
                        sv = list(s_acc)
                        if softcap:
                            for x in sv:
                                ptx.inst.mul.f32(x, x, float(scale) / float(softcap))
                                ptx.inst("tanh.approx.f32", x, x)
                        mask_if_needed(sv, j, BN, rows, fcol, off, sk_t, mask, cons, m0,
                                       sched)
                        return online_softmax(sv, m, l, scale_log2,
                                              RESCALE_SLACK if c.lazy_rescale else 0.0)

                    def my_turn():
                        """Ping-pong: wait until the previous consumer has issued its wgmmas."""
                        if c.pingpong:
                            ptx.inst("bar.sync", 1 + cons, 256)

                    def your_turn(pred=None):
                        """Ping-pong: hand the tensor cores to the next consumer (in turn
                        0, 1, .., NC - 1, 0, ..)."""
                        if c.pingpong:
                            nxt = 2 - cons if NC == 2 else 1 + (cons + 1) % NC
                            ptx.inst("bar.arrive", nxt, 256, pred=pred)

                    def next_stage():
                        """P·V of this block reads this stage's V in the next step."""
                        ptx.inst.mov.u32(vslot, ring.slot)
                        ptx.inst.mov.u32(vphase, ring.phase)
                        ring.advance()

                    if not dyn:                     # (dynamic: waited for the tile number)
                        wait(labels, my_qfull, qphase)

                    def first_issue():
                        my_turn()
                        s_gemm()
                        your_turn()

                    def first(issue=True):
                        if issue:
                            first_issue()
                            ptx.inst("wgmma.wait_group.sync.aligned", 0)
                        release(kempty, ring.slot)
                        scores(n_lo)                    # O is still zero: nothing to rescale
                        pack_p(list(s_acc), p_regs, dtype.name)

                    # Block j's softmax runs while P·V of block j - 1 is on the tensor cores:
                    # S(j) is issued first, then P(j-1)·V(j-1); wait_group 1 retires S(j) only.
                    def step(j):
                        my_turn()
                        s_gemm()
                        pv_gemm()
                        your_turn()
                        ptx.inst("wgmma.wait_group.sync.aligned", 1)
                        release(kempty, ring.slot)
                        alphas = scores(j)
                        if c.lazy_rescale:
                            wait_and_rescale(o_acc, alphas, 1 + 2 * NC + cons)
                        else:
                            ptx.inst("wgmma.wait_group.sync.aligned", 0)
                        release(vempty, vslot)
                        if not c.lazy_rescale:
                            rescale(list(o_acc), alphas)
                        pack_p(list(s_acc), p_regs, dtype.name)
                        next_stage()

                    def start(issue=True, finish=True):
                        """The tile's first block: its Q·Kᵀ issued, then retired and its
                        softmax (``Config.late_epilogue``: one or the other)."""
                        if c.pingpong and issue:        # consumer 0 issues first
                            ptx.inst("bar.arrive", 1, 256, pred=cons == NC - 1)
                        if not finish:
                            first_issue()
                        else:
                            first(issue=issue)

                    def tile_blocks():
                        if late:    # the last tile's epilogue under this one's first Q·Kᵀ
                            start(finish=False)     # (in one branch with its wait: ptxas
                            settle()                # serializes every wgmma otherwise)
                        start(issue=not late)
                        next_stage()
                        for j in ptx.range_(n_lo + 1, n_hi):
                            step(j)
                        if not oq:                      # every S of the tile has retired
                            release(my_qempty, 0)
                        my_turn()
                        pv_gemm()               # the tile's last P·V
                        # (the last consumer's last hand-over would have no taker: every
                        # bar.sync of each barrier is matched by exactly one bar.arrive)
                        your_turn(pred=cons == 0 if NC == 2 else cons != NC - 1)
                        ptx.inst("wgmma.wait_group.sync.aligned", 0)
                        release(vempty, vslot)
                    if late:
                        uniform_if(labels, n_lo < n_hi, tile_blocks, settle)
                    else:
                        with ptx.if_(n_lo < n_hi):
                            tile_blocks()
                    if not oq:
                        with ptx.if_(n_lo >= n_hi):     # no key: Q is free at once
                            release(my_qempty, 0)
                    q_next(qring, qphase)
                    if late:        # O out of the accumulator and 1 / l, for the next tile
                        for x, y in zip(kept[0] + kept[3], list(o_acc) + normalizers(l)):
                            ptx.inst.mov.f32(x, y)
                        for f, x in prev.items():
                            ptx.inst.mov.u32(x, getattr(w, f))
                        ptx.inst.mov.u32(pending, 1)
                    else:
                        write_out(w, urows, rows, o_acc, m, l)
                if tma_out and not (c.store_wait_once or late):   # the staging buffer
                    with ptx.if_(lane == 0):                     # outlives the last store
                        ptx.tma.wait(0, read=True)
                        if oq:                  # (Q's buffer: the next Q may come now)
                            ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink,
                                     ptx.addr(my_qempty))

            if dyn:
                t = reg.scalar(u32)
                top, done = (ptx.new_label(f"{x}{next(labels)}") for x in ("tile", "end"))
                ptx.place(top)
                qf = q_buffer(L, qfull, qempty, qring)[0]
                wait(labels, qf, qphase)
                words = base + tile_words(L, qring)
                ptx.inst("ld.shared.u32", t, ptx.addr(words + (cons << 2)))
                # every thread of the warpgroup has read its word before lane 0 releases Q
                # (after which the producer writes the next)
                ptx.inst("bar.sync", 1 + 2 * NC + cons, 128)
                ptx.bra(done, pred=t >= tiles)
                consume(t)
                ptx.bra(top, uni=True)
                ptx.place(done)
            else:
                for t in ptx.range_(cta, tiles, ncta):
                    consume(t)
            if late:
                settle(restart=False)
            if tma_out and c.store_wait_once:   # each tile's stage_out waits before it
                with ptx.if_(lane == 0):        # writes the buffer; the CTA's last stores
                    ptx.tma.wait(0, read=True)  # must have read it before the CTA ends

    return attention_fwd


@contextlib.contextmanager
def _nothing():
    yield


__all__ = ["build_forward", "schedule", "grid_for", "Smem"]
