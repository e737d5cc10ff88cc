"""Two key blocks a CTA in the backward's main kernel (``BwdConfig.kv_pair``, :mod:`.bwd`).

Under a causal mask key block ``n`` of ``nblk`` sees ``nblk - n`` row blocks, so one CTA a
key block gives CTAs from one step to ``nblk`` steps long, and a cost paid once a CTA (its
launch, the K/V load and the first Q/dO slot's latency with nothing to overlap them, the
dK/dV epilogue, the last dQ add) is paid twice as often per step as at full mask (head
dim 64: about 3.7 step times a CTA fits the causal-to-full ratios at S 1k, 4k and 16k).
Here CTA ``p`` of a (batch, K/V head) unit walks key block ``p`` and then ``nblk - 1 - p``
(the middle one alone when ``nblk`` is odd): ``nblk + 1`` steps every CTA under a causal
mask, half as many CTAs. The ring, the dQ writer's stages and the consumers' carried Sᵀ run
on across the two blocks; between them the producer loads the second block's first Q, dO
slot, then waits on ``kvempty`` (the first block's dK, dV have left K's and V's tiles by
TMA, ``dkv_tma``) and loads its K, V on ``kvfull``'s next phase.
"""
from __future__ import annotations

from ...core.types import pred, u32
from ...dsl import ptx, reg
from .._common.ring import wait
from .bwd_steps import load_kv


def pair_cta(cta, nblk):
    """``(p, rest, units)`` of CTA ``cta``: its pair ``p`` (key blocks ``p``, ``nblk-1-p``),
    its (batch, K/V head) unit number ``rest`` and how many key blocks it walks (1, 2)."""
    npair = (nblk + 1) // 2
    p = cta % npair
    two = reg.scalar(pred)
    ptx.inst.setp.lt.u32(two, 2 * p + 1, nblk)
    units = reg.scalar(u32)
    ptx.inst.selp.u32(units, 2, 1, two)
    return p, cta // npair, units


def unit_nb(t, p, nblk):
    """The key block of the CTA's walk ``t`` (0: ``p``, 1: ``nblk - 1 - p``)."""
    nb = reg.scalar(u32)
    first = reg.scalar(pred)
    ptx.inst.setp.eq.u32(first, t, 0)
    ptx.inst.selp.u32(nb, p, nblk - 1 - p, first)
    return nb


def grid(bn: int):
    """Half the CTAs of one a key block (rounded up per unit)."""
    return lambda B, SK, HK: (((SK + bn - 1) // bn + 1) // 2 * HK * B, 1, 1)


class KvLoad:
    """The producer's K/V load of walk ``t``, issued after the walk's first Q, dO slot (or
    at its end if it has no step): from the second walk on it waits for ``kvempty``'s
    phase of the walk before (the last walk's dK, dV have been read out of the tiles)."""

    def __init__(self, labels, t, base, maps, panels: int, bn: int, kc, kvfull, kvempty,
                 kv_bytes: int):
        self.labels, self.t, self.kvempty = labels, t, kvempty
        self.args = (base, maps, panels, bn, kc, kvfull, kv_bytes)
        self.due = reg.scalar(u32, init=1)

    def __call__(self) -> None:
        with ptx.if_(self.due != 0):
            with ptx.if_(self.t != 0):
                wait(self.labels, self.kvempty, (self.t + 1) & 1)
            load_kv(*self.args)
            ptx.inst.mov.u32(self.due, 0)


def release_kv(tid, kvempty) -> None:
    """After the epilogue's TMA stores have read K's and V's tiles (thread 128 waited for
    them): the producer may load the next walk's K, V."""
    with ptx.if_(tid == 128):
        ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink, ptx.addr(kvempty))


__all__ = ["pair_cta", "unit_nb", "grid", "KvLoad", "release_kv"]
