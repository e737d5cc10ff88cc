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
TMA, ``dkv_tma``; without it, the last wgmmas have read K and V, and the dK, dV stores to
global memory run under the next load) and loads its K, V on ``kvfull``'s next phase.
"""
from __future__ import annotations

from ...core.types import pred, u32
from ...dsl import ptx, reg
from .._common.ring import wait
from .bwd_dqwarp import take_stage
from .bwd_epi import pack_kv
from .bwd_layout import PANEL, ROW
from .bwd_steps import load_kv


def pair_cta(cta, nblk, most: int = 0):
    """``(p, rest, units)`` of CTA ``cta``: its pair ``p`` (key blocks ``p``, ``nblk-1-p``),
    its (batch, K/V head) unit number ``rest`` and how many key blocks it walks (1, 2).
    ``most`` (``BwdConfig.pair_max``; 0: none): units of more key blocks keep one a CTA
    (``p`` the key block; long units' CTAs pay the fixed cost rarely, and many shorter
    CTAs even out the grid's last wave)."""
    npair = (nblk + 1) // 2
    two = reg.scalar(pred)
    if most:
        paired = reg.scalar(pred)
        ptx.inst.setp.le.u32(paired, nblk, most)
        n = reg.scalar(u32)
        ptx.inst.selp.u32(n, npair, nblk, paired)
        npair = n
    p = cta % npair
    ptx.inst.setp.lt.u32(two, 2 * p + 1, nblk)
    if most:
        ptx.inst.and_.pred(two, two, paired)
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


def grid(bn: int, most: int = 0):
    """Half the CTAs of one a key block (rounded up per unit; ``most``: see
    :func:`pair_cta`)."""
    def ctas(nblk):
        return nblk if most and nblk > most else (nblk + 1) // 2
    return lambda B, SK, HK: (ctas((SK + bn - 1) // bn) * HK * B, 1, 1)


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
    """The producer may load the next walk's K, V: with ``dkv_tma`` (``tid`` given) once
    the epilogue's TMA stores have read K's and V's tiles (thread 128 waited for them);
    without it (``tid`` None) once every consumer thread's last wgmma has landed (each
    of the 256 arrives, before its dK, dV stores to global memory, which then run under
    the load)."""
    if tid is None:
        ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink, ptx.addr(kvempty))
        return
    with ptx.if_(tid == 128):
        ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink, ptx.addr(kvempty))


__all__ = ["pair_cta", "unit_nb", "grid", "KvLoad", "release_kv"]


class Owner:
    """``dkv_stage``: whether a consumer warpgroup holds its dQ stage. The writer warp hands
    it back by an arrival per staged step (and one before the first); a walk's epilogue
    takes it (:func:`take_stage`, if not held), writes dK, dV through it and frees it
    itself, so the next walk's first step does not wait for an arrival (the writer, one
    arrival ahead at most, never arrives twice on one barrier phase)."""

    def __init__(self):
        self.owned = reg.scalar(u32, init=0)

    def take(self, w) -> None:
        """A step's: the stage, unless held (then the step's hand-over gives it away)."""
        with ptx.if_(self.owned == 0):
            take_stage(w)
        ptx.inst.mov.u32(self.owned, 0)

    def end(self, w) -> None:
        """A walk's epilogue: the stage, held from here."""
        with ptx.if_(self.owned == 0):
            take_stage(w)
        ptx.inst.mov.u32(self.owned, 1)

    def last(self, w) -> None:
        """After the last walk: the writer's last arrival, unless an epilogue took it."""
        with ptx.if_(self.owned == 0):
            take_stage(w)


def store_kv_stage(accs, stage, r0, lane, w, outs, coords, d: int, dtype, scale: float) -> None:
    """``dkv_stage``: consumer warpgroup ``w``'s dK (times ``scale``) and dV (``accs``, its
    64 keys, m64nD) as 16-bit pairs into its dQ stage at ``stage`` (dK's panels, then dV's:
    64 rows of 128 bytes a panel, 16-byte chunk ``c`` of row ``r`` at ``c ^ (r % 8)``, the
    TMA box's layout, a warp's eight rows of one chunk on all 32 banks), then lane 0 stores
    them by TMA (``coords(p)``: panel ``p``'s, keys past SK clipped) and waits for the reads,
    and the warpgroup's barrier frees the stage for the next walk's dQ."""
    panels = -(-d // PANEL)
    half = panels * 64 * ROW
    pack_kv(accs, (stage, stage + half), r0, lane, 64, dtype, scale)
    ptx.inst("fence.proxy.async.shared::cta")
    ptx.inst("bar.sync", 1 + w, 128)
    with ptx.if_(lane == 0):
        for tmap, tile in ((outs[0].tma_desc(), stage), (outs[1].tma_desc(), stage + half)):
            for p in range(panels):
                ptx.tma.store(tmap, coords(p), tile + p * 64 * ROW)
        ptx.tma.commit()
        ptx.tma.wait(0, read=True)
    ptx.inst("bar.sync", 1 + w, 128)


__all__ += ["Owner", "store_kv_stage"]
