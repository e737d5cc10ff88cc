"""Split-K inside a cluster: ``split`` CTAs compute one output tile, each over its share of
K, and one rank per consumer adds the partial sums in a fixed order through distributed
shared memory.

Why (:func:`.plan.choose` has the numbers): with one tile row (M <= 128) the product is
bound by streaming B from HBM, and N / 128 tiles leave most SMs idle (N = 4096: 32 of 132).
Splitting K over a cluster of ``split`` CTAs gives ``split`` times the CTAs, each streaming
``1 / split`` of the tile's B; the partial sums are small (rows past M are not exchanged).

The cluster is ``(split, 1, 1)``; every CTA of it walks the same tiles (same cluster id),
and rank ``r`` takes k-blocks ``[nk * r / split, nk * (r + 1) / split)`` (:func:`k_range`;
a rank with none contributes zeros). Per tile and consumer warpgroup, after its wgmmas
retired:

* consumer ``c``'s rows are gathered and stored by its *owner*, rank ``c`` (so with two
  consumers two ranks share the gathering and the stores; at M = 128 and split 4 each
  owner reads 3 x 32 KiB instead of rank 0 reading 3 x 64 KiB);
* the other ranks wait until their partial buffer is free (``xfree``, acquire.cluster:
  the owner has read the previous tile's), store the 64 x ``bn`` f32 accumulator into it
  (``st.shared.v4.f32``, thread-linear: register group ``j`` of thread ``l`` at ``j *
  2048 + 16 l``, conflict-free) and arrive on the owner's ``xfull`` (``mapa`` +
  ``mbarrier.arrive.release.cluster.shared::cluster``, every thread: each releases its
  own stores);
* the owner waits on its ``xfull`` (``128 * (split - 1)`` arrivals, acquire.cluster), adds
  the buffers of ranks owner + 1, owner + 2, ... (mod split) in that order
  (``ld.shared::cluster.v4.f32`` of each partner's buffer through ``mapa``, one
  register group of every partner at a time), arrives on each partner's ``xfree`` (every thread,
  release.cluster: its reads are done), and runs this consumer's epilogue alone.

The sum is ``((acc_o + p_o+1) + p_o+2) + ...`` for every element, whatever the timing: the
result is deterministic (and differs from the unsplit kernel's only by f32 rounding
order). Warps whose 16 rows all lie past M skip the stores and loads (they still arrive),
so at M <= 16 one warp per CTA moves 8 KiB (``bn`` = 128). The kernel's closing
``barrier.cluster`` keeps every partner alive until the owners have read it.
"""
from __future__ import annotations

from ...dsl import ptx, reg
from ...core.types import f32, pred, u32

GROUP_BYTES = 128 * 16     # one v4 register group of a warpgroup: 128 threads x 16 bytes


def k_range(nk, rank, split: int):
    """(first, end) k-block of cluster rank ``rank`` (registers): ``nk * rank / split`` to
    ``nk * (rank + 1) / split`` (``mul.lo.u32``, ``div.u32``); shares differ by at most one
    k-block."""
    if split == 1:
        return 0, nk
    lo = (nk * rank) // split
    hi = (nk * (rank + 1)) // split
    return lo, hi


def partial_bytes(wg_m: int, bn: int) -> int:
    """One consumer's partial buffer: its 64 x ``bn`` f32 accumulator."""
    return wg_m * bn * 4


def init_barriers(xfull, xfree, consumers: int, split: int) -> None:
    """``mbarrier.init`` of each consumer's ``xfull`` (``128 * (split - 1)`` arrivals: used on
    its owner) and ``xfree`` (128 arrivals: used on the other ranks), 8 bytes apart."""
    for c in range(consumers):
        ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(xfull, 8 * c), 128 * (split - 1))
        ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(xfree, 8 * c), 128)


def _wait_cluster(labels, bar, parity) -> None:
    """``L: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [bar], parity;
    @!p bra L``: the arrivals' cluster-scope releases are visible after it."""
    top = ptx.new_label(f"xwait{next(labels)}")
    ptx.place(top)
    done = reg.scalar(pred)
    ptx.inst("mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64", done, ptx.addr(bar),
             parity)
    ptx.bra(top, pred=~done)


def _arrive_remote(bar, rank) -> None:
    """``mapa.shared::cluster.u32`` of ``bar`` in CTA ``rank``, then
    ``mbarrier.arrive.release.cluster.shared::cluster.b64`` on it."""
    remote = reg.scalar(u32)
    ptx.inst("mapa.shared::cluster.u32", remote, bar, rank)
    ptx.inst("mbarrier.arrive.release.cluster.shared::cluster.b64", ptx.sink, ptx.addr(remote))


class PartialExchange:
    """One consumer warpgroup's side of the exchange (see the module docstring).

    ``buf``: this consumer's partial buffer (shared address); ``xfull`` / ``xfree``: its
    two barriers; ``lane``: the thread's index in the warpgroup; ``owner``: the rank that
    gathers and stores this consumer's rows (a register or int; consumer ``c`` of a
    split of 2 or more: rank ``c``, so two ranks share the gathering); ``live``: a
    predicate, true for warps with rows below M."""

    def __init__(self, split: int, buf, xfull, xfree, lane, labels, owner=0):
        self.split = split
        self.buf = buf
        self.xfull, self.xfree = xfull, xfree
        self.lane = lane
        self.labels = labels
        self.owner = owner
        self.slot = buf + lane * 16
        self.phase = reg.scalar(u32, init=0)
        # the partners in the order their partials are added: owner + 1, owner + 2, ...
        # (mod split), the same on every run
        self.partners = []
        for i in range(1, split):
            if isinstance(owner, int):
                self.partners.append((owner + i) % split)
                continue
            r = owner + i
            ptx.inst.selp.u32(r, r - split, r, r >= split)
            self.partners.append(r)

    def exchange(self, acc, rank, live) -> None:
        """Send (partners) or gather (the owner) this tile's partial; toggles the phase."""
        with ptx.if_(rank == self.owner):
            self._gather(acc, live)
        with ptx.else_():
            self._send(acc, live)
        ptx.inst.xor.b32(self.phase, self.phase, 1)

    def _send(self, acc, live) -> None:
        _wait_cluster(self.labels, self.xfree, self.phase ^ 1)
        with ptx.if_(live):
            for j in range(len(acc) // 4):
                ptx.inst("st.shared.v4.f32", ptx.addr(self.slot, j * GROUP_BYTES),
                         list(acc[4 * j:4 * j + 4]))
        _arrive_remote(self.xfull, self.owner)

    def _gather(self, acc, live) -> None:
        _wait_cluster(self.labels, self.xfull, self.phase)
        with ptx.if_(live):
            srcs = []
            for r in self.partners:
                src = reg.scalar(u32)
                ptx.inst("mapa.shared::cluster.u32", src, self.slot, r)
                srcs.append(src)
            # register group by register group, every partner's v4 then the adds in partner
            # order: 4 (split - 1) registers in flight, not a whole partial per partner
            for j in range(len(acc) // 4):
                vs = []
                for src in srcs:
                    v = reg.array(f32, 4)
                    ptx.inst("ld.shared::cluster.v4.f32", list(v),
                             ptx.addr(src, j * GROUP_BYTES) if j else ptx.addr(src))
                    vs.append(v)
                for v in vs:
                    for q in range(4):
                        ptx.inst.add.f32(acc[4 * j + q], acc[4 * j + q], v[q])
        for r in self.partners:
            _arrive_remote(self.xfree, r)


__all__ = ["k_range", "partial_bytes", "init_barriers", "PartialExchange", "GROUP_BYTES"]
