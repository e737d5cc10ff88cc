"""Config.work_words (varlen: the producer writes each tile's located fields beside its Q
buffer, the consumers read them there) on the CPU interpreter, every detector on: the
output and LSE bitwise those of the same config without it, and agree with each
sequence's float64 attention. Ragged sequences, three of no rows and one of no keys, on
a persistent grid of 2 CTAs: the tiles without rows come last, several in a row on each
CTA, and pass through the Q buffers' barriers (two buffers, each in turn; a consumer that
did not release Q for them leaves the producer waiting)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.core.types import f16
from ptxdsl.ops.attention import api, varlen
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import build_forward
from varlen_checks import check_varlen


def _run(monkeypatch, c, h, hk, seed):
    monkeypatch.setattr(api, "choose", lambda *a, **kw: c)
    monkeypatch.setattr(varlen, "choose", lambda *a, **kw: c)
    lq, lk = [70, 0, 0, 0, 5, 130], [70, 9, 0, 3, 0, 100]
    q, k, v, cq, ck = check_varlen(lq, lk, h, hk, 64, np.float16, seed, causal=True)
    from ptxdsl.ops import attention_varlen
    return attention_varlen(q, k, v, cq, ck, max(lq), max(lk), causal=True, return_lse=True)


@pytest.mark.parametrize("h,hk,kw", [
    (2, 2, dict(q_double=True)),
    pytest.param(8, 2, dict(late_epilogue=True, tma_store=True, store_wait_once=True,
                            q_double=True, k_ahead=True), marks=pytest.mark.long)])
def test_work_words_same_bits(monkeypatch, h, hk, kw):
    base = Config(block_n=64, persistent=True, **kw)
    want, wlse = _run(monkeypatch, base, h, hk, 3)
    got, glse = _run(monkeypatch, dataclasses.replace(base, work_words=True), h, hk, 3)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(glse.view(np.uint32), wlse.view(np.uint32))


def test_work_words_varlen_only():
    c = Config(block_n=64, persistent=True, work_words=True)
    assert build_forward(c, f16, 64, Mask(-1, 0), scale=0.1, layout="varlen").name \
        .endswith("_ww")
    assert "_ww" not in build_forward(c, f16, 64, Mask(-1, 0), scale=0.1).name
    assert c.smem_bytes(64) == Config(block_n=64, persistent=True).smem_bytes(64) + 64
