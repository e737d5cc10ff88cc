"""The GQA-packed forward (:class:`~ptxdsl.ops.attention.tiles.Packed`, a tile's rows the
query heads of a group) with ``Config.tma_store``: a consumer's 64 rows are ``64 / G``
positions of the group's heads, one box of the ``(B, SQ, HK, G, D)`` output (TMA clips the
positions past SQ). On the CPU interpreter, every detector on: bitwise the output and LSE
of the same config storing by ``st.global``, and against float64; groups 2 and 4, causal
and full, ragged SQ, with and without the late epilogue (its guarded stores)."""
from __future__ import annotations

import pytest

from ptxdsl.core.types import f16
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import build_forward
from attention_fwd_checks import inputs, same_and_right


def test_emits_a_box_of_the_group():
    text = build_forward(Config(block_n=64, tma_store=True), f16, 64, Mask(), scale=0.1,
                         layout="packed", group=4).ptx()
    assert "cp.async.bulk.tensor.5d.global.shared::cta" in text and "st.global.b32" not in text


@pytest.mark.long
@pytest.mark.parametrize("group,mask,kw", [
    (4, Mask(-1, 0), dict(persistent=True)),
    (2, Mask(), dict(persistent=True, store_wait_once=True)),
    (4, Mask(), dict(persistent=True, q_double=True, late_epilogue=True,
                     store_wait_once=True))], ids=["g4-causal", "g2-full", "g4-late"])
def test_matches_the_st_global_bits(group, mask, kw):
    q, k, v = inputs(2, 30, 150, 2 * group, 2, 64, 7 + group)
    base = Config(block_n=64, **{x: y for x, y in kw.items() if x != "store_wait_once"})
    same_and_right(base, q, k, v, mask, layout="packed", group=group, tma_store=True,
                   store_wait_once=kw.get("store_wait_once", False))
