"""Memory instructions: ld, st, atom, red, cvta, createpolicy, discard and the bulk L2
prefetch (cp.async: :mod:`.cpasync`; mbarrier: :mod:`.mbarrier`).

Every access is checked before it is served (:func:`ptxdsl.interp.addressing.check`):
its address must be a multiple of its size (a ``.v4.f32`` access needs 16) and it
must lie inside one allocation of its state space; shared- and global-memory accesses
then go through the race detector. Atomics: :mod:`.atomic`.
"""
from __future__ import annotations

import numpy as np

from ...core import ir
from ..addressing import WINDOWS, addresses, check, space_of
from ..values import UINT
from .atomic import atomic


# ------------------------------------------------------------------------ ld / st
def _strong(m) -> bool:
    """ld/st.relaxed/.acquire/.release/.volatile: morally strong, like atomics they do not
    race with each other, and they synchronise through their address (see
    :mod:`ptxdsl.interp.hb`)."""
    return m.chosen.get("sem", "weak") != "weak"


def ld(mach, instr, mask):
    m = instr.match
    t = m.type
    n = m.vector
    threads = np.flatnonzero(mask)
    addr = addresses(mach, instr, instr.operands[1], mask)[threads]
    vals = np.zeros((len(threads), n), t.np_dtype)
    strong = _strong(m)
    for sp, sel, off in check(mach, instr, threads, addr, space_of(m), t.bytes * n, False,
                              kind="strong_read" if strong else None):
        if strong:
            mach.hb.atomic(sp.name, off, threads[sel])
        vals[sel] = sp.read(off, t.np_dtype, n)
    dest = instr.operands[0]
    regs = dest.items if isinstance(dest, ir.Vec) else (dest,)
    for i, r in enumerate(regs):
        full = np.zeros(mach.T, t.np_dtype)
        full[threads] = vals[:, i]
        mach.write_reg(r, full, mask)


def st(mach, instr, mask):
    m = instr.match
    t = m.type
    n = m.vector
    threads = np.flatnonzero(mask)
    addr = addresses(mach, instr, instr.operands[0], mask)[threads]
    src = mach.src(instr, 1, mask)
    items = src if isinstance(src, list) else [src]
    vals = np.stack([np.broadcast_to(np.asarray(v).astype(t.np_dtype), (mach.T,))[threads]
                     for v in items], axis=1)
    if mach.warp_stores_merge:
        threads, addr, vals = _one_per_warp_address(threads, addr, vals)
    strong = _strong(m)
    for sp, sel, off in check(mach, instr, threads, addr, space_of(m), t.bytes * n, True,
                              kind="atomic" if strong else None):
        if strong:
            mach.hb.atomic(sp.name, off, threads[sel])
        sp.write(off, vals[sel])


def _one_per_warp_address(threads, addr, vals):
    """With ``mach.warp_stores_merge`` (imported PTX): lanes of one warp storing the same
    bits to the same address in one instruction make one write (compilers such as Triton
    store a warp-reduced value from every lane); lanes storing different values there stay
    several writes, which the detector reports. Traced kernels keep the stricter rule."""
    if len(threads) < 2:
        return threads, addr, vals
    key = np.stack([addr.astype(np.uint64), (threads // 32).astype(np.uint64)], axis=1)
    _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    if len(first) == len(threads):
        return threads, addr, vals
    bits = vals.view(f"u{vals.dtype.itemsize}") if vals.dtype.itemsize in (1, 2, 4, 8) else vals
    if not (bits == bits[first][inv.reshape(-1)]).all():
        return threads, addr, vals
    keep = np.sort(first)
    return threads[keep], addr[keep], vals[keep]


# ------------------------------------------------------------------------ atomics
def atom(mach, instr, mask):
    atomic(mach, instr, mask, True)


def red(mach, instr, mask):
    atomic(mach, instr, mask, False)


# ------------------------------------------------------------------------ addresses, cache
def cvta(mach, instr, mask):
    m = instr.match
    t = m.type
    a = np.asarray(mach.src(instr, 1, mask)).astype(np.uint64)
    space = m.chosen.get("space", "global")
    w = np.uint64(WINDOWS.get(space, 0))
    r = a - w if m.has("to") else a + w
    mach.dst(instr, 0, r.astype(UINT[t.bits]).view(t.np_dtype), mask)


_PRIORITIES = ("L2::evict_normal", "L2::evict_first", "L2::evict_last", "L2::evict_unchanged")


def createpolicy(mach, instr, mask):
    """A policy is an opaque 64-bit value that only steers the L2's eviction order, which
    the interpreter does not model (memory contents are the same under every policy).
    It encodes its settings so that two different policies never look equal."""
    m = instr.match
    primary = _PRIORITIES.index(m.chosen["primary"])
    secondary = _PRIORITIES.index(m.chosen.get("secondary", "L2::evict_unchanged"))
    if len(instr.operands) > 1:  # a constant or an f32 register
        frac = np.broadcast_to(np.asarray(mach.src(instr, 1, mask), np.float32), (mach.T,))
    else:
        frac = np.ones(mach.T, np.float32)
    bits = frac.view(np.uint32).astype(np.uint64)
    value = np.uint64((primary << 36) | (secondary << 32)) | bits
    mach.dst(instr, 0, value, mask)


def bulk_prefetch_l2(mach, instr, mask):
    """Only warms the L2, which the interpreter does not model: memory is unchanged. The
    range is still checked (16-byte aligned, a multiple of 16 bytes, inside one global
    allocation), so that a prefetch computed from a wrong row or length is reported
    here rather than fetching some other allocation's bytes on the GPU."""
    threads = np.flatnonzero(mask)
    if not len(threads):
        return
    addr = addresses(mach, instr, instr.operands[0], mask)[threads]
    size = np.broadcast_to(np.asarray(mach.src(instr, 1, mask)).astype(np.int64),
                           (mach.T,))[threads]
    sp = mach.spaces["global"]
    for k, (a, n) in enumerate(zip(addr, size)):
        if a % np.uint64(16) or n <= 0 or n % 16:
            mach.fail(instr, f"cp.async.bulk.prefetch.L2 of {int(n)} bytes at {int(a):#x}: the "
                             f"address must be 16-byte aligned and the size a positive "
                             f"multiple of 16", int(threads[k]))
        if not sp.in_bounds(np.asarray([a], np.uint64), int(n))[0]:
            mach.fail(instr, f"cp.async.bulk.prefetch.L2 of {int(n)} bytes at {int(a):#x} "
                             f"reaches outside its allocation ({sp.nearest(int(a))})",
                      int(threads[k]))


def discard(mach, instr, mask):
    """The line's contents become undefined on the GPU (the L2 drops it, and DRAM keeps
    whatever it held before): here its 128 bytes are overwritten with 0xFF (a NaN in
    every float type), so that a kernel reading a line after discarding it gets wrong
    answers in the interpreter too. A write for the race checks: a discard racing
    another thread's read of the line is reported."""
    threads = np.flatnonzero(mask)
    if not len(threads):
        return
    addr = addresses(mach, instr, instr.operands[0], mask)[threads]
    space = instr.match.chosen.get("space")
    for sp, sel, off in check(mach, instr, threads, addr, space, 128, True):
        if sp.name != "global":  # a generic address into another window
            mach.fail(instr, f"discard.L2 drops a line of global memory; the generic address "
                             f"{int(addr[sel][0]):#x} is in .{sp.name} memory",
                      int(threads[sel][0]))
        sp.write(off, np.full((int(sel.sum()), 128), 0xFF, np.uint8))


HANDLERS = {
    "ld": ld,
    "st": st,
    "atom": atom,
    "red": red,
    "cvta": cvta,
    "createpolicy": createpolicy,
    "cp.async.bulk.prefetch.L2": bulk_prefetch_l2,
    "discard": discard,
}
