"""The varlen forward with ``Config.tma_store`` (:class:`~ptxdsl.ops.attention.varlen_tiles.
Varlen`'s ``tma_out``): a consumer's 64 rows of O leave by TMA stores where they all lie in
their sequence and by ``st.global`` where the sequence ends inside them (a box there would
write the next sequence's first rows). On the CPU interpreter against each sequence's
float64 attention: lengths that end a consumer's rows exactly (64, 128), inside them (1, 63,
100, 200) and a sequence with no query; causal and full, head dims 128 and 256 (O staged in
Q's buffer); GQA-packed tiles (boxes of ``64 / G`` positions of the group's heads)."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxdsl.core.types import bf16
from ptxdsl.ops.attention import api, varlen
from ptxdsl.ops.attention.config import Mask
from ptxdsl.ops.attention.fwd import build_forward
from ptxdsl.ops.attention.plan import choose

from varlen_checks import check_varlen

ml_dtypes = pytest.importorskip("ml_dtypes")


def _tma(mask):
    return replace(choose(128, "bf16", mask, 1), tma_store=True, store_wait_once=True)


def _plan(monkeypatch, mask):
    c = _tma(mask)
    for mod in (api, varlen):
        monkeypatch.setattr(mod, "choose", lambda *_a, **_k: c)


def test_emits_tma_stores_guarded_by_whole_rows():
    text = build_forward(_tma(Mask(-1, 0)), bf16, 128, Mask(-1, 0), scale=0.1,
                         layout="varlen").ptx()
    store = "cp.async.bulk.tensor.3d.global.shared::cta"
    assert "_tmastore" in text and store in text
    assert re.search(r"@%p\d+ " + re.escape(store), text)     # (where whole)
    assert "st.global.b32" in text                                    # (where not)
    packed = build_forward(_tma(Mask()), bf16, 128, Mask(), scale=0.1, layout="varlen",
                           group=4).ptx()
    assert "_tmastore" in packed and re.search(
        r"@%p\d+ cp\.async\.bulk\.tensor\.4d\.global\.shared::cta", packed)


@pytest.mark.long
@pytest.mark.parametrize("kw,h,hk", [(dict(causal=True), 2, 2), ({}, 2, 2),
                                     (dict(causal=True), 8, 2), ({}, 4, 2)],
                         ids=["causal", "full", "causal-gqa4", "full-gqa2"])
def test_sequences_match_float64(monkeypatch, kw, h, hk):
    _plan(monkeypatch, Mask(-1, 0) if kw else Mask())
    assert "_varlen_tmastore_w1" in api.forward_kernel(128, layout="varlen", **kw).name
    lq = [64, 1, 100, 0, 128, 63, 200]
    check_varlen(lq, [70, 9, 100, 20, 128, 150, 200], h, hk, 128, ml_dtypes.bfloat16, 11,
                 **kw)


@pytest.mark.long
@pytest.mark.parametrize("kw", [dict(causal=True), {}], ids=["causal", "full"])
def test_head_dim_256_rows_match_float64(kw):
    """Head dim 256's shipped rows (80 keys, ping-pong, O staged in Q's buffer)."""
    assert "_varlen_tmastore_oq" in api.forward_kernel(256, layout="varlen", **kw).name
    check_varlen([64, 1, 100, 0, 63, 130], [70, 9, 100, 20, 150, 130], 1, 1, 256,
                 ml_dtypes.bfloat16, 5, **kw)
