"""The deterministic backward's key-block pairs (``BwdConfig.det_pair``): clusters of two
CTAs, key blocks ``2j`` (rank 0, the *leader*) and ``2j + 1`` (rank 1, the *partner*) of one
(batch, K/V head) unit, so that only the leaders take turns on dQ's row blocks.

Why: in the deterministic mode a row block's adds pass from key block to key block in a
fixed order, and each link of that chain costs a CTA a semaphore poll, the add's landing
and the release (removing the waits alone took head dim 64 from 0.78 to 0.92-0.97 of the
default mode on the H200). Here the partner's consumer warpgroups store their dQ registers
into the leader's shared memory (``st.async`` completing on the leader's mbarrier); the
leader adds them to its own in registers (``own + partner``: one rounding, the same bits
in either order) before staging, and its writer warp takes the turn for both. Half the
links, half the global adds, and the partner's writer has none.

Per consumer warpgroup ``w`` (a warpgroup's 64 x 64 dQ, registers ``4k .. 4k + 3`` as the
16 bytes at ``(128 k + lane)·16``, as ``dq_frag`` stages them):

* ``recv_full[w]`` (leader; one arrival, armed with the bytes): the partner's stores land;
* ``recv_free[w]`` (partner; one arrival per leader warp): the leader has read them.

The partner's row blocks are a part of the leader's (no left window limit: a later key
block's causal range starts later and ends at the same block), walked in the same order,
so the leader receives at the blocks the partner's range holds and adds alone at the
others. Turns count pairs: :func:`.bwd_det.turn_of` with ``nb // 2`` and twice the block
(whole pair blocks, the same floor). A cluster barrier after the barriers' init and one
before the end keep each CTA's shared memory alive while the other may touch it."""
from __future__ import annotations

from ...core.types import f32, pred, s32, u32
from ...dsl import ptx, reg
from .._common.ring import wait
from .fwd import _s32

THREADS_PER_WARP = 32


def wait_cluster(labels, bar, parity) -> None:
    """Until ``bar``'s phase of ``parity`` completed, its cluster-scope releases visible."""
    top = ptx.new_label(f"pwait{next(labels)}")
    ptx.place(top)
    done = reg.scalar(pred)
    ptx.inst("mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64", done, ptx.addr(bar),
             parity)
    ptx.bra(top, pred=~done)


def cluster_sync() -> None:
    """Every thread of both CTAs (the barriers' init visible; the peer still alive)."""
    ptx.inst("barrier.cluster.arrive.release.aligned")
    ptx.inst("barrier.cluster.wait.acquire.aligned")


class Pair:
    """One CTA's side. ``recv``: the shared address of the leader's two receive buffers
    (``nbytes`` each); ``bars``: four mbarriers, ``recv_full[0..1]`` then
    ``recv_free[0..1]``; ``rank``: ``%cluster_ctarank`` (the CTA index's low bit)."""

    def __init__(self, recv, bars, nbytes: int, rank, labels):
        self.recv, self.bars, self.nbytes, self.labels = recv, bars, nbytes, labels
        self.rank = rank
        self.lead = rank == 0

    def full(self, w):
        return self.bars + 8 * w

    def free(self, w):
        return self.bars + 16 + 8 * w

    def init(self) -> None:
        """Thread 0, with the kernel's other barriers: each ``recv_full`` one arrival (the
        leader's, announcing the bytes), each ``recv_free`` one a leader warp."""
        for w in range(2):
            ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(self.full(w)), 1)
            ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(self.free(w)),
                     128 // THREADS_PER_WARP)

    @staticmethod
    def clip(n0, sk, lo, hi):
        """``hi``, or ``lo`` (no row blocks) for a key block past SK: an odd count's last
        partner."""
        live = reg.scalar(s32)
        ptx.inst.selp.s32(live, _s32(hi), _s32(lo), _s32(n0) < _s32(sk))
        return live

    @staticmethod
    def partner_range(n0, bn: int, sk, row_blocks):
        """The leader's view of the partner's row blocks ``[lo, hi)`` (empty past SK);
        ``row_blocks(n0)``: :func:`.bwd_steps.row_blocks`' range for a key block."""
        _, lo, hi = row_blocks(n0 + bn)
        return lo, Pair.clip(n0 + bn, sk, lo, hi)

    @staticmethod
    def writer_range(m_range, rank):
        """The writer warp's row blocks: the leader's walk, none for the partner (which adds
        nothing to dQ itself)."""
        first, stop, *step = m_range
        start = reg.scalar(s32)
        ptx.inst.selp.s32(start, _s32(first), _s32(stop), rank == 0)
        return (start, stop, *step)

    def receive(self, w, lane, regs, phase, on) -> None:
        """Leader warpgroup ``w``, where ``on`` (the partner's range holds the block): wait for
        the partner's registers (lane 0 announces their bytes: the stores may have landed
        already, as a peer's multicast may before the local expect), add them to ``regs``
        and free the buffer (each warp, once its loads are done); toggles ``phase``."""
        with ptx.if_(on):
            with ptx.if_(lane == 0):
                ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink,
                         ptx.addr(self.full(w)), self.nbytes)
            wait(self.labels, self.full(w), phase)
            at = self.recv + w * self.nbytes + lane * 16
            for k in range(len(regs) // 4):
                got = [reg.scalar(f32) for _ in range(4)]
                ptx.inst("ld.shared.v4.f32", got, ptx.addr(at, k * 128 * 16))
                for r, g in zip(regs[4 * k:4 * k + 4], got):
                    ptx.inst.add.f32(r, r, g)
            ptx.inst("bar.warp.sync", 0xFFFFFFFF)
            with ptx.if_((lane & (THREADS_PER_WARP - 1)) == 0):
                remote = reg.scalar(u32)
                ptx.inst("mapa.shared::cluster.u32", remote, self.free(w), 1)
                ptx.inst("mbarrier.arrive.release.cluster.shared::cluster.b64", ptx.sink,
                         ptx.addr(remote))
            ptx.inst.xor.b32(phase, phase, 1)

    def send(self, w, lane, regs, phase) -> None:
        """Partner warpgroup ``w``: once the leader has read the last ones, its registers into
        the leader's buffer ``w`` (``st.async.v4``, completing on its ``recv_full[w]``);
        toggles ``phase``."""
        wait_cluster(self.labels, self.free(w), phase ^ 1)
        at, bar = reg.scalar(u32), reg.scalar(u32)
        ptx.inst("mapa.shared::cluster.u32", at, self.recv + w * self.nbytes + lane * 16, 0)
        ptx.inst("mapa.shared::cluster.u32", bar, self.full(w), 0)
        for k in range(len(regs) // 4):
            ptx.inst("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32",
                     ptx.addr(at, k * 128 * 16), list(regs[4 * k:4 * k + 4]), ptx.addr(bar))
        ptx.inst.xor.b32(phase, phase, 1)


__all__ = ["Pair", "cluster_sync", "wait_cluster"]
