"""Config.o_in_q (the TMA-store epilogue staged in Q's buffer, Q released after the
stores have read it) on the CPU interpreter, every detector on: the output and LSE bitwise
those of the same config without the option, and agree with the float64 reference."""
from __future__ import annotations

import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from attention_fwd_checks import inputs, same_and_right
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import Smem


def test_options_checked_and_sized():
    """Off by default; o_in_q needs the TMA-store epilogue waiting every tile, and takes
    no shared memory of its own (head dim 256's 80-key pair of stages then fits)."""
    assert not Config().o_in_q
    for kw in ({}, dict(store_wait_once=True), dict(late_epilogue=True, persistent=True)):
        with pytest.raises(ValueError, match="o_in_q"):
            Config(o_in_q=True, tma_store=bool(kw), **kw)
    c = Config(block_n=80, pingpong=True, tma_store=True, o_in_q=True)
    assert c.smem_bytes(256) == Config(block_n=80, pingpong=True).smem_bytes(256) <= 232448
    L = Smem(c, 256, 2)
    assert L.o == L.q and L.total == Smem(Config(block_n=80), 256, 2).total


@pytest.mark.long
def test_o_in_q_head_dim_256():
    """Head dim 256 with the causal 80-key ping-pong rows' shape (persistent on 1 CTA,
    ragged against 80-key blocks), against the row's st.global epilogue (O's own staging
    buffer does not fit beside Q and two stages). (The hd256 rows through attention():
    test_interp.py's wider sweep, causal on one CTA a tile and full.)"""
    q, k, v = inputs(1, 200, 200, 1, 1, 256, 4)
    base = Config(block_n=80, pingpong=True, lazy_rescale=True, persistent=True)
    same_and_right(base, q, k, v, Mask(-1, 0), sms=1, tma_store=True, o_in_q=True)
