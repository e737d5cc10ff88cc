"""Config.split_mask (a consumer's key blocks in segments: the whole ones without mask
code, the edge ones masked without the test) and Config.consumer_bound (a consumer stops
at its own rows' last key block and passes the rest through) on the CPU interpreter,
every detector on. Both change which instructions run, never a value: the output and
LSE must be bitwise those of the same config without them (a block past a consumer's
rows adds exactly zero), and agree with the float64 reference."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.core.types import f16
from ptxdsl.ops.attention import api, attention_reference, varlen
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import build_forward
from ptxdsl.ops.attention.steps import consumer_blocks  # noqa: F401  (public helper)
from attention_fwd_checks import inputs, same_and_right


def test_split_and_bound_causal_pingpong_lazy():
    """Causal, Sq < Sk (keys aligned bottom-right) and ragged across five 32-key blocks:
    the first consumer stops two blocks before the second and keeps its ping-pong turns;
    lazy rescale's labels in each loop copy; persistent on 2 CTAs."""
    q, k, v = inputs(1, 100, 130, 1, 1, 64, 21)
    base = Config(block_n=32, pingpong=True, lazy_rescale=True, persistent=True)
    same_and_right(base, q, k, v, Mask(-1, 0), split_mask=True, consumer_bound=True)


@pytest.mark.long
@pytest.mark.parametrize("sq,sk,mask,kw", [
    (150, 170, Mask(-1, 0), dict(block_n=48)),                       # no ping-pong
    (170, 150, Mask(-1, 0), dict(block_n=32, pingpong=True)),        # rows with no key
    (1, 63, Mask(-1, 0), dict(block_n=32, lazy_rescale=True)),
    (63, 1, Mask(-1, 0), dict(block_n=32)),                          # Sq > Sk: empty rows
    (200, 200, Mask(40, 10), dict(block_n=32, pingpong=True, lazy_rescale=True)),
    (100, 110, Mask(), dict(block_n=48, lazy_rescale=True)),         # ragged Sk only
    (200, 150, Mask(-1, 0), dict(block_n=32, consumers=3, pingpong=True, lazy_rescale=True)),
    (120, 200, Mask(-1, 0), dict(block_n=32, dynamic=True, head_sections=True)),
])
def test_split_and_bound_more(sq, sk, mask, kw):
    """Windows (left and right edges), full, three consumers (the two below the diagonal
    skip), the dynamic scheduler, one CTA a tile and persistent, S = 1 and 63."""
    q, k, v = inputs(1, sq, sk, 2, 2, 64, sq + sk)
    base = Config(persistent=True, **kw)
    for on in (dict(split_mask=True), dict(consumer_bound=True),
               dict(split_mask=True, consumer_bound=True)):
        same_and_right(base, q, k, v, mask, **on)


@pytest.mark.long
@pytest.mark.parametrize("d,mask", [(128, Mask(-1, 0)), (256, Mask(30, 0))])
def test_split_and_bound_packed_gqa(d, mask):
    """The packed GQA layout (a group of 4 query heads in one tile's rows: a consumer's
    rows span 16 positions), head dims 128 and 256."""
    q, k, v = inputs(1, 70, 90, 8, 2, d, d)
    base = Config(block_n=32, pingpong=True, lazy_rescale=True, persistent=True)
    same_and_right(base, q, k, v, mask, layout="packed", group=4, split_mask=True,
                    consumer_bound=True)


@pytest.mark.long
def test_split_and_bound_varlen(monkeypatch):
    """attention_varlen (the ordered varlen layout) with the options on, against each
    sequence's reference: lengths 1, 63, 100, 200 and a sequence without keys."""
    base = Config(block_n=32, pingpong=True, lazy_rescale=True, persistent=True,
                  split_mask=True, consumer_bound=True)
    asked = []
    for mod in (api, varlen):
        monkeypatch.setattr(mod, "choose", lambda *a, **kw: asked.append(a) or base)
    lq, lk = [1, 63, 100, 200, 5], [1, 80, 100, 230, 0]
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((sum(n), 2, 64)).astype(np.float16)
               for n in (lq, lk, lk))
    cq, ck = (np.cumsum([0] + n).astype(np.int32) for n in (lq, lk))
    out, lse = varlen.attention_varlen(q, k, v, cq, ck, max(lq), max(lk), causal=True,
                                       return_lse=True)
    assert len(asked) == 2                # the forward's config and the order pass's
    for i in range(len(lq)):
        a, b, ka, kb = cq[i], cq[i + 1], ck[i], ck[i + 1]
        if ka == kb:
            assert (out[a:b] == 0).all() and np.isneginf(lse[:, a:b]).all()
            continue
        ref, rlse = attention_reference(q[None, a:b], k[None, ka:kb], v[None, ka:kb],
                                        causal=True)
        assert np.abs(out[a:b].astype(np.float64) - ref[0]).max() <= 4e-3 * np.abs(ref).max()
        np.testing.assert_array_equal(np.isneginf(lse[:, a:b]), np.isinf(rlse[0]))


@pytest.mark.long
@pytest.mark.parametrize("kw", [dict(persistent=True, lazy_rescale=True, split_mask=True),
                                dict(persistent=True, dynamic=True, head_sections=True),
                                dict(pingpong=True)])
def test_store_wait_once(kw):
    """Config.store_wait_once: the TMA-store epilogue's wait for the staging buffer's reads
    once per CTA (persistent on 2 CTAs, several tiles each; dynamic; one CTA a tile)."""
    q, k, v = inputs(1, 300, 280, 2, 2, 64, 33)
    base = Config(block_n=48, tma_store=True, **kw)
    same_and_right(base, q, k, v, Mask(-1, 0), store_wait_once=True)
    with pytest.raises(ValueError, match="tma_store"):
        Config(store_wait_once=True)


def test_options_leave_other_masks_and_defaults_alone():
    """consumer_bound needs a right bound: without one (full, a left-only window) the
    kernel is the one without it; the default Config has both off."""
    assert not Config().split_mask and not Config().consumer_bound
    for mask in (Mask(), Mask(20, -1)):
        plain = build_forward(Config(block_n=64), f16, 64, mask, scale=0.1)
        bound = build_forward(Config(block_n=64, consumer_bound=True), f16, 64, mask,
                              scale=0.1)
        strip = lambda p: [x for x in p.splitlines() if "Generated by" not in x]  # noqa: E731
        assert plain.name == bound.name and strip(plain.ptx()) == strip(bound.ptx())
