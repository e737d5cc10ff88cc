"""The fused decode's merge through distributed shared memory: the ``NS`` splits of a tile
run as one cluster of ``NS`` CTAs (``NS <= 16``, the non-portable size past 8) and merge
their partial rows there, with no global partials, ticket word nor last-split wait.

The head dim's ``D / 8`` column blocks of 8 are dealt round-robin to the ranks: rank
``c`` owns blocks ``c, c + NS, ...`` (``KMAX = ceil(D / 8 / NS)`` of them at most).
Once its loop is done, every split pushes each of its used rows, normalised (``O / l``),
to the owners: the 2 columns a thread holds of block ``i`` go to rank ``i % NS``
(``st.async ... v2.f32``), and the row's LSE to every rank (``st.async ... f32``), all
completing bytes on the receiver's mbarrier, which its thread 0 armed at the start for
``NS x rows x (32 x owned blocks + 4)`` bytes. Every CTA then waits on its own
mbarrier only (no cluster barrier, no global round trip) and merges its blocks' columns
(one thread per row and column pair, splits in rank order: the result does not depend
on which split came last) into ``out``; rank 0 also writes each row's LSE.

Receive area, f32 words in shared memory: ``lse[NS][ROWS]`` then
``o[NS][ROWS][KMAX][8]`` (``ROWS``: the most query rows a tile may hold, the plan's
``fused_max_rows``). A CTA exits right after its merge: every push into it has landed
by its wait, and its own pushes are ``st.async`` (no peer waits on them but through its
mbarrier). The cluster barrier's first phase, arrived at (relaxed) after the mbarrier's
init and waited for before the first push, tells every CTA its peers' mbarriers are
initialised.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core.types import PtxType, b32, f32, u32
from ...dsl import ptx, reg
from .softmax import LOG2E, lse_max, quad_reduce, row_inverse, row_lse

MAX_CLUSTER = 16     # CTAs per cluster on sm_90 (past 8: the non-portable size)


@dataclass(frozen=True)
class ClusterMerge:
    """The merge of ``ns`` splits of tiles of at most ``rows`` query rows, head dim ``d``."""

    ns: int
    d: int
    rows: int

    def __post_init__(self):
        if not 1 <= self.ns <= min(MAX_CLUSTER, self.d // 8):
            raise ValueError(f"a cluster merge takes 1 to {min(MAX_CLUSTER, self.d // 8)} "
                             f"splits at head dim {self.d}, not {self.ns}")

    @property
    def blocks(self) -> int:
        return self.d // 8

    @property
    def kmax(self) -> int:
        return -(-self.blocks // self.ns)

    @property
    def nbytes(self) -> int:
        return 4 * self.ns * self.rows * (1 + 8 * self.kmax)

    def lse_at(self, s, r):
        return (s * self.rows + r) * 4

    def o_at(self, s, r, k, c):
        return 4 * self.ns * self.rows + (((s * self.rows + r) * self.kmax + k) * 8 + c) * 4


def arm(cm: ClusterMerge, bar, rank, used) -> None:
    """Thread 0: the receiver's mbarrier expects every split's pushes of the ``used`` rows
    of the blocks rank ``rank`` owns (called right after the barrier's init)."""
    owned = reg.scalar(u32, init=cm.blocks + cm.ns - 1)
    ptx.inst.sub.u32(owned, owned, rank)
    owned = owned // cm.ns
    nbytes = (owned * 32 + 4) * used * cm.ns
    ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink, ptx.addr(bar), nbytes)


def push(cm: ClusterMerge, o_acc, m, l, trows, used, fcol, lw, split, recv, bar) -> None:
    """The consumer's pushes of its rows (``trows``, those under ``used``), normalised, to
    the owners of their columns; lanes of column pair 0 push the rows' LSE to every
    rank. ``recv`` / ``bar``: this CTA's receive area and mbarrier (shared addresses)."""
    ptx.cluster.wait(aligned=True)        # peers' mbarriers initialised (the start's phase)
    dst = [ptx.cluster.map_shared(recv, c) for c in range(cm.ns)]
    bars = [ptx.cluster.map_shared(bar, c) for c in range(cm.ns)]
    elems = list(o_acc)
    for r in range(2):
        quad_reduce(l[r], "add")
        inv, some = row_inverse(l[r])
        with ptx.if_(trows[r] < used):
            for i in range(cm.blocks):   # g = 4 i: row trow at 4 i, 4 i + 1; trow + 8 at + 2
                c, kk = i % cm.ns, i // cm.ns
                lo, hi = elems[4 * i + 2 * r], elems[4 * i + 2 * r + 1]
                ptx.inst.mul.f32(lo, lo, inv)
                ptx.inst.mul.f32(hi, hi, inv)
                at = dst[c] + cm.o_at(split, trows[r], kk, 0) + fcol * 4
                ptx.inst("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32",
                         ptx.addr(at), [lo, hi], ptx.addr(bars[c]))
            with ptx.if_((lw & 3) == 0):
                val = row_lse(l[r], m[r], some)
                for c in range(cm.ns):
                    ptx.inst("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32",
                             ptx.addr(dst[c] + cm.lse_at(split, trows[r])), val,
                             ptx.addr(bars[c]))


def merge(cm: ClusterMerge, dtype: PtxType, tid, rank, recv, tile, dims, pout, plse) -> None:
    """After the mbarrier's wait, in the consumer warpgroup (``tid`` 0..127): each thread
    merges one (row, owned block, column pair) at a time. ``tile``: (batch, K/V head,
    group, first query position, rows in use); ``dims``: (H, SQ)."""
    batch, hkv, group, sq0, used = tile
    nh, sq = dims
    items = cm.rows * cm.kmax * 4
    for it in range(-(-items // 128)):
        item = tid + it * 128
        r, k, cp = item // (cm.kmax * 4), (item >> 2) % cm.kmax, item & 3
        blk = k * cm.ns + rank
        ok = (item < items) & (r < used) & (blk < cm.blocks)
        with ptx.if_(ok):
            xs, os_ = [], []
            for s in range(cm.ns):
                x = reg.scalar(f32)
                ptx.inst("ld.shared.f32", x, ptx.addr(recv + cm.lse_at(s, r)))
                ov = [reg.scalar(f32) for _ in range(2)]
                ptx.inst("ld.shared.v2.f32", ov,
                         ptx.addr(recv + cm.o_at(s, r, k, 0) + cp * 8))
                xs.append(x)
                os_.append(ov)
            _, use, neg = lse_max(xs)
            tot = reg.scalar(f32, init=0.0)
            acc = [reg.scalar(f32, init=0.0) for _ in range(2)]
            for x, ov in zip(xs, os_):
                w = reg.scalar(f32)
                ptx.inst("fma.rn.f32", w, x, LOG2E, neg)
                ptx.inst("ex2.approx.ftz.f32", w, w)
                ptx.inst.add.f32(tot, tot, w)
                for a, y in zip(acc, ov):
                    ptx.inst("fma.rn.f32", a, w, y, a)
            inv, some = row_inverse(tot)
            for a in acc:
                ptx.inst.mul.f32(a, a, inv)
            word = reg.scalar(b32)
            ptx.inst(f"cvt.rn.{dtype.name}x2.f32", word, acc[1], acc[0])
            head = hkv * group + r % group
            pos = sq0 + r // group
            col = blk * 8 + cp * 2
            ptx.inst("st.global.b32",
                     ptx.addr(pout + (((batch * sq + pos) * nh + head) * cm.d + col)
                              * dtype.bytes), word)
            with ptx.if_((blk == 0) & (cp == 0)):
                val = row_lse(tot, use, some)
                ptx.inst("st.global.f32",
                         ptx.addr(plse + ((batch * nh + head) * sq + pos) * 4), val)


__all__ = ["ClusterMerge", "arm", "push", "merge", "MAX_CLUSTER"]
