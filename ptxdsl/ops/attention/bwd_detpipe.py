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
shared word; one per word with ``block_m`` 128's word per warpgroup). dQ's bits are those
of the plain writer: the same adds in the same order of key blocks.
"""
from __future__ import annotations

from contextlib import nullcontext

from ...dsl import ptx
from .bwd_det import pass_turn, spin


def _lane0(lane, guard):
    return ptx.if_((lane == 0) & guard if guard is not None else lane == 0)


def det_step(nw: int, lane, *, words, add, full: int, empty: int, threads: int,
             labels, guard=lambda w: None) -> None:
    """One row block's adds by the writer warp (lane 0 issues). ``words()``: the block's
    semaphore words as ``(at, turn, passes, guard)`` (recomputed where used, so that no
    register lives across the barriers: the producer warpgroup's budget is small); warpgroup
    ``w`` adds (``add(w)``: the reduce-adds of its stage) where ``guard(w)`` (None: always)
    holds; ``full + w`` / ``empty + w``: its named barriers of ``threads``."""
    with ptx.if_(lane == 0):
        for at, turn, _, g in words():
            with ptx.if_(g) if g is not None else nullcontext():
                spin(at, turn, True, labels)
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
        ptx.inst("cp.async.bulk.wait_group", 0)      # landed: now the turns pass
        for at, _, passes, g in words():
            with ptx.if_(g) if g is not None else nullcontext():
                pass_turn(at, passes)


__all__ = ["det_step"]
