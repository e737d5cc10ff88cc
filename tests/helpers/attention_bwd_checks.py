"""Checks shared by the attention backward's interpreter tests: gradients against float64,
and a varlen backward against each packed sequence's own float64 backward."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ptxdsl.ops import attention_backward, attention_varlen_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference

BF16 = ml_dtypes.bfloat16


def check_grads(got, ref):
    """Max error <= 3e-2 of the largest value (a floor for gradients that are 0)."""
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        g = np.asarray(g).astype(np.float64)
        assert g.shape == r.shape and np.isfinite(g).all(), name
        assert np.abs(g - r).max() <= 3e-2 * max(np.abs(r).max(), 1e-2), name


def gqa_grads_match(d: int, sq: int, sk: int, seed: int, **kw):
    """q, dout (1, sq, 2, d), k, v (1, sk, 1, d): random bf16, a GQA group of 2; the API's
    gradients (with whatever plan the caller patched in) against float64. Returns them."""
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((1, s, h, d)).astype(BF16)
                   for s, h in ((sq, 2), (sk, 1), (sk, 1), (sq, 2)))
    out, lse = attention_reference(q, k, v, **kw)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw)
    check_grads(got, attention_backward_reference(do, q, k, v, **kw))
    return got


def check_varlen_causal(q, k, v, do, cq, ck, **kw):
    """Packed (total, H, D) inputs with cumulative ends ``cq``, ``ck``: the forward's out and
    LSE from float64 per sequence, then one varlen backward (causal, ``kw``) whose slices
    each match that sequence's float64 gradients."""
    out, lse = np.zeros_like(q), np.zeros((q.shape[1], cq[-1]), np.float32)
    seqs = [(slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])) for i in range(len(cq) - 1)]
    for sq, sk in seqs:
        o, l = attention_reference(q[sq][None], k[sk][None], v[sk][None], causal=True)
        out[sq], lse[:, sq] = o[0].astype(BF16), l[0]
    got = attention_varlen_backward(do, q, k, v, out, lse, cq, ck, int(np.diff(cq).max()),
                                    int(np.diff(ck).max()), causal=True, **kw)
    for sq, sk in seqs:
        ref = attention_backward_reference(do[sq][None], q[sq][None], k[sk][None],
                                           v[sk][None], causal=True)
        check_grads([g[None] for g in (got[0][sq], got[1][sk], got[2][sk])], ref)


class GpuClaimingFrame:
    """The API's frame claiming a GPU, so that ``deterministic=True`` takes the
    deterministic kernels, which still run on the interpreter."""

    def __init__(self, frame):
        self._f = frame

    def __getattr__(self, name):
        return getattr(self._f, name)

    def on_gpu(self):
        return True

    def arch(self, _a):
        return "sm_90a"
