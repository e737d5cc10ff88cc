"""Config.dynamic: the persistent forward's tiles taken from a global counter (one atomic
add per tile by the producer) on the CPU interpreter, race detectors on, against the
float64 reference. Every tile exactly once: ``out`` starts as NaN, so a tile never taken
stays NaN; and the counter must end at zero, which happens only if the launch made
exactly one add per tile (its last add, returning ``tiles - 1``, resets it: fewer adds
leave it positive, more ones after the reset), one add per tile taken."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.core.types import f16
from ptxdsl.ops.attention import attention_reference, tiles
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import Smem, build_forward
from ptxas_resources import resources_or_skip  # noqa: E402


def _inputs(sq, sk, h, hk, d, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float16)
            for s in ((1, sq, h, d), (1, sk, hk, d), (1, sk, hk, d))]


def _run(c, q, k, v, mask, sms, layout="dense", group=1, counter=0):
    kern = build_forward(c, f16, q.shape[-1], mask, scale=0.125, sms=sms, layout=layout,
                         group=group)
    assert "_dyn" in kern.name and kern.arg_names[-1] == "counter"
    b, sq, h, d = q.shape
    word = np.array([counter], np.uint32)
    out = np.full(q.shape, np.nan, np.float16)
    if layout == "packed":
        hk = h // group
        lse = np.full((b, hk, group, sq), np.nan, np.float32)
        kern.interpret(q.reshape(b, sq, hk, group, d), k, v,
                       out.reshape(b, sq, hk, group, d), lse, word)
        lse = lse.reshape(b, h, sq)
    else:
        lse = np.full((b, h, sq), np.nan, np.float32)
        kern.interpret(q, k, v, out, lse, word)
    return out, lse, int(word[0])


def _check(out, lse, word, q, k, v, mask):
    assert word == 0, f"the counter ends at {word}: not one add per tile"
    o = out.astype(np.float64)
    assert not np.isnan(o).any() and not np.isnan(lse).any(), "a tile was never taken"
    ref, rlse = attention_reference(q, k, v, softmax_scale=0.125,
                                    window_size=(mask.left, mask.right))
    assert np.abs(o - ref).max() <= 4e-3 * np.abs(ref).max()
    np.testing.assert_array_equal(np.isneginf(lse), np.isinf(rlse))
    fin = ~np.isinf(rlse)
    assert (np.abs(lse[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1.0)).max() <= 1e-3


@pytest.mark.parametrize("causal,sections,pingpong", [
    pytest.param(True, True, True, marks=pytest.mark.long), (False, False, False)])
def test_dynamic_takes_every_tile_once(monkeypatch, causal, sections, pingpong):
    """Heads of 3 tiles on 2 CTAs (causal: 3 heads, 9 tiles, some with no key as Sq > Sk
    under the bottom-right mask; with head sections of two heads' K/V, the last section
    holds one head; full: 2 heads)."""
    h = 3 if causal else 2
    q, k, v = _inputs(300, 70, h, h, 64, 11)
    monkeypatch.setattr(tiles, "L2_KV_BYTES", 2 * 70 * 2 * 64 * 2)
    mask = Mask(-1, 0) if causal else Mask()
    c = Config(block_n=64, stages=2, persistent=True, dynamic=True, head_sections=sections,
               pingpong=pingpong)
    _check(*_run(c, q, k, v, mask, sms=2), q, k, v, mask)


@pytest.mark.parametrize("kw", [
    dict(head_sections=True, suspend_ns=10_000_000),
    pytest.param(dict(lazy_rescale=True, tma_store=True, store_wait_once=True,
                      late_epilogue=True, uniform_cons=True), marks=pytest.mark.long)])
def test_dynamic_with_two_q_buffers(monkeypatch, kw):
    """Config.q_double with the counter: each Q buffer carries its own tile-number words,
    so the producer publishes the next tile's number (and loads its Q) while the consumers
    still read the current one's; 9 causal tiles on 2 CTAs (each buffer taken twice or
    more, some tiles without keys), with head sections, and with the hd128 causal row's
    options (the epilogue under the next tile's first Q·Kᵀ, the TMA store); the first with
    the waits' suspend-time hint (Config.suspend_ns) on every try_wait."""
    q, k, v = _inputs(300, 70, 3, 3, 64, 14)
    monkeypatch.setattr(tiles, "L2_KV_BYTES", 2 * 70 * 2 * 64 * 2)
    c = Config(block_n=64, stages=2, persistent=True, dynamic=True, q_double=True, **kw)
    assert Smem(c, 64, 2).total == c.smem_bytes(64)
    waits = [ln for ln in build_forward(c, f16, 64, Mask(-1, 0), scale=0.125, sms=2).ptx()
             .splitlines() if "mbarrier.try_wait" in ln]
    assert waits and all(ln.rstrip().endswith(f", {c.suspend_ns:#x};") for ln in waits) \
        == bool(c.suspend_ns), waits
    _check(*_run(c, q, k, v, Mask(-1, 0), sms=2), q, k, v, Mask(-1, 0))


def test_dynamic_counter_not_zero_is_caught():
    """The checks' premise: a launch on a counter that was not zero skips a tile (one CTA,
    4 tiles, the counter at 1: tiles 0, 2, 3), which stays NaN."""
    q, k, v = _inputs(128, 64, 4, 1, 64, 12)
    c = Config(block_n=64, stages=2, persistent=True, dynamic=True)
    out, lse, word = _run(c, q, k, v, Mask(), sms=1, counter=1)
    o = out.astype(np.float64)
    assert np.isnan(o[:, :, 1]).all() and not np.isnan(o[:, :, [0, 2, 3]]).any()


def test_dynamic_needs_a_persistent_grid_and_a_counter_word():
    with pytest.raises(ValueError, match="persistent=True"):
        Config(dynamic=True)
    c = Config(block_n=64, persistent=True, dynamic=True)
    assert c.smem_bytes(64) == Config(block_n=64, persistent=True).smem_bytes(64) + 16
    assert Smem(c, 64, 2).total == c.smem_bytes(64)
    # varlen keeps its static order (its tile numbers come from the order pass)
    kern = build_forward(c, f16, 64, Mask(-1, 0), scale=0.125, layout="varlen")
    assert "counter" not in kern.arg_names and "atom" not in kern.ptx()


def test_attention_runs_a_dynamic_plan(monkeypatch):
    """ptxdsl.ops.attention with a dynamic plan row: the call gives the kernel a zeroed
    counter word (numpy: one per call; torch CUDA: the stream's workspace word)."""
    from ptxdsl.ops import attention
    from ptxdsl.ops.attention import api
    c = Config(block_n=64, stages=2, persistent=True, dynamic=True)
    monkeypatch.setattr(api, "choose", lambda *a, **kw: c)
    q, k, v = _inputs(130, 64, 2, 1, 64, 13)
    assert api.forward_kernel(64, "f16", causal=True).name.endswith("_dyn")
    for _ in range(2):
        out, lse = attention(q, k, v, causal=True, softmax_scale=0.125, return_lse=True)
        _check(out, lse, 0, q, k, v, Mask(-1, 0))


@pytest.mark.long
@pytest.mark.parametrize("d,sq,sk,h,hk,kw,layout", [
    (64, 40, 100, 8, 2, {}, "packed"),
    (64, 40, 100, 8, 2, dict(q_double=True), "packed"),
])
def test_dynamic_more_layouts(monkeypatch, d, sq, sk, h, hk, kw, layout):
    """The packed GQA layout (4 query heads per tile's rows), causal, on 2 CTAs (and with
    two Q buffers, each with its tile-number words)."""
    q, k, v = _inputs(sq, sk, h, hk, d, d + sq)
    monkeypatch.setattr(tiles, "L2_KV_BYTES", sk * 2 * d * 2)     # a head a section
    c = Config(block_n=64, stages=2, persistent=True, dynamic=True, **kw)
    mask = Mask(-1, 0)
    _check(*_run(c, q, k, v, mask, sms=2, layout=layout, group=h // hk), q, k, v, mask)


@pytest.mark.ptxas
@pytest.mark.parametrize("d,kw", [
    (64, dict(block_n=128, consumers=3, stages=3, lazy_rescale=True))])
def test_ptxas_keeps_the_dynamic_forward_in_registers(d, kw):
    """The hd64 causal row's config made dynamic (in no row: one ptxas case): no spills
    (at head dim 64 the producer needs its 32 registers: 24 spill; two consumers then get
    232 of the 3 x 168 pool)."""
    from ptxdsl.core.types import bf16
    c = Config(persistent=True, dynamic=True, **kw)
    assert c.producer_regs == 32 and c.consumer_regs == (160 if c.consumers == 3 else 232)
    k = build_forward(c, bf16, d, Mask(-1, 0), scale=d ** -0.5)
    r = resources_or_skip(k)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.local == 0


def test_recording_replays_the_stream_word(monkeypatch):
    """A recorded dynamic call (torch CUDA) passes the stream's workspace word on every
    repeat call: the counter is the recording's scratch, 8 bytes in (word 2), not an
    output allocated anew (which would start uninitialised)."""
    from ptxdsl.ops.attention import api
    from ptxdsl.runtime.memo import scratch
    seen = []

    class Memo:
        def record(self, key, rec):
            seen.append(rec)

    class Ptr:
        def __init__(self, p):
            self.p = p

        def data_ptr(self):
            return self.p

    q, k, v, out, lse, word = (Ptr(p) for p in (100, 200, 300, 400, 500, 808))
    monkeypatch.setattr(api, "FORWARD", Memo())
    fn = object()
    api._record((q, k, v, None), out, lse, [("fwd", (q, k, v, out, lse, word))], "key",
                False, word, (scratch(8), fn))
    (rec,) = seen
    assert rec.launches[0].order == ("t0", "t1", "t2", "o0", "o1", "(w + 8)")
    assert rec.outputs == (out, lse) and rec.scratch is fn
