"""ptxdsl.ops.attention_backward on the CPU interpreter (every detector on): the shipped
kernels against the float64 reference, max error <= 3e-2 of the largest value (bf16). The
default set is small ragged shapes at head dims 64 and 96; the plan rows' other masks and
softcap, the lab orderings and f16 with the forward kernel are marked ``long``."""
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


@pytest.mark.long
def test_head_dim_96_matches_float64():
    """Head dim 96 (head dim 128's panels, the second half filled with zeros by TMA; Sᵀ,
    dPᵀ stop at k = 96, dK, dV n96, dQ an n64 and an n32 chain): ragged, GQA, causal, two
    key blocks (bwd_plans.json's head dim 96 row, causal)."""
    q, k, v, do = _inputs(1, 40, 130, 2, 1, 96, 96)
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


# lab orderings in no plan row, one case each (the rows' own orderings run through the API
# below and in the other test_bwd_*.py files): no swizzled dQ stage and no overlap, and
# overlap 2
@pytest.mark.long
@pytest.mark.parametrize("d,cfg", [
    (64, dict()),
    (64, dict(overlap=2, dq_swizzle=True)),
], ids=["plain", "overlap2"])
def test_every_step_ordering_matches_float64(monkeypatch, d, cfg):
    """The plan table's alternatives that no row ships (BwdConfig's orderings of a consumer
    step), one case each, on a causal GQA shape crossing two key blocks."""
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
    # stages 3 (a lab option: no row takes it), GQA, 4 steps a CTA: the ring wraps
    pytest.param(dict(stages=3), (1, 140, 260, 2, 1), dict(window_size=(100, 20)),
                 marks=pytest.mark.long),
], ids=["causal", "stages3-window"])
@pytest.mark.long
def test_block_m_128_matches_float64(monkeypatch, cfg, shape, kw):
    """Head dim 64 with 128 query rows a step (BwdConfig.block_m): Sq = 60 leaves the
    block's second 64 rows past SQP (no dQ add, no semaphore for them); two key blocks,
    GQA, causal; three stages with a window (the plan rows' overlap 1 and dSᵀ pair run
    through the API below and in test_bwd_pair.py, test_bwd_short.py)."""
    from ptxdsl.ops.attention import bwd_api
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    c = BwdConfig(**{"stages": 2, "dq_tma": True, "dq_swizzle": True, "block_m": 128, **cfg})
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    q, k, v, do = _inputs(*shape, 64, 5)
    out, lse = _fwd(q, k, v, **kw)
    _check(attention_backward(do, q, k, v, out, lse, **kw),
           attention_backward_reference(do, q, k, v, **kw))


# the API's own plan (bwd_plans.json) for each (head dim, mask, softcap) row of head dims
# 64, 96, 128 not run elsewhere (192, 256: test_bwd_uniform.py, test_bwd_h192_*.py,
# test_bwd_det_desc.py, test_bwd_varlen.py)
@pytest.mark.long
@pytest.mark.parametrize("b,sq,sk,h,hk,d,kw", [
    (1, 1, 63, 1, 1, 128, dict(softcap=3.0)),          # Sq = 1; head dim 128 softcap row
    (1, 40, 130, 2, 1, 128, dict(softcap=3.0, causal=True)),
    (1, 70, 140, 1, 1, 128, dict(softcap=3.0, window_size=(20, 5))),
    (1, 130, 70, 1, 1, 64, dict(causal=True)),          # Sq > Sk: rows with no key
    (1, 100, 100, 1, 1, 64, dict(window_size=(20, 5))),
    (1, 60, 100, 4, 1, 64, {}),                          # a GQA group of 4
    (1, 64, 128, 1, 1, 64, dict(softcap=3.0, softmax_scale=0.2)),
    (1, 100, 129, 2, 2, 96, dict(window_size=(20, 5))),
    (1, 64, 128, 2, 1, 96, dict(softcap=3.0, softmax_scale=0.2)),
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
