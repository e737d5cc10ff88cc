"""The backward's dQ writer warp (``BwdConfig.dq_warp``): warp 1 of the producer warpgroup
adds the consumers' staged dQ to the global accumulator, so that a consumer warpgroup
hands its stage over with a non-blocking ``bar.arrive`` instead of a 128-thread
``bar.sync`` followed by one of its own threads issuing the TMA reduce-add and, a step
later, waiting for the bulk group's reads (FlashAttention-3's and -4's dQ store warp).

Two named barriers per consumer warpgroup ``w``, each of its 128 threads and the writer's
32: ``FULL + w`` (the consumer arrives after staging and ``fence.proxy.async``, the writer
waits) and ``EMPTY + w`` (the writer arrives once the reduce-adds have read the stage,
the consumer waits before it stages the next step). The writer arrives at ``EMPTY`` once
before its first step and the consumer waits once after its last, so each barrier's
arrivals and waits pair up."""
from __future__ import annotations

from ...core.types import s32
from ...dsl import ptx, reg
from .bwd_cols import stage_panels
from .bwd_config import BLOCK_M as BM, BwdConfig
from .bwd_det import pass_turn, spin, turn_of
from .bwd_detpipe import det_step
from .fwd import _s32

FULL, EMPTY = 4, 6          # named barrier ids (+ w); 0-3 are the kernel's others
THREADS = 128 + 32          # a consumer warpgroup and the writer warp


def take_stage(w) -> None:
    """Consumer warpgroup ``w``: wait until the writer has read the last staged dQ."""
    ptx.inst("bar.sync", EMPTY + w, THREADS)


def hand_stage(w) -> None:
    """Consumer warpgroup ``w``: the stage is written; hand it to the writer."""
    ptx.inst("fence.proxy.async.shared::cta")
    ptx.inst("bar.arrive", FULL + w, THREADS)


def stage_frag(regs, stage_w, lane) -> None:
    """``BwdConfig.dq_frag``: a warpgroup's dQ accumulator into its stage as its registers
    lie, registers ``4k .. 4k + 3`` as the 16 bytes at ``(128 k + lane)·16``."""
    regs, at = list(regs), stage_w + lane * 16
    for k in range(len(regs) // 4):
        ptx.inst("st.shared.v4.f32", ptx.addr(at, k * 128 * 16), regs[4 * k:4 * k + 4])


def frag_block(dq_acc, bh, m0, d: int, w=None):
    """``dq_frag``'s global address of warpgroup ``w``'s 64 x 64 block (its 64-column
    piece ``w``) of the 64 rows from ``m0`` of (batch, head) row ``bh``."""
    at = ptx.global_ptr(dq_acc) + (bh * ptx.dim("SQP") + m0) * (d * 4)
    return at if w is None else at + w * (BM * 64 * 4)


def add_frag(frag_at, stage_w, nbytes: int) -> None:
    """``dq_frag``: a stage in fragment order added to its block by one 1-D bulk reduction
    (a bulk group's; the caller commits)."""
    ptx.inst("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32", ptx.addr(frag_at),
             ptx.addr(stage_w), nbytes)


def reduce_boxes(c: BwdConfig, d: int, tdq, dqc, w, m0, head, stage_w, frag_at=None) -> None:
    """TMA reduce-add of warpgroup ``w``'s stage (``stage_w``) into the rows from ``m0``:
    32-column swizzled boxes (or 64-column rows), at the columns the warpgroup computed.
    ``frag_at`` (``BwdConfig.dq_frag``): the stage's 64 rows in fragment order, added by
    one 1-D bulk reduction to that global address (the block's rows in the same order)."""
    if c.dq_frag:
        add_frag(frag_at, stage_w, BM * c.wg_cols(d) * 4)
        return
    box = 32 if c.dq_swizzle else 64
    panels = stage_panels(c, d) if c.panel_split else None
    for ch in range(c.wg_cols(d) // box):
        col = w * panels[ch][1] + panels[ch][0] if panels else \
            w * c.wg_cols(d) + ch * box if c.dq_split or c.col_split else ch * box
        ptx.tma.reduce(tdq, dqc(col, m0, head), stage_w + ch * BM * box * 4)


def writer(c: BwdConfig, d: int, *, lane, tdq, dqc, stage_of, group, hk, heads, m_range,
           bm, det=None, start: bool = True, end: bool = True, frag=None) -> None:
    """The writer warp's loop over the consumers' steps (``lane``: its lane; ``stage_of(w)``:
    warpgroup ``w``'s stage; ``heads(gi)``: the query head and its (batch, head) row;
    ``m_range``: the consumers' ``ptx.range_`` over row blocks, in their order;
    ``det``: the deterministic mode's ``(sem, sem_mb(mb), nb, off, mask, labels, bn, desc,
    poll)`` (``poll``: det_poll's shared words, or a false value),
    the turns taken by the writer's lane 0 as the consumer's would; ``start``, ``end``:
    the first arrivals and the last wait, where kv_pair walks a second key block between
    them: the consumers hand their stages on across it); ``frag(m0, bh, w)``: dq_frag's
    global address of warpgroup ``w``'s block of the 64 rows from ``m0`` of row ``bh``)."""
    if start:
        writer_start()
    if det and det[-1]:      # det_poll: nothing read ahead of the first step
        with ptx.if_(lane == 0):
            for i in range(2):
                ptx.inst("st.shared.u32", ptx.addr(det[-1](), 4 * i), 0)
    rows = bm > BM       # block_m 128: warpgroup w staged rows m0 + 64 w .. (its own turn)
    for gi in ptx.range_(0, group):
        head, bh = heads(gi)
        for mb in ptx.range_(*m_range):
            m0 = mb * bm
            if det and c.det_pipe and (c.dq_split or c.col_split or rows):  # (bwd_detpipe)
                # (det_poll: the walk's next row block, where there is one)
                nxt = None if not det[-1] else \
                    (mb - 1, _s32(mb) > _s32(m_range[1]) + 1) if len(m_range) == 3 else \
                    (mb + 1, _s32(mb) + 1 < _s32(m_range[1]))
                _det_pipe_step(c, d, lane, tdq, dqc, stage_of, head, bh, mb, m0, rows, det,
                               nxt, frag)
                continue
            for w in range(2):
                ptx.inst("bar.sync", FULL + w, THREADS)
                # (rows: none when the last block's second half is past SQP's padded rows)
                m0w = m0 + w * BM if rows else m0
                with ptx.if_((lane == 0) & (_s32(m0w) < _s32(ptx.dim("SQP")))
                             if rows else lane == 0):
                    # the consumer fenced before arriving; fencing again here keeps the
                    # order checkable when it has fenced its next step's dSᵀ since (the
                    # CPU interpreter remembers a warp's latest proxy fence only)
                    ptx.inst("fence.proxy.async.shared::cta")
                    if det:
                        sem, sem_mb, nb, off, mask, labels, bn, desc, _ = det
                        split = c.dq_split or c.col_split or rows
                        smb = 2 * sem_mb(mb) + w if rows else sem_mb(mb)
                        at = ptx.global_ptr(sem) + (bh * ptx.dim("NMB") + smb) * 4
                        spin(at, turn_of(nb, m0, off, mask, reg.scalar(s32, init=w), split,
                                         bn, 1 if rows else 2, desc), split, labels)
                    reduce_boxes(c, d, tdq, dqc, w, m0w, head, stage_of(w),
                                 frag and frag(m0w, bh, w))
                    ptx.inst("cp.async.bulk.commit_group")
                    if det:                  # the adds land before the turn passes
                        ptx.inst("cp.async.bulk.wait_group", 0)
                        pass_turn(at)
                    ptx.inst("cp.async.bulk.wait_group.read", 0)
                ptx.inst("bar.arrive", EMPTY + w, THREADS)
    if end:
        writer_end(c, lane)


def writer_start() -> None:
    """The writer's first arrivals: both stages free before the consumers' first step."""
    for w in range(2):
        ptx.inst("bar.arrive", EMPTY + w, THREADS)


def writer_end(c: BwdConfig, lane) -> None:
    """The writer's last wait (``dq_exit_read``: the kernel's end makes the adds visible)."""
    with ptx.if_(lane == 0):
        ptx.inst("cp.async.bulk.wait_group.read" if c.dq_exit_read else
                 "cp.async.bulk.wait_group", 0)


def _det_pipe_step(c: BwdConfig, d: int, lane, tdq, dqc, stage_of, head, bh, mb, m0, rows,
                   det, nxt, frag=None) -> None:
    """``det_pipe``: one row block's turns and adds (:func:`.bwd_detpipe.det_step`) through
    one semaphore word: the warpgroups' disjoint columns share the block's word (two turns
    a key block), and with ``block_m`` 128 the word of the block's first 64-row half takes
    one turn a key block for both halves (its adds, none past SQP's padded rows, then one
    landing and one release: a word a half polled and released each, as the plain writer
    has them, doubled the writer's serial path a block, measured past the step's length).
    ``nxt``: the walk's next row block and whether there is one (``det_poll`` reads its
    word early, into the shared word at ``poll()``)."""
    sem, sem_mb, nb, off, mask, labels, bn, desc, poll = det

    guard = (lambda w: _s32(m0 + w * BM) < _s32(ptx.dim("SQP"))) if rows else \
        (lambda w: None)
    smb = (lambda m: 2 * sem_mb(m)) if rows else sem_mb
    at = lambda m: ptx.global_ptr(sem) + (bh * ptx.dim("NMB") + smb(m)) * 4
    turns = 1 if rows else 2             # a key block's turns on the word

    def words():
        return [(at(mb), turn_of(nb, m0, off, mask, reg.scalar(s32, init=0), True, bn,
                                 turns, desc), turns, None)]

    def next_words():
        mn, has = nxt
        return [(at(mn), has)]

    def add(w):
        m0w = m0 + w * BM if rows else m0
        reduce_boxes(c, d, tdq, dqc, w, m0w, head, stage_of(w), frag and frag(m0w, bh, w))
    det_step(2, lane, words=words, add=add, full=FULL, empty=EMPTY, threads=THREADS,
             labels=labels, guard=guard, ahead=(poll, next_words) if poll else None)


__all__ = ["writer", "writer_start", "writer_end", "take_stage", "hand_stage", "reduce_boxes",
           "stage_frag", "frag_block", "add_frag", "FULL", "EMPTY"]
