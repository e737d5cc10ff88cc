"""RMSNorm with FP8 output: the kernel of ``rms_norm_quant``.

Per row (``h = x``, or ``x + residual`` rounded to x's dtype and written back into the
residual, as :func:`~.row.add_residual` does for ``rms_norm``):

* ``p = h * (offset + w)`` and ``rstd = rsqrt(mean(h^2) + eps)``, all in f32;
* ``y = p * rstd`` (one ``mul.f32``: the product is formed before rstd is known);
* the scale: **dynamic**, ``scale = max(max|y| / 448, MIN_SCALE)`` per row (``div.rn.f32``,
  so exactly the f32 quotient), or **static**, ``scale = S[0]`` read from memory;
* ``q = e4m3(y * (1 / scale))``: the reciprocal rounded once (``rcp.rn.f32``), then one
  ``mul.f32`` and ``cvt.rn.satfinite.e4m3x2.f32`` (round to nearest even, saturated to
  +-448) per element.

Why ``p`` first: rounding is monotonic and rstd is positive, so
``max|p * rstd|`` (after rounding each product) equals ``max|p| * rstd`` (rounded once).
The row's largest ``|p|`` is therefore known in the *same* reduction as the sum of
squares (:class:`~.._common.reduce.RowSumMax`: one ``bar.sync``), and the scale is
the exact f32 ``max|y| / 448`` of the very ``y`` that is quantised, with no second
reduction.

**One pass over memory** wherever the row fits in registers (at most 32 values per
thread, every row up to 32768 elements at 1024 threads): x (and the residual) are read
once, ``p`` stays in registers, the FP8 bytes and ``h`` are written once. Longer rows
read ``h`` and ``w`` a second time (mostly from L2).

``MIN_SCALE`` (``1 / (448 * 512)`` in f32, as vLLM's per-token quantisation clamps) keeps
an all-zero row's scale positive: its FP8 bytes are zeros, not NaN. The clamp keeps a
NaN (``max.NaN.f32``): a row of x holding a NaN or an inf (its sum of squares is NaN or
inf, so ``max|p| * rstd`` is NaN) gets a NaN scale.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ... import Tile, kernel
from ...dsl import ptx, reg
from ...core.types import PtxType, f32, u8, u32

from .._common.launch_order import after_previous_kernel, pdl_for
from .._common.nanmath import max_keep_nan
from .._common.reduce import RowSum, RowSumMax
from .._common.rowio import l2_policy, load_chunk, narrow, store_chunk, store_e4m3_chunk
from .fwd import RELOAD_HINTS, RELOAD_POLICY, X_POLICY, Plan, plan
from .row import add_residual, rstd_of, store_rstd, with_offset

__all__ = ["FP8_MAX", "MIN_SCALE", "build_quant", "plan_quant"]

FP8_MAX = 448.0  # the largest finite float8_e4m3fn
MIN_SCALE = float(np.float32(1.0 / (FP8_MAX * 512.0)))


def plan_quant(n: int, dtype: PtxType, vec: int | None = None, *,
               register_values: int = 32, **kw) -> Plan:
    """The forward's schedule (:func:`~.fwd.plan`: threads, lanes per row, rows per CTA)
    with the row kept in registers wherever it fits (at most ``register_values`` f32
    values per thread; the plan table's :class:`~.config.QuantConfig`), half-precision
    rows included: their dynamic scale needs the whole row before any byte is written,
    and a second read is what this kernel exists to avoid."""
    p = plan(n, dtype, vec, **kw)
    return dataclasses.replace(p, two_pass=p.per_thread * p.vec > register_values,
                               preload_w=True)


def quant_specs(N: int, dtype: PtxType, wdtype: PtxType, residual: bool, dynamic: bool):
    """In/out Tiles and argument names of a quant kernel variant."""
    ins = [Tile("M", N, dtype, stride="sx")]
    if residual:
        ins.append(Tile("M", N, dtype, stride="sr"))
    ins.append(Tile(N, wdtype))
    if not dynamic:
        ins.append(Tile(1, f32))
    outs = [Tile("M", N, u8)]
    if residual:
        outs.append(Tile("M", N, dtype, stride="sr"))
    if dynamic:
        outs.append(Tile("M", f32))
    names = ["X"] + (["R"] if residual else []) + ["W"] + ([] if dynamic else ["S"]) + ["Y"] \
        + (["H"] if residual else []) + (["SCALE"] if dynamic else [])
    return tuple(ins), tuple(outs), names


def build_quant(p: Plan, dtype: PtxType, wdtype: PtxType, *, eps: float = 1e-6,
                residual: bool = False, dynamic: bool = True, offset: float = 0.0,
                arch: str = "sm_90a"):
    """The RMSNorm + FP8 quantisation kernel for plan ``p`` (:func:`plan_quant`).

    Arguments, in order: X (M, N) [strided rows], [R (M, N) residual, strided], W (N,),
    [S (1,) f32: the static scale], then outputs Y (M, N) u8 (the e4m3 bytes,
    contiguous), [H (M, N): x + residual, usually R itself], [SCALE (M,) f32: the
    dynamic per-row scales].
    """
    N, T, R = p.n, p.threads, p.rows_per_cta
    ins, outs, names = quant_specs(N, dtype, wdtype, residual, dynamic)
    kind = "dyn" if dynamic else "static"

    pdl = pdl_for(arch)

    @kernel(in_specs=ins, out_specs=outs,
            grid=lambda M: (-(-M // R), 1, 1), block=(p.block, 1, 1), arch=arch,
            name=f"rms_norm_quant_{kind}_{dtype.name}_{N}", arg_names=names,
            min_ctas_per_sm=p.min_ctas, pdl=pdl)
    def rms_norm_quant(*args):
        after_previous_kernel(pdl, p.block)
        it = iter(args)
        X = next(it)
        Rs = next(it) if residual else None
        W = next(it)
        S = None if dynamic else next(it)
        Y = next(it)
        H = next(it) if residual else None
        SC = next(it) if dynamic else None

        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        if R > 1:
            lane = tid & (T - 1)
            row = cta * R + (tid >> (T.bit_length() - 1))
        else:
            lane, row = tid, cta
        # As in the forward: lane groups past the last row take part in the shuffles,
        # only their memory accesses are switched off.
        rowok = row < ptx.dim("M") if R > 1 else None
        _row(p, dtype, wdtype, eps, offset, X, Rs, W, S, Y, H, SC, row, lane, tid, rowok)

    return rms_norm_quant


def _row(p, dtype, wdtype, eps, offset, X, Rs, W, S, Y, H, SC, row, lane, tid, rowok):
    N, T, V, K = p.n, p.threads, p.vec, p.per_thread
    es, wes = dtype.bytes, wdtype.bytes
    dynamic = SC is not None
    px, pw, py = ptx.global_ptrs(X, W, Y)
    lane_x = lane * (V * es)
    xrow = px + row * (X.row_stride * es) + lane_x
    wrow = pw + lane * (V * wes)
    yrow = py + row * N + lane * V            # one byte per element
    if Rs is not None:
        pr, ph = ptx.global_ptrs(Rs, H)
        rrow = pr + row * (Rs.row_stride * es) + lane_x
        hrow = ph + row * (Rs.row_stride * es) + lane_x

    def guard(k):
        if not p.ragged or (k + 1) * T <= p.chunks:
            return rowok
        inside = lane < (p.chunks - k * T)
        return inside if rowok is None else inside & rowok

    preds = [guard(k) for k in range(K)]
    step, wstep, ystep = T * V * es, T * V * wes, T * V
    policies: dict = {}
    xpol = l2_policy(X_POLICY, policies)
    wpol = l2_policy(p.w_policy, policies)
    rpol = l2_policy(RELOAD_POLICY, policies) if p.two_pass else None

    def weights(k):
        return with_offset(load_chunk(wrow, k * wstep, wdtype, V, pred=preds[k],
                                      hints=p.w_hints, policy=wpol), offset)

    def times(xs, ws):
        """``p = h * (offset + w)``, in h's registers."""
        for a, b in zip(xs, ws):
            ptx.inst.mul.f32(a, a, b)
        return xs

    if not dynamic:
        # The static scale first: its load (an L2 hit) overlaps the row's.
        scale = reg.scalar(f32)
        ptx.inst.ld.global_.nc.f32(scale, ptx.addr(ptx.global_ptrs(S)[0]))
        inv = reg.scalar(f32)
        ptx.inst.rcp.rn.f32(inv, scale)
    acc = reg.scalar(f32, init=0.0)
    top = reg.scalar(f32, init=0.0) if dynamic else None
    ps = []
    for k in range(K):
        x = load_chunk(xrow, k * step, dtype, V, pred=preds[k], hints=p.x_hints, policy=xpol)
        if Rs is not None:
            r = load_chunk(rrow, k * step, dtype, V, pred=preds[k], hints=p.x_hints,
                           policy=xpol)
            x = add_residual(x, r, dtype)
            store_chunk(hrow, k * step, dtype, narrow(x, dtype), pred=preds[k])
        for v in x:
            ptx.inst.fma.rn.f32(acc, v, v, acc)
        if p.two_pass and not dynamic:
            continue  # nothing of this row is needed before the second read
        prod = times(x, weights(k))
        if dynamic:
            for v in prod:
                a = reg.scalar(f32)
                ptx.inst.abs.f32(a, v)
                ptx.inst.max.f32(top, top, a)
        if not p.two_pass:
            ps.append(prod)

    if dynamic:
        total, top = RowSumMax(T, tid)(acc, top)
    else:
        total = RowSum(T, tid, looped=False)(acc)
    rstd = rstd_of(total, N, eps)
    if dynamic:
        # max|y| = max|p| * rstd exactly (module docstring); the scale is its f32 / 448.
        scale = reg.scalar(f32)
        ptx.inst.mul.f32(top, top, rstd)
        ptx.inst.div.rn.f32(scale, top, FP8_MAX)
        max_keep_nan(scale, scale, MIN_SCALE)   # a row with a NaN or inf: scale NaN
        store_rstd(SC, row, scale, lane, rowok)
        inv = reg.scalar(f32)
        ptx.inst.rcp.rn.f32(inv, scale)

    for k in range(K):
        if p.two_pass:
            src = hrow if Rs is not None else xrow
            h = load_chunk(src, k * step, dtype, V, pred=preds[k], hints=RELOAD_HINTS,
                           policy=rpol)
            prod = times(h, weights(k))
        else:
            prod = ps[k]
        for v in prod:
            ptx.inst.mul.f32(v, v, rstd)   # y
            ptx.inst.mul.f32(v, v, inv)    # y / scale, as y * (1 / scale)
        store_e4m3_chunk(yrow, k * ystep, prod, pred=preds[k], hints=p.y_hints)
