"""``ptx.cluster``: the CTAs of a cluster (sm_90) synchronising and finding each other.

=================================  ================================================
``arrive(relaxed=, aligned=)``     ``barrier.cluster.arrive[.relaxed][.aligned]``
``wait(aligned=)``                 ``barrier.cluster.wait[.aligned]``
``sync(aligned=)``                 ``arrive`` then ``wait``
``ctarank()``                      ``mov.u32 r, %cluster_ctarank`` (returns ``r``)
``is_rank(i)``                     ``ctarank()`` then ``setp.eq.u32 p, r, i`` (returns
                                   ``p``); pyptx calls it ``rank(i)``
``map_shared(addr, cta)``          ``mapa.shared::cluster.u32 r, addr, cta``: the same
                                   shared variable in the CTA of rank ``cta``
``arrive_remote(addr, cta, n=1)``  ``mapa`` as above, then
                                   ``mbarrier.arrive.shared::cluster.b64 _, [r], n``
=================================  ================================================

Every call takes ``pred=`` (a guard on each recorded instruction).
"""
from __future__ import annotations

from ..core import ir
from ..core.trace import current
from ..core.types import pred as pred_t, u32
from .mbarrier import arrive_remote as _arrive_remote

__all__ = ["arrive", "wait", "sync", "ctarank", "is_rank", "rank", "map_shared",
           "map_shared_u32", "arrive_remote"]


def arrive(*, relaxed: bool = False, aligned: bool = False, pred=None) -> None:
    """``barrier.cluster.arrive[.relaxed][.aligned]``."""
    chain = ["barrier", "cluster", "arrive"] + (["relaxed"] if relaxed else []) + \
        (["aligned"] if aligned else [])
    current("ptx.cluster.arrive").inst(chain, (), guard=pred)


def wait(*, aligned: bool = False, pred=None) -> None:
    """``barrier.cluster.wait[.aligned]``.

    Its acquire is at cluster scope, and on an H100 and an H200 that empties the SM's L1:
    global data read before the wait and read again after it comes from L2 (measured:
    docs/rmsnorm.md, "The two-pass cluster forward"). A kernel that rereads data through
    L1 exchanges values with ``st.async`` and an mbarrier instead, or waits before its
    loads."""
    chain = ["barrier", "cluster", "wait"] + (["aligned"] if aligned else [])
    current("ptx.cluster.wait").inst(chain, (), guard=pred)


def sync(*, aligned: bool = False, pred=None) -> None:
    """``barrier.cluster.arrive`` then ``barrier.cluster.wait`` (``.aligned`` on both if
    asked): every thread of every CTA of the cluster meets here."""
    arrive(aligned=aligned, pred=pred)
    wait(aligned=aligned, pred=pred)


def ctarank() -> ir.Reg:
    """``mov.u32 r, %cluster_ctarank``: this CTA's rank in its cluster."""
    b = current("ptx.cluster.ctarank")
    r = b.new_reg(u32)
    b.inst(["mov", "u32"], (r, ir.Special("cluster_ctarank", u32)))
    return r


def is_rank(i) -> ir.Reg:
    """A predicate, true in the CTA of rank ``i``: :func:`ctarank` and ``setp.eq.u32``."""
    b = current("ptx.cluster.is_rank")
    r = ctarank()
    p = b.new_reg(pred_t)
    b.inst(["setp", "eq", "u32"], (p, r, i))
    return p


rank = is_rank  # pyptx's name


def map_shared(addr, cta, *, pred=None) -> ir.Reg:
    """``mapa.shared::cluster.u32 r, addr, cta``: ``addr`` (a ``.u32`` shared address) as
    seen in the CTA of rank ``cta``."""
    b = current("ptx.cluster.map_shared")
    r = b.new_reg(u32)
    b.inst(["mapa", "shared::cluster", "u32"], (r, addr, cta), guard=pred)
    return r


def arrive_remote(addr, cta, count=1, *, pred=None) -> None:
    """Arrive ``count`` times on the mbarrier at shared address ``addr`` of the CTA of
    rank ``cta``: ``mapa.shared::cluster.u32 r, addr, cta`` and
    ``mbarrier.arrive.shared::cluster.b64 _, [r], count``."""
    _arrive_remote(addr, cta, count, pred=pred)


map_shared_u32 = map_shared  # pyptx's name
