"""Config.o_in_q (the TMA-store epilogue staged in Q's buffer, Q released after the
stores have read it), Config.q_split (each consumer's Q on its own barriers) and
Config.kv_spread (the full order visiting a batch's query heads
K/V head by K/V head) on the CPU interpreter, every detector on: the output and LSE
bitwise those of the same config without the option, and agree with the float64
reference."""
from __future__ import annotations

import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from attention_fwd_checks import inputs, right, same_and_right
from ptxdsl.core.types import bf16, f16
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import Smem, build_forward


def test_options_checked_and_sized():
    """Off by default; o_in_q needs the TMA-store epilogue waiting every tile, and takes
    no shared memory of its own (head dim 256's 80-key pair of stages then fits)."""
    assert not Config().o_in_q and not Config().kv_spread and not Config().q_split
    for kw in ({}, dict(store_wait_once=True), dict(late_epilogue=True, persistent=True)):
        with pytest.raises(ValueError, match="o_in_q"):
            Config(o_in_q=True, tma_store=bool(kw), **kw)
    c = Config(block_n=80, pingpong=True, tma_store=True, o_in_q=True)
    assert c.smem_bytes(256) == Config(block_n=80, pingpong=True).smem_bytes(256) <= 232448
    L = Smem(c, 256, 2)
    assert L.o == L.q and L.total == Smem(Config(block_n=80), 256, 2).total
    split = Config(block_n=80, tma_store=True, o_in_q=True, q_split=True)
    assert split.smem_bytes(256) == c.smem_bytes(256) + 32 == Smem(split, 256, 2).total


@pytest.mark.long
def test_o_in_q_head_dim_256():
    """Head dim 256 with the causal 80-key ping-pong rows' shape (persistent on 1 CTA,
    ragged against 80-key blocks), with Config.q_split (a lab option:
    its one interpreter case), against the row's st.global epilogue (O's own staging
    buffer does not fit beside Q and two stages). (o_in_q alone: the hd256 rows through
    attention(), test_interp.py's wider sweep, causal on one CTA a tile and full.)"""
    q, k, v = inputs(1, 200, 200, 1, 1, 256, 4)
    base = Config(block_n=80, pingpong=True, lazy_rescale=True, persistent=True)
    same_and_right(base, q, k, v, Mask(-1, 0), sms=1, tma_store=True, o_in_q=True,
                   q_split=True)


@pytest.mark.long
@pytest.mark.parametrize("h,hk,kw", [
    (8, 2, dict(block_n=64, persistent=True, lazy_rescale=True)),
])
def test_kv_spread(h, hk, kw):
    """Full, a GQA group of 4, ragged Sq and Sk, two batches (a lab option: one case):
    every tile taken once (out and LSE start as NaN), bitwise the order without it."""
    q, k, v = inputs(2, 150, 90, h, hk, 64, 8)
    same_and_right(Config(**kw), q, k, v, Mask(), kv_spread=True)


def test_kv_spread_name():
    """The kernel says it: dense full only (causal and the packed layout keep theirs)."""
    c = Config(block_n=64, persistent=True, kv_spread=True)
    assert build_forward(c, bf16, 64, Mask(), scale=0.1).name.endswith("_spread")
    assert "_spread" not in build_forward(c, f16, 64, Mask(), scale=0.1, layout="packed",
                                          group=2).name
    assert "_spread" not in build_forward(c, f16, 64, Mask(-1, 0), scale=0.1).name
    c = Config(block_n=64, persistent=True, q_split=True)
    assert build_forward(c, bf16, 64, Mask(), scale=0.1).name.endswith("_qs")
    assert "_qs" not in build_forward(c, f16, 64, Mask(), scale=0.1, layout="varlen").name


@pytest.mark.long
@pytest.mark.parametrize("kw,layout,hk", [
    (dict(block_n=48, persistent=True, lazy_rescale=True), "packed", 2),
])
def test_kv_rotate(kw, layout, hk):
    """Full, Sk = 200 in 48-key blocks (the ragged last block read first or in the
    middle by the tiles past the first), Sq over several tiles, GQA packed (a group of 2
    in a tile's rows; a lab option: one case): against the float64 reference; causal
    keeps its order."""
    q, k, v = inputs(1, 300, 200, 4, hk, 64, 31)
    c = Config(kv_rotate=True, **kw)
    right(c, q, k, v, Mask(), layout, 4 // hk if layout == "packed" else 1)
    assert "_rot" not in build_forward(c, f16, 64, Mask(-1, 0), scale=0.1).name


def test_kv_rotate_checked():
    """Not with the options that place a tile's blocks (split_mask, diag_n, late)."""
    for kw in (dict(split_mask=True), dict(diag_n=16), dict(late_epilogue=True)):
        with pytest.raises(ValueError, match="kv_rotate"):
            Config(block_n=48, persistent=True, kv_rotate=True, **kw)
    c = Config(block_n=64, kv_rotate=True)
    assert build_forward(c, bf16, 64, Mask(), scale=0.1).name.endswith("_rot")
