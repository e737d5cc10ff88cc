"""Stream-K (``Plan.stream_k``): every CTA of the grid takes an equal share of all the
k-blocks of all the tiles, so a product of few tiles (M = 128: N / bn tiles for 132 SMs)
keeps every SM busy, each streaming the same bytes.

The tiles' k-blocks are numbered ``u = t * nk + kb`` (tile ``t`` in :mod:`.schedule`'s
order, ``nk`` k-blocks each), ``T = tiles * nk`` in all; of a grid of ``G <= T`` CTAs
(at most one per SM, all resident at once) CTA ``c`` takes ``[c T / G, (c + 1) T / G)``
(:func:`share`). That range cuts into *segments*, one per tile it touches
(:func:`walk`): a whole tile (its epilogue as the unsplit kernel's), the tile's first
k-blocks (the *owner*: always the CTA's last segment) or k-blocks after the first (a
*contributor*: always the CTA's first segment, so a CTA contributes at most once).

Per consumer warpgroup (each owns 64 rows of the tile and its own flag):

* a contributor stores its f32 accumulator into its CTA's slot of the partials
  workspace (``st.global.v4.f32``, thread-linear: register group ``j`` of thread ``l`` at
  ``j * 2048 + 16 l``, coalesced), meets its warpgroup at its named barrier, and one
  thread adds 1 to the tile's flag (``red.release.gpu.global.add.u32``);
* the owner's thread 0 polls the flag (``ld.acquire.gpu``) until it counts every CTA
  after it that touched the tile (``last - c``, ``last`` the CTA holding the tile's last
  k-block: :func:`last_cta`), sets it back to 0 for the next launch, and after the named
  barrier every thread adds the contributors' partials in CTA order (``ld.global.cg``:
  L2, where the other SMs wrote them), then runs the epilogue.

With clusters along M (``Plan.cluster``, B shared by multicast) the unit is the cluster
tile: cluster ``c`` takes the share, both CTAs walk the same segments in step (each its
tile row), and each CTA has its own flags and slot (indexed by cluster and rank).

The sum is ``((acc + p_c+1) + p_c+2) + ...`` whatever the timing: deterministic. An
owner waits only in its last segment, for CTAs that never wait before contributing:
no cycle. The flags are zero before the first launch and every launch leaves them so,
as the workspace of :data:`WORKSPACE` (one per device and stream) is made; the partials
live only during a launch.
"""
from __future__ import annotations

from ...dsl import ptx, reg
from ...core.types import f32, u32, u64
from .._common.workspace import HEADER, Workspace

GROUP_BYTES = 128 * 16      # one v4 register group of a warpgroup: 128 threads x 16 bytes
FLAG_CAP = 1 << 14          # flag words of the workspace: tiles x consumers at most
FLAGS_AT = 4 * HEADER                       # byte offsets in the workspace buffer
PARTIALS_AT = FLAGS_AT + 4 * FLAG_CAP

# The per-(device, stream) buffers of stream-K launches: flags then partials, their own
# (the RMSNorm backward's buffer keeps its partials where these flags would be).
WORKSPACE = Workspace()


def layout(p, m: int, n: int, k: int) -> tuple[int, int]:
    """(cluster tiles, k-blocks per tile) of an (M, N, K) product under plan ``p``."""
    tm, tn = p.tiles(m, n)
    return tm // p.cluster * tn, -(-k // p.bk)


def grid(p, m: int, n: int, k: int, sms: int) -> int:
    """CTAs of a stream-K launch: one per SM in whole clusters, never more clusters than
    the k-blocks; refused where the flags or the u32 range arithmetic (``T * G``) would
    not hold."""
    tiles, nk = layout(p, m, n, k)
    g = max(1, min(sms // p.cluster, tiles * nk))
    if tiles * p.cluster * p.consumers > FLAG_CAP or tiles * nk * g >= 1 << 32:
        raise ValueError(f"Plan.stream_k: {tiles * p.cluster} tiles of {nk} k-blocks on "
                         f"{g * p.cluster} CTAs is past the workspace's "
                         f"{FLAG_CAP // p.consumers} tiles or the u32 k-block arithmetic; "
                         f"use split-K or the unsplit plan")
    return g * p.cluster


def partial_bytes(p) -> int:
    """One CTA's slot of the partials: every consumer's 64 x ``bn`` f32 accumulator."""
    return p.consumers * p.wg_m * p.bn * 4


def workspace_elems(p, g: int) -> int:
    """The 32-bit words a launch of ``g`` CTAs needs after the header: the flags, the
    partials."""
    return FLAG_CAP + g * partial_bytes(p) // 4


def workspace_args(frame, like, p, m: int, n: int, k: int, sms: int, device: int):
    """``([flags, partials], scratch)`` for one launch of ``p`` on (M, N, K): with CUDA
    torch tensors views of the stream's :data:`WORKSPACE` buffer and ``scratch`` its
    lookup (a :class:`~ptxdsl.runtime.memo.Recording`'s, at :data:`FLAGS_AT` and
    :data:`PARTIALS_AT`); else zeroed flags and partials made for the call, and None."""
    elems = workspace_elems(p, grid(p, m, n, k, sms))
    if frame.cuda_torch:
        from ...runtime import torch_private
        hooks = torch_private.hooks(frame.torch)

        def scratch():
            return WORKSPACE.torch_buffer(hooks, device, hooks.raw_stream(device), elems)
        buf, _ = scratch()
        parts = buf[HEADER + FLAG_CAP:HEADER + elems].view(frame.torch.float32)
        return [buf[HEADER:HEADER + FLAG_CAP], parts], scratch
    return [frame.zeros_u32(FLAG_CAP, like), frame.empty((elems - FLAG_CAP,), like, f32)], None


def share(cid, total, g):
    """(lo, hi): CTA ``cid``'s k-blocks ``[cid T / G, (cid + 1) T / G)`` (registers)."""
    return (cid * total) // g, ((cid + 1) * total) // g


def last_cta(t, nk, total, g):
    """The CTA holding tile ``t``'s last k-block ``u = t nk + nk - 1``: the largest ``c``
    with ``c T / G <= u``, ``((u + 1) G - 1) / T``."""
    return ((t + 1) * nk * g - 1) // total


def segments(cid, total, nk, g, body) -> None:
    """``body(t, k0, k1)`` (:func:`walk`) over CTA (cluster) ``cid``'s :func:`share` of
    the ``total`` k-blocks."""
    walk(*share(cid, total, g), nk, body)


def walk(lo, hi, nk, body) -> None:
    """``body(t, k0, k1)`` for each tile ``t`` the range ``[lo, hi)`` touches, with its
    k-blocks ``[k0, k1)`` of that tile (registers); a loop in the PTX."""
    t0 = lo // nk
    for t in ptx.range_(t0, (hi + nk - 1) // nk):
        first = t * nk
        k0 = reg.scalar(u32)
        ptx.inst.selp.u32(k0, lo - first, 0, t == t0)
        body(t, k0, ptx.min(hi - first, nk))


class Fixup:
    """One consumer warpgroup's side of the stream-K fix-up (see the module docstring):
    ``flags`` and ``parts`` the workspace's u64 addresses, ``cid`` the cluster (the CTA
    without clusters) and ``rank`` the CTA in it (its tile row of the cluster tile, its
    own flags and slot), ``cons`` the consumer, ``lane`` its thread, ``bar_id`` its named
    barrier."""

    def __init__(self, p, flags, parts, cid, rank, cons, lane, bar_id, labels):
        self.p, self.flags, self.parts = p, flags, parts
        self.cid, self.rank, self.cons, self.lane = cid, rank, cons, lane
        self.bar_id, self.labels = bar_id, labels

    def _index(self, i):
        """Cluster ``i``'s (or tile ``i``'s) word for this CTA of it and this consumer."""
        cl, co = self.p.cluster, self.p.consumers
        return (i * cl + self.rank) * co + self.cons if cl > 1 else i * co + self.cons

    def _slot(self, cluster):
        """This thread's 16 bytes of register group 0 in the partial of ``cluster``'s CTA
        of this rank, this consumer (a u64 address)."""
        off = reg.scalar(u64)
        ptx.inst.mul.wide.u32(off, self._index(cluster), 64 * self.p.bn * 4)
        return self.parts + off + self.lane * 16

    def _flag(self, t):
        at = reg.scalar(u64)
        ptx.inst.mul.wide.u32(at, self._index(t), 4)
        return self.flags + at

    def contribute(self, acc, t) -> None:
        """Store ``acc`` into this CTA's slot; the tile's flag gains one."""
        slot = self._slot(self.cid)
        for j in range(len(acc) // 4):
            ptx.inst("st.global.v4.f32", ptx.addr(slot, j * GROUP_BYTES) if j
                     else ptx.addr(slot), list(acc[4 * j:4 * j + 4]))
        ptx.inst("barrier.sync", self.bar_id, 128)      # every thread's stores, then release
        with ptx.if_(self.lane == 0):
            ptx.inst("red.release.gpu.global.add.u32", ptx.addr(self._flag(t)), 1)

    def gather(self, acc, t, nk, total, g) -> None:
        """Wait for the tile's contributors, reset its flag, add their partials in order."""
        count = last_cta(t, nk, total, g) - self.cid
        with ptx.if_(self.lane == 0):
            at = self._flag(t)
            top = ptx.new_label(f"skwait{next(self.labels)}")
            seen = reg.scalar(u32)
            ptx.place(top)
            ptx.inst.ld.acquire.gpu.global_.u32(seen, ptx.addr(at))
            ptx.bra(top, pred=seen != count)
            ptx.inst("st.relaxed.gpu.global.u32", ptx.addr(at), reg.scalar(u32, init=0))
        ptx.inst("barrier.sync", self.bar_id, 128)
        for r in ptx.range_(1, count + 1):
            src = self._slot(self.cid + r)
            for j in range(len(acc) // 4):
                v = reg.array(f32, 4)
                ptx.inst("ld.global.cg.v4.f32", list(v),
                         ptx.addr(src, j * GROUP_BYTES) if j else ptx.addr(src))
                for q in range(4):
                    ptx.inst.add.f32(acc[4 * j + q], acc[4 * j + q], v[q])


def tiles(fix: Fixup, cid, total_tiles, nk, g, mainloop, acc, store) -> None:
    """A consumer's stream-K loop: each segment's k-blocks (``mainloop(count)``), then
    its epilogue (``store(t)``: whole tiles and owners) or its contribution."""
    total = total_tiles * nk

    def segment(t, k0, k1):
        mainloop(k1 - k0)
        with ptx.if_(k0 == 0):
            with ptx.if_(k1 != nk):
                fix.gather(acc, t, nk, total, g)
            store(t)
        with ptx.else_():
            fix.contribute(acc, t)
    segments(cid, total, nk, g, segment)


__all__ = ["WORKSPACE", "FLAG_CAP", "FLAGS_AT", "PARTIALS_AT", "Fixup", "grid", "layout",
           "partial_bytes", "segments", "share", "last_cta", "tiles", "walk",
           "workspace_args", "workspace_elems"]
