"""How a consumer's f32 accumulator reaches C: ``act(acc + bias)`` rounded to the output
type, written into a 128-byte-swizzled staging panel in shared memory, stored by TMA.

Each consumer stores its 64 x ``bn`` result in steps of ``epi_cols`` columns through its
own 64 x ``epi_cols`` staging buffer of 128-byte panels (64 bf16 / 32 f32 columns each;
the swizzle spreads a warp's 8 rows over 8 bank groups; a tile that is not whole panels
wide ends with an overlapping one, :func:`panel_steps`): ``st.shared`` of packed pairs
(``cvt.rn.bf16x2.f32``; for 16-bit outputs four 8 x 8 matrices at a time with
``stmatrix.sync.aligned.m8n8.x4.shared.b16``, see :func:`_stmatrix_offsets`),
``fence.proxy.async.shared::cta``, ``bar.sync id, 128`` (a named
barrier per consumer), then one thread issues one
``cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group`` per panel and
``cp.async.bulk.commit_group``; before the buffer is written again that thread waits
``cp.async.bulk.wait_group.read 0`` and the warpgroup meets at the barrier.
"""
from __future__ import annotations

from ...dsl import ptx, reg
from ...core.types import b32, f32

from .epilogue import activate


def panel_steps(bn: int, epi_cols: int, pc: int) -> list[list[int]]:
    """The first column of each 128-byte panel (``pc`` columns) of a 64 x ``bn`` tile,
    grouped into epilogue steps of ``epi_cols // pc`` panels (one staging buffer each).

    C's tensor map has one box, a whole panel. A tile that is not whole panels wide
    (``bn = 224`` of a 16-bit C: 3.5 panels of 64) ends with the panel of its last ``pc``
    columns, which overlaps the one before it. The shared columns are staged in both and
    stored twice with the same values, so no store writes past the tile into the
    neighbouring tile's columns."""
    if bn < pc or bn % 8 or epi_cols % pc:
        raise ValueError(f"panel_steps: a tile of {bn} columns (a multiple of 8, at least "
                         f"one panel of {pc}) in steps of {epi_cols} (whole panels)")
    starts = list(range(0, bn - pc + 1, pc))
    if bn % pc:
        starts.append(bn - pc)
    per = epi_cols // pc
    return [starts[i:i + per] for i in range(0, len(starts), per)]


def stmatrix_staged(p, out_dtype) -> bool:
    """Whether a 16-bit output is staged with ``stmatrix.x4`` (:attr:`.config.Plan.stmatrix`)."""
    return p.stmatrix and out_dtype.bytes == 2


def _values(acc, gj, col, n0, n, fcol, bias, pbias, activation, scale):
    """act(acc * scale + bias) of the thread's four elements of 8-column group ``gj``
    (``col``: the group's first column in the tile)."""
    bv = cs = None
    if bias is not None:
        bcol = n0 + (col + fcol) if col else n0 + fcol
        bv = [_bias_at(pbias, bcol if e == 0 else bcol + 1, n, bias) for e in range(2)]
    if hasattr(scale, "column"):            # row-wise (.promote.RowScales)
        scol = n0 + (col + fcol) if col else n0 + fcol
        cs = [scale.column(scol if e == 0 else scol + 1, n) for e in range(2)]
    vals = []
    for r in range(4):
        v = acc[4 * gj + r]
        if cs is not None:
            v = v * scale.rows[r >> 1] * cs[r & 1]
        elif scale is not None:
            v = v * scale
        if bv is not None:
            v = v + bv[r & 1]
        vals.append(activate(v, activation))
    return vals


def _pack(out_dtype, pair):
    w = reg.scalar(b32)
    ptx.inst(f"cvt.rn.{out_dtype.name}x2.f32", w, pair[1], pair[0])
    return w


def _stmatrix_words(acc, out_dtype, col, n0, n, fcol, bias, pbias, activation, scale):
    """The four packed words one ``stmatrix.x4`` stores: columns ``col .. col + 15``."""
    words = []
    for h in range(2):
        c = col + 8 * h
        vals = _values(acc, c // 8, c, n0, n, fcol, bias, pbias, activation, scale)
        words += [_pack(out_dtype, vals[0:2]), _pack(out_dtype, vals[2:4])]
    return words


def store_tile(acc, p, L, out_dtype, ob, bias, activation, stage_c, lane, frow, fcol, bar_id,
              row0, n0, n, tma_c, pbias, scale=None):
    """Store one consumer's 64 x ``bn`` accumulator (see the module docstring); with
    ``scale`` (an f32 register: an 8-bit product's ``scale_a * scale_b``) each value is
    ``act(acc * scale + bias)``; with a :class:`.promote.RowScales` it is
    ``act(acc * scale_a[row] * scale_b[col] + bias)``.

    Addresses: the thread's element ``(row, col)`` of a panel lies at byte ``row*128 +
    16*((b >> 4) ^ (row & 7)) + (b & 15)`` with ``b = (col % pc) * ob``. ``b >> 4`` is a
    constant ``c`` of the 8-column group plus ``fhi = (fcol*ob) >> 4`` (0, or 0/1 for f32,
    where ``c`` is even), so the swizzled chunk is ``c ^ q`` with ``q = fhi ^ (frow & 7)``
    per thread: eight offsets ``(c ^ q) << 4`` and two row bases are computed once, and
    each store is one ``add.u32`` and an ``st.shared`` with a constant panel offset."""
    pc = L.panel_cols                       # columns per 128-byte panel
    fb = fcol * ob                          # byte of the thread's pair in its 8-column group
    q = (fb >> 4) ^ (frow & 7)
    xs = [q << 4 if c == 0 else (q ^ c) << 4 for c in range(8)]
    flo = fb & 15
    bases = [stage_c + (frow * 128 if hr == 0 else (frow + 8) * 128) + flo for hr in range(2)]
    use_stm = stmatrix_staged(p, out_dtype)
    if use_stm:
        sbase, sx = _stmatrix_offsets(stage_c, lane)

    def values(gj, col):
        return _values(acc, gj, col, n0, n, fcol, bias, pbias, activation, scale)

    for step in panel_steps(p.bn, p.epi_cols, pc):
        with ptx.if_(lane == 0):
            ptx.inst("cp.async.bulk.wait_group.read", 0)
        ptx.inst("barrier.sync", bar_id, 128)
        packed: dict = {}                   # columns an overlapping panel stages again
        for slot, start in enumerate(step):
            off = slot * L.panel_stride     # the panel's place in the staging buffer
            if use_stm:                     # two 8-column groups per stmatrix.x4
                for jq in range(pc // 16):
                    col = start + 16 * jq
                    if col not in packed:
                        packed[col] = _stmatrix_words(acc, out_dtype, col, n0, n, fcol, bias,
                                                      pbias, activation, scale)
                    ptx.inst("stmatrix.sync.aligned.m8n8.x4.shared.b16",
                             ptx.addr(sbase + sx[jq], off), packed[col])
                continue
            for j in range(pc // 8):        # the panel's 8-column groups
                col = start + 8 * j         # + fcol
                if col not in packed:
                    vals = values(col // 8, col)
                    packed[col] = [pair if out_dtype == f32 else [_pack(out_dtype, pair)]
                                   for pair in (vals[0:2], vals[2:4])]
                c = ((8 * j) * ob) >> 4     # the group's 16-byte chunk in the panel row
                for hr in range(2):         # rows frow, frow + 8
                    got = packed[col][hr]
                    at = ptx.addr(bases[hr] + xs[c], off)
                    if len(got) == 1:
                        ptx.inst("st.shared.b32", at, got[0])
                    else:
                        ptx.inst("st.shared.v2.f32", at, got)
        ptx.inst("fence.proxy.async.shared::cta")
        ptx.inst("barrier.sync", bar_id, 128)
        with ptx.if_(lane == 0):
            for slot, start in enumerate(step):
                ptx.inst("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
                         ptx.addr(tma_c, coords=[n0 + start, row0]),
                         ptx.addr(stage_c + slot * L.panel_stride))
            ptx.inst("cp.async.bulk.commit_group")


def store_rows(acc, p, out_dtype, activation, pc, sc, row, row_end, n0, n, fcol,
               scale=None) -> None:
    """Store one consumer's 64 x ``bn`` accumulator straight to global memory, the rows
    before ``row_end`` only (a grouped GEMM's tile: its last rows may be the next group's,
    which a TMA store could not leave out): each thread's pairs ``act(acc * scale)`` of
    rows ``row``, ``row + 8`` and columns ``n0 + 8j + fcol``, ``+ 1`` as one predicated
    ``st.global`` (``.b32`` of a packed 16-bit pair, ``.v2.f32``). ``pc``: C's address,
    ``sc`` its row stride in elements; N even (a pair never straddles N)."""
    from .._common.rowio import narrow, store_chunk
    from ...core.types import u64
    ob = out_dtype.bytes
    rows = [row, row + 8]
    ok = [r < row_end for r in rows]
    bases = []
    for r in rows:
        d = reg.scalar(u64)
        ptx.inst.mul.wide.u32(d, r, sc * ob)
        bases.append(pc + d)
    for gj in range(p.bn // 8):
        col = n0 + (8 * gj + fcol) if gj else n0 + fcol
        vals = _values(acc, gj, 8 * gj, n0, n, fcol, None, None, activation, scale)
        cok = col < n
        off = reg.scalar(u64)
        ptx.inst.mul.wide.u32(off, col, ob)
        for h in range(2):
            store_chunk(bases[h] + off, 0, out_dtype, narrow(vals[2 * h:2 * h + 2], out_dtype),
                        pred=ok[h] & cok)


def _stmatrix_offsets(stage_c, lane):
    """Where this thread's row address points for ``stmatrix.x4`` of a 16-bit output.

    One instruction stores columns ``16 jp .. 16 jp + 15`` of the warp's 16 rows as four 8 x 8
    matrices: 0 and 1 the top and bottom rows of 8-column group ``2 jp``, 2 and 3 those of
    ``2 jp + 1`` (each thread's packed pairs are already in the matrices' fragment layout,
    the wgmma accumulator's). Lane ``l`` gives the address of row ``i = l & 7`` of matrix
    ``q = l >> 3``: warp row ``8 (q & 1) + i`` at 128 bytes a row, 16-byte chunk ``c = 2 (jp
    % 4) + (q >> 1)`` of its panel, swizzled to ``c ^ i`` (the row's phase in the 128-byte
    pattern is ``i``). Returns the row base (``stage_c + row * 128``) and the four chunk
    offsets ``(c ^ i) << 4`` for ``jp % 4``; each store adds one and a constant panel
    offset. Each matrix's eight 16-byte rows fall in eight different chunks: no bank
    conflict."""
    warp, lw = lane >> 5, lane & 31
    i = lw & 7
    qm = lw >> 3
    row = warp * 16 + (qm & 1) * 8 + i
    sbase = stage_c + row * 128
    qh = qm >> 1
    sx = [((qh if jq == 0 else qh + 2 * jq) ^ i) << 4 for jq in range(4)]
    return sbase, sx


def _bias_at(pbias, col, n, dtype):
    """bias[col] as f32 (0 past N): one predicated ``ld.global`` (cached in L1)."""
    from .._common.rowio import load_chunk
    ok = col < n
    addr = pbias + col * dtype.bytes
    return load_chunk(addr, 0, dtype, 1, pred=ok)[0]


__all__ = ["store_tile", "store_rows", "stmatrix_staged", "panel_steps"]
