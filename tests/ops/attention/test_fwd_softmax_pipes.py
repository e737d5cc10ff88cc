"""Config.max_ilp (the row max of S over a thread's columns in interleaved ``max.f32``
chains, FA4's sm90 softmax's four, instead of one chain the block's first ``ex2`` waits
behind) and Config.exp_emu (some of each row's exponentials by a cubic on the FMA pipe,
off the MUFU), lab/attention_plans.py's ``fwd64`` set: off by default, checked, and on
the CPU interpreter with every detector on: max_ilp bitwise the output and LSE of the
same config without it (max is exact), exp_emu within the float64 reference's
tolerances (rows that see no key: 0 and an LSE of -inf)."""
from __future__ import annotations

import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
import dataclasses

import numpy as np

from attention_fwd_checks import inputs, right, run, same_and_right
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.softmax import EXP2_POLY


def test_option_checked():
    """Off by default (the shipped rows' PTX unchanged); 2, 4 or 8 chains, else a clear
    error naming the option."""
    assert Config().max_ilp == 0
    for n in (2, 4, 8):
        assert Config(max_ilp=n).max_ilp == n
    for bad in (1, 3, 16, -4):
        with pytest.raises(ValueError, match="max_ilp"):
            Config(max_ilp=bad)
    assert Config().exp_emu == 0 and Config(block_n=128, exp_emu=16).exp_emu == 16
    for bad, bn in ((17, 128), (-1, 128), (9, 64)):
        with pytest.raises(ValueError, match="exp_emu"):
            Config(block_n=bn, exp_emu=bad)


def test_exp2_poly_fit():
    """The cubic in float32 as the kernel evaluates it (three FMAs from p(0) = 1) is
    within 1e-4 of 2^f on [0, 1], relative, and floor(x) is what add.rm of 1.5 * 2^23
    leaves in the low bits from -127 to 8 (the lazy rescale's slack)."""
    c1, c2, c3 = (np.float32(c) for c in EXP2_POLY)
    f = np.linspace(0, 1, 4097, dtype=np.float32)
    p = (np.float32(c3) * f + c2) * f + c1
    p = p * f + np.float32(1)
    assert np.abs(p.astype(np.float64) / np.exp2(f.astype(np.float64)) - 1).max() < 1e-4
    x = np.arange(-127 * 16, 8 * 16 + 1) / 16.0
    t = np.floor(x + 12582912.0)                   # exact: below 2^24, ulp 1
    assert ((t.astype(np.float32).view(np.uint32) - 0x4B400000).astype(np.int32)
            == np.floor(x)).all()


_ROW64 = dict(block_n=64, persistent=True, lazy_rescale=True, consumers=3, stages=3)


@pytest.mark.long
@pytest.mark.parametrize("kw,mask,ilp", [
    (_ROW64, Mask(-1, 0), 4),                                   # the hd64 causal row's shape
])
def test_same_values(kw, mask, ilp):
    """Ragged Sq > Sk (the first causal rows see no key: m stays -inf), GQA, three
    consumers on 192-row tiles (a lab option: one interpreter case)."""
    q, k, v = inputs(1, 200, 150, 2, 1, 64, 41)
    same_and_right(Config(**kw), q, k, v, mask, sms=2, max_ilp=ilp)


@pytest.mark.long
@pytest.mark.parametrize("kw,mask,emu", [
    (_ROW64, Mask(-1, 0), 4),                                   # the hd64 causal row's shape
])
def test_polynomial_exponentials(kw, mask, emu):
    """Ragged Sq > Sk (the first causal rows see no key: 0 and -inf, as without), GQA,
    three consumers (a lab option: one interpreter case): within the reference's
    tolerances, and within 2e-3 of the same config without it."""
    q, k, v = inputs(1, 200, 150, 2, 1, 64, 42)
    base = Config(**kw)
    got, glse = right(dataclasses.replace(base, exp_emu=emu), q, k, v, mask)
    name, want, wlse = run(base, q, k, v, mask)
    assert np.abs(got.astype(np.float64) - want).max() <= 2e-3 * np.abs(want).max()
    np.testing.assert_array_equal(np.isneginf(glse), np.isneginf(wlse))
