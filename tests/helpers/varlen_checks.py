"""The varlen forward's check against float64, shared by tests/ops/attention/test_varlen.py
and test_varlen_tma_store.py: packed random sequences through :func:`attention_varlen`, each
sequence's O and LSE against its own float64 attention (no keys: zeros and -inf)."""
from __future__ import annotations

import numpy as np

from ptxdsl.ops import attention_varlen
from ptxdsl.ops.attention import attention_reference


def check_varlen(lq, lk, h, hk, d, dtype, seed, **kw):
    """Returns the inputs ``(q, k, v, cu_q, cu_k)`` for further calls."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((sum(lq), h, d)).astype(dtype)
    k = rng.standard_normal((sum(lk), hk, d)).astype(dtype)
    v = rng.standard_normal((sum(lk), hk, d)).astype(dtype)
    cq, ck = np.cumsum([0] + lq).astype(np.int32), np.cumsum([0] + lk).astype(np.int32)
    out, lse = attention_varlen(q, k, v, cq, ck, max(lq), max(lk), return_lse=True, **kw)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (h, sum(lq))
    o = out.astype(np.float64)
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    tol = 2e-2 if dtype != np.float16 else 4e-3
    for i in range(len(lq)):
        a, b, ka, kb = cq[i], cq[i + 1], ck[i], ck[i + 1]
        if a == b:
            continue
        if ka == kb:                      # no keys: zeros and -inf
            assert (o[a:b] == 0).all() and np.isneginf(lse[:, a:b]).all()
            continue
        ref, rlse = attention_reference(q[None, a:b], k[None, ka:kb], v[None, ka:kb], **kw)
        assert np.abs(o[a:b] - ref[0]).max() <= tol * max(np.abs(ref).max(), 1.0), i
        empty = np.isinf(rlse[0])
        np.testing.assert_array_equal(np.isneginf(lse[:, a:b]), empty)
        assert (o[a:b].transpose(1, 0, 2)[empty] == 0).all()
        fin = ~empty
        if fin.any():
            got = lse[:, a:b][fin]
            assert (np.abs(got - rlse[0][fin]) <= 1e-3 * np.maximum(
                np.abs(rlse[0][fin]), 1)).all()
    return q, k, v, cq, ck
