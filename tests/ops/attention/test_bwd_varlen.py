"""ptxdsl.ops.attention_varlen_backward on the CPU interpreter: three launches for all the
packed sequences (the kernels read cu_seqlens themselves), each sequence's dq, dk, dv
against the float64 reference at ragged lengths, with empty and length-1 sequences."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.errors import LaunchError
from ptxdsl.ops import attention_varlen_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference
from ptxdsl.runtime.adapter import Frame

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16


def _packed(lens_q, lens_k, h, hk, d, seed, **kw):
    """Packed q, k, v, dout, the forward's out and lse per sequence (float64 reference;
    lse -inf and out 0 for a sequence without keys) and the offsets."""
    rng = np.random.default_rng(seed)
    cq, ck = np.cumsum([0] + lens_q), np.cumsum([0] + lens_k)
    q, do = (rng.standard_normal((cq[-1], h, d)).astype(BF16) for _ in range(2))
    k, v = (rng.standard_normal((ck[-1], hk, d)).astype(BF16) for _ in range(2))
    out = np.zeros_like(q)
    lse = np.full((h, cq[-1]), -np.inf, np.float32)
    for i in range(len(lens_q)):
        a, e, ka, kb = cq[i], cq[i + 1], ck[i], ck[i + 1]
        if a < e and ka < kb:
            o, l = attention_reference(q[a:e][None], k[ka:kb][None], v[ka:kb][None], **kw)
            out[a:e], lse[:, a:e] = o[0].astype(BF16), l[0]
    return q, k, v, do, out, lse, cq, ck


def _check_each(got, q, k, v, do, cq, ck, **kw):
    for i in range(len(cq) - 1):
        a, e, ka, kb = cq[i], cq[i + 1], ck[i], ck[i + 1]
        parts = [np.asarray(x).astype(np.float64)
                 for x in (got[0][a:e], got[1][ka:kb], got[2][ka:kb])]
        if a == e or ka == kb:            # no rows or no keys: zero gradients
            assert all((x == 0).all() for x in parts), i
            continue
        ref = attention_backward_reference(do[a:e][None], q[a:e][None], k[ka:kb][None],
                                           v[ka:kb][None], **kw)
        for name, g, r in zip(("dq", "dk", "dv"), parts, ref):
            # (a floor for gradients that are 0 exactly: one key per row gives dS = 0)
            err = np.abs(g[None] - r).max() / max(np.abs(r).max(), 1e-2)
            assert err <= 3e-2, (i, name, err)


def test_one_launch_each_over_ragged_sequences(monkeypatch):
    """Five sequences (one without rows, one of one row and key, one without keys), GQA,
    causal: the preprocess, main kernel and postprocess run once each."""
    q, k, v, do, out, lse, cq, ck = _packed([5, 0, 40, 1, 3], [9, 4, 66, 1, 0], 2, 1, 64, 7,
                                            causal=True)
    launches = []
    run = Frame.run
    monkeypatch.setattr(Frame, "run", lambda self, kern, *a: (launches.append(kern.name),
                                                              run(self, kern, *a))[1])
    got = attention_varlen_backward(do, q, k, v, out, lse, cq, ck, 40, 66, causal=True)
    assert len(launches) == 3 and all("varlen" in n for n in launches), launches
    _check_each(got, q, k, v, do, cq, ck, causal=True)


@pytest.mark.long
@pytest.mark.parametrize("d,lens_q,lens_k,kw", [
    (128, [5, 0, 70, 1, 3, 130], [9, 4, 66, 1, 0, 200], {}),
    (64, [64, 65, 1], [128, 129, 300], dict(window_size=(30, 10))),
    (256, [0, 40, 1, 65], [3, 70, 1, 64], dict(window_size=(20, 3))),
])
def test_head_dims_and_masks(d, lens_q, lens_k, kw):
    """The plan rows varlen takes: head dim 128 full, 64 window, 256 window (128 causal:
    test_bwd_short.py; head dim 192: test_bwd_h192_sched.py, test_bwd_h192_wg3.py)."""
    q, k, v, do, out, lse, cq, ck = _packed(lens_q, lens_k, 2, 1, d, d, **kw)
    got = attention_varlen_backward(do, q, k, v, out, lse, cq, ck, max(lens_q), max(lens_k),
                                    **kw)
    _check_each(got, q, k, v, do, cq, ck, **kw)


def test_bad_arguments_name_the_caller():
    q, k, v, do, out, lse, cq, ck = _packed([3, 2], [4, 1], 1, 1, 64, 1)
    with pytest.raises(LaunchError, match="lse must be") as e:
        attention_varlen_backward(do, q, k, v, out, lse[:, :2], cq, ck, 3, 4)
    assert "test_bwd_varlen.py" in str(e.value)
    with pytest.raises(LaunchError, match="below the longest"):
        attention_varlen_backward(do, q, k, v, out, lse, cq, ck, 2, 4)
    with pytest.raises(LaunchError, match="cu_seqlens_k"):
        attention_varlen_backward(do, q, k, v, out, lse, cq, ck[:2], 3, 4)
    with pytest.raises(LaunchError, match="dout must be"):
        attention_varlen_backward(do[:, :, :32], q, k, v, out, lse, cq, ck, 3, 4)
