"""The producer's loads of one ring step, and Q and dO of a slot on mbarriers of their own
(``BwdConfig.qdo_split``, FlashAttention-3's and -4's two pipelines): the slot's ``full``
barrier counts Q and -LSE·log2e, a second one (``fulldo``) dO and D, so a consumer issues
Sᵀ = K·Qᵀ once Q has landed and waits for dO only before dPᵀ = V·dOᵀ (with ``s_ahead``,
the next step's Sᵀ waits for its Q alone). One ``empty`` barrier still releases the
slot."""
from __future__ import annotations

from ...dsl import ptx

ROW = 128            # bytes per swizzled panel row


def load_slot(*, base, slot, full, fulldo, q_bytes: int, bm: int, panels: int,
              tiles, rows, qc, rc) -> None:
    """The loads of one step into ``slot``: ``tiles`` ((tmap, offset) of Q, dO), ``rows``
    ((tmap, offset) of -LSE·log2e, D: one copy per consumer warpgroup, each reads its
    own, so a warpgroup's reads are all ordered before its release); all on ``full``, or
    (``fulldo`` given) Q and LSE on ``full``, dO and D on ``fulldo`` (``qc(p)``, ``rc()``: the
    boxes' coordinates)."""
    def tile(tmap, dst, fb):
        at = base + dst + slot * q_bytes
        for p in range(panels):
            ptx.tma.load(at + p * bm * ROW if p else at, tmap, qc(p), fb)

    def row(tmap, dst, fb):
        for cw in range(2):
            ptx.tma.load(base + dst + slot * (2 * bm * 4) + cw * bm * 4, tmap, rc(), fb)

    if fulldo is None:
        fb = full + slot * 8
        ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink, ptx.addr(fb),
                 2 * q_bytes + 4 * bm * 4)
        for t in tiles:
            tile(*t, fb)
        for r in rows:
            row(*r, fb)
        return
    for bar, t, r in zip((full, fulldo), tiles, rows):
        fb = bar + slot * 8
        ptx.inst("mbarrier.arrive.expect_tx.shared::cta.b64", ptx.sink, ptx.addr(fb),
                 q_bytes + 2 * bm * 4)
        tile(*t, fb)
        row(*r, fb)


__all__ = ["load_slot"]
