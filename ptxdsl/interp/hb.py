"""Happens-before: which memory accesses of one batch of CTAs are ordered.

Knowledge is kept per warp: ``K[w, u]`` is the step (the machine's instruction
counter, a global clock) up to which warp ``w`` has synchronised with warp
``u``'s accesses. Every access is stamped with the step it ran at. An access by
thread ``t`` (warp ``w``) is ordered after an earlier access by thread ``u`` at
step ``s`` when ``t == u``, or ``K[w, warp(u)] >= s`` (another warp), or the
warp synchronised its own lanes after ``s`` (another lane of the same warp).

Edges (release -> acquire):

* a named-barrier generation: every arriving warp (``bar.arrive`` or
  ``.sync``) releases, every warp that waited at ``.sync`` acquires; warps
  that did not take part learn nothing;
* an mbarrier phase: each arrival (and each asynchronous copy's
  ``complete_tx``, when it lands: :mod:`.landing`) releases into the phase, a
  wait that sees the phase complete acquires it;
* ``wgmma.wait_group``: the operand reads of the groups it retires (recorded as
  the warpgroup's first thread's) are ordered before every warp of the warpgroup;
* a cluster-barrier generation: each ``barrier.cluster.arrive`` (not
  ``.relaxed``) releases into it, each ``wait`` that sees it complete acquires
  it (warps of every CTA of the cluster: knowledge spans the whole batch);
* atomics on one address: each is a release and an acquire on that address
  (``atom``/``red`` chains order the plain accesses around them).

Proxy fences (``fence.proxy.async``) are remembered per warp with what the warp knew
when it fenced (:meth:`HappensBefore.proxy_fence`), for :mod:`.proxy`.

:class:`Tracker` holds, per byte of a state space, the last writer (and
whether it was an atomic), the readers since (one to three threads with their steps, or
several warps),
whether the byte was ever written (uninitialised reads), whether an
unfinished ``cp.async`` is still writing it, and (shared memory) whether its last write
went through the generic proxy (:mod:`.proxy`).
"""
from __future__ import annotations

import numpy as np


class HappensBefore:
    def __init__(self, mach):
        self.mach = mach
        self.W = mach.P // 32
        nw = mach.T // 32
        self.K = np.full((nw, nw), -1, np.int64)
        self.lanesync = np.full(nw, -1, np.int64)
        self.mb_release: dict = {}   # mbarrier offset -> joined release vector (this phase)
        self.mb_phase: dict = {}     # mbarrier offset -> release vector of the last phase
        self.atomics: dict = {}      # (space, byte offset) -> joined release vector
        self.cl_release: dict = {}   # (cluster, generation) -> joined release vector
        self.FK = self.FS = None     # latest fence.proxy.async per warp (proxy_fence)
        self.KI = self.init_fenced = None   # fence.mbarrier_init (mbarrier_init_fence)
        self.cl_init: dict = {}

    def _release(self, w: int) -> np.ndarray:
        v = self.K[w].copy()
        v[w] = self.mach.steps
        return v

    def _acquire(self, w: int, v) -> None:
        if v is not None:
            np.maximum(self.K[w], v, out=self.K[w])
        self.lanesync[w] = self.mach.steps

    def barrier(self, cta: int, arrived, waiting) -> None:
        """A named barrier generation completed in batch-local CTA ``cta``."""
        base = cta * self.W
        ws = base + np.flatnonzero(arrived.reshape(-1, 32).any(1))
        join = self.K[ws].max(0)
        join[ws] = self.mach.steps
        for w in base + np.flatnonzero(waiting.reshape(-1, 32).any(1)):
            self._acquire(int(w), join)

    def mbarrier_arrive(self, off: int, thread: int) -> None:
        v = self._release(thread // 32)
        old = self.mb_release.get(off)
        self.mb_release[off] = v if old is None else np.maximum(old, v)

    def mbarrier_release(self, off: int, v) -> None:
        """A release into the mbarrier's phase with the vector ``v`` (an asynchronous
        copy landing: what its issuing warp knew at issue, :mod:`.landing`)."""
        old = self.mb_release.get(off)
        self.mb_release[off] = v if old is None else np.maximum(old, v)

    def mbarrier_complete(self, off: int) -> None:
        v = self.mb_release.pop(off, None)
        if v is not None:
            self.mb_phase[off] = v

    def mbarrier_acquire(self, off: int, thread: int) -> None:
        self._acquire(thread // 32, self.mb_phase.get(off))

    def atomic(self, space: str, offs, threads) -> None:
        """Atomics by ``threads`` at byte offsets ``offs`` (in thread order). An acquire
        orders a warp's lanes only after its own lanes' releases of earlier instructions
        (``before``): the lanes of one instruction are not ordered by it, so a lane's plain
        access after the other lanes' atomics on the address is a race."""
        before: dict = {}
        for off, t in zip(np.asarray(offs).tolist(), np.asarray(threads).tolist()):
            w = t // 32
            key = (space, off)
            v = self.atomics.get(key)
            b = before.setdefault(key, v)
            if v is not None:
                np.maximum(self.K[w], v, out=self.K[w])
            if b is not None and b[w] > self.lanesync[w]:
                self.lanesync[w] = b[w]
            rel = self._release(w)
            self.atomics[key] = rel if v is None else np.maximum(v, rel)

    def proxy_fence(self, warps) -> None:
        """``fence.proxy.async`` by ``warps`` (batch warp indices): remember, per warp, the
        step of its latest proxy fence and what it knew then (``FK[w, u]``: the step up to
        which the fence covers warp ``u``'s accesses; its own warp's up to the fence)."""
        if self.FS is None:
            nw = self.K.shape[0]
            self.FK = np.full((nw, nw), -1, np.int64)
            self.FS = np.full(nw, -1, np.int64)
        self.FK[warps] = self.K[warps]
        self.FK[warps, warps] = self.mach.steps
        self.FS[warps] = self.mach.steps

    # barrier.cluster (interp/cluster.py): each non-.relaxed arrival releases into the
    # generation it joins (``key``); a wait that sees the generation complete acquires it.
    def cluster_arrive(self, key, warps) -> None:
        ws = np.asarray(warps, np.int64)
        v = self.K[ws].max(0)
        v[ws] = self.mach.steps
        old = self.cl_release.get(key)
        self.cl_release[key] = v if old is None else np.maximum(old, v)

    def cluster_acquire(self, key, warps) -> None:
        v = self.cl_release.get(key)
        vi = self.cl_init.get(key) if self.KI is not None else None
        for w in np.asarray(warps, np.int64).tolist():
            self._acquire(w, v)
            if vi is not None:
                np.maximum(self.KI[w], vi, out=self.KI[w])

    # fence.mbarrier_init.release.cluster: the warp's earlier mbarrier.inits are released
    # by its next cluster-barrier arrival, .relaxed ones included (CUTLASS's idiom); a wait
    # of that generation learns of them in ``KI`` (read by :meth:`init_ordered` only).
    def mbarrier_init_fence(self, warps) -> None:
        if self.KI is None:
            nw = self.K.shape[0]
            self.KI = np.full((nw, nw), -1, np.int64)
            self.init_fenced = np.full(nw, -1, np.int64)
        self.init_fenced[warps] = self.mach.steps

    def cluster_arrive_inits(self, key, warps) -> None:
        if self.KI is None:
            return
        ws = np.asarray(warps, np.int64)
        ws = ws[self.init_fenced[ws] >= 0]
        if len(ws):
            v = np.full(self.K.shape[0], -1, np.int64)
            v[ws] = self.init_fenced[ws]
            old = self.cl_init.get(key)
            self.cl_init[key] = v if old is None else np.maximum(old, v)

    def init_ordered(self, t: int, by: int, step: int) -> bool:
        """Whether thread ``t`` is ordered after ``by``'s mbarrier.init at ``step``."""
        if self.ordered(np.asarray([t]), np.asarray([by]), step)[0]:
            return True
        return self.KI is not None and bool(self.KI[t // 32, by // 32] >= step)

    def ordered(self, cur_t, prev_t, prev_step):
        """Whether accesses by ``cur_t`` are ordered after ``prev_t``'s at ``prev_step``."""
        cw, pw = cur_t // 32, prev_t // 32
        same_warp = cw == pw
        k = self.K[cw, np.where(prev_t >= 0, pw, 0)]
        return (cur_t == prev_t) | np.where(same_warp, self.lanesync[cw] >= prev_step,
                                            k >= prev_step)

    def ordered_many(self, cur_t, mask, prev_step, cta_rows):
        """Ordered after reads by every warp in ``mask`` (CTA-local warp bits) of its CTA."""
        cw = cur_t // 32
        ok = np.ones(len(cur_t), bool)
        for u in range(self.W):
            bit = ((mask >> np.uint64(u)) & np.uint64(1)).astype(bool)
            if not bit.any():
                continue
            uw = cta_rows * self.W + u
            k = np.where(uw == cw, self.lanesync[cw], self.K[cw, uw])
            ok &= ~bit | (k >= prev_step)
        return ok


class Tracker:
    """Per-byte access records of one state space (see the module docstring).

    ``reads=False`` (global memory) records writes only: reads are checked against
    earlier writes (read-after-write and write-write races are found) but a write after
    another thread's read is not seen; that keeps whole-tensor loads cheap.
    """

    def __init__(self, nbytes: int, initialised: bool, reads: bool = True):
        self.reads = reads
        self.w_tid = np.full(nbytes, -1, np.int32)
        self.w_step = np.zeros(nbytes, np.int32)
        self.w_atom = np.zeros(nbytes, bool)
        self.init = np.full(nbytes, initialised, bool)
        self.all_init = initialised
        self.pending = np.zeros(nbytes, np.int16) if reads else None  # unfinished cp.async
        self.any_pending = False
        self.written = False                                 # any record since reset
        if reads:
            self.r_tid = np.full(nbytes, -1, np.int32)      # -2: several readers
            self.r_step = np.zeros(nbytes, np.int32)
            self.r_tid2 = np.full(nbytes, -1, np.int32)     # an earlier second reader
            self.r_step2 = np.zeros(nbytes, np.int32)
            self.r_tid3 = np.full(nbytes, -1, np.int32)     # and a third
            self.r_step3 = np.zeros(nbytes, np.int32)
            self.r_mask = np.zeros(nbytes, np.uint64)       # reader warps (CTA-local bits)
            self.r_cta = np.full(nbytes, -1, np.int32)      # -2: readers in several CTAs
            # the async-proxy detector (:mod:`.proxy`): the last write went through the
            # generic proxy (st.shared, ...), not the async one (TMA, bulk copies)
            self.w_generic = np.zeros(nbytes, bool)
            # bulk copies (TMA stores, ...) whose group is not yet retired read these
            self.reading = np.zeros(nbytes, np.int16)
            self.any_reading = False
            self.n_reading = 0                              # marks in reading, in all

    def reset(self) -> None:
        """Forget every access (a new batch: earlier CTAs ran before it)."""
        if self.written:
            self.w_tid[:] = -1
            self.w_atom[:] = False
            self.written = False
        if self.reads:
            self.r_tid[:] = -1
            self.r_tid2[:] = -1
            self.r_tid3[:] = -1
            if self.any_reading:
                self.reading[:] = 0
                self.any_reading = False
                self.n_reading = 0
            self.r_mask[:] = 0
            self.r_cta[:] = -1
