"""The backward main kernel's dK / dV epilogue through shared memory and TMA stores
(``BwdConfig.dkv_tma``, FlashAttention-4's sm90 epilogue).

Once every wgmma of the last step has landed, K's and V's tiles are free: each consumer
thread packs its dK (times the softmax scale) and dV accumulators to 16-bit pairs and writes
them where its rows of K and V were (the TMA box's layout: 64-column panels of
``block_n`` 128-byte rows, 16-byte chunk ``c`` of row ``r`` at ``c ^ (r % 8)``, so a warp's
eight rows of one chunk fill all 32 banks once); one thread then stores every panel with
``cp.async.bulk.tensor`` (keys past SK clipped by the tensor map) and waits only for the
reads of shared memory before the CTA may exit. :func:`.bwd_steps.store` instead makes
each thread write 4-byte pairs to global memory (a warp's store: eight 16-byte pieces)."""
from __future__ import annotations

from ...core.types import b32
from ...dsl import ptx, reg
from .bwd_layout import PANEL, ROW

BAR = (3, 256)       # the two consumer warpgroups' named barrier (as the dSᵀ exchange's)


def pack_kv(accs, tiles, row, lane, rows: int, dtype, scale: float) -> None:
    """dK (times ``scale``) and dV (``accs``, m64nD) as 16-bit pairs into ``tiles`` (dK's,
    dV's: 64-column panels of ``rows`` 128-byte rows, 16-byte chunk ``c`` of row ``r`` at
    ``c ^ (r % 8)``, a TMA box's layout); ``row``: this thread's first row in the tiles."""
    lw = lane & 31
    xr = lw >> 2                          # row % 8
    row_at = row * ROW + (lw & 3) * 4
    for acc, tile, sc in ((accs[0], tiles[0], scale), (accs[1], tiles[1], None)):
        chunk = [tile + row_at + ((xr ^ c) << 4) for c in range(8)]
        elems = list(acc)
        for g in range(0, len(elems), 4):
            k = g // 4                    # columns 8k .. 8k + 7: panel k // 8, chunk k % 8
            for r in range(2):
                lo, hi = elems[g + 2 * r], elems[g + 2 * r + 1]
                if sc is not None:
                    ptx.inst.mul.f32(lo, lo, float(sc))
                    ptx.inst.mul.f32(hi, hi, float(sc))
                wd = reg.scalar(b32)
                ptx.inst(f"cvt.rn.{dtype.name}x2.f32", wd, hi, lo)
                o = (k // 8) * rows * ROW + r * 8 * ROW
                ptx.inst("st.shared.b32", ptx.addr(chunk[k % 8], o), wd)


def store_kv_tma(accs, base, layout, outs, key_row, lane, tid, coords, d: int, dtype,
                 scale: float) -> None:
    """``accs``: ``(dk_acc, dv_acc)`` (m64nD, this warpgroup's 64 keys); ``base`` and
    ``layout`` (:class:`.bwd_layout.Smem`): the K and V tiles' shared addresses (``block_n`` rows a
    panel); ``outs``: the dk, dv tensors (TMA-mapped as K); ``key_row``: this thread's first
    key row in the tile (``64 w + r0``); ``lane``: its lane in the warpgroup; ``tid``: its
    thread id (thread 128 issues the stores); ``coords(p)``: panel ``p``'s TMA
    coordinates."""
    k_at, v_at = base + layout.k, base + layout.v
    bn = layout.kv_bytes // (-(-d // PANEL) * PANEL * dtype.bytes)
    tdk, tdv = (t.tma_desc() for t in outs)
    ptx.inst("wgmma.wait_group.sync.aligned", 0)
    ptx.inst("bar.sync", *BAR)            # both warpgroups' last reads of K and V are done
    pack_kv(accs, (k_at, v_at), key_row, lane, bn, dtype, scale)
    ptx.inst("fence.proxy.async.shared::cta")
    ptx.inst("bar.sync", *BAR)
    with ptx.if_(tid == 128):
        panels = -(-d // PANEL)
        for tmap, tile in ((tdk, k_at), (tdv, v_at)):
            for p in range(panels):
                ptx.tma.store(tmap, coords(p), tile + p * bn * ROW)
        ptx.tma.commit()
        ptx.tma.wait(0, read=True)


__all__ = ["pack_kv", "store_kv_tma"]
