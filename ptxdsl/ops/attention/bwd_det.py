"""The backward's deterministic mode (:mod:`.bwd`): dQ's f32 additions to each 64-row block
in one fixed order, ascending key block (and, where the two consumer warpgroups add the
same columns, warpgroup 0 before 1), through a u32 semaphore per (batch, head, 64-row
block) that the preprocess zeroes.

The order itself is the old one (dq's bits are unchanged; dK and dV, summed in registers
in the order a CTA visits its row blocks, are not); what this module decides is when each
add happens, so that a CTA rarely finds its turn not yet come:

* **Which CTA takes which key block** (:func:`det_cta`): CTAs in sections of ``G`` (batch,
  K/V head) units, key block-major inside a section, so that a unit's key block ``nb + 1``
  starts ``G`` CTAs after its block ``nb`` (one wave's turnover spaces them in time, as
  the chain of adds needs) and still only after it (a CTA waits only for CTAs launched
  before it). ``G`` keeps a section's Q, dO and f32 dQ rows within :data:`SECTION_BYTES`
  of L2 (or is ``BwdConfig.det_units``: more units, fewer co-resident key blocks of each,
  a shorter chain of turns on a row block).
* **In which order a CTA visits its query blocks** (:func:`m_blocks`): last to first, so
  that under a causal or window mask the key blocks of a row block reach it together
  (every key block's range ends at the last block) or the earlier key block first (a
  window's ranges end two blocks apart), not the later key block first as the ascending
  walk from the diagonal has them.
* **In which order the turns go** (``BwdConfig.det_desc``, dense layout): ascending key
  block, or descending (:func:`last_nb`), each CTA walking its row blocks up from its
  diagonal and a section launching its last key block first, so that under a causal mask
  key block ``n`` reaches a row block a step after ``n + 1``, in its turn, rather than
  all of a unit's co-resident key blocks reaching the last row block at once.
* **When a turn is waited for and passed on** (:class:`Turns`): the add is a TMA
  reduce-add whose completion takes a round trip to L2; the adding thread passes the turn
  only in the next step, right after that step's first GEMMs are issued (their tensor
  time covers the completion wait, the release and an early ``ld.acquire`` of this step's
  block's semaphore), so the consumer warpgroup no longer stalls on its own add every step.
"""
from __future__ import annotations

from ...core.types import s32, u32
from ...dsl import ptx, reg
from .bwd_config import BLOCK_N as BN
from .config import Mask
from .tiles import s32_of as _s32

# a section's Q, dO (16-bit) and f32 dQ rows, well inside an H100/H200's 50/60 MB L2
SECTION_BYTES = 24 << 20
MAX_SECTION = 8     # units a section interleaves at most


def _min(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return a.min(b) if not isinstance(a, int) else b.min(a)


def _max(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return a.max(b) if not isinstance(a, int) else b.max(a)


def section_units(sq, group, d: int):
    """``G``: the (batch, K/V head) units a section interleaves, from 1 to 8, as many as
    keep their Q, dO and dQ rows (``sq`` rows of ``group`` heads, 8 bytes an element)
    within :data:`SECTION_BYTES`. ``sq``, ``group``: ints or u32 registers."""
    return _max(_min((SECTION_BYTES // (8 * d)) // (sq * group), MAX_SECTION), 1)


def det_cta(cta, nblk, nhk, units, sq, group, d: int, g: int = 0, desc: bool = False):
    """``(nb, hk, batch)`` of CTA ``cta`` (dense layout): sections of ``G`` units
    (:func:`section_units`, or ``g`` where given: ``BwdConfig.det_units``; the last section
    takes the rest), each section's CTAs key block-major (``desc``, ``BwdConfig.det_desc``:
    last key block first). Ints (the tests' model) or u32 registers (the kernel)."""
    g_full = g or section_units(sq, group, d)
    span = g_full * nblk
    sec = cta // span
    g = _min(g_full, units - sec * g_full)
    r = cta - sec * span
    nb = r // g
    u = sec * g_full + r - nb * g
    return (nblk - 1 - nb if desc else nb), u % nhk, u // nhk


def m_blocks(m_lo, m_hi, desc: bool = False):
    """``ptx.range_`` arguments that visit the row blocks ``m_hi - 1`` down to ``m_lo``
    (``desc``: ``m_lo`` up to ``m_hi - 1``, each key block from its diagonal on)."""
    return (m_lo, m_hi) if desc else (m_hi - 1, m_lo - 1, -1)


def first_nb(m0, off, mask: Mask, bn: int = BN):
    """The first key block whose CTA takes the rows from ``m0`` (see the m range)."""
    if mask.left < 0:
        return reg.scalar(s32, init=0)
    return ptx.max(_s32(m0) + off - mask.left, reg.scalar(s32, init=0)) // bn


def last_nb(m0, off, mask: Mask, bn: int, bm: int):
    """The last key block whose CTA takes the ``bm``-row block from ``m0`` (dense layout:
    the key blocks of ``SK``); the first past its rows' keys takes none (see the m range)."""
    nblk = (_s32(ptx.dim("SK")) + (bn - 1)) // bn
    if mask.right < 0:
        return nblk - 1
    return ptx.min((_s32(m0) + off + (bm - 1 + mask.right)) // bn, nblk - 1)


def turn_of(nb, m0, off, mask: Mask, w, split: bool, bn: int, adds: int, desc=None):
    """The semaphore value at which key block ``nb``'s warpgroup ``w`` adds to the rows
    from ``m0``: ``adds`` per earlier key block, plus ``w`` when the warpgroups add the
    same columns (``split`` False). ``desc`` (``BwdConfig.det_desc``: the step's rows
    ``bm``): the key blocks in descending order, ``adds`` per later key block."""
    turn = ((last_nb(m0, off, mask, bn, desc) - _s32(nb)) if desc else
            (_s32(nb) - first_nb(m0, off, mask, bn))) * adds
    return turn if split else turn + _s32(w)


def spin(at, turn, split: bool, labels, seen=None) -> None:
    """Until the semaphore at ``at`` reaches ``turn`` (``split``: at least; else exactly):
    ``ld.acquire.gpu`` polls; ``seen`` a value read earlier (skips the first poll when it
    already shows the turn)."""
    top = ptx.new_label(f"turn{next(labels)}")
    done = ptx.new_label(f"turned{next(labels)}")
    if seen is None:
        seen = reg.scalar(u32)
        ptx.place(top)
    else:
        ptx.place(top)
        ptx.bra(done, pred=(_s32(seen) >= turn) if split else (_s32(seen) == turn))
    ptx.inst.ld.acquire.gpu.global_.u32(seen, ptx.addr(at))
    ptx.bra(top, pred=(_s32(seen) < turn) if split else (_s32(seen) != turn))
    ptx.place(done)


def pass_turn(at, n: int = 1) -> None:
    """The adds are done (after ``bar.sync`` or the bulk group's completion): the next
    turn, or the next ``n`` at once (``red.release.gpu.global.add.u32``)."""
    ptx.inst("fence.proxy.async.global")
    ptx.inst("red.release.gpu.global.add.u32", ptx.addr(at), n)


class Turns:
    """A consumer warpgroup's turns with dQ added by TMA reduce-add (one adding thread,
    ``lane == 0``). Two u32 words of shared memory (``slot()``: their address, computed
    where used) carry the block whose add is in flight (its semaphore index + 1, 0 for
    none) and the semaphore value read early in the step, so that no register lives
    across the step for them (the masked kernels have none to spare)."""

    def __init__(self, sem, labels, slot):
        self.sem, self.labels, self.slot = sem, labels, slot

    def at(self, index):       # (the pointer where it is used: none live across the loop)
        return ptx.global_ptr(self.sem) + index * 4

    def index(self, bh, mb):
        return bh * ptx.dim("NMB") + mb

    def start(self) -> None:
        """Before the loop (the adding thread): no add in flight."""
        ptx.inst("st.shared.u32", ptx.addr(self.slot()), 0)

    def land(self) -> None:
        """The adding thread: wait for the last add to complete and pass its turn."""
        ptx.inst("cp.async.bulk.wait_group", 0)
        pend = reg.scalar(u32)
        ptx.inst("ld.shared.u32", pend, ptx.addr(self.slot()))
        with ptx.if_(pend != 0):
            pass_turn(self.at(pend - 1))
            ptx.inst("st.shared.u32", ptx.addr(self.slot()), 0)

    def early(self, lane, adds_now, bh, mb) -> None:
        """Right after the step's first GEMMs are issued: land the last step's add and, if
        this step adds (``adds_now``; None: no early read, the add's wait reads), read its
        block's semaphore."""
        with ptx.if_(lane == 0):
            self.land()
        if adds_now is None:
            return
        with ptx.if_(adds_now):
            seen = reg.scalar(u32)
            ptx.inst.ld.acquire.gpu.global_.u32(seen, ptx.addr(self.at(self.index(bh, mb))))
            ptx.inst("st.shared.u32", ptx.addr(self.slot(), 4), seen)

    def wait(self, bh, mb, turn, split: bool, early: bool = True) -> None:
        """The adding thread, before its reduce-add: until the block's turn comes
        (``early``: from the value :meth:`early` read)."""
        seen = None
        if early:
            seen = reg.scalar(u32)
            ptx.inst("ld.shared.u32", seen, ptx.addr(self.slot(), 4))
        spin(self.at(self.index(bh, mb)), turn, split, self.labels, seen)

    def added(self, bh, mb) -> None:
        """The adding thread has committed its reduce-add to the block: in flight."""
        ptx.inst("st.shared.u32", ptx.addr(self.slot()), self.index(bh, mb) + 1)


__all__ = ["SECTION_BYTES", "section_units", "det_cta", "m_blocks", "first_nb", "last_nb",
           "turn_of",
           "spin", "pass_turn", "Turns"]
