"""The per-row steps every RMSNorm forward kernel shares, whatever its schedule.

Each records the same instructions in the same order wherever it is used, so the
one-CTA-per-row, persistent and staged kernels differ only in how rows reach them.
"""
from __future__ import annotations

from types import SimpleNamespace

from ...dsl import ptx, reg
from ...core.types import PtxType, f32, u32

from .._common.rowio import round_trip


def unpack(args, residual: bool, with_rstd: bool):
    """``(X, R, W, Y, H, RSTD)`` from a forward kernel's arguments (absent ones None),
    in :func:`~.fwd.forward_specs` order."""
    it = iter(args)
    X = next(it)
    Rs = next(it) if residual else None
    W = next(it)
    Y = next(it)
    H = next(it) if residual else None
    RSTD = next(it) if with_rstd else None
    return X, Rs, W, Y, H, RSTD


def persistent_rows(p, X, W, Y, Rs, H, es: int, wes: int) -> SimpleNamespace:
    """What a persistent forward kernel (a fixed grid walking the row blocks ``cta, cta +
    nctaid, ...``) knows before its first row: ``tid``, ``cta``, ``ncta``, ``m`` (the
    rows), ``lane``/``group`` (thread in its row, row in its CTA), ``nblocks`` and
    ``shift`` (row blocks of ``2**shift`` rows), this
    thread's first-chunk pointers ``x0``/``y0``/``w0`` (and ``r0``/``h0`` with a
    residual), the row strides ``sx``/``sr``, the byte offset ``lane_b`` of its first
    chunk, and ``chunk_ok[k]``: the predicate of its chunk ``k`` (None: always there)."""
    T, R, V = p.threads, p.rows_per_cta, p.vec
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
    ncta = reg.scalar(u32); ptx.inst.mov.u32(ncta, ptx.special.nctaid.x())
    m = ptx.dim("M")
    if R > 1:
        lane, group = tid & (T - 1), tid >> (T.bit_length() - 1)
    else:
        lane, group = tid, 0
    shift = R.bit_length() - 1  # R is a power of two
    nblocks = (m + (R - 1)) >> shift if R > 1 else m
    px, pw, py = ptx.global_ptrs(X, W, Y)
    v = SimpleNamespace(tid=tid, cta=cta, ncta=ncta, m=m, lane=lane, group=group,
                        shift=shift, nblocks=nblocks, sx=X.row_stride)
    v.lane_b = lane * (V * es)
    v.x0 = px + v.lane_b
    v.y0 = py + v.lane_b
    v.w0 = pw + lane * (V * wes)
    if Rs is not None:
        pr, ph = ptx.global_ptrs(Rs, H)
        v.sr = Rs.row_stride
        v.r0, v.h0 = pr + v.lane_b, ph + v.lane_b
    v.chunk_ok = [None if not p.ragged or (k + 1) * T <= p.chunks
                  else lane < (p.chunks - k * T) for k in range(p.per_thread)]
    return v


def balanced_grid(blocks: int, most: int) -> int:
    """CTAs for a persistent kernel walking ``blocks`` row blocks with at most ``most``
    CTAs: the fewest that give no CTA more blocks than ``most`` CTAs would. The same
    longest CTA, but no CTA left with one block fewer than the others (8192 rows over
    528 CTAs: 512 CTAs of 16 rows rather than 272 of 16 and 256 of 15)."""
    if blocks <= 0:
        return 0
    per = -(-blocks // most)
    return -(-blocks // per)


def both(a, b):
    """``a & b`` of two predicates, either of which may be None (always true)."""
    return b if a is None else (a if b is None else a & b)


def add_residual(x: list, r: list, dtype: PtxType) -> list:
    """``h = x + r`` in f32 (``add.f32`` per element), rounded to ``dtype`` as storing
    and reloading h would round it."""
    s = []
    for a, b in zip(x, r):
        t = reg.scalar(f32)
        ptx.inst.add.f32(t, a, b)
        s.append(t)
    return round_trip(s, dtype)


def rstd_of(total, n: int, eps: float):
    """``rsqrt(total / n + eps)``: one ``fma.rn.f32`` (1/n and eps are immediates) and
    ``rsqrt.approx.f32``."""
    ms = reg.scalar(f32)
    ptx.inst.fma.rn.f32(ms, total, 1.0 / n, eps)
    rstd = reg.scalar(f32)
    ptx.inst.rsqrt.approx.f32(rstd, ms)
    return rstd


def store_rstd(RSTD, row, rstd, lane, ok=None) -> None:
    """``RSTD[row] = rstd`` from lane 0 of the row's threads (and only where predicate
    ``ok`` holds, when given: lane groups past the last row)."""
    prs = ptx.global_ptrs(RSTD)[0]
    first = lane == 0
    with ptx.if_(first if ok is None else first & ok):
        ptx.inst.st.global_.f32(ptx.addr(prs + row * 4), rstd)


def with_offset(w: list, offset: float) -> list:
    """Gemma's ``offset + w`` per element: one ``add.f32`` each (offset an immediate)
    into new registers (``w``'s are left as they are, so weights held across rows may
    be offset again per row). ``offset == 0`` records nothing and returns ``w``: the
    kernel is then exactly the plain RMSNorm's."""
    if not offset:
        return w
    out = []
    for r in w:
        t = reg.scalar(f32)
        ptx.inst.add.f32(t, r, float(offset))
        out.append(t)
    return out


def scale(x: list, w: list, rstd) -> list:
    """``(x * rstd) * w`` per element: two ``mul.f32``, rounded in that order."""
    ys = []
    for a, b in zip(x, w):
        t = reg.scalar(f32)
        ptx.inst.mul.f32(t, a, rstd)
        ptx.inst.mul.f32(t, t, b)
        ys.append(t)
    return ys
