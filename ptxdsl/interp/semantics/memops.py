"""Memory instructions: ld, st, atom, red, cvta, cp.async and mbarrier.

Every access is checked before it is served: its address must be a multiple
of its size (a ``.v4.f32`` access needs 16) and it must lie inside one
allocation of its state space; shared- and global-memory accesses then go through the
race detector. Atomics apply in ascending thread order (deterministic), are
exempt from race detection among themselves, and ``atom.global.add.f32``
flushes subnormals as the hardware does (``.shared`` does not).

mbarrier: arrivals, expected and completed transaction bytes and phases live in
``mach.mbarriers`` keyed by the shared byte offset of the object (the byte counts are
checked by :mod:`.transactions`);
:func:`mbarrier_expect_tx` and :func:`mbarrier_complete_tx` are the entry points
for asynchronous (bulk / tensor) copies. Waits park the warp (see
:mod:`.schedule`) until the phase completes.
"""
from __future__ import annotations

import numpy as np

from ..core import ir
from . import fround as fr
from . import cluster, transactions
from .memory import SHARED_WINDOW
from .access import track
from .schedule import Blocked
from .semantics import handler
from .values import UINT

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


# ------------------------------------------------------------------------ ld / st
def _strong(m) -> bool:
    """ld/st.relaxed/.acquire/.release/.volatile: morally strong, like atomics they do not
    race with each other, and they synchronise through their address (see :mod:`.hb`)."""
    return m.chosen.get("sem", "weak") != "weak"
@handler("ld")
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


@handler("st")
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
    strong = _strong(m)
    for sp, sel, off in check(mach, instr, threads, addr, space_of(m), t.bytes * n, True,
                              kind="atomic" if strong else None):
        if strong:
            mach.hb.atomic(sp.name, off, threads[sel])
        sp.write(off, vals[sel])


# ------------------------------------------------------------------------ atomics
def _atomic_op(op, t, global_f32_add: bool):
    ftz = fr.FMTS["f32"]

    def add(cur, b, c):
        if global_f32_add:
            x = fr.flush_subnormal(cur.view(np.uint32), ftz).view(np.float32)
            y = fr.flush_subnormal(np.asarray(b, np.float32).view(np.uint32), ftz).view(np.float32)
            r = (x + y).astype(np.float32)
            return fr.canonical_nan(fr.flush_subnormal(r.view(np.uint32), ftz),
                                    ftz).view(np.float32)
        return (cur + b).astype(cur.dtype)

    return {
        "add": add,
        "min": lambda cur, b, c: np.minimum(cur, b),
        "max": lambda cur, b, c: np.maximum(cur, b),
        "inc": lambda cur, b, c: np.where(cur >= b, 0, cur + 1).astype(cur.dtype),
        "dec": lambda cur, b, c: np.where((cur == 0) | (cur > b), b, cur - 1).astype(cur.dtype),
        "cas": lambda cur, b, c: np.where(cur == b, c, cur).astype(cur.dtype),
        "exch": lambda cur, b, c: np.broadcast_to(b, cur.shape).astype(cur.dtype),
        "and": lambda cur, b, c: cur & b,
        "or": lambda cur, b, c: cur | b,
        "xor": lambda cur, b, c: cur ^ b,
    }[op]


def atomic(mach, instr, mask, has_dest: bool):
    m = instr.match
    t = m.type
    op = m.chosen["op"]
    threads = np.flatnonzero(mask)
    ai = 1 if has_dest else 0
    addr = addresses(mach, instr, instr.operands[ai], mask)[threads]
    b = np.broadcast_to(np.asarray(mach.src(instr, ai + 1, mask)).astype(t.np_dtype),
                        (mach.T,))[threads]
    c = None
    if op == "cas":
        c = np.broadcast_to(np.asarray(mach.src(instr, ai + 2, mask)).astype(t.np_dtype),
                            (mach.T,))[threads]
    olds = np.zeros(len(threads), t.np_dtype)
    for sp, sel, off in check(mach, instr, threads, addr, space_of(m), t.bytes, True,
                              kind="atomic"):
        mach.hb.atomic(sp.name, off, threads[sel])
        sel = np.flatnonzero(sel)
        fn = _atomic_op(op, t, t.name == "f32" and op == "add" and sp.name == "global")
        order = np.lexsort((sel, off))
        offs, idx = off[order], sel[order]
        uniq, start, counts = np.unique(offs, return_index=True, return_counts=True)
        group = np.repeat(np.arange(len(uniq)), counts)
        rank = np.arange(len(offs)) - start[group]
        cur = sp.read(uniq, t.np_dtype, 1)[:, 0].copy()
        if op == "add" and t.is_int:  # prefix sums give every thread its old value at once
            vals = b[idx]
            csum = np.cumsum(vals, dtype=t.np_dtype)
            before = csum - vals
            base_sum = (csum[start] - vals[start])[group]
            olds[idx] = (cur[group] + (before - base_sum)).astype(t.np_dtype)
            tot = np.add.reduceat(vals, start).astype(t.np_dtype) if len(vals) else vals
            cur = (cur + tot).astype(t.np_dtype)
        else:
            for k in range(int(counts.max()) if len(counts) else 0):
                pos = np.flatnonzero(rank == k)
                g = group[pos]
                olds[idx[pos]] = cur[g]
                cur[g] = fn(cur[g], b[idx[pos]], None if c is None else c[idx[pos]])
        sp.write(uniq, cur[:, None])
    if has_dest:
        full = np.zeros(mach.T, t.np_dtype)
        full[threads] = olds
        mach.dst(instr, 0, full, mask)


@handler("atom")
def atom(mach, instr, mask):
    atomic(mach, instr, mask, True)


@handler("red")
def red(mach, instr, mask):
    atomic(mach, instr, mask, False)


@handler("cvta")
def cvta(mach, instr, mask):
    m = instr.match
    t = m.type
    a = np.asarray(mach.src(instr, 1, mask)).astype(np.uint64)
    space = m.chosen.get("space", "global")
    w = np.uint64(WINDOWS.get(space, 0))
    r = a - w if m.has("to") else a + w
    mach.dst(instr, 0, r.astype(UINT[t.bits]).view(t.np_dtype), mask)


# L2 eviction priorities in the order createpolicy's encoding below numbers them.
_PRIORITIES = ("L2::evict_normal", "L2::evict_first", "L2::evict_last", "L2::evict_unchanged")


@handler("createpolicy")
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


# ------------------------------------------------------------------------ cp.async
@handler("cp.async.bulk.prefetch.L2")
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


@handler("discard")
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


@handler("cp.async")
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


@handler("cp.async.commit_group")
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


@handler("cp.async.wait_group")
def cp_async_wait_group(mach, instr, mask):
    _complete(mach, mask, int(instr.operands[0].value))


@handler("cp.async.wait_all")
def cp_async_wait_all(mach, instr, mask):
    mach.async_groups[mask] += 1
    _complete(mach, mask, 0)


# ------------------------------------------------------------------------ mbarrier
def _mbar_targets(mach, instr, mask):
    threads = np.flatnonzero(mask)
    addr = addresses(mach, instr, instr.operands[[isinstance(o, ir.Addr)
                                                  for o in instr.operands].index(True)], mask)
    space = space_of(instr.match)
    out = []
    for sp, sel, off in check(mach, instr, threads, addr[threads], space, 8, True, race=False):
        out.extend(zip(threads[sel].tolist(), off.tolist()))
    return out


def _mbar_state(mach, instr, t, key):
    st = mach.mbarriers.get(key)
    if st is None:
        mach.fail(instr, "mbarrier object used before mbarrier.init (or after mbarrier.inval)",
                  t)
    return st


@handler("mbarrier.init")
def mbarrier_init(mach, instr, mask):
    count = np.broadcast_to(np.asarray(mach.src(instr, 1, mask)).astype(np.int64), (mach.T,))
    for t, off in _mbar_targets(mach, instr, mask):
        mach.mbarriers[off] = {"expected": int(count[t]), "pending": int(count[t]), "phase": 0,
                               "tx": 0}
    mach.events += 1


def _phase_done(mach, off: int, st) -> None:
    """Complete the current phase once its arrivals and transaction bytes are all in."""
    if st["pending"] == 0 and st["tx"] == 0:
        st["phase"] += 1
        st["pending"] = st["expected"]
        transactions.new_phase(st)
        mach.hb.mbarrier_complete(off)
        mach.events += 1


def mbarrier_expect_tx(mach, off: int, nbytes: int, instr=None, thread=None) -> None:
    """Add ``nbytes`` expected transaction bytes to the current phase of the mbarrier at
    shared byte offset ``off`` (as ``expect_tx`` does)."""
    transactions.expect(mach, mach.mbarriers[off], int(nbytes), instr, thread)


def mbarrier_complete_tx(mach, off: int, nbytes: int, instr=None, thread=None) -> None:
    """An asynchronous copy delivered ``nbytes`` to the mbarrier at shared byte offset
    ``off`` (``Space.offsets`` of its address): the phase completes when the count reaches
    zero with no arrivals pending. For bulk / tensor copies (``.mbarrier::complete_tx``):
    write the copied bytes first (through :func:`.access.track` as writes of the issuing
    ``thread``), then call this with that ``thread``, so that a consumer's acquire of the
    phase orders the copy's writes before its reads."""
    st = mach.mbarriers.get(off)
    if st is None:
        mach.fail(instr, "an asynchronous copy completes on an mbarrier that was never "
                         "initialised (mbarrier.init)", thread)
    if thread is not None:      # the copy's writes happen before the phase completes
        mach.hb.mbarrier_arrive(off, int(thread))
    transactions.complete(mach, st, int(nbytes), instr, thread)
    _phase_done(mach, off, st)


def _by_barrier(targets) -> dict:
    """``{offset: [threads, in order]}`` of ``_mbar_targets``' pairs."""
    groups: dict = {}
    for t, off in targets:
        groups.setdefault(off, []).append(t)
    return groups


def _arrive(mach, instr, mask, tx=None):
    """Arrivals, one barrier at a time: threads arriving on one barrier within its phase's
    remaining count are taken together (the same tokens, one release per warp); arrivals
    that would run past the phase go one by one."""
    tokens = np.zeros(mach.T, np.uint64)
    txv = None if tx is None else np.broadcast_to(np.asarray(tx).astype(np.int64), (mach.T,))
    for off, ts in _by_barrier(_mbar_targets(mach, instr, mask)).items():
        st = _mbar_state(mach, instr, ts[0], off)
        if len(ts) > st["pending"]:
            for t in ts:
                _arrive_one(mach, instr, st, off, t, txv)
            continue
        tokens[ts] = st["phase"]
        if txv is not None:
            transactions.expect(mach, st, int(txv[ts].sum()), instr, ts[0])
        st["pending"] -= len(ts)
        transactions.arrived(mach, st, instr, ts[-1])
        seen = set()
        for t in ts:
            if t // 32 not in seen:
                seen.add(t // 32)
                mach.hb.mbarrier_arrive(off, t)
        _phase_done(mach, off, st)
    mach.events += 1
    mach.dst(instr, 0, tokens, mask)


def _arrive_one(mach, instr, st, off, t, txv):
    if txv is not None:
        transactions.expect(mach, st, int(txv[t]), instr, t)
    st["pending"] -= 1
    if st["pending"] < 0:
        mach.fail(instr, "mbarrier received more arrivals than its expected count", t)
    transactions.arrived(mach, st, instr, t)
    mach.hb.mbarrier_arrive(off, t)
    _phase_done(mach, off, st)


@handler("mbarrier.arrive")
def mbarrier_arrive(mach, instr, mask):
    _arrive(mach, instr, mask)


@handler("mbarrier.arrive.expect_tx")
def mbarrier_arrive_expect_tx(mach, instr, mask):
    _arrive(mach, instr, mask, mach.src(instr, 2, mask))


def _wait(mach, instr, mask, parity: bool):
    """Parked (Blocked) until the phase completed for every thread, then true and an
    acquire; when nothing else can progress it may give up and return false."""
    arg = np.broadcast_to(np.asarray(mach.src(instr, 2, mask)).astype(np.int64), (mach.T,))
    done = np.zeros(mach.T, bool)
    targets = _mbar_targets(mach, instr, mask)
    groups = _by_barrier(targets)
    for off, ts in groups.items():
        st = _mbar_state(mach, instr, ts[0], off)
        a = arg[ts]
        done[ts] = (st["phase"] & 1) != (a & 1) if parity else st["phase"] > a
    if (mask & ~done).any():
        t = int(np.argmax(mask & ~done))
        off = dict(targets)[t]
        sp = mach.spaces["shared"]

        def what():
            st = mach.mbarriers.get(off, {})
            want = (f"the phase with parity {int(arg[t]) & 1}" if parity
                    else f"phase {int(arg[t])}")
            text = (f"the mbarrier {sp.nearest(sp.base + off % sp.row_bytes)} to complete "
                    f"{want} (it is in phase {st.get('phase')}, waiting for "
                    f"{st.get('pending')} more arrivals and {st.get('tx')} transaction bytes)")
            if st and st["pending"] == 0 and st["tx"] > 0:
                text += (f"; every arrival is in but {st['tx']} announced bytes never arrived: "
                         f"{transactions.summary(st)}")
            return text
        raise Blocked(what, fallback=lambda: mach.dst(instr, 0, done, mask))
    for off, ts in groups.items():           # one acquire per warp and barrier
        seen = set()
        for t in ts:
            if t // 32 not in seen:
                seen.add(t // 32)
                mach.hb.mbarrier_acquire(off, t)
    mach.dst(instr, 0, done, mask)


@handler("mbarrier.test_wait")
def mbarrier_test_wait(mach, instr, mask):
    _wait(mach, instr, mask, False)


@handler("mbarrier.try_wait")
def mbarrier_try_wait(mach, instr, mask):
    _wait(mach, instr, mask, instr.match.has("parity"))


@handler("mbarrier.inval")
def mbarrier_inval(mach, instr, mask):
    for _, off in _mbar_targets(mach, instr, mask):
        mach.mbarriers.pop(off, None)
