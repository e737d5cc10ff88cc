"""What the cluster RMSNorm kernels share: how a row splits over a cluster of CTAs, the
rank's slice of the row held as registers, and the row sum reduced through distributed
shared memory (DSMEM).

A row of ``n`` elements is ``chunks`` 16-byte (``vec``-element) chunks. A cluster of
``C`` CTAs shares the row: the CTA of rank ``r`` owns chunks ``r*T*K ... (r+1)*T*K - 1``
(``T`` threads, ``K`` chunks per thread), its thread ``t`` the chunks ``r*T*K + k*T + t``
(``k < K``): coalesced, 16 bytes per access. Chunks past the row's end (a ragged last
slice) are predicated off.

:class:`ClusterSum` forms a row's f32 sum across the whole cluster with one cluster
barrier: every warp's butterfly sum is pushed by lanes ``0..C-1`` into slot ``rank*W +
warp`` of each peer's slot array (``mapa.shared::cluster`` + ``st.shared::cluster.f32``),
``barrier.cluster.arrive`` (release) / ``barrier.cluster.wait`` (acquire), then every
warp sums the ``C*W`` slots of its own CTA, lane ``l`` the slots ``l, l+32, ...`` in that
order, and a butterfly: every thread of every CTA of the cluster adds the same values in
the same order, so all of them hold the same bits (IEEE addition commutes, and a xor
butterfly pairs the same two values in both lanes of a pair).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...dsl import ptx, reg, smem
from ...core.types import PtxType, b32, f32, u32

from .._common.rowio import RING_ALIGN, load_chunk, widen_pair

WARP = 32
MAX_CLUSTER = 16     # CTAs per cluster on sm_90 (more than 8: the non-portable size)


@dataclass(frozen=True)
class ClusterSplit:
    """A row of ``n`` elements over a cluster of ``cluster`` CTAs of ``threads`` threads,
    ``per_thread`` chunks of ``vec`` elements each per thread."""

    n: int
    vec: int
    cluster: int
    threads: int
    per_thread: int

    def __post_init__(self):
        if not 1 <= self.cluster <= MAX_CLUSTER:
            raise ValueError(f"a cluster holds 1 to {MAX_CLUSTER} CTAs, not {self.cluster}")
        if self.threads % WARP or not WARP <= self.threads <= 1024:
            raise ValueError(f"threads per CTA: a multiple of 32 up to 1024, not "
                             f"{self.threads}")
        if self.cluster * self.slice_chunks < self.chunks:
            raise ValueError(f"{self.cluster} CTAs x {self.threads} threads x "
                             f"{self.per_thread} chunks do not cover a row of {self.chunks} "
                             f"chunks")
        if (self.cluster - 1) * self.slice_chunks >= self.chunks:
            raise ValueError(f"the last of {self.cluster} CTAs would own no part of a row of "
                             f"{self.chunks} chunks: use fewer CTAs")

    @property
    def chunks(self) -> int:
        return -(-self.n // self.vec)

    @property
    def slice_chunks(self) -> int:
        """Chunks of the row each CTA owns (the last CTA's slice may be ragged)."""
        return self.threads * self.per_thread

    @property
    def ragged(self) -> bool:
        return self.cluster * self.slice_chunks != self.chunks

    @property
    def warps(self) -> int:
        return self.threads // WARP


class Slice:
    """This thread's place in its CTA's slice of the row: ``tid``, ``rank``, the byte
    offset ``first`` (in elements times the element size of each array: use
    :meth:`offset`) of its chunk 0 and ``preds[k]``, the guard of its chunk ``k`` (None
    where every CTA's chunk ``k`` is inside the row)."""

    def __init__(self, s: ClusterSplit, tid=None, rank=None):
        self.s = s
        if tid is None:
            tid = reg.scalar(u32)
            ptx.inst.mov.u32(tid, ptx.special.tid.x())
        if rank is None:
            rank = ptx.cluster.ctarank()
        self.tid, self.rank = tid, rank
        # chunk index of this thread's chunk 0 within the row
        self.chunk0 = rank * s.slice_chunks + tid
        # chunk k exists where chunk0 + k*T < chunks (only the last slice can be ragged)
        self.preds = [None if not s.ragged or (s.cluster - 1) * s.slice_chunks
                      + (k + 1) * s.threads <= s.chunks
                      else self.chunk0 < s.chunks - k * s.threads
                      for k in range(s.per_thread)]

    def offset(self, es: int):
        """Byte offset of this thread's chunk 0 in a row of ``es``-byte elements."""
        return self.chunk0 * (self.s.vec * es)

    def step(self, es: int) -> int:
        """Bytes from a thread's chunk k to its chunk k+1."""
        return self.s.threads * self.s.vec * es


def load_raw(base, offset: int, dtype: PtxType, vec: int, *, pred=None, hints=(),
             policy=None) -> list:
    """One chunk as registers to keep: the 32-bit words as loaded for half precision
    (two elements per register; :func:`widen` gives f32), f32 registers otherwise."""
    if dtype == f32 or vec == 1:
        return load_chunk(base, offset, dtype, vec, pred=pred, hints=hints, policy=policy)
    words = [reg.scalar(b32, init=0 if pred is not None else None) for _ in range(vec // 2)]
    chain = ["ld", "global", *hints]
    if policy is not None:
        chain.append("L2::cache_hint")
    if len(words) > 1:
        chain.append(f"v{len(words)}")
    chain.append("b32")
    ptx.inst(".".join(chain), words if len(words) > 1 else words[0], ptx.addr(base, offset),
             *([policy] if policy is not None else []), pred=pred)
    return words


def widen(raw: list, dtype: PtxType) -> list:
    """f32 registers of a chunk kept by :func:`load_raw` (no instruction for f32)."""
    if raw and raw[0].dtype == f32:
        return raw
    return [v for w in raw for v in widen_pair(w, dtype)]


class ClusterSum:
    """The f32 sum of a per-thread value over every thread of the cluster (module
    docstring). ``slots``: ``buffers`` arrays of ``C*W`` f32 in shared memory (two for a
    kernel that reduces row after row: a peer may push the next row's partial before
    this CTA has read the current one's). ``tx``: the pushes complete on an mbarrier
    per buffer instead of a cluster barrier (:meth:`_tx_exchange`)."""

    def __init__(self, s: ClusterSplit, tid, rank, *, buffers: int = 1, tx: bool = False):
        self.s, self.tid, self.rank = s, tid, rank
        self.bars = self.rows = None
        if buffers not in (1, 2):
            raise ValueError(f"an exchange has one or two slot buffers, not {buffers}")
        if tx:
            # What the peers' st.async complete their bytes on, one per slot buffer.
            # Recorded before the kernel's barrier.cluster.arrive, whose wait then tells
            # every CTA that its peers' barriers are initialised (fence.mbarrier_init
            # releases the init).
            self.bars = smem.mbarrier(buffers)
            self.bars.init_all(1, pred=tid == 0)
            ptx.fence.mbarrier_init(pred=tid == 0)
            # rows exchanged so far (two buffers): row k's barrier is k & 1, the phase
            # it completes there (k >> 1) & 1
            self.rows = reg.scalar(u32, init=0) if buffers > 1 else None
        self.count = s.cluster * s.warps
        self.per_lane = -(-self.count // WARP)
        self.buffers = buffers
        self.slots = smem.alloc(f32, (buffers, self.per_lane * WARP))
        self.lane = tid & (WARP - 1)
        self.warp = tid >> 5
        # this warp's slot (in every peer's array: the same offset) and its peer
        self.mine = self.slots.base + ((rank * s.warps + self.warp) << 2)
        self.pushes = self.lane < s.cluster if s.cluster < WARP else None
        self.buf = reg.scalar(u32, init=0) if buffers > 1 else None

    def total(self):
        """The cluster's sum, after the barrier (in every thread, the same bits)."""
        s = reg.scalar(f32, init=0.0)
        base = self.slots.base + (self.lane << 2)
        if self.buf is not None:
            base = base + self.buf
        for j in range(self.per_lane):
            ok = None
            if (j + 1) * WARP > self.count:
                ok = self.lane < self.count - j * WARP
            v = reg.scalar(f32, init=0.0 if ok is not None else None)
            ptx.inst.ld.shared.f32(v, ptx.addr(base, 4 * WARP * j), pred=ok)
            ptx.inst.add.f32(s, s, v)
        ptx.warp.reduce_sum(s)
        if self.buf is not None:
            # the other buffer for the next row (byte offset of buffer 1, or back to 0)
            ptx.inst.xor.b32(self.buf, self.buf, 4 * self.per_lane * WARP)
        return s

    def __call__(self, acc, *, first: bool = False):
        """``push``, the cluster barrier, ``total``. ``first``: the barrier's phase begun
        with ``barrier.cluster.arrive.relaxed`` at the kernel's start is waited for before
        the first remote store (no CTA writes a peer's shared memory before the peer has
        started). With ``tx``: :meth:`_tx_exchange` instead (the kernel waited for that
        phase already)."""
        ptx.warp.reduce_sum(acc)
        if self.bars is not None:
            return self._tx_exchange(acc)
        if first:
            ptx.cluster.wait(aligned=True)
        local = self.mine if self.buf is None else self.mine + self.buf
        remote = ptx.cluster.map_shared(local, self.lane, pred=self.pushes)
        ptx.inst("st.shared::cluster.f32", ptx.addr(remote), acc, pred=self.pushes)
        ptx.cluster.arrive(aligned=True)
        ptx.cluster.wait(aligned=True)
        return self.total()

    def _tx_exchange(self, acc):
        """The exchange without a cluster barrier: lanes ``0..C-1`` of every warp push the
        warp's sum into CTA ``lane``'s slot by ``st.async``, completing 4 bytes on that
        CTA's mbarrier, which thread 0 armed for the ``C*W*4`` bytes its CTA receives;
        every thread waits on its own CTA's mbarrier (an acquire at CTA scope). A
        cluster barrier's wait acquires at cluster scope, which empties the SM's L1 (by
        ``ncu``, a two-pass slice read again after one found 0% of it there); this
        exchange leaves L1 as it was.

        With two buffers (a kernel walking rows) row ``k`` goes through slot buffer and
        mbarrier ``k & 1`` and waits for that barrier's phase ``(k >> 1) & 1``. A peer
        pushes row ``k + 2`` into this CTA's buffer only after its own wait for row
        ``k + 1``, which needs this CTA's push of row ``k + 1``, issued after it read
        row ``k``: the buffer and its barrier's phase are free again by then (the
        barrier may even take the bytes before this CTA's ``expect_tx``: its phase
        cannot complete without this CTA's own arrival)."""
        if self.rows is None:
            bar, phase, local = self.bars[0], 0, self.mine
        else:
            which = self.rows & 1
            bar = self.bars.at(which)
            phase = (self.rows >> 1) & 1
            local = self.mine + self.buf
        bar.arrive_expect_tx(4 * self.count, pred=self.tid == 0)
        remote = ptx.cluster.map_shared(local, self.lane, pred=self.pushes)
        rbar = ptx.cluster.map_shared(bar.address(), self.lane, pred=self.pushes)
        ptx.inst("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32",
                 ptx.addr(remote), acc, ptx.addr(rbar), pred=self.pushes)
        bar.wait(phase)
        if self.rows is not None:
            ptx.inst.add.u32(self.rows, self.rows, 1)
        return self.total()


class Ring:
    """A ring of ``stages`` shared-memory buffers through which a persistent cluster
    kernel's CTA receives its slice of one row after another, rows ahead.

    A buffer holds the slice (16-byte chunks) of each array in ``arrays`` (``(pointer to
    this thread's chunk 0 of row 0, row stride in bytes)``). Each thread fills it with
    ``cp.async.cg`` copies of its own chunks and later reads only those (as
    :mod:`.bwd_staged` does), so ``cp.async.wait_group`` is the only wait the ring needs.
    Rows are ``first, first + step, ...``; copies of rows past ``m`` are switched off
    but their (empty) groups still close, so the group count stays right.

    Records: ``prime`` the first ``stages - 1`` rows' copies; ``next(row)`` the copies of
    ``row + (stages-1)*step`` into the buffer read last time and ``cp.async.wait_group
    stages-1``; ``chunk(a, k, dtype)`` an ``ld.shared`` of chunk ``k`` of array ``a``;
    ``advance()`` the buffer offsets' rotation (``mov``, ``add``, ``selp``).
    """

    def __init__(self, s: ClusterSplit, tid, preds: list, arrays, stages: int, m, step):
        from ...core.types import u8
        if s.vec <= 0 or stages < 1:
            raise ValueError("a ring has at least one buffer")
        self.s, self.preds, self.arrays, self.S, self.m, self.step = (s, preds, arrays,
                                                                      stages, m, step)
        self.slice_bytes = s.slice_chunks * 16
        self.sb = len(arrays) * self.slice_bytes
        ring = smem.alloc(u8, (stages * self.sb,), dynamic=True, align=RING_ALIGN)
        self.mine = ring.base + (tid << 4)     # this thread's chunk 0 in buffer 0
        self.take = reg.scalar(u32, init=0)                  # the buffer read this row
        self.fill = reg.scalar(u32, init=(stages - 1) * self.sb)  # the one refilled
        self.src = None

    def _issue(self, row, off) -> None:
        ok = row < self.m
        T = self.s.threads
        for a, (base, stride) in enumerate(self.arrays):
            src = base + row * stride
            for k in range(self.s.per_thread):
                g = ok if self.preds[k] is None else self.preds[k] & ok
                ptx.inst("cp.async.cg.shared.global",
                         ptx.addr(self.mine + off, a * self.slice_bytes + k * T * 16),
                         ptx.addr(src, k * T * 16), 16, pred=g)
        ptx.inst("cp.async.commit_group")

    def prime(self, first) -> None:
        for i in range(self.S - 1):
            self._issue(first + i * self.step, i * self.sb)

    def next(self, row) -> None:
        self._issue(row + (self.S - 1) * self.step, self.fill)
        ptx.inst("cp.async.wait_group", self.S - 1)
        self.src = self.mine + self.take

    def chunk(self, a: int, k: int, dtype: PtxType) -> list:
        return load_chunk(self.src, a * self.slice_bytes + k * self.s.threads * 16, dtype,
                          self.s.vec, pred=self.preds[k], space="shared")

    def advance(self) -> None:
        ptx.inst.mov.u32(self.fill, self.take)
        ptx.inst.add.u32(self.take, self.take, self.sb)
        ptx.inst.selp.u32(self.take, 0, self.take, self.take == self.S * self.sb)
