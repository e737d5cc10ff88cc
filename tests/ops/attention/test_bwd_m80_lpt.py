"""``BwdConfig.lpt_units`` in the 80-query tile (:mod:`ptxdsl.ops.attention.bwd_m80`): the
default mode's CTAs in :func:`~ptxdsl.ops.attention.bwd_det.det_cta`'s key block-major
sections, as :mod:`.bwd` takes them. What it accepts and emits, the CPU interpreter's dq,
dk, dv against float64 at ragged shapes (sections that do not divide the units, key blocks
past SK, GQA, causal / window / full), and ptxas -v."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops import attention_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_m80 import build_backward_m80
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
from attention_bwd_checks import check_grads  # noqa: E402

M80 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80, ds_double=True,
           dq_warp=True, dk_last=True, dq_swap=True)
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)


def test_takes_lpt_units():
    """dq_swap takes lpt_units (the tag names it); wg2 still refuses it."""
    assert BwdConfig(**M80, **FIXED, lpt_units=8).tag.endswith("_dqs_kvt_lpt8_xr")
    with pytest.raises(ValueError, match="lpt_units"):
        BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg2=True, lpt_units=4)


@pytest.mark.long
def test_emits_the_sections_only_when_asked():
    """lpt_units changes only how the CTA finds its (key block, unit): the same GEMMs,
    more integer work before them; 0 leaves the plain order's PTX."""
    plain = build_backward_m80(BwdConfig(**M80), bf16, 128, Mask(-1, 0), scale=0.1).ptx()
    lpt = build_backward_m80(BwdConfig(**M80, lpt_units=8), bf16, 128, Mask(-1, 0),
                             scale=0.1).ptx()
    mmas = lambda t: [ln.split()[0] for ln in t.splitlines() if "wgmma.mma_async" in ln]
    ops = lambda t, op: sum(ln.split()[0] == op for ln in t.splitlines() if ln.strip())
    assert "_lpt8" in lpt and mmas(lpt) == mmas(plain)
    # the section's (key block, unit): two more divisions and the last section's clip
    assert ops(lpt, "div.u32") == ops(plain, "div.u32") + 2
    assert ops(lpt, "min.u32") == ops(plain, "min.u32") + 1


@pytest.mark.long
@pytest.mark.parametrize("b,hk,sq,sk,g,kw", [
    (3, 1, 170, 300, 2, dict(causal=True)),
    (2, 2, 100, 260, 3, dict(window_size=(30, 5))),
    (3, 1, 90, 140, 2, {})], ids=["causal", "window", "full"])
def test_matches_float64(monkeypatch, b, hk, sq, sk, g, kw):
    """``b·hk`` (batch, K/V head) units in sections of ``g`` (the last one shorter), 2 or 3
    key blocks a unit (the last past SK), two query heads a K/V head summed (GQA), with the
    fixed-cost options the lab times beside it: every CTA's (key block, unit) once."""
    c = BwdConfig(**M80, **FIXED, lpt_units=g)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a, **_k: c)
    rng = np.random.default_rng(sq + sk + g)
    q, k, v, do = (rng.standard_normal((b, s, h, 128)).astype(BF16)
                   for s, h in ((sq, 2 * hk), (sk, hk), (sk, hk), (sq, 2 * hk)))
    out, lse = attention_reference(q, k, v, **kw)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32), **kw)
    check_grads(got, attention_backward_reference(do, q, k, v, **kw))


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("mask", [Mask(), Mask(-1, 0), Mask(40, 3)],
                         ids=["full", "causal", "window"])
def test_ptxas_keeps_everything_in_registers_and_pipelined(mask):
    """The lab's variant (the fixed-cost options and lpt_units 8): no spills, and no wgmma
    serialization notice (C7510-C7520, "Potential Performance Loss")."""
    k = build_backward_m80(BwdConfig(**M80, **FIXED, lpt_units=8), bf16, 128, mask,
                           scale=0.07)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name
