"""``Config.q_double``: the forward's two Q buffers (:mod:`.fwd`), which the tiles of a CTA
take in turn, so the producer loads the next tile's Q while the current one runs: which
buffer, mbarriers, (``Config.dynamic``) tile-number words and (``Config.work_words``) tile
fields a tile's Q uses, and the turn to the next."""
from __future__ import annotations

from ...core.types import u32
from ...dsl import ptx, reg
from .tiles import Work

# Config.work_words: the Work fields the producer writes for the consumers, a word each
WORK_FIELDS = ("m0", "head", "batch", "hkv", "sq", "sk", "q0", "k0")


def q_buffer(L, qfull, qempty, ring):
    """``(qfull, qempty, Q's byte offset)`` of the buffer the tile at ``ring``'s slot takes:
    the first (``L.q``, its mbarriers ``qfull`` / ``qempty``) or the second (``L.q2``, its
    mbarriers at ``L.qbar2``, full then empty as the first's are); without ``ring`` (one Q
    buffer) the first."""
    if ring is None:
        return qfull, qempty, L.q
    second = ring.slot == 1
    bars = reg.scalar(u32)
    ptx.inst.selp.u32(bars, L.qbar2 - L.qfull, 0, second)
    at = reg.scalar(u32)
    ptx.inst.selp.u32(at, L.q2, L.q, second)
    return qfull + bars, qempty + bars, at


def tile_words(L, ring):
    """``Config.dynamic``: the byte offset of the tile-number words (one per consumer) that
    go with the Q buffer of ``ring``'s slot (``q_double``: 16 bytes on for the second), or
    of the one set without ``ring``."""
    if ring is None:
        return L.tile
    at = reg.scalar(u32)
    ptx.inst.selp.u32(at, L.tile + 16, L.tile, ring.slot == 1)
    return at


def _work_at(base, L, ring, nc: int):
    if ring is None:
        return base + L.work
    at = reg.scalar(u32)
    ptx.inst.selp.u32(at, L.work + 32 * nc, L.work, ring.slot == 1)
    return base + at


def put_work(base, L, ring, w: Work, nc: int) -> None:
    """``Config.work_words``: tile ``w``'s fields into the words of the Q buffer at
    ``ring``'s slot, a copy for each of the ``nc`` consumers (the producer, before Q's
    full barrier completes). A copy each, as the tile numbers: each consumer's reads are
    then ordered before the next writes by its own release of Q."""
    at = _work_at(base, L, ring, nc)
    for c in range(nc):
        for i, f in enumerate(WORK_FIELDS):
            ptx.inst("st.shared.u32", ptx.addr(at, 32 * c + 4 * i), getattr(w, f))


def get_work(base, L, ring, sched, cons, nc: int) -> Work:
    """``Config.work_words``: consumer ``cons``'s copy of the tile the producer wrote
    beside the Q buffer at ``ring``'s slot (read once its full barrier completed);
    whether it has rows, from its fields."""
    at = _work_at(base, L, ring, nc) + (cons << 5)
    got = {}
    for i, f in enumerate(WORK_FIELDS):
        got[f] = reg.scalar(u32)
        ptx.inst("ld.shared.u32", got[f], ptx.addr(at, 4 * i))
    return Work(**got, valid=sched.has_rows(got["m0"], got["sq"]))


def q_next(ring, phase) -> None:
    """On to the next tile's Q: the other buffer (``ring``, ``q_double``), else the next
    phase of the one buffer's mbarriers."""
    if ring is None:
        ptx.inst.xor.b32(phase, phase, 1)
    else:
        ring.advance()


__all__ = ["q_buffer", "q_next", "tile_words", "put_work", "get_work", "WORK_FIELDS"]
