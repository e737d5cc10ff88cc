"""The consumer's per-block math on the S accumulator: boundary masks, the online softmax
in exp2, and P packed into wgmma's register A operand.

A consumer warpgroup holds S (64 x block_n, f32) as a :class:`~ptxdsl.dsl.wgmma.WgmmaFragment`:
each thread two rows (``r`` and ``r + 8``), ``block_n / 4`` columns of each. The four
threads of a quad share a row, so row reductions are two ``shfl.sync.bfly`` steps.
"""
from __future__ import annotations

import math

from ...core.types import b32, f32, pred
from ...dsl import ptx, reg
from ...dsl.wgmma import WgmmaLayout

LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)
NEG_INF = float("-inf")


def row_of(i: int) -> int:
    """Which of a thread's two rows (0: ``r``, 1: ``r + 8``) accumulator element ``i`` is in."""
    return (i // 2) % 2


def col_of(i: int) -> int:
    """Element ``i``'s column relative to the thread's first column ``2 * (lane % 4)``."""
    return i % 2 + 8 * (i // 4)


def mask_block(s, hi_rel, lo_rel) -> None:
    """Set S elements outside the keys of their row to -inf. ``hi_rel[r]`` / ``lo_rel[r]``
    (``.s32``, or None for no bound): the row's first excluded / first included key minus
    this thread's first column in the block. Per element and bound: ``setp.gt.s32`` (or
    ``le``) against the element's constant column, ``selp.f32``."""
    for i, x in enumerate(s):
        r, c = row_of(i), col_of(i)
        for bound, cmp in ((hi_rel[r], "le"), (lo_rel[r], "gt")):
            if bound is None:
                continue
            out = reg.scalar(pred)          # column c is past the bound: excluded
            ptx.inst(f"setp.{cmp}.s32", out, bound, c)
            ptx.inst.selp.f32(x, NEG_INF, x, out)


def quad_reduce(x, op: str) -> None:
    """``x = op(x, x of the other three threads of the quad)``: ``shfl.sync.bfly.b32`` by
    1 and 2, each followed by ``max.f32`` / ``add.f32``."""
    for d in (1, 2):
        y = reg.scalar(f32)
        ptx.inst("shfl.sync.bfly.b32", y, x, d, 0x1F, 0xFFFFFFFF)
        ptx.inst(f"{op}.f32", x, x, y)


def online_softmax(s, m, l, scale_log2: float, slack: float = 0.0) -> list:
    """One block of the online softmax, in the log2 domain (``m`` holds ``max(S) * scale *
    log2 e`` per row); returns each row's ``alpha``, by which O is to be rescaled
    (:func:`rescale`) once no wgmma writes it:

    * row max of the block (``max.f32`` chain, :func:`quad_reduce`), ``m' = max(m, mx *
      scale_log2)``; ``m_use = m'`` or 0 where the row has seen no key yet (``-inf - -inf``
      would be NaN);
    * ``alpha = ex2(m - m_use)``; each ``p = ex2(fma(s, scale_log2, -m_use))``: one FMA and
      ``ex2.approx.ftz.f32`` per element, written back into S;
    * ``l = l * alpha + sum(p)`` (this thread's columns only; the quad's sums are added in
      the epilogue).

    ``slack > 0``: ``m`` moves only when the block's max exceeds it by more than ``slack``
    (log2 units), so ``alpha`` is exactly 1 in most blocks and O's rescale can be skipped;
    the probabilities then reach up to ``2^slack`` (O / l and the LSE ``m + lg2 l`` are
    unchanged)."""
    alphas = []
    for r in range(2):
        elems = [x for i, x in enumerate(s) if row_of(i) == r]
        mx = reg.scalar(f32)
        ptx.inst.max.f32(mx, elems[0], elems[1])
        for x in elems[2:]:
            ptx.inst.max.f32(mx, mx, x)
        quad_reduce(mx, "max")
        new = reg.scalar(f32)
        ptx.inst.mul.f32(new, mx, scale_log2)
        if slack:
            bar = reg.scalar(f32)
            ptx.inst.add.f32(bar, m[r], float(slack))
            grow = reg.scalar(pred)
            ptx.inst.setp.gt.f32(grow, new, bar)
            ptx.inst.selp.f32(new, new, m[r], grow)
        else:
            ptx.inst.max.f32(new, new, m[r])
        empty = reg.scalar(pred)
        ptx.inst.setp.eq.f32(empty, new, NEG_INF)
        use = reg.scalar(f32)
        ptx.inst.selp.f32(use, 0.0, new, empty)
        alpha = reg.scalar(f32)
        ptx.inst.sub.f32(alpha, m[r], use)
        ptx.inst("ex2.approx.ftz.f32", alpha, alpha)
        ptx.inst.mov.f32(m[r], new)
        neg = reg.scalar(f32)
        ptx.inst.neg.f32(neg, use)
        total = reg.scalar(f32)
        for j, x in enumerate(elems):
            ptx.inst("fma.rn.f32", x, x, scale_log2, neg)
            ptx.inst("ex2.approx.ftz.f32", x, x)
            if j == 0:
                ptx.inst.mov.f32(total, x)
            else:
                ptx.inst.add.f32(total, total, x)
        ptx.inst("fma.rn.f32", l[r], l[r], alpha, total)
        alphas.append(alpha)
    return alphas


def rescale(o, alphas) -> None:
    """O's rows times their ``alpha``: one ``mul.f32`` per accumulator element."""
    for i, x in enumerate(o):
        ptx.inst.mul.f32(x, x, alphas[row_of(i)])


def _a_order(n: int) -> list[list[tuple[int, int]]]:
    """For each k16 chunk of a 64 x ``n`` accumulator, the (low, high) accumulator element
    indices of each of the 4 registers of wgmma's register A fragment, found by matching
    (row, col) positions of the two layouts for every thread of the warpgroup."""
    acc = WgmmaLayout(n)
    a = WgmmaLayout(16)                         # the A fragment: element 2j + half, register j
    chunks = []
    for c in range(n // 16):
        regs = []
        for j in range(4):
            pair = []
            for half in range(2):
                want = [(rr, cc + 16 * c) for rr, cc in
                        (a.position(t, 2 * j + half) for t in range(128))]
                hits = [i for i in range(acc.elems)
                        if all(acc.position(t, i) == w for t, w in enumerate(want))]
                if len(hits) != 1:
                    raise AssertionError(f"no accumulator element holds A element "
                                         f"{2 * j + half} of chunk {c}")
                pair.append(hits[0])
            regs.append(tuple(pair))
        chunks.append(regs)
    return chunks


def p_registers(n: int) -> list[list]:
    """Registers for P of a 64 x ``n`` block as wgmma A operands: ``n / 16`` chunks of 4
    ``.b32``."""
    return [[reg.scalar(b32) for _ in range(4)] for _ in range(n // 16)]


def pack_p(s, into, dtype_name: str) -> None:
    """P (the exponentiated S) into the A registers ``into`` (:func:`p_registers`):
    ``cvt.rn.{bf16x2|f16x2}.f32 d, hi, lo`` per register (the accumulator of S already
    holds each thread's A elements of a k16 chunk, see :func:`_a_order`)."""
    for regs, chunk in zip(into, _a_order(2 * len(s))):
        for d, (lo, hi) in zip(regs, chunk):
            ptx.inst(f"cvt.rn.{dtype_name}x2.f32", d, s[hi], s[lo])


def row_inverse(total):
    """``(1 / total or 0, total > 0)``: a row's normaliser, 0 for a row that saw no key
    (``setp`` + ``rcp.rn`` + ``selp``), and the predicate :func:`row_lse` takes."""
    some = reg.scalar(pred)
    ptx.inst.setp.gt.f32(some, total, 0.0)
    inv = reg.scalar(f32)
    ptx.inst("rcp.rn.f32", inv, total)
    ptx.inst.selp.f32(inv, inv, 0.0, some)
    return inv, some


def lse_max(lses, prev=None):
    """``(max, use, -use)`` over partial LSEs in log2 units (``lse·log2e``, and ``prev``
    where given, already in them): ``use`` is the max, or 0 when every one is -inf (a row
    no split saw), so ``ex2(lse·log2e - use)`` never takes -inf - -inf."""
    mx = reg.scalar(f32)
    ptx.inst.mul.f32(mx, lses[0], LOG2E)
    for x in lses[1:]:
        t = reg.scalar(f32)
        ptx.inst.mul.f32(t, x, LOG2E)
        ptx.inst.max.f32(mx, mx, t)
    if prev is not None:
        ptx.inst.max.f32(mx, mx, prev)
    empty = reg.scalar(pred)
    ptx.inst.setp.eq.f32(empty, mx, NEG_INF)
    use = reg.scalar(f32)
    ptx.inst.selp.f32(use, 0.0, mx, empty)
    neg = reg.scalar(f32)
    ptx.inst.neg.f32(neg, use)
    return mx, use, neg


def row_lse(total, row_max, some):
    """A row's log-sum-exp ``(row_max + lg2 total) ln 2`` (``row_max`` in log2 units), -inf
    where ``some`` (:func:`row_inverse`) is false."""
    val = reg.scalar(f32)
    ptx.inst("lg2.approx.f32", val, total)
    ptx.inst.add.f32(val, val, row_max)
    ptx.inst.mul.f32(val, val, LN2)
    ptx.inst.selp.f32(val, val, NEG_INF, some)
    return val


__all__ = ["mask_block", "online_softmax", "rescale", "pack_p", "p_registers", "quad_reduce",
           "lse_max", "row_inverse", "row_lse", "row_of", "col_of", "LOG2E", "LN2", "NEG_INF"]
