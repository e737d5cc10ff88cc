"""``Config.q_double``: the forward's two Q buffers (:mod:`.fwd`), which the tiles of a CTA
take in turn, so the producer loads the next tile's Q while the current one runs: which
buffer, mbarriers and (``Config.dynamic``) tile-number words a tile's Q uses, and the turn
to the next."""
from __future__ import annotations

from ...core.types import u32
from ...dsl import ptx, reg


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


def q_next(ring, phase) -> None:
    """On to the next tile's Q: the other buffer (``ring``, ``q_double``), else the next
    phase of the one buffer's mbarriers."""
    if ring is None:
        ptx.inst.xor.b32(phase, phase, 1)
    else:
        ring.advance()


__all__ = ["q_buffer", "q_next", "tile_words"]
