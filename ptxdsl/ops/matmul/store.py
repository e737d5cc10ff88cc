"""How a consumer's f32 accumulator reaches C: ``act(acc + bias)`` rounded to the output
type, written into a 128-byte-swizzled staging panel in shared memory, stored by TMA.

Each consumer stores its 64 x ``bn`` result in steps of ``epi_cols`` columns through its
own 64 x ``epi_cols`` staging buffer of 128-byte panels (64 bf16 / 32 f32 columns each;
the swizzle spreads a warp's 8 rows over 8 bank groups): ``st.shared`` of packed pairs
(``cvt.rn.bf16x2.f32``), ``fence.proxy.async.shared::cta``, ``bar.sync id, 128`` (a named
barrier per consumer), then one thread issues one
``cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group`` per panel and
``cp.async.bulk.commit_group``; before the buffer is written again that thread waits
``cp.async.bulk.wait_group.read 0`` and the warpgroup meets at the barrier.
"""
from __future__ import annotations

from ptxdsl import ptx, reg
from ptxdsl.types import b32, f32

from .epilogue import activate


def store_tile(acc, p, L, out_dtype, ob, bias, activation, stage_c, lane, frow, fcol, bar_id,
              row0, n0, n, tma_c, pbias, store=True):
    """Store one consumer's 64 x ``bn`` accumulator (see the module docstring).

    Addresses: the thread's element ``(row, col)`` of a panel lies at byte ``row*128 +
    16*((b >> 4) ^ (row & 7)) + (b & 15)`` with ``b = (col % pc) * ob``. ``b >> 4`` is a
    constant ``c`` of the 8-column group plus ``fhi = (fcol*ob) >> 4`` (0, or 0/1 for f32,
    where ``c`` is even), so the swizzled chunk is ``c ^ q`` with ``q = fhi ^ (frow & 7)``
    per thread: eight offsets ``(c ^ q) << 4`` and two row bases are computed once, and
    each store is one ``add.u32`` and an ``st.shared`` with a constant panel offset."""
    pc = L.panel_cols                       # columns per 128-byte panel
    panels = p.epi_cols // pc
    rows = p.wg_m
    fb = fcol * ob                          # byte of the thread's pair in its 8-column group
    q = (fb >> 4) ^ (frow & 7)
    xs = [q << 4 if c == 0 else (q ^ c) << 4 for c in range(8)]
    flo = fb & 15
    bases = [stage_c + (frow * 128 if hr == 0 else (frow + 8) * 128) + flo for hr in range(2)]
    for half in range(p.bn // p.epi_cols):
        with ptx.if_(lane == 0):
            ptx.inst("cp.async.bulk.wait_group.read", 0)
        ptx.inst("barrier.sync", bar_id, 128)
        for j in range(p.epi_cols // 8):    # 8-column groups of this half
            col = half * p.epi_cols + 8 * j  # + fcol
            gj = col // 8
            bv = None
            if bias is not None:
                bcol = n0 + (col + fcol) if col else n0 + fcol
                bv = [_bias_at(pbias, bcol if e == 0 else bcol + 1, n, bias) for e in range(2)]
            vals = []
            for r in range(4):
                v = acc[4 * gj + r]
                if bv is not None:
                    v = v + bv[r & 1]
                vals.append(activate(v, activation))
            panel = (8 * j) // pc
            c = (((8 * j) % pc) * ob) >> 4  # the group's 16-byte chunk in the panel row
            for hr in range(2):             # rows frow, frow + 8
                pair = vals[2 * hr:2 * hr + 2]
                if out_dtype == f32:
                    words = pair
                else:
                    w = reg.scalar(b32)
                    ptx.inst(f"cvt.rn.{out_dtype.name}x2.f32", w, pair[1], pair[0])
                    words = [w]
                at = ptx.addr(bases[hr] + xs[c], panel * rows * 128)
                if len(words) == 1:
                    ptx.inst("st.shared.b32", at, words[0])
                else:
                    ptx.inst("st.shared.v2.f32", at, words)
        ptx.inst("fence.proxy.async.shared::cta")
        ptx.inst("barrier.sync", bar_id, 128)
        with ptx.if_(lane == 0):
            for qq in range(panels if store else 0):
                ptx.inst("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
                         ptx.addr(tma_c, coords=[n0 + half * p.epi_cols + qq * pc, row0]),
                         ptx.addr(stage_c + qq * (rows * 128)))
            ptx.inst("cp.async.bulk.commit_group")


def _bias_at(pbias, col, n, dtype):
    """bias[col] as f32 (0 past N): one predicated ``ld.global`` (cached in L1)."""
    from .._common.rowio import load_chunk
    ok = col < n
    addr = pbias + col * dtype.bytes
    return load_chunk(addr, 0, dtype, 1, pred=ok)[0]


__all__ = ["store_tile"]
