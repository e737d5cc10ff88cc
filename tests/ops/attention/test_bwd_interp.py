"""ptxdsl.ops.attention_backward on the CPU interpreter (every detector on): the shipped
kernels against the float64 reference, max error <= 3e-2 of the largest value (bf16). The
default set is one small ragged shape; the wider sweep is marked ``long``."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.core.errors import LaunchError
from ptxdsl.ops import attention, attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16


def _inputs(b, sq, sk, h, hk, d, seed, dtype=BF16):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype)
            for s in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d), (b, sq, h, d))]


def _fwd(q, k, v, **kw):
    """out and lse from the float64 reference (cheaper than the forward kernel here)."""
    out, lse = attention_reference(q, k, v, **kw)
    return out.astype(q.dtype), lse.astype(np.float32)


def _check(got, ref, tol=3e-2):
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        g = np.asarray(g).astype(np.float64)
        assert g.shape == r.shape and not np.isnan(g).any(), name
        err = np.abs(g - r).max() / max(np.abs(r).max(), 1e-30)
        assert err <= tol, (name, err)


def test_ragged_gqa_causal_matches_float64():
    """Sq = 63 rows against Sk = 100 keys (ragged both ways), 2 query heads on 1 K/V head
    (dk, dv summed over the group), causal aligned bottom-right."""
    q, k, v, do = _inputs(1, 63, 100, 2, 1, 64, 0)
    out, lse = _fwd(q, k, v, causal=True)
    got = attention_backward(do, q, k, v, out, lse, causal=True)
    _check(got, attention_backward_reference(do, q, k, v, causal=True))


@pytest.mark.parametrize("d,kw", [(192, dict(window_size=(40, 3))), (256, dict(causal=True))])
def test_wide_head_dims_match_float64(d, kw):
    """Head dims 192 and 256 (col_split: 64-key CTAs, each warpgroup half of dK, dV and
    dQ's columns; 192 in 32-column pieces, some starting mid-panel): ragged, GQA."""
    q, k, v, do = _inputs(1, 70, 100, 2, 1, d, d)
    out, lse = _fwd(q, k, v, **kw)
    _check(attention_backward(do, q, k, v, out, lse, **kw),
           attention_backward_reference(do, q, k, v, **kw))


def test_head_dim_96_matches_float64():
    """Head dim 96 (head dim 128's panels, the second half filled with zeros by TMA; Sᵀ,
    dPᵀ stop at k = 96, dK, dV n96, dQ an n64 and an n32 chain): ragged, GQA, causal, two
    key blocks."""
    q, k, v, do = _inputs(1, 70, 150, 2, 1, 96, 96)
    out, lse = _fwd(q, k, v, causal=True)
    _check(attention_backward(do, q, k, v, out, lse, causal=True),
           attention_backward_reference(do, q, k, v, causal=True))


def test_bad_arguments_name_the_caller():
    q, k, v, do = _inputs(1, 8, 8, 1, 1, 64, 1)
    out, lse = _fwd(q, k, v)
    with pytest.raises(LaunchError, match="lse must be") as e:
        attention_backward(do, q, k, v, out, lse[:, :, :4])
    assert "test_bwd_interp.py" in str(e.value)
    with pytest.raises(LaunchError, match="dout must be"):
        attention_backward(do[:, :4], q, k, v, out, lse)
    with pytest.raises(LaunchError, match="head dim 80"):
        qq, kk, vv, dd = _inputs(1, 8, 8, 1, 1, 80, 1)
        attention_backward(dd, qq, kk, vv, dd, lse)
    with pytest.raises(LaunchError, match="dlse must be"):
        attention_backward(do, q, k, v, out, lse, dlse=lse[:, :, :4])
    with pytest.raises(LaunchError, match="deterministic"):
        attention_backward(do, q, k, v, out, lse, deterministic=1)
    with pytest.raises(LaunchError, match="dk must be"):
        attention_backward(do, q, k, v, out, lse, dk=np.zeros((1, 8, 1, 64), np.float32))


@pytest.mark.parametrize("d,cfg", [
    (64, dict()),
    (64, dict(overlap=1, dq_swizzle=True, dq_first=True)),
    (64, dict(overlap=2, dq_swizzle=True, dq_first=True)),
    (64, dict(overlap=2, dq_swizzle=True, ex2_poly=True)),
    (128, dict(overlap=1, dq_swizzle=True, dq_split=True)),
    pytest.param(128, dict(overlap=2, dq_split=True), marks=pytest.mark.long),
    pytest.param(128, dict(overlap=1, dq_swizzle=True, dq_first=True), marks=pytest.mark.long),
    pytest.param(128, dict(overlap=2), marks=pytest.mark.long),
    pytest.param(128, dict(overlap=2, dq_swizzle=True, dq_split=True, dq_first=True),
                 marks=pytest.mark.long),
    pytest.param(128, dict(overlap=1, dq_swizzle=True, dq_split=True, ds_double=True),
                 marks=pytest.mark.long),
    pytest.param(128, dict(overlap=1, dq_swizzle=True, dq_split=True, ex2_poly=True),
                 marks=pytest.mark.long),
    (64, dict(dq_swizzle=True, block_m=128)),
    pytest.param(64, dict(dq_swizzle=True, block_m=128, overlap=1), marks=pytest.mark.long),
    pytest.param(64, dict(dq_swizzle=True, block_m=128, stages=3), marks=pytest.mark.long),
    pytest.param(64, dict(dq_swizzle=True, block_m=128, ex2_poly=True), marks=pytest.mark.long),
    pytest.param(96, dict(overlap=2, dq_swizzle=True), marks=pytest.mark.long),
    pytest.param(96, dict(overlap=1, dq_swizzle=True, dq_first=True), marks=pytest.mark.long),
    pytest.param(96, dict(dq_swizzle=True, ex2_poly=True), marks=pytest.mark.long),
    pytest.param(192, dict(overlap=1, dq_swizzle=True, col_split=True),
                 marks=pytest.mark.long),
    pytest.param(256, dict(stages=1, dq_swizzle=True, col_split=True),
                 marks=pytest.mark.long),
])
def test_every_step_ordering_matches_float64(monkeypatch, d, cfg):
    """The plan table's alternatives (BwdConfig's orderings of a consumer step), not only
    the rows it ships with, on a causal GQA shape crossing two key blocks."""
    from ptxdsl.ops.attention import bwd_api
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    c = BwdConfig(**{"stages": 2, "dq_tma": True, **cfg})
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    q, k, v, do = _inputs(1, 70, 150, 2, 1, d, 3)
    out, lse = _fwd(q, k, v, causal=True)
    _check(attention_backward(do, q, k, v, out, lse, causal=True),
           attention_backward_reference(do, q, k, v, causal=True))


@pytest.mark.parametrize("cfg,shape,kw", [
    (dict(), (1, 60, 150, 2, 1), dict(causal=True)),
    pytest.param(dict(overlap=1), (2, 130, 300, 2, 2), dict(window_size=(40, 3)),
                 marks=pytest.mark.long),
    pytest.param(dict(), (1, 150, 70, 4, 2), dict(causal=True, softcap=5.0),
                 marks=pytest.mark.long),
    pytest.param(dict(stages=3), (1, 300, 270, 1, 1), dict(window_size=(100, 20)),
                 marks=pytest.mark.long),
    pytest.param(dict(overlap=1), (1, 200, 150, 2, 1), {}, marks=pytest.mark.long),
    pytest.param(dict(ds_double=True), (1, 300, 200, 2, 1), dict(causal=True),
                 marks=pytest.mark.long),
    pytest.param(dict(overlap=1, ds_double=True), (2, 130, 300, 2, 2),
                 dict(window_size=(40, 3)), marks=pytest.mark.long),
])
def test_block_m_128_matches_float64(monkeypatch, cfg, shape, kw):
    """Head dim 64 with 128 query rows a step (BwdConfig.block_m): Sq = 60 leaves the
    block's second 64 rows past SQP (no dQ add, no semaphore for them); two key blocks,
    GQA, masks, softcap."""
    from ptxdsl.ops.attention import bwd_api
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    c = BwdConfig(**{"stages": 2, "dq_tma": True, "dq_swizzle": True, "block_m": 128, **cfg})
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    q, k, v, do = _inputs(*shape, 64, 5)
    out, lse = _fwd(q, k, v, **kw)
    _check(attention_backward(do, q, k, v, out, lse, **kw),
           attention_backward_reference(do, q, k, v, **kw))


@pytest.mark.long
@pytest.mark.parametrize("b,sq,sk,h,hk,d,kw", [
    (1, 1, 63, 1, 1, 128, {}),
    (1, 100, 100, 2, 2, 128, dict(causal=True)),
    (2, 100, 200, 4, 2, 64, dict(causal=True)),
    (1, 130, 70, 2, 1, 64, dict(causal=True)),          # Sq > Sk: rows with no key
    (1, 100, 100, 1, 1, 64, dict(window_size=(20, 5))),
    (1, 64, 128, 1, 1, 64, dict(softcap=3.0, softmax_scale=0.2)),
    (1, 63, 63, 1, 1, 64, dict(deterministic=True)),
    (1, 130, 129, 2, 2, 192, dict(softcap=3.0, softmax_scale=0.1)),
    (2, 1, 65, 2, 1, 256, dict(softcap=2.0)),
    (1, 100, 40, 1, 1, 256, dict(causal=True)),          # Sq > Sk: rows with no key
    (1, 100, 129, 2, 2, 96, dict(window_size=(20, 5))),
    (1, 64, 128, 2, 1, 96, dict(softcap=3.0, softmax_scale=0.2)),
    (1, 63, 63, 1, 1, 96, dict(deterministic=True, causal=True)),
])
def test_wider_sweep_matches_float64(b, sq, sk, h, hk, d, kw):
    q, k, v, do = _inputs(b, sq, sk, h, hk, d, b + sq + sk + d)
    fkw = {x: y for x, y in kw.items() if x != "deterministic"}
    out, lse = _fwd(q, k, v, **fkw)
    _check(attention_backward(do, q, k, v, out, lse, **kw),
           attention_backward_reference(do, q, k, v, **fkw))


@pytest.mark.long
def test_with_the_forward_kernel_and_f16():
    q, k, v, do = _inputs(1, 100, 100, 2, 1, 64, 5, np.float16)
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    _check(attention_backward(do, q, k, v, out, lse, causal=True),
           attention_backward_reference(do, q, k, v, causal=True), tol=1e-2)
