"""Config.diag_n (a consumer's last key block, where its rows see at most ``diag_n`` of
its keys, with a ``diag_n``-column mask and softmax and ``diag_n / 16`` P·V steps) on
the CPU interpreter, every detector on. The keys it skips are masked for every
row of the consumer, so the output and LSE must be bitwise those of the same config
without it, and agree with the float64 reference."""
from __future__ import annotations

import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.core.types import f16
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import build_forward
from attention_fwd_checks import inputs, same_and_right


@pytest.mark.long
def test_diag_causal_ragged_pingpong_lazy():
    """Causal, Sq > Sk (keys aligned bottom-right: rows with no key), 32-key blocks, each
    consumer to its own last block (consumer_bound): the first consumer's one block is
    narrow (4 keys seen), the second's first block wide and its last narrow (8 keys),
    after the loop; ping-pong turns and lazy rescale's labels in the peeled step; two
    query heads on one K/V head. diag_n is a lab option (in no plans row): its one
    interpreter case."""
    q, k, v = inputs(1, 100, 40, 2, 1, 64, 7)
    base = Config(block_n=32, pingpong=True, lazy_rescale=True, persistent=True,
                  consumer_bound=True)
    same_and_right(base, q, k, v, Mask(-1, 0), diag_n=16)


def test_diag_checked_and_off_by_default():
    """diag_n is off by default (the kernel unchanged); it takes a multiple of 16 below
    block_n and one loop."""
    assert Config().diag_n == 0
    c = Config(block_n=48, diag_n=32)
    assert build_forward(c, f16, 64, Mask(-1, 0), scale=0.1).name.endswith("_causal_dn32")
    for bad in (dict(diag_n=24), dict(diag_n=128), dict(diag_n=64, split_mask=True)):
        with pytest.raises(ValueError, match="diag_n"):
            Config(block_n=128, **bad)
