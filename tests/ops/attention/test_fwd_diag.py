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
    after the loop; ping-pong turns and lazy rescale's labels in the peeled step."""
    q, k, v = inputs(1, 100, 40, 1, 1, 64, 7)
    base = Config(block_n=32, pingpong=True, lazy_rescale=True, persistent=True,
                  consumer_bound=True)
    same_and_right(base, q, k, v, Mask(-1, 0), diag_n=16)


@pytest.mark.long
@pytest.mark.parametrize("sq,sk,mask,kw,dn", [
    (200, 200, Mask(-1, 0), dict(block_n=128), 64),                  # the hd128 plan's tiles
    (200, 200, Mask(-1, 0), dict(block_n=128, tma_store=True, store_wait_once=True), 64),
    (150, 170, Mask(-1, 0), dict(block_n=48, consumer_bound=True), 32),
    (170, 150, Mask(-1, 0), dict(block_n=48, pingpong=True), 32),    # rows with no key
    (1, 63, Mask(-1, 0), dict(block_n=48, lazy_rescale=True), 16),
    (63, 1, Mask(-1, 0), dict(block_n=32), 16),                      # Sq > Sk: empty rows
    (200, 200, Mask(40, 10), dict(block_n=48, pingpong=True, lazy_rescale=True), 32),
    (100, 110, Mask(), dict(block_n=48, lazy_rescale=True), 16),     # ragged Sk only
    (200, 150, Mask(-1, 0), dict(block_n=48, consumers=3, pingpong=True, lazy_rescale=True),
     32),
    (120, 200, Mask(-1, 0), dict(block_n=48, dynamic=True, head_sections=True), 32),
])
def test_diag_more(sq, sk, mask, kw, dn):
    """128 keys a block narrowed to 64 (the hd64/hd128 causal rows' shape), windows,
    full with a ragged Sk, three consumers, consumer_bound, the dynamic scheduler, S = 1
    and 63, one CTA a tile and persistent."""
    q, k, v = inputs(1, sq, sk, 2, 2, 64, sq + sk)
    same_and_right(Config(persistent=True, **kw), q, k, v, mask, diag_n=dn)
    if not kw.get("dynamic"):
        same_and_right(Config(**kw), q, k, v, mask, diag_n=dn)


@pytest.mark.long
@pytest.mark.parametrize("d,mask", [(128, Mask(-1, 0)), (256, Mask(30, 0))])
def test_diag_packed_gqa(d, mask):
    """The packed GQA layout (a group of 4 query heads in one tile's rows: a consumer's
    last row is position m0 / 4 + 15), head dims 128 and 256."""
    q, k, v = inputs(1, 70, 90, 8, 2, d, d)
    base = Config(block_n=48, pingpong=True, lazy_rescale=True, persistent=True)
    same_and_right(base, q, k, v, mask, layout="packed", group=4, diag_n=16)


def test_diag_checked_and_off_by_default():
    """diag_n is off by default (the kernel unchanged); it takes a multiple of 16 below
    block_n, P in registers and one loop."""
    assert Config().diag_n == 0
    c = Config(block_n=48, diag_n=32)
    assert build_forward(c, f16, 64, Mask(-1, 0), scale=0.1).name.endswith("_causal_dn32")
    for bad in (dict(diag_n=24), dict(diag_n=128), dict(diag_n=64, p_smem=True),
                dict(diag_n=64, split_mask=True)):
        with pytest.raises(ValueError, match="diag_n"):
            Config(block_n=128, **bad)
