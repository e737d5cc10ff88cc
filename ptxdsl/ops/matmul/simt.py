"""The SIMT GEMM: correct for every shape, stride and alignment, never fast.

``C = act(A @ B + bias)`` with f32 ``fma`` on each thread's 4x4 outputs of a
64x64 CTA tile, the operands read straight from global memory (no shared
memory, no tensor cores). It is what runs where TMA cannot describe an operand
(a row stride that is not a multiple of 16 bytes, a base that is not 16-byte
aligned) and what the CPU interpreter runs for numpy arrays on a machine without
a GPU, so it covers every layout the op accepts:

* ``a_t=False``: A is stored ``(M, K)`` with row stride ``sa``; ``a_t=True``: A is
  the transpose of a stored ``(K, M)`` array (a column-major A), row stride ``sa``.
* ``b_t=False``: B is stored ``(K, N)``; ``b_t=True``: B is the transpose of a
  stored ``(N, K)`` array (``x @ W.T`` of a linear layer).

Per K step each thread records 4 + 4 predicated ``ld.global`` (``.u16``/``.b16``
widened to f32 for bf16/f16; ``.u8`` widened through ``cvt.rn.f16x2.e4m3x2`` /
``.e5m2x2`` for the 8-bit floats) and 16 ``fma.rn.f32``; the epilogue is
:mod:`.epilogue`'s bias and activation and one predicated ``st.global`` per output.
"""
from __future__ import annotations

from ... import Tile, kernel
from ...dsl import ptx, reg
from ...core.types import PtxType, f32, s32, u32, u64

from .._common.launch_order import after_previous_kernel, pdl_for
from .._common.rowio import load_chunk, narrow, store_chunk
from .epilogue import activate
from .config import FallbackPlan
from .fp8 import SCALE_SUFFIX, mode_of, scale_specs
from .groups import group_tile


def specs(dtype: PtxType, out_dtype: PtxType, a_t: bool, b_t: bool, bias: PtxType | None,
          b_dtype: PtxType | None = None, scaled=False, grouped: bool = False):
    """(in_specs, out_specs, argument names) of the kernel for one layout (``grouped``: B
    holds G matrices stacked, ``(G*N, K)`` or ``(G*K, N)``, and ``offs`` (G,) follows it)."""
    bt = b_dtype or dtype
    a = Tile("K", "M", dtype, stride="sa") if a_t else Tile("M", "K", dtype, stride="sa")
    if grouped:
        b = Tile("GN", "K", bt, stride="sb") if b_t else Tile("GK", "N", bt, stride="sb")
    else:
        b = Tile("N", "K", bt, stride="sb") if b_t else Tile("K", "N", bt, stride="sb")
    ins = (a, b) + ((Tile("G", s32),) if grouped else ()) \
        + ((Tile("N", bias),) if bias is not None else ()) \
        + scale_specs(mode_of(scaled), grouped)
    names = ("A", "B") + (("offs",) if grouped else ()) + (("bias",) if bias is not None else ()) \
        + (("scale_a", "scale_b") if scaled else ()) + ("C",)
    return ins, (Tile("M", "N", out_dtype, stride="sc"),), names


def build_simt(p: FallbackPlan, dtype: PtxType, out_dtype: PtxType, *, a_t: bool = False,
               b_t: bool = False, bias: PtxType | None = None, activation: str | None = None,
               arch: str = "sm_90a", b_dtype: PtxType | None = None, scaled=False,
               grouped: bool = False):
    """The kernel for one (dtype, out dtype, layout, epilogue); M, N, K and the three
    row strides are run-time parameters. ``b_dtype``: B's element type where it is not
    A's (an e4m3 / e5m2 mix); ``scaled``: the f32 arguments ``scale_a``, ``scale_b``
    (:func:`scale_specs`) scale the sums: True or ``"tensor"`` (8-bit operands'
    per-tensor scales), ``"row"`` (per row of A and column of B, in the epilogue) or
    ``"block"`` (each 128-long K block's sums, accumulated apart, times its scales).

    ``grouped``: a grouped GEMM (:mod:`.grouped`): ``offs`` (G,) int32 cuts A's M rows
    into groups, B holds one matrix per group; grid row ``y`` is the ``y``-th tile row of
    the groups' (:mod:`.groups`; ``G`` more rows than ``ceil(M / 64)`` cover every
    group's partial last tile row, the extra CTAs find no tile and store nothing);
    row-wise scales are then ``scale_a`` (M,) and ``scale_b`` (G, N)."""
    mode = mode_of(scaled)
    if grouped and mode == "block":
        raise ValueError("build_simt: a grouped GEMM takes per-tensor or row-wise scales")
    T, P = p.tile, p.per
    bt = b_dtype or dtype
    es, bes, oes = dtype.bytes, bt.bytes, out_dtype.bytes
    ins, outs, names = specs(dtype, out_dtype, a_t, b_t, bias, bt, scaled, grouped)
    tag = f"{'t' if a_t else 'n'}{'t' if b_t else 'n'}"
    ty = dtype.name if bt == dtype else f"{dtype.name}_{bt.name}"

    pdl = pdl_for(arch)

    def grid(M, N, K):
        return (-(-N // T), -(-M // T), 1)

    def grid_grouped(M, N, G):
        return (-(-N // T), -(-M // T) + G, 1)

    @kernel(in_specs=ins, out_specs=outs, arg_names=names,
            grid=grid_grouped if grouped else grid, block=(256, 1, 1), arch=arch,
            name=f"matmul_simt_{'grouped_' if grouped else ''}{tag}_{ty}_{out_dtype.name}"
                 f"{'_bias' if bias else ''}{SCALE_SUFFIX[mode]}"
                 f"{'_' + activation if activation else ''}", pdl=pdl)
    def matmul_simt(*args):
        A, B, *rest, C = args
        after_previous_kernel(pdl)   # a 2-D grid: no go-ahead (exit)
        pa, pb, pc = ptx.global_ptrs(A, B, C)
        if grouped:
            (poffs,) = ptx.global_ptrs(rest.pop(0))
        if bias is not None:
            (pbias,) = ptx.global_ptrs(rest.pop(0))
        scale = None
        if mode == "tensor":
            sab = [reg.scalar(f32) for _ in range(2)]
            for r, ptr in zip(sab, ptx.global_ptrs(*rest)):
                ptx.inst.ld.global_.nc.f32(r, ptx.addr(ptr))
            scale = sab[0] * sab[1]
        elif mode:
            psa, psb = ptx.global_ptrs(*rest)
        m, n, k = ptx.dim("M"), ptx.dim("N"), ptx.dim("K")
        sa, sb, sc = (ptx.dim(s, kind="stride") for s in ("sa", "sb", "sc"))
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        bx = reg.scalar(u32); ptx.inst.mov.u32(bx, ptx.special.ctaid.x())
        by = reg.scalar(u32); ptx.inst.mov.u32(by, ptx.special.ctaid.y())

        def wide(x, scale):
            d = reg.scalar(u64)
            ptx.inst.mul.wide.u32(d, x, scale)
            return d

        def compute(first_row, row_end, pb, psb=psb if mode in ("row", "block") else None):
            """The CTA's 64 x 64 tile from row ``first_row`` (rows before ``row_end``)."""
            row0 = first_row + (tid >> 4)
            col0 = bx * T + (tid & 15)
            rows = [row0 + 16 * i if i else row0 for i in range(P)]
            cols = [col0 + 16 * j if j else col0 for j in range(P)]
            row_ok = [r < row_end for r in rows]
            col_ok = [c < n for c in cols]

            # A[r, kk]: row-major A steps es per k; a transposed one steps a row (sa).
            a_ptrs = [pa + wide(r, es if a_t else sa * es) for r in rows]
            b_ptrs = [pb + wide(c, sb * bes if b_t else bes) for c in cols]
            a_step = wide(sa, es) if a_t else es
            b_step = bes if b_t else wide(sb, bes)
            acc = [[reg.scalar(f32, init=0.0) for _ in range(P)] for _ in range(P)]

            def k_steps(count, into):
                for _ in ptx.range_(count):
                    av = [load_chunk(a_ptrs[i], 0, dtype, 1, pred=row_ok[i])[0] for i in range(P)]
                    bv = [load_chunk(b_ptrs[j], 0, bt, 1, pred=col_ok[j])[0] for j in range(P)]
                    for i in range(P):
                        for j in range(P):
                            ptx.inst.fma.rn.f32(into[i][j], av[i], bv[j], into[i][j])
                    for ptr in a_ptrs:
                        ptx.inst.add.u64(ptr, ptr, a_step)
                    for ptr in b_ptrs:
                        ptx.inst.add.u64(ptr, ptr, b_step)

            if mode == "block":
                # Each 128-long K block summed apart, then promoted: acc += part * sa * sb.
                nkb, nb = ptx.dim("KB"), ptx.dim("NB")
                part = [[reg.scalar(f32) for _ in range(P)] for _ in range(P)]
                for kb in ptx.range_(nkb):
                    for row in part:
                        for r in row:
                            ptx.inst.mov.f32(r, 0.0)
                    k_steps(ptx.min(k - kb * 128, 128), part)
                    sav = [load_chunk(psa + wide(kb * m + r, 4), 0, f32, 1, pred=ok)[0]
                           for r, ok in zip(rows, row_ok)]
                    sbv = [load_chunk(psb + wide(kb * nb + (c >> 7), 4), 0, f32, 1, pred=ok)[0]
                           for c, ok in zip(cols, col_ok)]
                    for i in range(P):
                        for j in range(P):
                            ptx.inst.fma.rn.f32(acc[i][j], part[i][j], sav[i] * sbv[j], acc[i][j])
            else:
                k_steps(k, acc)
            if mode == "row":
                sav = [load_chunk(psa + wide(r, 4), 0, f32, 1, pred=ok)[0]
                       for r, ok in zip(rows, row_ok)]
                sbv = [load_chunk(psb + wide(c, 4), 0, f32, 1, pred=ok)[0]
                       for c, ok in zip(cols, col_ok)]
            bvals = None
            if bias is not None:
                bvals = [load_chunk(pbias + wide(c, bias.bytes), 0, bias, 1, pred=ok)[0]
                         for c, ok in zip(cols, col_ok)]
            for i in range(P):
                crow = pc + wide(rows[i], sc * oes)
                for j in range(P):
                    v = acc[i][j] * scale if scale is not None else acc[i][j]
                    if mode == "row":
                        v = v * sav[i] * sbv[j]
                    v = v + bvals[j] if bvals is not None else v
                    v = activate(v, activation)
                    store_chunk(crow + wide(cols[j], oes), 0, out_dtype, narrow([v], out_dtype),
                                pred=row_ok[i] & col_ok[j])

        if not grouped:
            compute(by * T, m, pb)
            return
        g, m0, end, _, found = group_tile(poffs, ptx.dim("G"), by, T, 1)
        # group g's matrix of B: N (K-major) or K (MN-major) rows of sb elements further
        pbg = pb + wide(g, (n if b_t else k) * sb * bes)
        with ptx.if_(found != 0):
            compute(m0, end, pbg, psb + wide(g, n * 4) if mode == "row" else None)

    return matmul_simt


__all__ = ["build_simt", "specs"]
