"""ptxdsl.ops.attention on the CPU interpreter, the shipped kernel against the float64
numpy reference: out within 16-bit rounding, LSE to 1e-3, rows that see no key give 0 and
-inf. The default set is a few small shapes; the wider sweep, ping-pong across a
persistent CTA's tiles, 192-row tiles, and head sections' order are marked ``long``."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.ops import attention
from ptxdsl.ops.attention import attention_reference
from varlen_checks import check_varlen

ml_dtypes = pytest.importorskip("ml_dtypes")


def _inputs(b, sq, sk, h, hk, d, dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype)
            for s in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d))]


def _check(q, k, v, **kw):
    out, lse = attention(q, k, v, return_lse=True, **kw)
    ref, rlse = attention_reference(q, k, v, **kw)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == np.float32
    o = out.astype(np.float64)
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    err = np.abs(o - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err <= 2e-2 if q.dtype != np.float16 else err <= 4e-3, err
    empty = np.isinf(rlse)
    np.testing.assert_array_equal(np.isneginf(lse), empty)
    assert (o.transpose(0, 2, 1, 3)[empty] == 0).all()
    fin = ~empty
    if fin.any():
        rel = np.abs(lse[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1.0)
        assert rel.max() <= 1e-3, rel.max()
    return out


@pytest.mark.parametrize("sq,sk,h,hk,d,dtype,kw", [
    (100, 100, 2, 1, 64, np.float16, dict(causal=True)),          # GQA, ragged, causal
    (63, 130, 1, 1, 64, "bf16", {}),                              # two K/V blocks, ragged Sk
    (1, 63, 1, 1, 64, np.float16, dict(window_size=(8, 0))),      # one row, sliding window
])
def test_small_shapes_match_float64(sq, sk, h, hk, d, dtype, kw):
    dt = ml_dtypes.bfloat16 if dtype == "bf16" else dtype
    _check(*_inputs(1, sq, sk, h, hk, d, dt, sq + sk), **kw)


def test_rows_that_see_no_key_give_zero_and_minus_inf():
    """Causal with Sq > Sk (aligned bottom-right): the first Sq - Sk rows see nothing."""
    q, k, v = _inputs(1, 70, 6, 1, 1, 64, np.float16, 3)
    out = _check(q, k, v, causal=True)
    assert (out[0, :64].astype(np.float64) == 0).all()


def test_out_is_written_in_place_and_returned():
    q, k, v = _inputs(1, 16, 16, 1, 1, 64, np.float16, 4)
    out = np.full_like(q, np.nan)
    got = attention(q, k, v, out=out)
    assert got is out and not np.isnan(out.astype(np.float64)).any()


@pytest.mark.long
@pytest.mark.parametrize("b,sq,sk,h,hk,d,kw", [
    (1, 200, 200, 2, 2, 128, dict(causal=True)), (1, 63, 300, 4, 2, 128, {}),
    (1, 130, 70, 1, 1, 256, dict(causal=True)), (1, 130, 70, 1, 1, 256, {}),
    (2, 100, 100, 2, 1, 192, {}),
    (1, 200, 200, 1, 1, 64, dict(window_size=(50, 10))),
    (1, 150, 200, 2, 1, 128, dict(window_size=(40, 5))),
    (1, 128, 256, 2, 1, 64, dict(softcap=5.0, softmax_scale=0.3)),
])
def test_wider_sweep_matches_float64(b, sq, sk, h, hk, d, kw):
    _check(*_inputs(b, sq, sk, h, hk, d, ml_dtypes.bfloat16, b + sq + sk + d), **kw)


@pytest.mark.parametrize("causal,pingpong,heads", [
    pytest.param(True, True, 2, marks=pytest.mark.long), (True, False, 1)])
def test_persistent_grid_loops_over_tiles(causal, pingpong, heads):
    """Config.persistent on a grid of 2 CTAs: each takes several tiles (Q reloaded once the
    consumers release it, the K/V ring running on across tiles), some with no key at all;
    with ping-pong the consumers' named barriers stay matched across tiles. Causal tiles
    go round the CTAs in a snake (odd rounds reversed); one head gives 3 tiles, so the
    reversed second round has one tile, which CTA 0 takes."""
    from ptxdsl.core.types import f16
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.fwd import build_forward
    q, k, v = _inputs(1, 300, 100, heads, 1, 64, np.float16, 5)
    kern = build_forward(Config(block_n=64, stages=2, pingpong=pingpong, persistent=True),
                         f16, 64, Mask(-1, 0) if causal else Mask(), scale=0.125, sms=2)
    assert kern.grid_for({"B": 1, "SQ": 300, "H": heads}) == (2, 1, 1)
    out, lse = kern.interpret(q, k, v)
    ref, rlse = attention_reference(q, k, v, causal=causal, softmax_scale=0.125)
    assert np.abs(out.astype(np.float64) - ref).max() <= 4e-3 * np.abs(ref).max()
    np.testing.assert_array_equal(np.isneginf(lse), np.isinf(rlse))


@pytest.mark.long
@pytest.mark.parametrize("causal,pingpong", [(True, True)])
def test_three_consumers_tile_192_rows(causal, pingpong):
    """Config.consumers = 3: tiles of 192 rows, four warpgroups, 160 registers per consumer;
    persistent on 2 CTAs, with the ping-pong passing the turn round the three consumers
    (0, 1, 2, 0, ..) across tiles, some tiles with no key (causal, Sq > Sk)."""
    from ptxdsl.core.types import f16
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.fwd import build_forward
    q, k, v = _inputs(1, 400, 150, 2, 1, 64, np.float16, 6)
    c = Config(block_n=64, stages=2, pingpong=pingpong, persistent=True, consumers=3)
    assert (c.block_m, c.consumer_regs) == (192, 160)
    kern = build_forward(c, f16, 64, Mask(-1, 0) if causal else Mask(), scale=0.125, sms=2)
    assert kern.grid_for({"B": 1, "SQ": 400, "H": 2}) == (2, 1, 1)
    assert "setmaxnreg.inc.sync.aligned.u32 160" in kern.ptx()
    out, lse = kern.interpret(q, k, v)
    ref, rlse = attention_reference(q, k, v, causal=causal, softmax_scale=0.125)
    assert np.abs(out.astype(np.float64) - ref).max() <= 4e-3 * np.abs(ref).max()
    np.testing.assert_array_equal(np.isneginf(lse), np.isinf(rlse))
    fin = ~np.isinf(rlse)
    assert (np.abs(lse[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1.0)).max() <= 1e-3


@pytest.mark.parametrize("consumers", [2, pytest.param(3, marks=pytest.mark.long)])
def test_lazy_rescale_with_a_growing_max(consumers):
    """Config.lazy_rescale: keys that grow block by block move the row max by more than 8
    (log2 units) in some blocks and not in others, so warps take both branches (rescale,
    or keep the stale max with probabilities up to 2^8); causal and ragged Sk."""
    from ptxdsl.core.types import f16
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.fwd import build_forward
    q, k, v = _inputs(1, 130, 200, 1, 1, 64, np.float16, 7)
    k *= np.linspace(0.2, 3.0, 200, dtype=np.float16)[None, :, None, None]
    c = Config(block_n=32, stages=2, persistent=True, consumers=consumers, lazy_rescale=True)
    kern = build_forward(c, f16, 64, Mask(-1, 0), scale=0.3, sms=1)
    assert "bar.red.or.pred" in kern.ptx()
    out, lse = kern.interpret(q, k, v)
    ref, rlse = attention_reference(q, k, v, causal=True, softmax_scale=0.3)
    assert np.abs(out.astype(np.float64) - ref).max() <= 4e-3 * np.abs(ref).max()
    fin = ~np.isinf(rlse)
    assert (np.abs(lse[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1.0)).max() <= 1e-3


def test_pack_gqa_head_dim_96():
    """Few query rows and GQA (Sq = 3, 4 query heads per K/V head): the group's heads
    share one tile's rows (pack_gqa); head dim 96 fills its second panel half, causal
    aligned bottom-right per row position, not per packed row."""
    from ptxdsl.ops.attention import KERNELS
    _check(*_inputs(1, 3, 40, 8, 2, 96, np.float16, 3), causal=True)
    assert any("_d96_" in k.name and "_packed4" in k.name
               for k in KERNELS._kernels.values())


@pytest.mark.long
@pytest.mark.parametrize("b,sq,sk,h,hk,d,kw", [
    (1, 16, 300, 16, 2, 128, dict(causal=True)),             # group of 8, two K/V heads
    (1, 64, 64, 4, 2, 64, dict(softcap=5.0)),                # two tiles of packed rows
    (1, 100, 130, 2, 2, 96, dict(causal=True)),              # head dim 96, no packing
    (1, 100, 130, 1, 1, 96, dict(window_size=(40, 5))),      # hd96 window: its causal row
    (1, 100, 130, 2, 2, 96, {}),                             # hd96 full: 192-row tiles
])
def test_pack_gqa_and_head_dim_96_sweep(b, sq, sk, h, hk, d, kw):
    _check(*_inputs(b, sq, sk, h, hk, d, ml_dtypes.bfloat16, sq + sk + d), **kw)


@pytest.mark.long
def test_packed_layout_past_one_tile():
    """The packed schedule forced at Sq = 100 (G = 2: 200 packed rows, two tiles whose
    rows straddle positions), causal: masks compare row positions, not packed rows."""
    from ptxdsl.core.types import f16
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.fwd import build_forward
    q, k, v = _inputs(1, 100, 120, 4, 2, 64, np.float16, 9)
    kern = build_forward(Config(block_n=64, stages=2, persistent=True), f16, 64, Mask(-1, 0),
                         scale=0.125, sms=2, layout="packed", group=2)
    out5, lse4 = kern.interpret(q.reshape(1, 100, 2, 2, 64), k, v)
    ref, rlse = attention_reference(q, k, v, causal=True, softmax_scale=0.125)
    out = out5.reshape(q.shape).astype(np.float64)
    assert np.abs(out - ref).max() <= 4e-3 * np.abs(ref).max()
    lse = lse4.reshape(1, 4, 100)
    assert np.abs(lse - rlse).max() <= 1e-3 * np.abs(rlse).max()


@pytest.mark.long
@pytest.mark.parametrize("d,causal,sq,h", [(64, True, 300, 2), (96, False, 70, 1)])
def test_tma_store_epilogue(d, causal, sq, h):
    """Config.tma_store: O through a swizzled staging buffer and TMA stores (rows past SQ
    clipped by the map; head dim 96's columns past D zeroed in the buffer, not stored); a
    persistent CTA's next tile waits until the last tile's stores have read the buffer."""
    from ptxdsl.core.types import f16
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.fwd import build_forward
    q, k, v = _inputs(1, sq, 100, h, 1, d, np.float16, d)
    kern = build_forward(Config(64, 2, True, True, tma_store=True), f16, d,
                         Mask(-1, 0) if causal else Mask(), scale=0.125, sms=2)
    out, lse = kern.interpret(q, k, v)
    ref, rlse = attention_reference(q, k, v, causal=causal, softmax_scale=0.125)
    assert np.abs(out.astype(np.float64) - ref).max() <= 4e-3 * np.abs(ref).max()
    np.testing.assert_array_equal(np.isneginf(lse), np.isinf(rlse))


def test_varlen_one_launch_ragged_lengths():
    """One launch over packed sequences of lengths 0, 1, 3, 5 and 70 (query rows of one
    128-row tile reach into the next sequence's rows; keys too), one without keys, one
    whose queries see no key under the bottom-right causal mask; the persistent grid of
    2 CTAs walks tile numbers that no m-block has."""
    from ptxdsl.core.errors import LaunchError
    from ptxdsl.ops import attention_varlen
    q, k, v, cq, ck = check_varlen([5, 0, 70, 1, 3], [17, 4, 70, 0, 1], 1, 1, 64,
                                    np.float16, 7, causal=True)
    with pytest.raises(LaunchError, match="cu_seqlens_k must be a 1-d"):
        attention_varlen(q, k, v, cq, ck[None], 70, 70)
    with pytest.raises(LaunchError, match="cu_seqlens_k must start at 0"):
        attention_varlen(q, k, v, cq, ck[::-1].copy(), 70, 70)
    with pytest.raises(LaunchError, match="5 sequences, cu_seqlens_k 4"):
        attention_varlen(q, k, v, cq, np.array([0, 1, 2, 3, ck[-1]], np.int32), 70, 70)
    with pytest.raises(LaunchError, match="below the longest"):
        attention_varlen(q, k, v, cq, ck, 8, 70)


@pytest.mark.long
@pytest.mark.parametrize("lq,lk,h,hk,d,kw", [
    ([130, 1, 63, 200], [100, 300, 63, 1], 4, 2, 128, {}),
    ([200, 17], [200, 40], 2, 1, 64, dict(window_size=(50, 10))),
    ([100, 3], [90, 300], 1, 1, 256, dict(softcap=5.0)),
])
def test_varlen_wider_sweep(lq, lk, h, hk, d, kw):
    check_varlen(lq, lk, h, hk, d, ml_dtypes.bfloat16, sum(lq), **kw)


@pytest.mark.long
def test_causal_order_in_head_sections(monkeypatch):
    """Config.head_sections: causal tiles longest-first within sections of heads whose K/V
    fit tiles.L2_KV_BYTES (here two heads' worth, so three heads make a full section and a
    last one of one head), snaking over a persistent grid of 2 CTAs: every tile once."""
    from ptxdsl.core.types import f16
    from ptxdsl.ops.attention import tiles
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.fwd import build_forward
    q, k, v = _inputs(1, 300, 300, 3, 3, 64, np.float16, 8)
    monkeypatch.setattr(tiles, "L2_KV_BYTES", 2 * 300 * 2 * 64 * 2)
    kern = build_forward(Config(block_n=64, stages=2, persistent=True, head_sections=True),
                         f16, 64, Mask(-1, 0), scale=0.125, sms=2)
    assert kern.name.endswith("_l2")
    out, lse = kern.interpret(q, k, v)
    ref, rlse = attention_reference(q, k, v, causal=True, softmax_scale=0.125)
    assert np.abs(out.astype(np.float64) - ref).max() <= 4e-3 * np.abs(ref).max()
    assert (np.abs(lse - rlse) / np.maximum(np.abs(rlse), 1.0)).max() <= 1e-3
