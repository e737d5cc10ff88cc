"""The dQ writer warp's deterministic turns, pipelined (``BwdConfig.det_pipe``): what the
writer of :mod:`.bwd_dqwarp` (and of :mod:`.bwd_wg3`) does per row block when the consumer
warpgroups add disjoint columns (``dq_split``, ``col_split``, ``block_m`` 128, ``wg3``).

The plain writer takes each warpgroup's stage in turn: wait for the stage, poll the
semaphore (an ``ld.acquire`` round trip to L2 even when the turn has come), reduce-add, wait
for the add to *land* (another round trip), pass one turn, and only then free the stage and
go on to the next warpgroup. So a key block's turn on a row block passes two (three with
wg3) landings after the block's stage was handed over, the next key block's CTA waits for
all of them, and at every one of a unit's co-resident key blocks the chain adds that delay
again (FlashAttention-3's writer spins before taking the stage, issues every warpgroup's
add, frees each stage once read, then passes the turn; read, not copied).

Here, per row block: the turn is polled *before* the stages are taken (while the
consumers still compute them); each warpgroup's add is issued as its stage arrives; the
stages are freed once the adds have read them (not landed); then one wait for all the
adds to land and one ``red.release`` passes the block's turns together (``+ nw`` on a
shared word; with ``block_m`` 128, ``+ 1`` on the word of the block's first half, which
serves both). dQ's bits are those of the plain writer: the same adds in the same order of
key blocks. Each poll and each release is a round trip to L2 of about half a microsecond
on an H200 (``lab/attention_bwd_det_trace.py``, in 73a4eec), so a block takes one of each.

With ``det_poll`` the next row block's semaphore is read while this block's adds land
(an ``ld.acquire`` whose L2 round trip the landing wait covers), so a writer that runs
behind its turns (they came long ago) skips the next step's first poll.
"""
from __future__ import annotations

from contextlib import nullcontext

from ...core.types import u32
from ...dsl import ptx, reg
from .bwd_det import pass_turn, spin


def _lane0(lane, guard):
    return ptx.if_((lane == 0) & guard if guard is not None else lane == 0)


def det_step(nw: int, lane, *, words, add, full: int, empty: int, threads: int,
             labels, guard=lambda w: None, ahead=None) -> None:
    """One row block's adds by the writer warp (lane 0 issues). ``words()``: the block's
    semaphore words as ``(at, turn, passes, guard)`` (recomputed where used, so that no
    register lives across the barriers: the producer warpgroup's budget is small); warpgroup
    ``w`` adds (``add(w)``: the reduce-adds of its stage) where ``guard(w)`` (None: always)
    holds; ``full + w`` / ``empty + w``: its named barriers of ``threads``. ``ahead``
    (``BwdConfig.det_poll``): ``(slot, next_words)``, the next row block's words
    (``next_words()``: ``(at, pred)``, read where ``pred`` holds) read while this block's
    adds land, each value kept in the shared u32 at ``slot() + 4 i`` (0: none read) for
    the next step's first poll."""
    with ptx.if_(lane == 0):
        for i, (at, turn, _, g) in enumerate(words()):
            with ptx.if_(g) if g is not None else nullcontext():
                seen = None
                if ahead:       # (a count only grows: an early value is a lower bound)
                    seen = reg.scalar(u32)
                    ptx.inst("ld.shared.u32", seen, ptx.addr(ahead[0](), 4 * i))
                spin(at, turn, True, labels, seen)
    for w in range(nw):
        ptx.inst("bar.sync", full + w, threads)
        with _lane0(lane, guard(w)):
            # (the consumer fenced before arriving; again here, as bwd_dqwarp says why)
            ptx.inst("fence.proxy.async.shared::cta")
            add(w)
            ptx.inst("cp.async.bulk.commit_group")
    with ptx.if_(lane == 0):
        ptx.inst("cp.async.bulk.wait_group.read", 0)
    for w in range(nw):
        ptx.inst("bar.arrive", empty + w, threads)
    with ptx.if_(lane == 0):
        if ahead:            # the next block's words, their L2 trip under the landing
            slot, next_words = ahead
            for i, (at, pred) in enumerate(next_words()):
                seen = reg.scalar(u32, init=0)
                with ptx.if_(pred):
                    ptx.inst.ld.acquire.gpu.global_.u32(seen, ptx.addr(at))
                ptx.inst("st.shared.u32", ptx.addr(slot(), 4 * i), seen)
        ptx.inst("cp.async.bulk.wait_group", 0)      # landed: now the turns pass
        for at, _, passes, g in words():
            with ptx.if_(g) if g is not None else nullcontext():
                pass_turn(at, passes)


__all__ = ["det_step"]
