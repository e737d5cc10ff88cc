"""Row I/O helpers for row-wise kernels: vector loads/stores of f32/f16/bf16 as f32 registers.

A *chunk* is ``vec`` consecutive elements of one row, moved by the widest
access that fits (16 bytes at most: ``ld.global.v4.f32`` for 4 f32,
``ld.global.v4.b32`` for 8 halves). Half-precision words are widened to f32
right after the load (bf16: a shift or mask, exact; f16: ``cvt.f32.f16``) and
narrowed with one ``cvt.rn.{f16,bf16}x2.f32`` per pair before the store, so
the arithmetic in between is always f32. :func:`store_e4m3_chunk` stores f32 registers as FP8
(e4m3) bytes.
"""
from __future__ import annotations

from ...dsl import ptx, reg
from ...core.types import PtxType, b16, b32, b64, bf16, e4m3x2, e5m2x2, f16x2, f32, u16, u32

# Alignment, in bytes, of a shared-memory ring that threads fill with cp.async row
# chunks (a warp's 512 contiguous bytes in whole 128-byte lines). A dynamic array lies
# after the static ones, so it is aligned only as far as it asks: 4 more static bytes
# once left the staged backward's ring 16-byte aligned, and 1024 x 16384 bf16 took
# 37.3 us a call on an H200 against 33.4-33.7 aligned
# (bench/results/rmsnorm_bwd_ring_align_h200.json).
RING_ALIGN = 128

def load_chunk(base, offset: int, dtype: PtxType, vec: int, *, pred=None,
               hints: tuple[str, ...] = (), space: str = "global", policy=None) -> list:
    """Load ``vec`` elements at byte ``[base+offset]`` of ``space`` (global or shared)
    and return them as f32 registers.

    With ``pred`` the load is guarded and the registers read 0 where it is false,
    so sums over a ragged tail need no further masking. ``hints`` are ld modifiers
    (``cs``, ``L1::evict_last``, ...); ``policy`` is an L2 eviction policy register
    (:func:`l2_policy`), passed with ``.L2::cache_hint``.
    """
    per = 16 // dtype.bytes
    if vec > per:  # wider than one 16-byte access (f32 weights beside bf16 x)
        return [v for i in range(0, vec, per)
                for v in load_chunk(base, offset + i * dtype.bytes, dtype, per, pred=pred,
                                    hints=hints, space=space, policy=policy)]
    addr = ptx.addr(base, offset)
    if dtype == f32:
        vals = [reg.scalar(f32, init=0.0 if pred is not None else None) for _ in range(vec)]
        _ld(space, hints, policy, vec, "f32", vals if vec > 1 else vals[0], addr, pred)
        return vals
    if dtype.bytes == 1:            # e4m3 / e5m2: one byte at a time (the SIMT GEMM)
        if vec != 1:
            raise ValueError(f"load_chunk: {dtype.name} loads one element at a time, got {vec}")
        return [widen_fp8(base, offset, dtype, pred, hints, space, policy)]
    if vec == 1:
        if dtype == bf16:
            h = reg.scalar(u32, init=0 if pred is not None else None)
            _ld(space, hints, policy, 1, "u16", h, addr, pred)
            v = reg.scalar(f32)
            ptx.inst.shl.b32(v, h, 16)
            return [v]
        h = reg.scalar(b16, init=0 if pred is not None else None)
        _ld(space, hints, policy, 1, "b16", h, addr, pred)
        v = reg.scalar(f32)
        ptx.inst.cvt.f32.f16(v, h)
        return [v]
    words = [reg.scalar(b32, init=0 if pred is not None else None) for _ in range(vec // 2)]
    _ld(space, hints, policy, vec // 2, "b32", words if vec > 2 else words[0], addr, pred)
    return [x for w in words for x in widen_pair(w, dtype)]


def widen_fp8(base, offset: int, dtype: PtxType, pred=None, hints=(), space="global",
              policy=None):
    """One e4m3 / e5m2 element at ``[base+offset]`` as an f32 register: ``ld.u8`` into
    the low byte of a packed pair (the high one 0), ``cvt.rn.f16x2.e4m3x2`` (exact: every
    8-bit float is an f16), then the low f16 to f32 (0 where ``pred`` is false)."""
    pair_t = {"e4m3": e4m3x2, "e5m2": e5m2x2}[dtype.name]
    byte = reg.scalar(u16, init=0 if pred is not None else None)
    _ld(space, hints, policy, 1, "u8", byte, ptx.addr(base, offset), pred)
    q = reg.scalar(pair_t)
    ptx.inst.mov.b16(q, byte)
    h = reg.scalar(f16x2)
    ptx.inst(f"cvt.rn.f16x2.{pair_t.name}", h, q)
    lo, _ = ptx.unpack(h, b16)
    v = reg.scalar(f32)
    ptx.inst.cvt.f32.f16(v, lo)
    return v


def widen_pair(word, dtype: PtxType) -> tuple:
    """Two f32 registers from a 32-bit word holding two halves (low element first)."""
    lo, hi = reg.scalar(f32), reg.scalar(f32)
    if dtype == bf16:
        ptx.inst.shl.b32(lo, word, 16)
        ptx.inst.and_.b32(hi, word, 0xFFFF0000)
    else:
        h0, h1 = ptx.unpack(word, b16)
        ptx.inst.cvt.f32.f16(lo, h0)
        ptx.inst.cvt.f32.f16(hi, h1)
    return lo, hi


def _ld(space, hints, policy, n, tname, dst, addr, pred):
    chain = ["ld", space, *_with_policy(hints, policy)] + ([f"v{n}"] if n > 1 else []) + [tname]
    ptx.inst(".".join(chain), dst, addr, *([policy] if policy is not None else []), pred=pred)


def _with_policy(hints, policy) -> list:
    """``hints`` with ``L2::cache_hint`` in its PTX place (before an L2 prefetch size)."""
    mods = list(hints)
    if policy is not None:
        at = next((i for i, h in enumerate(mods) if h in ("L2::64B", "L2::128B", "L2::256B")),
                  len(mods))
        mods.insert(at, "L2::cache_hint")
    return mods


def l2_policy(priority: str, cache: dict):
    """A ``createpolicy.fractional.L2::<priority>.b64`` register, made once per kernel
    (``cache`` maps priority to register); None for no policy."""
    if priority is None:
        return None
    if priority not in cache:
        r = reg.scalar(b64)
        ptx.inst(f"createpolicy.fractional.L2::{priority}.b64", r)
        cache[priority] = r
    return cache[priority]


def narrow(vals: list, dtype: PtxType) -> list:
    """f32 registers -> the registers to store: themselves for f32, packed pairs for halves."""
    if dtype == f32:
        return list(vals)
    if len(vals) == 1:
        h = reg.scalar(b16)
        ptx.inst(f"cvt.rn.{dtype.name}.f32", h, vals[0])
        return [h]
    out = []
    for i in range(0, len(vals), 2):
        w = reg.scalar(b32)
        # cvt.rn.{f16,bf16}x2.f32 d, a, b puts a in the upper half: the later element.
        ptx.inst(f"cvt.rn.{dtype.name}x2.f32", w, vals[i + 1], vals[i])
        out.append(w)
    return out


def store_chunk(base, offset: int, dtype: PtxType, regs: list, *, pred=None,
                hints: tuple[str, ...] = (), policy=None) -> None:
    """Store registers from :func:`narrow` at ``[base+offset]`` in one access."""
    n = len(regs)
    width = 16 // max(r.dtype.bits // 8 for r in regs)
    if n > width:
        step = 16
        for i in range(0, n, width):
            store_chunk(base, offset + (i // width) * step, dtype, regs[i:i + width],
                        pred=pred, hints=hints, policy=policy)
        return
    if dtype == f32:
        tname = "f32"
    elif regs[0].dtype.bits == 16:
        tname = "b16"
    else:
        tname = "b32"
    chain = ["st", "global", *_with_policy(hints, policy)] + ([f"v{n}"] if n > 1 else []) \
        + [tname]
    ptx.inst(".".join(chain), ptx.addr(base, offset), regs if n > 1 else regs[0],
             *([policy] if policy is not None else []), pred=pred)


def round_trip(vals: list, dtype: PtxType) -> list:
    """Round f32 values to ``dtype`` and back (what storing then reloading would give)."""
    if dtype == f32:
        return vals
    out = []
    for v in vals:
        h = reg.scalar(b16)
        ptx.inst(f"cvt.rn.{dtype.name}.f32", h, v)
        r = reg.scalar(f32)
        if dtype == bf16:
            w = reg.scalar(u32)
            ptx.inst.cvt.u32.u16(w, h)
            ptx.inst.shl.b32(r, w, 16)
        else:
            ptx.inst.cvt.f32.f16(r, h)
        out.append(r)
    return out


def l2_prefetch_rows(tid, row, m, rows, nbytes: int, policy=None) -> None:
    """Thread 0 asks L2 for ``row`` (when it is < ``m``) of each (row-start pointer of
    row 0, row stride in bytes) in ``rows``: one bulk request of ``nbytes`` per row
    (``cp.async.bulk.prefetch.L2``; 16-byte aligned, a multiple of 16 bytes), with an
    L2 eviction ``policy`` register when given."""
    with ptx.if_(tid == 0):
        with ptx.if_(row < m):
            for base, stride in rows:
                ptx.inst("cp.async.bulk.prefetch.L2.global" +
                         (".L2::cache_hint" if policy is not None else ""),
                         ptx.addr(base + row * stride), nbytes,
                         *([policy] if policy is not None else []))


def store_e4m3_chunk(base, offset: int, vals: list, *, pred=None,
                     hints: tuple[str, ...] = (), policy=None) -> None:
    """Store f32 registers as FP8 e4m3 bytes at ``[base+offset]`` in one access.

    Each pair becomes one ``cvt.rn.satfinite.e4m3x2.f32`` (round to nearest even,
    saturated to +-448, NaN kept; the later element in the upper byte), pairs of pairs
    one ``mov.b32 {lo, hi}``; then ``st.global.v2.b32`` for 8 values, ``st.global.b32``
    for 4, ``st.global.b16`` for 2. One value is converted beside a zero and stored
    with ``st.global.b8``.
    """
    n = len(vals)
    if n == 1:
        p, h = reg.scalar(e4m3x2), reg.scalar(b16)
        ptx.inst.cvt.rn.satfinite.e4m3x2.f32(p, 0.0, vals[0])
        ptx.inst.mov.b16(h, p)
        _st(hints, policy, 1, "b8", h, ptx.addr(base, offset), pred)
        return
    if n % 2 or n > 16:
        raise ValueError(f"store_e4m3_chunk stores 1, 2, 4, 8 or 16 values, not {n}")
    pairs = []
    for i in range(0, n, 2):
        p = reg.scalar(e4m3x2)
        ptx.inst.cvt.rn.satfinite.e4m3x2.f32(p, vals[i + 1], vals[i])
        pairs.append(p)
    if n == 2:
        _st(hints, policy, 1, "b16", pairs[0], ptx.addr(base, offset), pred)
        return
    words = [ptx.pack(b32, pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)]
    _st(hints, policy, len(words), "b32", words if len(words) > 1 else words[0],
        ptx.addr(base, offset), pred)


def _st(hints, policy, n, tname, src, addr, pred) -> None:
    chain = ["st", "global", *_with_policy(hints, policy)] + ([f"v{n}"] if n > 1 else []) \
        + [tname]
    ptx.inst(".".join(chain), addr, src, *([policy] if policy is not None else []), pred=pred)
