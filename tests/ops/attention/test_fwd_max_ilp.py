"""Config.max_ilp (the row max of S over a thread's columns in interleaved ``max.f32``
chains, FA4's sm90 softmax's four, instead of one chain the block's first ``ex2`` waits
behind), lab/attention_plans.py's ``fwd64`` set: off by default, checked, and on the CPU
interpreter with every detector on bitwise the output and LSE of the same config without
it (max is exact), in agreement with the float64 reference."""
from __future__ import annotations

import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from attention_fwd_checks import inputs, same_and_right
from ptxdsl.ops.attention.config import Config, Mask


def test_option_checked():
    """Off by default (the shipped rows' PTX unchanged); 2, 4 or 8 chains, else a clear
    error naming the option."""
    assert Config().max_ilp == 0
    for n in (2, 4, 8):
        assert Config(max_ilp=n).max_ilp == n
    for bad in (1, 3, 16, -4):
        with pytest.raises(ValueError, match="max_ilp"):
            Config(max_ilp=bad)


_ROW64 = dict(block_n=64, persistent=True, lazy_rescale=True, consumers=3, stages=3)


@pytest.mark.long
@pytest.mark.parametrize("kw,mask,ilp", [
    (_ROW64, Mask(-1, 0), 4),                                   # the hd64 causal row's shape
    (dict(block_n=64, persistent=True), Mask(-1, 0), 8),        # hd64 1k causal: 128 x 2
    (dict(block_n=48, persistent=True, lazy_rescale=True, uniform_cons=True), Mask(), 2),
    (dict(block_n=16, persistent=True), Mask(40, 0), 4),        # too few columns: one chain
])
def test_same_values(kw, mask, ilp):
    """Ragged Sq > Sk (the first causal rows see no key: m stays -inf), three consumers
    on 192-row tiles, a full mask with a ragged last block, a window; 4 columns a row
    (block_n 16) are fewer than two per chain at 4 chains, where the single chain stays."""
    q, k, v = inputs(1, 300, 200, 2, 1, 64, 41)
    same_and_right(Config(**kw), q, k, v, mask, sms=2, max_ilp=ilp)
