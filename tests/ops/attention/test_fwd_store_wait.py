"""Config.store_wait_once (the TMA-store epilogue's wait for the staging buffer's reads
once per CTA, not after every tile) on the CPU interpreter, every detector on: it changes
which instructions run, never a value, so the output and LSE must be bitwise those of the
same config without it, and agree with the float64 reference."""
from __future__ import annotations

import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.ops.attention.config import Config, Mask
from attention_fwd_checks import inputs, same_and_right


@pytest.mark.long
@pytest.mark.parametrize("kw", [dict(persistent=True, lazy_rescale=True, head_sections=True)])
def test_store_wait_once(kw):
    """Config.store_wait_once: the TMA-store epilogue's wait for the staging buffer's reads
    once per CTA (the hd128 causal row's options: persistent on 2 CTAs, several tiles
    each, head sections, lazy rescale), causal, ragged."""
    q, k, v = inputs(1, 200, 180, 2, 2, 64, 33)
    base = Config(block_n=48, tma_store=True, **kw)
    same_and_right(base, q, k, v, Mask(-1, 0), store_wait_once=True)
    with pytest.raises(ValueError, match="tma_store"):
        Config(store_wait_once=True)
