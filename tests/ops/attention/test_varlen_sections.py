"""Config.head_sections on the varlen forward (causal): the order pass's longest-first
m-blocks taken within sections of heads whose K/V fit L2, one section after another, on
the CPU interpreter with every detector on, against each sequence's float64 attention.
Sections of two heads' K/V (``L2_KV_BYTES`` shrunk to the test's sizes) over three K/V
heads, so the last section holds one; unpacked and GQA-packed tiles."""
from __future__ import annotations

import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.ops.attention import api, tiles, varlen
from ptxdsl.ops.attention.config import Config
from varlen_checks import check_varlen

ml_dtypes = pytest.importorskip("ml_dtypes")


@pytest.mark.parametrize("h,hk", [(3, 3), (6, 3)])
def test_varlen_causal_in_head_sections(monkeypatch, h, hk):
    lq = lk = [70, 5, 0, 100]
    monkeypatch.setattr(tiles, "L2_KV_BYTES", 2 * sum(lk) * 2 * 64 * 2)
    c = Config(block_n=64, persistent=True, head_sections=True)
    names = []
    real = api.build_forward
    monkeypatch.setattr(api, "choose", lambda *a, **kw: c)
    monkeypatch.setattr(varlen, "choose", lambda *a, **kw: c)
    monkeypatch.setattr(api, "build_forward", lambda *a, **kw: names.append(
        kw["layout"]) or real(*a, **kw))
    check_varlen(lq, lk, h, hk, 64, ml_dtypes.bfloat16, h + 40, causal=True)
    assert names == ["varlen"]
