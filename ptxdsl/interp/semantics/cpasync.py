"""``cp.async`` (global -> shared, 4 to 16 bytes a thread) and its groups.

A copy reads its global source when issued; its shared destination is written when
the issuing thread's ``cp.async.wait_group`` / ``wait_all`` retires its group. Until
then the destination bytes are marked pending: any access to them is an error (see
:mod:`ptxdsl.interp.access`).
"""
from __future__ import annotations

import numpy as np

from ..access import track
from ..addressing import addresses, check


def cp_async(mach, instr, mask):
    threads = np.flatnonzero(mask)
    size = int(instr.operands[2].value)
    src_size = size
    if len(instr.operands) > 3:
        s = np.broadcast_to(np.asarray(mach.src(instr, 3, mask)).astype(np.int64), (mach.T,))
        src_size = s[threads]
    dst = addresses(mach, instr, instr.operands[0], mask)[threads]
    src = addresses(mach, instr, instr.operands[1], mask)[threads]
    (gsp, _, goff), = check(mach, instr, threads, src, "global", size, False)
    data = gsp.read(goff, np.uint8, size).copy()
    beyond = np.arange(size)[None, :] >= np.reshape(src_size, (-1, 1))
    data = np.where(beyond, np.uint8(0), data)  # bytes past src-size are zero-filled
    for sp, _, off in check(mach, instr, threads, dst, "shared", size, True, race=False):
        _pending(sp, off, size, 1)
    mach.async_copies.append((threads, dst, data, mach.async_groups[threads].copy(), instr))


def _pending(sp, off, size, delta):
    """Mark (``delta`` 1) or clear (-1) bytes an unfinished cp.async is writing."""
    tr = sp.tracker
    if tr is None:
        return
    np.add.at(tr.pending, (off[:, None] + np.arange(size)).reshape(-1), delta)
    tr.any_pending = bool(tr.pending.any())


def cp_async_commit(mach, instr, mask):
    mach.async_groups[mask] += 1


def _complete(mach, mask, keep_newest: int | None):
    rest = []
    for threads, dst, data, gid, instr in mach.async_copies:
        sel = mask[threads]
        if keep_newest is not None:
            sel &= gid < mach.async_groups[threads] - keep_newest
        if sel.any():
            for sp, _, off in check(mach, instr, threads[sel], dst[sel], "shared", data.shape[1],
                                    True, race=False):
                _pending(sp, off, data.shape[1], -1)
                track(mach, instr, sp, threads[sel], off, data.shape[1], "write")
                sp.write(off, data[sel])
            mach.events += 1
        if (~sel).any():
            rest.append((threads[~sel], dst[~sel], data[~sel], gid[~sel], instr))
    mach.async_copies = rest


def cp_async_wait_group(mach, instr, mask):
    _complete(mach, mask, int(instr.operands[0].value))


def cp_async_wait_all(mach, instr, mask):
    mach.async_groups[mask] += 1
    _complete(mach, mask, 0)


HANDLERS = {
    "cp.async": cp_async,
    "cp.async.commit_group": cp_async_commit,
    "cp.async.wait_group": cp_async_wait_group,
    "cp.async.wait_all": cp_async_wait_all,
}
