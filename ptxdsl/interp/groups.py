"""Bulk groups' copies still in flight (:mod:`.semantics.bulk`): which shared bytes a TMA store
or a bulk copy may still be reading until its issuing thread retires its group, and the
check that no write lands on them before then (called by :func:`.access.track`)."""
from __future__ import annotations

import numpy as np


class BulkState:
    """Per batch: committed group counts per thread and the copies not yet retired."""

    def __init__(self, T: int):
        self.groups = np.zeros(T, np.int64)
        self.pending: list = []      # [thread, group, instr, shared offsets read or None]


def state(mach) -> BulkState:
    st = getattr(mach, "bulk", None)
    if st is None:
        st = mach.bulk = BulkState(mach.T)
    return st


def issued(mach, instr, t: int, sp=None, read_off=None) -> None:
    """A bulk-group copy by thread ``t`` was issued; it reads shared bytes ``read_off``
    (offsets in ``sp``, each byte) until its group is retired."""
    st = state(mach)
    if read_off is not None and len(read_off):
        tr = sp.tracker
        if tr is not None and tr.reads:
            np.add.at(tr.reading, read_off, 1)
            tr.n_reading += len(read_off)
            tr.any_reading = True
    st.pending.append([t, int(st.groups[t]), instr, read_off])


def overwrite(mach, instr, sp, b: np.ndarray, t) -> None:
    """A write of shared bytes ``b`` that a bulk copy may still be reading: an error."""
    busy = sp.tracker.reading[b] > 0
    if not busy.any():
        return
    byte = int(b[np.argmax(busy)])
    copy = next((p for p in state(mach).pending
                 if p[3] is not None and (p[3] == byte).any()), None)
    addr = sp.base + byte % sp.row_bytes
    if copy is None:
        mma = next((p for p in getattr(mach, "wgmma_pending", ())
                    if any((r == byte).any() for r in p.reads)), None)
        if mma is not None:
            mach.fail(instr, f"writes shared memory at {addr:#x} ({sp.nearest(addr)}) that "
                             f"the wgmma.mma_async at {mma.instr.loc} (warpgroup of thread "
                             f"{mach.tid_str(int(mma.threads[0]))}) may still be reading as "
                             f"an operand: it reads until wgmma.wait_group retires its group; "
                             f"wait for it (wgmma.commit_group, wgmma.wait_group N), then "
                             f"hand the buffer over", int(t))
    by = (f"the bulk copy at {copy[2].loc} (thread {mach.tid_str(copy[0])})"
          if copy else "a bulk copy")
    mach.fail(instr, f"writes shared memory at {addr:#x} ({sp.nearest(addr)}) that {by} may "
                     f"still be reading: the issuing thread must retire its group first "
                     f"(cp.async.bulk.commit_group, then cp.async.bulk.wait_group.read N), "
                     f"then hand the buffer over (a barrier)", int(t))


def retire(mach, entries) -> None:
    for t, g, instr, off in entries:
        if off is not None and len(off):
            tr = mach.spaces["shared"].tracker
            if tr is not None and tr.reads:
                np.add.at(tr.reading, off, -1)
                tr.n_reading -= len(off)
                tr.any_reading = tr.n_reading > 0


def at_exit(mach) -> None:
    """A bulk copy whose group its thread never retired when the kernel ends: the CTA's
    shared memory may be handed to the next CTA while the copy still reads it."""
    st = getattr(mach, "bulk", None)
    if st is not None and st.pending:
        t, _, instr, _ = st.pending[0]
        mach.fail(instr, "this bulk copy's group is not retired when its thread exits: the "
                         "CTA's shared memory may be reused while the copy still reads it; "
                         "commit and wait for it (cp.async.bulk.commit_group, then "
                         "cp.async.bulk.wait_group.read 0) before the kernel ends", int(t))
