"""dSᵀ into shared memory by ``stmatrix`` (``BwdConfig.ds_stsm``): one
``stmatrix.x4`` stores a warp's 16 keys x 16 queries (four 8 x 8 matrices, the packed
registers of one A-fragment chunk) where four ``st.shared.b32`` a thread did, in the same
layout, so the readers (dQ's descriptors) are unchanged. FlashAttention-4's sm90 backward
stages dS this way (bench/results/peer_sass_bwd64c.json: 16 STSM beside 8 STS, against
ptxdsl's 80 STS).

Matrix ``j`` of chunk ``kc`` is register ``j``: keys ``8 (j % 2)`` on of the warp's 16,
queries ``16 kc + 8 (j // 2)`` on; lanes ``8 j .. 8 j + 7`` give its rows' addresses."""
from __future__ import annotations

from ...dsl import ptx

STSM = "stmatrix.sync.aligned.m8n8.x4.shared.b16"


def _row(lw):
    """This lane's row of its matrix (``lw % 8``), the matrix's key half (8 keys) and
    query half (8 queries)."""
    return lw & 7, (lw >> 3) & 1, lw >> 4


def store_swizzled(regs, tile, warp, lw, offset) -> None:
    """:mod:`.bwd`'s 64-query dSᵀ tiles (a key's 64 queries in one 128-byte row, 16-byte
    chunk ``c`` at ``c ^ key % 8``): ``regs`` the packed chunks (16 queries each; chunk
    ``kc`` in tile ``kc // 4``, ``offset(kc // 4)`` bytes past ``tile``), ``tile`` the
    warpgroup's first tile, ``warp`` its warp (16 keys each)."""
    r, kh, qh = _row(lw)
    at = tile + (warp * 16 + kh * 8 + r) * 128
    cols = [((2 * c + qh) ^ r) << 4 for c in range(4)]
    for kc, chunk in enumerate(regs):
        ptx.inst(STSM, ptx.addr(at + cols[kc % 4], offset(kc // 4)), list(chunk))


def store_panels(regs, keys_at, lw, panel: int) -> None:
    """:mod:`.bwd_m80`'s 16-query dSᵀ panels (a key's 16 queries in 32 bytes, the 16-byte
    half ``h`` at ``h ^ key bit 2``): ``keys_at`` the warp's first key's row, chunk ``kc``
    in panel ``kc`` (``panel`` bytes apart)."""
    r, kh, qh = _row(lw)
    at = keys_at + (kh * 8 + r) * 32 + ((qh ^ (r >> 2)) << 4)
    for kc, chunk in enumerate(regs):
        ptx.inst(STSM, ptx.addr(at, kc * panel), list(chunk))


__all__ = ["store_swizzled", "store_panels", "STSM"]
