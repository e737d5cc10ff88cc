"""Head dim 192's fixed-cost options: ``BwdConfig.prep_wide`` at D = 192
(:mod:`ptxdsl.ops.attention.bwd_prepw`: 8 threads a row, three 16-byte chunks a thread),
``dkv_tma`` in wg3 (:func:`ptxdsl.ops.attention.bwd_wg3._store_kv_tma`: each warpgroup's
dKᵀ, dVᵀ transposed into its column panel of K's and V's tiles, TMA stores),
``dq_exit_read`` in wg3 (the writer warp's, or the consumers', last wait for reads only)
and ``lpt_units`` in wg3 (key block-major sections): what they emit and refuse, the
CPU interpreter against float64 (ragged, GQA, causal; with the step options in the plan's
causal row: test_bwd_h192_sched.py; in the deterministic mode: test_bwd_det192.py), and
ptxas -v."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16, f16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_prepw import build_postprocess_wide, build_preprocess_wide
from ptxdsl.ops.attention.bwd_wg3 import build_backward_wg3
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads  # noqa: E402

ROW = dict(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160, overlap=2)
STORE = "cp.async.bulk.tensor.4d.global.shared::cta"


def test_wg3_takes_the_fixed_cost_options():
    """wg3 accepts dkv_tma, lpt_units and dq_exit_read without the writer warp (tags
    name them); col_split refuses dq_exit_read without it."""
    assert BwdConfig(**ROW, dkv_tma=True, dq_exit_read=True, lpt_units=4).tag.endswith(
        "_wg3_kvt_lpt4_xr")
    with pytest.raises(ValueError, match="dq_exit_read"):
        BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, col_split=True, dq_exit_read=True)


@pytest.mark.long
@pytest.mark.parametrize("det", [False, True], ids=["default", "det"])
def test_wide_preprocess_at_192_takes_three_chunks_a_thread(det):
    """Six v4 loads and six v4 zero stores a thread (two rows of three 16-byte chunks);
    the values against bwd_prep's: test_bwd_short.py's wide-kernel test at head dim 192."""
    d = 192
    pre = build_preprocess_wide(f16, d, deterministic=det).ptx()
    assert pre.count("ld.global.v4.b32") == 2 * 2 * 3 and pre.count("st.global.v4.f32") == 2 * 2 * 3
    assert pre.count("shfl.sync.bfly.b32") == 2 * 3          # log2(8) a row, two rows


def _case(monkeypatch, c, sq, sk, seed, lead=1, **kw):
    """q, dout (lead, sq, 2, 192), k, v (lead, sk, 1, 192): GQA, bf16, against float64."""
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((lead, s, h, 192)).astype(BF16)
                   for s, h in ((sq, 2), (sk, 1), (sk, 1), (sq, 2)))
    out, lse = attention_reference(q, k, v, **kw)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw)
    check_grads(got, attention_backward_reference(do, q, k, v, **kw))


@pytest.mark.long
def test_matches_float64(monkeypatch):
    """prep_wide, dkv_tma and dq_exit_read without the writer warp (the consumers' own
    last wait; the plan's causal row, with the writer warp, lpt_units and the step
    options: test_bwd_h192_sched.py's test_causal_row_options_match_float64): two key
    blocks (the last past SK: the TMA store clips its rows), rows past SQ, both heads of
    the GQA group summed before the store, causal."""
    _case(monkeypatch, BwdConfig(**ROW, prep_wide=True, dkv_tma=True, dq_exit_read=True),
          40, 100, 140, causal=True)


@pytest.mark.ptxas
@pytest.mark.long
def test_ptxas_keeps_everything_in_registers():
    """dkv_tma with dq_exit_read and lpt_units over the causal row's writer warp: no
    spills, no wgmma serialization notice beyond the shipped wg3 kernels' C7519; two TMA
    stores a warpgroup's thread and no 16-byte global stores of dK, dV; the last full
    bulk wait gone; the wide pre- and postprocess kernels."""
    base, det, mask = dict(ROW, dq_warp=True), False, Mask(-1, 0)
    c = BwdConfig(**base, dkv_tma=True, dq_exit_read=True, lpt_units=8)
    k = build_backward_wg3(c, bf16, 192, mask, scale=0.07)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    shipped = build_backward_wg3(BwdConfig(**base), bf16, 192, mask, scale=0.07,
                                 deterministic=det)
    for code in range(7510, 7521):
        assert (f"C{code}" in k.check().log) == (f"C{code}" in shipped.check().log), code
    text, old = k.ptx(), shipped.ptx()
    assert text.count(STORE) == 2 and STORE not in old
    assert "st.global.v4.b32" in old and "st.global.v4.b32" not in text
    full = "cp.async.bulk.wait_group 0"
    assert old.count(full) - text.count(full) == 1
    for kk in (build_preprocess_wide(bf16, 192, deterministic=det),
               build_postprocess_wide(bf16, 192, 0.07)):
        r = resources_or_skip(kk)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, kk.name
