"""The backward's elementwise step between its GEMMs (keys are rows, queries columns):
Sᵀ -> Pᵀ = ex2(Sᵀ·scale·log2e - LSE·log2e) and dPᵀ -> dSᵀ = Pᵀ ∘ (dPᵀ - D), with the
softcap's tanh and the causal / window mask, in place on wgmma accumulators (:mod:`.bwd`)."""
from __future__ import annotations

from ...core.types import f32
from ...dsl import ptx, reg
from .config import Mask
from .fwd import _s32
from .softmax import mask_block

def cap_and_mask(s, keys, m0, fcol, off, mask: Mask, kw0, scale, softcap,
                 keep: bool = True, bm: int = 64) -> list:
    """Softcap (``s = tanh(s·scale/cap)``, the tanh values returned for dS unless ``keep``
    is false) and the causal / window mask, only where the block (``bm`` queries) crosses
    it."""
    caps = []
    if softcap and not keep:
        for x in s:
            ptx.inst.mul.f32(x, x, float(scale) / float(softcap))
            ptx.inst("tanh.approx.f32", x, x)
    elif softcap:
        for x in s:
            t = reg.scalar(f32)
            ptx.inst.mul.f32(t, x, float(scale) / float(softcap))
            ptx.inst("tanh.approx.f32", t, t)
            ptx.inst.mov.f32(x, t)
            caps.append(t)
    if mask.any:
        need = None
        if mask.right >= 0:       # some key past row + off + right
            need = _s32(kw0) + 63 > _s32(m0) + off + mask.right
        if mask.left >= 0:        # some key before row + off - left
            early = _s32(kw0) < _s32(m0) + off + (bm - 1 - mask.left)
            need = early if need is None else need | early
        with ptx.if_(need):
            col0 = _s32(m0 + fcol)
            # column c of key j is excluded if c < j - off - right or c > j - off + left
            lo = [keys[r] - off - mask.right - col0 if mask.right >= 0 else None
                  for r in range(2)]
            hi = [keys[r] - off + (mask.left + 1) - col0 if mask.left >= 0 else None
                  for r in range(2)]
            mask_block(s, hi, lo)
    return caps


def grad_scores(s, dp, keys, m0, fcol, off, mask: Mask, kw0, lse_at, d_at, scale,
                softcap, scale_log2, cap_inline: bool = False, bm: int = 64) -> None:
    """Sᵀ -> Pᵀ in place and dPᵀ -> dSᵀ in place (keys are rows, queries columns):
    ``p = ex2(fma(s, scale·log2e, -lse·log2e))`` (``ld.shared.v2.f32`` of a column pair's
    -LSE·log2e and D), ``ds = p · (dp - D)``; with softcap, ``s = tanh(s·scale/cap)`` first
    and ``ds ·= 1 - s²``. Masks (causal / window) only where the block crosses them.
    ``cap_inline``: ``1 - s²`` made per element just before ``p`` overwrites ``s``
    (``max(·, 0)``: a masked ``s = -inf`` gives 0, not ``0 · -inf``), not kept for the whole
    tile (32 registers fewer: what keeps head dim 256's softcap from spilling). ``bm``: the
    step's queries (the mask's reach)."""
    keep = not cap_inline
    caps = cap_and_mask(s, keys, m0, fcol, off, mask, kw0, scale, softcap, keep, bm)
    for g in range(len(s) // 4):
        nl = [reg.scalar(f32) for _ in range(2)]
        dd = [reg.scalar(f32) for _ in range(2)]
        ptx.inst("ld.shared.v2.f32", nl, ptx.addr(lse_at + fcol * 4, 32 * g))
        ptx.inst("ld.shared.v2.f32", dd, ptx.addr(d_at + fcol * 4, 32 * g))
        for i in range(4 * g, 4 * g + 4):
            x, y = s[i], dp[i]
            if softcap and not keep:
                c = reg.scalar(f32)
                ptx.inst("fma.rn.f32", c, x, x, -1.0)   # s² - 1
                ptx.inst("min.f32", c, c, 0.0)
                ptx.inst.neg.f32(c, c)                  # max(1 - s², 0)
            ptx.inst("fma.rn.f32", x, x, scale_log2, nl[i % 2])
            ptx.inst("ex2.approx.ftz.f32", x, x)
            ptx.inst.sub.f32(y, y, dd[i % 2])
            ptx.inst.mul.f32(y, y, x)
            if softcap:
                ptx.inst.mul.f32(y, y, c) if not keep else cap_grad(y, caps[i])


def row_pairs(at, fcol, groups: int) -> list:
    """The ``groups`` column pairs' f32 row values (-LSE·log2e or D) this thread's
    accumulator columns need, one ``ld.shared.v2.f32`` each."""
    pairs = []
    for g in range(groups):
        pairs.append([reg.scalar(f32) for _ in range(2)])
        ptx.inst("ld.shared.v2.f32", pairs[-1], ptx.addr(at + fcol * 4, 32 * g))
    return pairs


def probs(s, keys, m0, fcol, off, mask: Mask, kw0, lse_at, scale, softcap,
          scale_log2, bm: int = 64, lse=None) -> list:
    """Sᵀ -> Pᵀ in place (the first half of :func:`grad_scores`, while dPᵀ is in flight);
    returns the softcap's tanh values for :func:`dscores`. ``lse``: the first pairs,
    :func:`row_pairs` loaded ahead (``BwdConfig.lse_early``); the rest loaded here."""
    caps = cap_and_mask(s, keys, m0, fcol, off, mask, kw0, scale, softcap, bm=bm)
    for g in range(len(s) // 4):
        nl = lse[g] if lse and g < len(lse) else row_pairs(lse_at + 32 * g, fcol, 1)[0]
        for i in range(4 * g, 4 * g + 4):
            ptx.inst("fma.rn.f32", s[i], s[i], scale_log2, nl[i % 2])
            ptx.inst("ex2.approx.ftz.f32", s[i], s[i])
    return caps


def dscores(p, dp, caps, fcol, d_at) -> None:
    """dPᵀ -> dSᵀ = Pᵀ ∘ (dPᵀ - D) in place (times ``1 - tanh²`` with softcap)."""
    for g in range(len(p) // 4):
        dd = [reg.scalar(f32) for _ in range(2)]
        ptx.inst("ld.shared.v2.f32", dd, ptx.addr(d_at + fcol * 4, 32 * g))
        for i in range(4 * g, 4 * g + 4):
            ptx.inst.sub.f32(dp[i], dp[i], dd[i % 2])
            ptx.inst.mul.f32(dp[i], dp[i], p[i])
            if caps:
                cap_grad(dp[i], caps[i])


def cap_grad(y, t) -> None:
    """``y ·= 1 - t²`` (softcap's tanh derivative; t is overwritten)."""
    ptx.inst("fma.rn.f32", t, t, t, -1.0)   # t² - 1
    ptx.inst.neg.f32(t, t)
    ptx.inst.mul.f32(y, y, t)


__all__ = ["grad_scores", "probs", "dscores", "row_pairs"]
