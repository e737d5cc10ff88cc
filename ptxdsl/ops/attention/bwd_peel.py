"""Which query blocks of a key block's walk run the mask code (:mod:`.bwd`, default mode).

A CTA's steps over the rows ``[m_lo, m_hi)`` (:func:`.bwd_steps.row_blocks`) cross the
causal / window boundary only at the ends: the first ones, where a key of the block lies
past ``row + off + right`` for the block's first row, and, with a left window, the last
ones, where a key lies before ``row + off - left`` for its last row. ``BwdConfig.mask_peel``
walks those steps in loops of their own (each step there still tests whether its own
warpgroup's keys cross, :func:`.bwd_scores.cap_and_mask`) and the steps between in a loop
traced without the mask, so they carry neither its test nor its branch (FlashAttention's
forward splits its key loop the same way). ``BwdConfig.m_desc`` walks every part last row
block first."""
from __future__ import annotations

from ...dsl import ptx
from .config import Mask
from .fwd import _s32


def _ceil_div(x, n: int):
    """``ceil(max(x, 0) / n)`` of an ``.s32`` register."""
    return (ptx.max(x, _s32(0)) + (n - 1)) // n


def _clamp(x, lo, hi):
    return ptx.min(ptx.max(x, lo), hi)


def step_parts(mask: Mask, n0, off, m_lo, m_hi, bn: int, bm: int, peel: bool,
               desc: bool = False) -> list:
    """``[(ptx.range_ arguments, mask for its steps), ...]`` in walking order: the one range
    ``[m_lo, m_hi)`` with ``mask`` (``peel`` off, or no mask), else the masked first
    steps ``[m_lo, a)``, the unmasked ``[a, b)`` and (left window) the masked last
    ``[b, m_hi)``; ``desc``: each range last block first, the parts in reverse."""
    span = lambda lo, hi: (hi - 1, lo - 1, -1) if desc else (lo, hi)  # noqa: E731
    if not (peel and mask.any):
        return [(span(m_lo, m_hi), mask)]
    a, b = m_lo, m_hi
    if mask.right >= 0:      # block m crosses iff n0 + bn - 1 > m·bm + off + right
        a = _clamp(_ceil_div(_s32(n0) + (bn - 1 - mask.right) - off, bm), m_lo, m_hi)
    if mask.left >= 0:       # ... iff n0 < m·bm + bm - 1 + off - left
        b = _clamp(_ceil_div(_s32(n0) + (mask.left + 2 - bm) - off, bm), a, m_hi)
    parts = [((m_lo, a), mask)] if mask.right >= 0 else []
    parts.append(((a, b), Mask()))
    if mask.left >= 0:
        parts.append(((b, m_hi), mask))
    parts = [(span(*r), m) for r, m in parts]
    return parts[::-1] if desc else parts


__all__ = ["step_parts"]
