"""Warp-level instructions: shfl.sync, vote.sync, match.sync, redux.sync, elect.sync,
bar.warp.sync and activemask.

Each is evaluated on ``(warps, 32)`` views of the thread arrays. The
``.sync`` rules are enforced: the executing lane must be in its membermask,
and every lane the membermask names must execute the same instruction (be
active here); a shuffle that reads a lane outside the membermask or an
inactive lane (an undefined value on hardware) is refused too.
"""
from __future__ import annotations

import numpy as np

from ...core import ir
from ..values import view

_LANES = np.arange(32, dtype=np.uint32)


def _per_thread(mach, v, dtype=np.uint32) -> np.ndarray:
    return np.broadcast_to(np.asarray(v).astype(dtype), (mach.T,))


def warp_active_bits(mach, mask) -> np.ndarray:
    """Per thread: the bit mask of lanes of its warp that are active in ``mask``."""
    bits = (mask.reshape(-1, 32).astype(np.uint64) << _LANES.astype(np.uint64)).sum(1)
    return np.repeat(bits.astype(np.uint32), 32)


def check_members(mach, instr, mask, members) -> np.ndarray:
    """Validate membermasks (``members``: per-thread uint32); returns active-lane bits."""
    act = warp_active_bits(mach, mask)
    own = ((members >> mach.lane) & 1).astype(bool)
    bad = mask & ~own
    if bad.any():
        t = int(np.argmax(bad))
        mach.fail(instr, f"lane {int(mach.lane[t])} executes it but is not in its membermask "
                         f"{int(members[t]):#010x}", t)
    missing = mask & ((members & ~act) != 0)
    if missing.any():
        t = int(np.argmax(missing))
        lanes = [i for i in range(32) if (int(members[t]) & ~int(act[t])) >> i & 1]
        mach.fail(instr, f"membermask {int(members[t]):#010x} names lanes {lanes} that do not "
                         f"execute this instruction (they took another branch or exited); "
                         f"every lane in the membermask must arrive", t)
    return act


def _pred_out(instr) -> int:
    """1 when the instruction was given its optional ``|p`` predicate destination."""
    slots = instr.match.operands
    return 1 if len(slots) > 1 and slots[1].role == "p" else 0


def _shuffled_source(mach, instr, i, mask):
    """shfl's source for every lane, and which lanes wrote it (None: all did, or reads
    are not checked). A lane's own never-written source is no error by itself: see shfl."""
    op = instr.operands[i]
    w = mach.written.get(op) if isinstance(op, ir.Reg) else True
    if w is True or not mach.check_init or (mach.held and op in mach.held):
        return mach.src(instr, i, mask), None
    raw = mach.regs.get(op)
    if raw is None:
        raw = np.zeros(mach.T, mach.store[op])
    t = instr.match.resolve_type(instr.match.operands[i].ty)
    return view(raw, t), (np.zeros(mach.T, bool) if w is None else w)


def _unwritten(mach, reg, lanes) -> None:
    """Mark ``reg`` as never written in ``lanes`` (a later read there is the error)."""
    w = mach.written.get(reg)
    w = np.ones(mach.T, bool) if w is True else (np.zeros(mach.T, bool) if w is None
                                                  else w.copy())
    w &= ~lanes
    mach.written[reg] = True if w.all() else w


def shfl(mach, instr, mask):
    """Triton (3.6) shuffles registers that some lanes never wrote and discards what
    those lanes' values became. So reading a never-written lane is not reported at the
    shuffle: the result is uninitialised in each lane that took such a value, and a later
    read of it in that lane is the error."""
    k = _pred_out(instr)
    a, wrote = _shuffled_source(mach, instr, 1 + k, mask)
    b = _per_thread(mach, mach.src(instr, 2 + k, mask)).astype(np.int64)
    c = _per_thread(mach, mach.src(instr, 3 + k, mask)).astype(np.int64)
    members = _per_thread(mach, mach.src(instr, 4 + k, mask))
    check_members(mach, instr, mask, members)
    lane = mach.lane.astype(np.int64)
    bval, cval, seg = b & 0x1F, c & 0x1F, (c >> 8) & 0x1F
    max_lane = (lane & seg) | (cval & ~seg)
    min_lane = lane & seg
    mode = instr.match.chosen["mode"]
    if mode == "up":
        j = lane - bval
        ok = j >= max_lane
    elif mode == "down":
        j = lane + bval
        ok = j <= max_lane
    elif mode == "bfly":
        j = lane ^ bval
        ok = j <= max_lane
    else:
        j = min_lane | (bval & ~seg)
        ok = j <= max_lane
    j = np.where(ok, j, lane)
    src = np.arange(mach.T) - lane + j
    readable = mask[src] & (((members >> j.astype(np.uint32)) & 1) == 1)
    bad = mask & ~readable
    if bad.any():
        t = int(np.argmax(bad))
        mach.fail(instr, f"lane {int(mach.lane[t])} reads lane {int(j[t])}, which is not in the "
                         f"membermask {int(members[t]):#010x} or is not active: the value is "
                         f"undefined on hardware", t)
    av = np.broadcast_to(np.asarray(a), (mach.T,))
    if wrote is None:
        mach.dst(instr, 0, av[src], mask)
    else:
        got = mask & wrote[src]
        mach.dst(instr, 0, av[src], got)
        d = instr.operands[0]
        if isinstance(d, ir.Reg) and (mask & ~got).any():
            _unwritten(mach, d, mask & ~got)
    if k:  # p: the source lane was in range (else d is this lane's own value)
        mach.dst(instr, 1, ok, mask)


def activemask(mach, instr, mask):
    mach.dst(instr, 0, warp_active_bits(mach, mask), mask)


def bar_warp_sync(mach, instr, mask):
    """Every lane of the membermask must arrive together (the interpreter runs a warp's
    active lanes in lockstep, so arriving is the whole of the wait).

    It also orders memory among the lanes taking part (PTX: bar.warp.sync guarantees
    memory ordering among the participating threads): where the membermask holds every
    active lane of a warp, the warp's lanes are synchronised for the race checks (the
    happens-before record is per warp, so a partial mask orders nothing)."""
    members = _per_thread(mach, mach.src(instr, 0, mask))
    check_members(mach, instr, mask, members)
    active = warp_active_bits(mach, mask).reshape(-1, 32)[:, 0]
    mem = members.reshape(-1, 32)
    act = mask.reshape(-1, 32)
    whole = (act.any(1) & np.all(~act | ((mem & active[:, None]) == active[:, None]), 1))
    mach.hb.lanesync[np.flatnonzero(whole)] = mach.steps


def vote(mach, instr, mask):
    p = _per_thread(mach, mach.src(instr, 1, mask), bool)
    members = _per_thread(mach, mach.src(instr, 2, mask))
    check_members(mach, instr, mask, members)
    ballot = warp_active_bits(mach, mask & p) & members
    mode = instr.match.chosen["mode"]
    if mode == "ballot":
        res = ballot.astype(np.uint32)
    elif mode == "all":
        res = ballot == members
    elif mode == "any":
        res = ballot != 0
    else:
        res = (ballot == 0) | (ballot == members)
    mach.dst(instr, 0, res, mask)


def _pairwise(mach, v):
    """(warps, 32, 32) comparison v[lane] == v[other] and (warps*32, 32) member bits."""
    w = np.broadcast_to(np.asarray(v), (mach.T,)).reshape(-1, 32)
    return w[:, :, None] == w[:, None, :]


def _member_matrix(members) -> np.ndarray:
    return ((members.reshape(-1, 32)[:, :, None] >> _LANES[None, None, :]) & 1).astype(bool)


def match(mach, instr, mask):
    v = mach.src(instr, 1, mask)
    members = _per_thread(mach, mach.src(instr, 2, mask))
    check_members(mach, instr, mask, members)
    eq = _pairwise(mach, v) & _member_matrix(members)
    bits = (eq.astype(np.uint64) << _LANES.astype(np.uint64)).sum(2).reshape(-1)
    bits = bits.astype(np.uint32)
    if instr.match.chosen["mode"] == "all":
        bits = np.where(bits == members, members, np.uint32(0)).astype(np.uint32)
    mach.dst(instr, 0, bits, mask)


def redux(mach, instr, mask):
    t = instr.match.type
    v = np.broadcast_to(np.asarray(mach.src(instr, 1, mask)), (mach.T,)).reshape(-1, 32)
    members = _per_thread(mach, mach.src(instr, 2, mask))
    check_members(mach, instr, mask, members)
    inc = _member_matrix(members)                    # (warps, lane, other)
    vals = np.broadcast_to(v[:, None, :], inc.shape)
    op = instr.match.chosen["op"]
    if op == "add":
        r = np.where(inc, vals.astype(np.uint64), 0).sum(2).astype(np.uint32).view(t.np_dtype)
    elif op in ("min", "max"):
        info = np.iinfo(t.np_dtype)
        ident = info.max if op == "min" else info.min
        r = getattr(np.where(inc, vals, ident), op)(2)
    else:
        ident = {"and": 0xFFFFFFFF, "or": 0, "xor": 0}[op]
        u = vals.view(np.uint32) if vals.dtype != np.uint32 else vals
        fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
        r = fn.reduce(np.where(inc, u, np.uint32(ident)), axis=2)
    mach.dst(instr, 0, np.asarray(r).reshape(-1).astype(t.np_dtype), mask)


def elect(mach, instr, mask):
    members = _per_thread(mach, mach.src(instr, 2, mask))
    act = check_members(mach, instr, mask, members)
    cand = (members & act).astype(np.uint64)
    low = cand & (~cand + np.uint64(1))
    leader = np.where(low == 0, 0, np.log2(np.maximum(low, 1)).astype(np.int64))
    mach.dst(instr, 0, leader.astype(np.uint32), mask)
    mach.dst(instr, 1, mach.lane.astype(np.int64) == leader, mask)


HANDLERS = {
    "shfl.sync": shfl,
    "activemask": activemask,
    "bar.warp.sync": bar_warp_sync,
    "vote.sync": vote,
    "match.sync": match,
    "redux.sync": redux,
    "elect.sync": elect,
}
