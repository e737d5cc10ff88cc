"""Row sums across the threads of a row, for row-wise kernels."""
from __future__ import annotations

from ...dsl import ptx, reg, smem
from ...core.types import f32, u32

WARP = 32


class RowSum:
    """Sum a per-thread f32 over the ``T`` threads of a row; every thread gets the total.

    ``T <= 32``: a butterfly over ``T`` lanes (several rows per warp). Larger rows:
    a full-warp butterfly, lane 0 of each warp writes its partial to shared memory,
    one ``bar.sync``, then every thread adds the partials itself (vector loads from
    shared memory; no second barrier, no serial thread). In a loop the partials
    alternate between two buffers, so one call's writes cannot race the previous
    call's reads and one barrier per call is enough.

    ``groups`` > 1: the CTA holds that many rows at once, ``T`` threads each (``tid``
    is then the thread's place in its row, ``group`` its row's register); each group
    of more than a warp has its own partials and meets at its own named barrier
    (``bar.sync 1 + group, T``), so the rows' sums do not wait for one another; rows of
    a warp or less need neither.
    """

    def __init__(self, T: int, tid, *, looped: bool, groups: int = 1, group=None):
        self.T = T
        self.tid = tid
        self.nwarps = max(1, T // WARP)
        self.looped = looped
        self.group = group if groups > 1 else None
        # Rows of one warp or less sum by shuffles alone: any number of groups. Wider rows
        # meet at a named barrier per group (1..15; 0 is the CTA's).
        if groups > 1 and T > WARP and (group is None or T % WARP or groups > 15):
            raise ValueError(f"RowSum: {groups} row groups of {T} threads need a group "
                             f"register, whole warps per row and at most 15 groups (named "
                             f"barriers 1..15); rows of at most {WARP} threads take any "
                             f"number")
        if T > WARP:
            # Rows padded to 4 floats: the partials are read with 16-byte loads.
            pad = -(-self.nwarps // 4) * 4
            bufs = 2 if looped else 1
            self.partials = smem.alloc(f32, (bufs, pad) if self.group is None else
                                       (bufs, groups, pad))
            self.buf = reg.scalar(u32, init=0) if looped else None
            if self.group is not None:
                self.barrier = reg.scalar(u32)
                ptx.inst.add.u32(self.barrier, self.group, 1)

    def __call__(self, acc):
        T = self.T
        if T == 1:
            return acc
        if T <= WARP:
            ptx.warp.reduce_sum(acc, width=T)
            return acc
        ptx.warp.reduce_sum(acc)
        tid, W = self.tid, self.nwarps
        row = self.buf if self.looped else 0
        at = (row,) if self.group is None else (row, self.group)
        with ptx.if_((tid & (WARP - 1)) == 0):
            self.partials[at + (tid >> 5,)] = acc
        if self.group is None:
            ptx.bar.sync(0)
        else:
            ptx.bar.sync(self.barrier, T)
        total = reg.scalar(f32, init=0.0)
        base = self.partials.addr(at + (0,))
        i = 0
        while i < W:
            n = 4 if W - i >= 4 else (2 if W - i >= 2 else 1)
            vals = [reg.scalar(f32) for _ in range(n)]
            ptx.inst(f"ld.shared{'.v%d' % n if n > 1 else ''}.f32", vals if n > 1 else vals[0],
                     ptx.addr(base.base, base.offset + 4 * i))
            for v in vals:
                ptx.inst.add.f32(total, total, v)
            i += n
        if self.looped:
            ptx.inst.xor.b32(self.buf, self.buf, 1)
        return total


class RowSumMax:
    """A row's f32 sum and f32 max at once (every thread gets both): :class:`RowSum`'s
    schedule, not in a loop, with both values in one shared-memory exchange.

    ``T <= 32``: ``ptx.warp.reduce_sum`` and ``reduce_max`` over ``T`` lanes. Larger
    rows: both butterflies over the full warp, lane 0 of each warp writes its two
    partials (``st.shared.f32``), **one** ``bar.sync``, then every thread folds the
    per-warp sums (``add.f32``) and maxima (``max.f32``) itself, with ``ld.shared.v4``
    loads.
    """

    def __init__(self, T: int, tid):
        self.T = T
        self.tid = tid
        self.nwarps = max(1, T // WARP)
        if T > WARP:
            self.partials = smem.alloc(f32, (2, -(-self.nwarps // 4) * 4))

    def __call__(self, acc, top):
        T = self.T
        if T == 1:
            return acc, top
        if T <= WARP:
            ptx.warp.reduce_sum(acc, width=T)
            ptx.warp.reduce_max(top, width=T)
            return acc, top
        ptx.warp.reduce_sum(acc)
        ptx.warp.reduce_max(top)
        tid = self.tid
        with ptx.if_((tid & (WARP - 1)) == 0):
            self.partials[0, tid >> 5] = acc
            self.partials[1, tid >> 5] = top
        ptx.bar.sync(0)
        return (_fold(self.partials.addr(0, 0), self.nwarps, "add"),
                _fold(self.partials.addr(1, 0), self.nwarps, "max"))


def _fold(base, count: int, op: str):
    """``op.f32`` (add or max) over ``count`` f32 at ``base`` in shared memory, read with
    the widest ``ld.shared`` vectors that fit, into a new register (0 to start: the maxima
    folded here are of absolute values)."""
    out = reg.scalar(f32, init=0.0)
    i = 0
    while i < count:
        n = 4 if count - i >= 4 else (2 if count - i >= 2 else 1)
        vals = [reg.scalar(f32) for _ in range(n)]
        ptx.inst(f"ld.shared{'.v%d' % n if n > 1 else ''}.f32", vals if n > 1 else vals[0],
                 ptx.addr(base.base, base.offset + 4 * i))
        for v in vals:
            ptx.inst(f"{op}.f32", out, out, v)
        i += n
    return out
