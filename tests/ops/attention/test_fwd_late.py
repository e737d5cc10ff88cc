"""Config.late_epilogue (a tile's epilogue in the next tile, under that tile's first
Q·Kᵀ) on the CPU interpreter, every detector on: the output and LSE bitwise those of the
same config without it, and agree with the float64 reference."""
from __future__ import annotations

import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from attention_fwd_checks import inputs, right, same_and_right
from ptxdsl.core.types import f16
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import build_forward


def test_late_two_tiles_one_cta():
    """One CTA, two tiles (Sq > Sk, causal: the first tile's rows see 18 keys or none):
    the first tile's epilogue runs under the second's first Q·Kᵀ, the second's at the
    end; ping-pong, lazy rescale. Against the reference only
    (late_epilogue bitwise against the config without it: the long tests)."""
    q, k, v = inputs(1, 150, 40, 1, 1, 64, 9)
    c = Config(block_n=32, pingpong=True, lazy_rescale=True, persistent=True,
               late_epilogue=True)
    right(c, q, k, v, Mask(-1, 0), sms=1)


@pytest.mark.long
@pytest.mark.parametrize("mask,kw,d", [
    (Mask(-1, 0), dict(block_n=128, lazy_rescale=True, tma_store=True, store_wait_once=True,
                       uniform_cons=True, q_double=True), 128),
], ids=["hd128-causal-row"])
def test_late_more(mask, kw, d):
    """Persistent on 2 CTAs over several tiles (ragged Sq and Sk): the hd128 causal row
    past 1k keys (the TMA-store epilogue waiting once a CTA, uniform_cons, q_double: the
    row itself, at 180 keys; two tiles a CTA). (The packed GQA layout: test_late_packed_gqa.)"""
    q, k, v = inputs(1, 200, 180, 2, 2, d, 33)
    same_and_right(Config(persistent=True, **kw), q, k, v, mask, late_epilogue=True)


@pytest.mark.long
def test_late_packed_gqa():
    """The packed GQA layout (4 query heads a tile's rows), head dim 128."""
    q, k, v = inputs(1, 70, 90, 8, 2, 128, 5)
    base = Config(block_n=48, lazy_rescale=True, persistent=True, tma_store=False)
    same_and_right(base, q, k, v, Mask(-1, 0), layout="packed", group=4, sms=1,
                   late_epilogue=True)


def test_late_off_by_default_and_not_for_varlen():
    """Off by default; the varlen layouts keep their epilogue in the tile (no ``_late``)."""
    assert not Config().late_epilogue
    c = Config(block_n=64, persistent=True, late_epilogue=True)
    assert "_late" not in build_forward(c, f16, 64, Mask(-1, 0), scale=0.1,
                                        layout="varlen").name
