"""Where a memory operand points: per-thread addresses, and the state space and byte
offsets they resolve to, checked.

:func:`addresses` evaluates an address operand (a register or a symbol, plus an
offset) for every thread. :func:`check` resolves addresses to (space, offsets) groups:
an address must be a multiple of the access size (a ``.v4.f32`` access needs 16) and
lie inside one allocation of its state space; shared- and global-memory accesses then
go through the detectors (:func:`.access.track`). Generic addresses are global memory
or fall in one of the :data:`WINDOWS`; shared addresses carry the CTA's rank in its
cluster (:mod:`.cluster`).
"""
from __future__ import annotations

import numpy as np

from ..core import ir
from . import cluster
from .access import track
from .memory import SHARED_WINDOW


WINDOWS = {"shared": SHARED_WINDOW, "local": 0x7D00_0000_0000, "const": 0x7C00_0000_0000,
           "param": 0x7B00_0000_0000}


def space_of(m) -> str | None:
    s = m.chosen.get("space") or m.chosen.get("dst")
    if s is None:
        return None
    return "shared" if s.startswith("shared") else s


def addresses(mach, instr, op: ir.Addr, mask) -> np.ndarray:
    """Per-thread uint64 addresses of a memory operand (all threads; read under ``mask``)."""
    if isinstance(op.base, ir.Symbol):
        base = np.asarray(mach.symbol_address(op.base, instr), np.uint64)
        return np.broadcast_to(base + np.uint64(op.offset & 0xFFFFFFFFFFFFFFFF),
                               (mach.T,)).copy()
    r = mach.read_reg(op.base, mask, instr)
    a = r.astype(np.uint64) if r.dtype.itemsize == 8 else r.astype(np.uint64)
    return a + np.uint64(op.offset % (1 << 64))


def _cluster_space(instr) -> bool:
    """Whether the instruction addresses shared memory as ``.shared::cluster``."""
    c = instr.match.chosen
    return "shared::cluster" in (c.get("space"), c.get("dst"))


def _desc(write: bool) -> str:
    return "write" if write else "read"


def check(mach, instr, threads, addr, space: str | None, nbytes: int, write: bool,
          race: bool = True, kind: str | None = None):
    """Resolve addresses of ``threads`` to (space name, offsets) groups; raise on bad accesses."""
    mis = (addr % np.uint64(nbytes)) != 0
    if mis.any():
        k = int(np.argmax(mis))
        mach.fail(instr, f"misaligned {nbytes}-byte {space or 'generic'} {_desc(write)} at "
                         f"address {int(addr[k]):#x}: the address must be a multiple of "
                         f"{nbytes}", int(threads[k]))
    groups = []
    if space is None:  # generic addressing: global, or one of the windows
        sh = (addr >= np.uint64(SHARED_WINDOW)) & (addr < np.uint64(SHARED_WINDOW + (1 << 32)))
        pw = WINDOWS["param"]
        pa = (addr >= np.uint64(pw)) & (addr < np.uint64(pw + (1 << 32)))
        gl = ~sh & ~pa
        for sel, name, shift in ((gl, "global", 0), (sh, "shared", SHARED_WINDOW),
                                 (pa, "param", pw)):
            if sel.any():
                groups.append((name, sel, addr[sel] - np.uint64(shift)))
    else:
        if space == "shared":  # shared addresses are 32-bit offsets in the shared window
            addr = addr & np.uint64(0xFFFFFFFF)
        groups.append((space, np.ones(len(threads), bool), addr))
    out = []
    for name, sel, a in groups:
        sp = mach.spaces[name]
        th = threads[sel]
        rows = None
        if name == "shared":  # this CTA's row, or a peer's (a shared::cluster address)
            a, rows = cluster.shared_rows(mach, instr, th, a,
                                          space is None or _cluster_space(instr))
        ok = sp.in_bounds(a, nbytes)
        if not ok.all():
            k = int(np.argmax(~ok))
            peer = (f" in the shared memory of the cluster's CTA of rank "
                    f"{int(rows[k]) % mach.cluster_size}" if rows is not None and
                    rows[k] != mach.cta[th[k]] else "")
            mach.fail(instr, f"out of bounds {name} {_desc(write)} of {nbytes} bytes at address "
                             f"{int(a[k]):#x}{peer} ({sp.nearest(int(a[k]))})", int(th[k]))
        off = sp.offsets(a, rows)
        if race:
            track(mach, instr, sp, th, off, nbytes, kind or ("write" if write else "read"))
        out.append((sp, sel, off))
    return out
