"""``BwdConfig.lpt_units`` in the 80-query tile (:mod:`ptxdsl.ops.attention.bwd_m80`): the
default mode's CTAs in :func:`~ptxdsl.ops.attention.bwd_det.det_cta`'s key block-major
sections, as :mod:`.bwd` takes them. What it accepts and emits, and ptxas -v. (The CPU
interpreter's dq, dk, dv against float64 with sections that do not divide the units, key
blocks past SK, GQA, causal: the shipped causal row's options in
test_bwd_m80_ahead.py::test_matches_float64[causal-lpt]; lpt_units only maps a CTA to its
(key block, unit), the same with or without s_ahead.)"""
from __future__ import annotations

import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention.bwd_config import BwdConfig
from ptxdsl.ops.attention.bwd_m80 import build_backward_m80
from ptxdsl.ops.attention.config import Mask
from ptxas_resources import resources_or_skip

M80 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80, ds_double=True,
           dq_warp=True, dk_last=True, dq_swap=True)
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)


def test_takes_lpt_units():
    """dq_swap takes lpt_units (the tag names it); a negative count is refused."""
    assert BwdConfig(**M80, **FIXED, lpt_units=8).tag.endswith("_dqs_kvt_lpt8_xr")
    with pytest.raises(ValueError, match="lpt_units"):
        BwdConfig(**M80, lpt_units=-1)


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


@pytest.mark.ptxas
@pytest.mark.long
@pytest.mark.parametrize("mask", [Mask(-1, 0)], ids=["causal"])
def test_ptxas_keeps_everything_in_registers_and_pipelined(mask):
    """The lab's variant (the fixed-cost options and lpt_units 8, in no row: once,
    causal): no spills, and no wgmma serialization notice (C7510-C7520, "Potential
    Performance Loss")."""
    k = build_backward_m80(BwdConfig(**M80, **FIXED, lpt_units=8), bf16, 128, mask,
                           scale=0.07)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0, k.name
    assert "Performance Loss" not in k.check().log, k.name
