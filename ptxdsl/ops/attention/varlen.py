"""``ptxdsl.ops.attention_varlen``: packed sequences of different lengths, flash_attn's
``flash_attn_varlen_func`` layout, as one :func:`~.api.attention` launch per sequence.

Each sequence's rows of the packed ``(total, H, D)`` tensors are a contiguous
``(1, len, H, D)`` view, so every launch runs the forward kernel on the caller's memory and
writes into its rows of ``out``. Correct for any mix of lengths; one launch per sequence
(a kernel that walks ``cu_seqlens`` itself is not written yet).
"""
from __future__ import annotations

from ...core.types import f32
from .api import _fail, _frame, attention


def _offsets(cu, name: str, total: int) -> list[int]:
    try:
        vals = [int(x) for x in (cu.tolist() if hasattr(cu, "tolist") else cu)]
    except (TypeError, ValueError):
        _fail(f"{name} must be a 1-d integer array of sequence offsets, got {cu!r}")
    if len(getattr(cu, "shape", (len(vals),))) != 1 or len(vals) < 2 or vals[0] != 0 \
            or any(b < a for a, b in zip(vals, vals[1:])) or vals[-1] != total:
        _fail(f"{name} must be 1-d, start at 0, never decrease and end at the packed "
              f"length {total}, got {vals}")
    return vals


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
                     max_seqlen_k: int, *, causal: bool = False,
                     softmax_scale: float | None = None, window_size=(-1, -1),
                     softcap: float = 0.0, return_lse: bool = False, out=None):
    """Attention over packed sequences: q ``(total_q, H, D)``, k and v ``(total_k, Hkv, D)``;
    sequence ``i`` is rows ``cu_seqlens_q[i]:cu_seqlens_q[i+1]`` of q against rows
    ``cu_seqlens_k[i]:cu_seqlens_k[i+1]`` of k and v, with the options of
    :func:`~.api.attention` (causal aligned bottom-right per sequence). Returns ``out``
    ``(total_q, H, D)`` and, with ``return_lse``, the LSE ``(H, total_q)`` (f32; -inf for
    rows of a sequence without keys)."""
    frame = _frame(q)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if len(a.shape) != 3:
            _fail(f"{name} must be 3-d ((total, heads, head_dim), packed sequences), got "
                  f"shape {tuple(a.shape)}")
    cq = _offsets(cu_seqlens_q, "cu_seqlens_q", int(q.shape[0]))
    ck = _offsets(cu_seqlens_k, "cu_seqlens_k", int(k.shape[0]))
    if len(cq) != len(ck):
        _fail(f"cu_seqlens_q has {len(cq) - 1} sequences, cu_seqlens_k {len(ck) - 1}")
    lq = [b - a for a, b in zip(cq, cq[1:])]
    lk = [b - a for a, b in zip(ck, ck[1:])]
    if max(lq) > max_seqlen_q or max(lk) > max_seqlen_k:
        _fail(f"max_seqlen_q / max_seqlen_k ({max_seqlen_q}, {max_seqlen_k}) are below the "
              f"longest sequences ({max(lq)}, {max(lk)})")
    h = int(q.shape[1])
    if out is None:
        out = frame.empty(tuple(q.shape), q)
    elif tuple(out.shape) != tuple(q.shape):
        _fail(f"out must have q's shape {tuple(q.shape)}, got {tuple(out.shape)}")
    lse = frame.empty((h, int(q.shape[0])), q, f32)
    kw = dict(causal=causal, softmax_scale=softmax_scale, window_size=window_size,
              softcap=softcap)
    for i in range(len(lq)):
        a, b = cq[i], cq[i + 1]
        if a == b:
            continue
        o_i = out[a:b]
        if lk[i] == 0:                          # no keys: zeros and an LSE of -inf
            o_i[...] = 0
            lse[:, a:b] = float("-inf")
            continue
        ka, kb = ck[i], ck[i + 1]
        _, lse_i = attention(q[a:b][None], k[ka:kb][None], v[ka:kb][None], return_lse=True,
                             out=o_i[None], **kw)
        lse[:, a:b] = lse_i[0]
    return (out, lse) if return_lse else out


__all__ = ["attention_varlen"]
