"""Asynchronous copies into shared memory in flight: TMA box loads and 1-D bulk copies
(``.mbarrier::complete_tx::bytes``) land when a thread needs their mbarrier, not at issue.

At issue (:func:`start`) the copy's writes are checked as the issuing thread's (races with
earlier accesses, buffers a bulk store or a wgmma still reads, bytes another copy is still
writing) and its destination bytes are marked pending: until it lands, any access to them
is an error naming the copy (:func:`describe`, called by :mod:`.access`). A copy lands
(:func:`land`) as late as the schedule allows: when a wait on the mbarrier it completes on
is not yet satisfied, when every scheduled unit waits, or when the kernel ends. Landing
writes the bytes, stamps them with the landing step and completes the transaction bytes on
the mbarrier with what the issuing warp knew at issue, so only a thread that acquires that
phase (or learns of it through a later edge) is ordered after the copy's writes; a thread
that merely met the issuer at a ``bar.sync`` is not.
"""
from __future__ import annotations


class Copy:
    __slots__ = ("instr", "thread", "dests", "bars", "known", "complete")

    def __init__(self, instr, thread, dests, bars, known, complete):
        self.complete = complete  # semantics.mbarrier.mbarrier_complete_tx
        self.instr = instr
        self.thread = thread
        self.dests = dests      # [(space, byte offsets, bytes to write)]
        self.bars = bars        # [(mbarrier offset, transaction bytes)]
        self.known = known      # the issuing warp's happens-before row at issue


def _copies(mach) -> list:
    c = getattr(mach, "in_flight", None)
    if c is None:
        c = mach.in_flight = []
    return c


def start(mach, instr, t: int, dests, bars, complete) -> None:
    """Issue a copy by thread ``t``: ``dests`` ``[(space, byte offsets, data bytes)]`` (its
    writes, already checked with :func:`.access.track`), ``bars`` ``[(mbarrier offset,
    bytes)]``: where its transaction bytes complete (through ``complete``)."""
    for sp, b, _ in dests:
        tr = sp.tracker
        if tr is not None and tr.reads:
            tr.pending[b] += 1           # (a copy's bytes are distinct)
            tr.any_pending = True
    _copies(mach).append(Copy(instr, t, dests, bars, mach.hb.K[t // 32].copy(), complete))


def land(mach, bars=None) -> bool:
    """Land the copies completing on any mbarrier offset in ``bars`` (all: None), in issue
    order; whether any landed."""
    copies = _copies(mach)
    if not copies:
        return False
    go = [c for c in copies if bars is None or any(o in bars for o, _ in c.bars)]
    if not go:
        return False
    mach.in_flight = [c for c in copies if all(c is not g for g in go)]
    for c in go:
        for sp, b, data in c.dests:
            tr = sp.tracker
            if tr is not None and tr.reads:
                tr.pending[b] -= 1
                tr.w_step[b] = mach.steps
                tr.any_pending = bool(tr.pending.any())
            sp.buf[b] = data
            sp.version += 1
        w = c.thread // 32
        v = c.known.copy()
        v[w] = mach.steps
        for off, n in c.bars:
            c.complete(mach, off, n, c.instr, c.thread, release=v)
    mach.events += 1
    return True


def describe(mach, sp, byte: int):
    """The in-flight copy writing shared byte ``byte`` of ``sp``, or None."""
    for c in _copies(mach):
        for s, b, _ in c.dests:
            if s is sp and (b == byte).any():
                return c
    return None
