"""Config.uniform_cons (the consumer's warpgroup index through ``shfl.sync.idx``, so ptxas
keeps Q's descriptors and per-consumer loop bounds in uniform registers) and
Config.q_double (Q in two buffers the tiles of a CTA take in turn), lab/attention_plans.py's
``fwdc`` set, on the CPU interpreter with every detector on: the output and LSE bitwise
those of the same config without them, and agree with the float64 reference."""
from __future__ import annotations

import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from attention_fwd_checks import inputs, same_and_right
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import Smem


def test_options_checked_and_sized():
    """Off by default; q_double refuses o_in_q (O staged in the one Q buffer), and its
    mbarriers and second Q come last (the layout of everything else unchanged; dynamic:
    a second set of tile-number words)."""
    assert not Config().uniform_cons and not Config().q_double
    with pytest.raises(ValueError, match="q_double"):
        Config(q_double=True, tma_store=True, o_in_q=True)
    dyn = dict(persistent=True, dynamic=True)
    assert Smem(Config(q_double=True, **dyn), 64, 2).tile == Smem(Config(**dyn), 64, 2).tile
    assert (Smem(Config(q_double=True, **dyn), 64, 2).qbar2
            == Smem(Config(q_double=True, persistent=True), 64, 2).qbar2 + 32)
    for kw, d in ((dict(tma_store=True, store_wait_once=True, lazy_rescale=True), 128),
                  (dict(consumers=3, stages=3), 64), (dict(block_n=80), 256)):
        one, two = Config(**kw), Config(q_double=True, **kw)
        L1, L2 = Smem(one, d, 2), Smem(two, d, 2)
        assert (L2.k, L2.v, L2.qfull, getattr(L2, "o", 0)) == (
            L1.k, L1.v, L1.qfull, getattr(L1, "o", 0))
        assert L2.qbar2 == L1.total and L2.q2 % 1024 == 0
        assert two.smem_bytes(d) == L2.total == L2.q2 + L1.q_bytes
    # the hd128 causal plan row's shape with two Q buffers fits sm_90's 227 KiB
    assert Config(tma_store=True, q_double=True).smem_bytes(128) <= 232448


_ROW128 = dict(block_n=64, persistent=True, lazy_rescale=True, tma_store=True,
               store_wait_once=True)


@pytest.mark.long
@pytest.mark.parametrize("kw,mask,sms", [
    (_ROW128, Mask(-1, 0), 2),
])
def test_q_double(kw, mask, sms):
    """Persistent on 2 CTAs (each buffer taken twice or more, its phase wrapping),
    ragged Sq > Sk (the first causal rows see no key: a tile without keys releases its
    buffer at once), GQA, the hd128 causal rows' shape (lazy rescale, the TMA-store
    epilogue waiting once a CTA). (With the epilogue under the next tile's first Q·Kᵀ,
    the hd128 causal row past 1k keys: test_fwd_late.py.)"""
    q, k, v = inputs(1, 300, 200, 2, 1, 64, 31)
    same_and_right(Config(**kw), q, k, v, mask, sms=sms, q_double=True)


@pytest.mark.long
def test_q_double_packed():
    """The packed GQA layout (a group of 2), causal, one CTA over every tile, with
    uniform_cons too: bitwise without either. (uniform_cons's 192-row tiles: the hd64
    full row through attention(), test_interp.py's wider sweep.)"""
    q, k, v = inputs(1, 130, 150, 4, 2, 64, 33)
    same_and_right(Config(block_n=64, persistent=True, lazy_rescale=True), q, k, v,
                   Mask(-1, 0), layout="packed", group=2, sms=1, q_double=True,
                   uniform_cons=True)


@pytest.mark.long
@pytest.mark.parametrize("causal,group_heads", [(True, (4, 1))])
def test_varlen_bitwise(monkeypatch, causal, group_heads):
    """attention_varlen (GQA packed 4 heads a tile), causal, with both options on the
    plan's row: bitwise its outputs without them (a sequence with no keys, one of one
    row, ragged lengths). (The ordered varlen layout is the packed one's order pass.)"""
    import dataclasses
    import numpy as np
    from ptxdsl.ops.attention import api, attention_varlen, varlen
    h, hk = group_heads
    rng = np.random.default_rng(34)
    lq, lk = [1, 130, 0, 70], [1, 150, 5, 60]
    q = rng.standard_normal((sum(lq), h, 64)).astype(np.float16)
    k, v = (rng.standard_normal((sum(lk), hk, 64)).astype(np.float16) for _ in range(2))
    cq, ck = (np.cumsum([0] + x).astype(np.int32) for x in (lq, lk))

    def call():
        return attention_varlen(q, k, v, cq, ck, max(lq), max(lk), causal=causal,
                                return_lse=True)
    want = call()
    built, real = [], api.choose

    def choose(*a, **kw):
        c = dataclasses.replace(real(*a, **kw), q_double=True, uniform_cons=True)
        built.append(c)
        return c
    names, build = [], api.build_forward
    monkeypatch.setattr(api, "choose", choose)
    monkeypatch.setattr(varlen, "choose", choose)
    monkeypatch.setattr(api, "build_forward", lambda *a, **kw: (
        lambda kern: names.append(kern.name) or kern)(build(*a, **kw)))
    got = call()
    assert built and names and all(n.endswith("_uc_q2") and "varlen" in n for n in names)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
