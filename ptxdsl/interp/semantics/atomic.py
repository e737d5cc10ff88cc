"""How ``atom`` and ``red`` (and ``red.async``) update memory.

Atomics apply in ascending thread order (deterministic), are exempt from race
detection among themselves, and ``atom.global.add.f32`` flushes subnormals as the
hardware does (``.shared`` does not).
"""
from __future__ import annotations

import numpy as np

from .. import fround as fr
from ..addressing import addresses, check, space_of


def _atomic_op(op, t, global_f32_add: bool):
    ftz = fr.FMTS["f32"]

    def add(cur, b, c):
        if global_f32_add:
            x = fr.flush_subnormal(cur.view(np.uint32), ftz).view(np.float32)
            y = fr.flush_subnormal(np.asarray(b, np.float32).view(np.uint32), ftz).view(np.float32)
            r = (x + y).astype(np.float32)
            return fr.canonical_nan(fr.flush_subnormal(r.view(np.uint32), ftz),
                                    ftz).view(np.float32)
        return (cur + b).astype(cur.dtype)

    return {
        "add": add,
        "min": lambda cur, b, c: np.minimum(cur, b),
        "max": lambda cur, b, c: np.maximum(cur, b),
        "inc": lambda cur, b, c: np.where(cur >= b, 0, cur + 1).astype(cur.dtype),
        "dec": lambda cur, b, c: np.where((cur == 0) | (cur > b), b, cur - 1).astype(cur.dtype),
        "cas": lambda cur, b, c: np.where(cur == b, c, cur).astype(cur.dtype),
        "exch": lambda cur, b, c: np.broadcast_to(b, cur.shape).astype(cur.dtype),
        "and": lambda cur, b, c: cur & b,
        "or": lambda cur, b, c: cur | b,
        "xor": lambda cur, b, c: cur ^ b,
    }[op]


def combine_bytes(op: str, dtype, cur: np.ndarray, src: np.ndarray) -> np.ndarray:
    """``cur op src`` elementwise on raw element bytes ((n, e) uint8) -> new raw bytes: the
    bulk and TMA reductions' atomic update (float adds rounded once, min / max of floats
    returning the non-NaN operand)."""
    name = dtype.name
    if name in ("f16", "bf16", "f32"):
        f = fr.FMTS[name]
        a, b = fr.decode(cur.view(f.udtype)[:, 0], f), fr.decode(src.view(f.udtype)[:, 0], f)
        if op == "add":
            bits = fr.add(a, b, "rn", f)          # rounded once from the exact sum
            # a NaN sum is written as the all-ones NaN (0x7fffffff, 0x7fff), not the
            # canonical one of add.f32: measured on an H100 (tests/gpu/test_bulk_interp_gpu)
            bits = np.where(np.isnan(a + b), f.sign - 1, bits)
        else:
            pick = (np.fmin if op == "min" else np.fmax)(a, b)
            bits = np.where(pick == a, cur.view(f.udtype)[:, 0], src.view(f.udtype)[:, 0])
        return np.asarray(bits).astype(f.udtype).view(np.uint8).reshape(cur.shape)
    dt = np.dtype({"b32": np.uint32, "b64": np.uint64}.get(name, dtype.np_dtype))
    a, b = cur.view(dt)[:, 0], src.view(dt)[:, 0]
    if op == "add":
        r = a + b
    elif op in ("min", "max"):
        r = (np.fmin if op == "min" else np.fmax)(a, b) if dt.kind == "f" else \
            (np.minimum if op == "min" else np.maximum)(a, b)
    elif op == "inc":
        r = np.where(a >= b, 0, a + 1)
    elif op == "dec":
        r = np.where((a == 0) | (a > b), b, a - 1)
    else:
        r = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op](a, b)
    return np.asarray(r).astype(dt).view(np.uint8).reshape(cur.shape)


def atomic(mach, instr, mask, has_dest: bool):
    m = instr.match
    t = m.type
    op = m.chosen["op"]
    threads = np.flatnonzero(mask)
    ai = 1 if has_dest else 0
    addr = addresses(mach, instr, instr.operands[ai], mask)[threads]
    b = np.broadcast_to(np.asarray(mach.src(instr, ai + 1, mask)).astype(t.np_dtype),
                        (mach.T,))[threads]
    c = None
    if op == "cas":
        c = np.broadcast_to(np.asarray(mach.src(instr, ai + 2, mask)).astype(t.np_dtype),
                            (mach.T,))[threads]
    olds = np.zeros(len(threads), t.np_dtype)
    for sp, sel, off in check(mach, instr, threads, addr, space_of(m), t.bytes, True,
                              kind="atomic"):
        mach.hb.atomic(sp.name, off, threads[sel])
        sel = np.flatnonzero(sel)
        fn = _atomic_op(op, t, t.name == "f32" and op == "add" and sp.name == "global")
        order = np.lexsort((sel, off))
        offs, idx = off[order], sel[order]
        uniq, start, counts = np.unique(offs, return_index=True, return_counts=True)
        group = np.repeat(np.arange(len(uniq)), counts)
        rank = np.arange(len(offs)) - start[group]
        cur = sp.read(uniq, t.np_dtype, 1)[:, 0].copy()
        was = cur.copy()
        if op == "add" and t.is_int:  # prefix sums give every thread its old value at once
            vals = b[idx]
            csum = np.cumsum(vals, dtype=t.np_dtype)
            before = csum - vals
            base_sum = (csum[start] - vals[start])[group]
            olds[idx] = (cur[group] + (before - base_sum)).astype(t.np_dtype)
            tot = np.add.reduceat(vals, start).astype(t.np_dtype) if len(vals) else vals
            cur = (cur + tot).astype(t.np_dtype)
        else:
            for k in range(int(counts.max()) if len(counts) else 0):
                pos = np.flatnonzero(rank == k)
                g = group[pos]
                olds[idx[pos]] = cur[g]
                cur[g] = fn(cur[g], b[idx[pos]], None if c is None else c[idx[pos]])
        # a failed cas or an add of 0 leaves memory as it was: a loop polling with it can
        # be seen to spin (progress.py)
        if not np.array_equal(cur.view(np.uint8), was.view(np.uint8)):
            sp.write(uniq, cur[:, None])
    if has_dest:
        full = np.zeros(mach.T, t.np_dtype)
        full[threads] = olds
        mach.dst(instr, 0, full, mask)
