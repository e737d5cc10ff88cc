"""The split-KV decode path (``Sq <= 16``) on the CPU interpreter with every detector on,
against the float64 reference: GQA groups packed as one tile's rows, keys split over
several CTAs (forced, the interpreter's 2 SMs would pick one split at these lengths) and
merged by the combine kernel or, fused, by the last split of each tile; causal and
windows aligned bottom-right, rows and splits
that see no key. The wider sweep is marked ``long``."""
from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401
from ptxdsl.ops import attention
from ptxdsl.ops.attention import attention_reference, decode
from ptxdsl.ops.attention.decode_cluster import ClusterMerge

ml_dtypes = pytest.importorskip("ml_dtypes")


def _inputs(b, sq, sk, h, hk, d, dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype)
            for s in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d))]


def _check(monkeypatch, splits, b, sq, sk, h, hk, d, dtype, fused=None, clustered=None, **kw):
    """``fused``: the fused plan's other fields (a dict), else the table's plan; with
    ``cluster_merge`` the launch takes no tickets (unless ``clustered`` is False)."""
    dt = ml_dtypes.bfloat16 if dtype == "bf16" else dtype
    q, k, v = _inputs(b, sq, sk, h, hk, d, dt, b + sq + sk + d)
    seen = []
    monkeypatch.setattr(decode, "splits_for", lambda *a: seen.append(a) or splits)
    left = []
    if fused is not None:
        plan = decode.DecodePlan(**{"block_n": 64, "stages": 2, **fused, "fused": True})
        monkeypatch.setattr(decode, "choose", lambda *a: plan)
        run = decode.run

        def spy(*a, **k):
            res, tickets = run(*a, **k)
            left.append(np.zeros(b * hk * -(-sq // (64 * hk // h))) if tickets is None
                        else tickets[0])
            want = bool(fused.get("cluster_merge")) if clustered is None else clustered
            assert (tickets is None) == want
            return res, tickets
        monkeypatch.setattr(decode, "run", spy)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    assert seen, "the call did not take the decode path"
    if fused is not None:    # one launch, and every tile's ticket word left zero for the next
        assert len(left) == 1 and left[0].shape == (b * hk * -(-sq // (64 * hk // h)),)
        assert not left[0].any(), left[0]
    ref, rlse = attention_reference(q, k, v, **kw)
    o = out.astype(np.float64)
    assert out.dtype == q.dtype and lse.shape == (b, h, sq) and lse.dtype == np.float32
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    err = np.abs(o - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err <= (2e-2 if dtype == "bf16" else 4e-3), err
    empty = np.isinf(rlse)
    np.testing.assert_array_equal(np.isneginf(lse), empty)
    assert (o.transpose(0, 2, 1, 3)[empty] == 0).all()
    fin = ~empty
    if fin.any():
        rel = np.abs(lse[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1.0)
        assert rel.max() <= 1e-3, rel.max()


@pytest.mark.parametrize("splits,b,sq,sk,h,hk,d,dtype,kw", [
    (3, 1, 5, 300, 4, 2, 64, np.float16, dict(causal=True)),      # GQA 2, ragged Sk, causal
    (2, 1, 1, 63, 4, 1, 64, "bf16", dict(window_size=(8, 0))),     # MQA, a split with no key
])
def test_decode_matches_float64(monkeypatch, splits, b, sq, sk, h, hk, d, dtype, kw):
    _check(monkeypatch, splits, b, sq, sk, h, hk, d, dtype, **kw)


@pytest.mark.long
@pytest.mark.parametrize("splits,b,sq,sk,h,hk,d,dtype,kw", [
    (2, 1, 1, 300, 2, 2, 128, "bf16", dict(window_size=(40, 0))),
    (3, 1, 3, 300, 4, 1, 64, np.float16, dict(softcap=5.0, softmax_scale=0.3)),
    (1, 1, 5, 1, 2, 1, 64, np.float16, dict(causal=True)),         # rows before the keys
    (5, 1, 2, 300, 1, 1, 128, np.float16, dict(causal=True)),      # more splits than blocks
    (1, 1, 3, 70, 64, 1, 64, np.float16, dict(causal=True)),       # G = 64: one position a tile
])
def test_decode_wider_sweep(monkeypatch, splits, b, sq, sk, h, hk, d, dtype, kw):
    _check(monkeypatch, splits, b, sq, sk, h, hk, d, dtype, **kw)


@pytest.mark.parametrize("splits,b,sq,sk,h,hk,d,dtype,kw", [
    (3, 1, 16, 130, 8, 2, 64, np.float16, {}),         # every warp merges rows; ragged Sk
])
def test_fused_decode_matches_float64(monkeypatch, splits, b, sq, sk, h, hk, d, dtype, kw):
    """One launch: the last split of each tile merges (and leaves its ticket zero); the
    L2 and tensor-map prefetches ahead of the previous kernel's wait and the producer's
    late go-ahead (no-ops here) trace and verify."""
    _check(monkeypatch, splits, b, sq, sk, h, hk, d, dtype,
           fused={"l2_ahead": 2, "late_go": True, "tmap_prefetch": True}, **kw)


@pytest.mark.long
@pytest.mark.parametrize("splits,b,sq,sk,h,hk,d,dtype,kw", [
    (4, 1, 1, 500, 8, 2, 128, "bf16", {}),
    (3, 2, 16, 200, 8, 2, 64, np.float16, {}),                     # two batches' tickets
    (2, 1, 1, 63, 4, 1, 64, "bf16", dict(window_size=(8, 0))),     # a split with no key
    (17, 1, 3, 1500, 4, 1, 64, np.float16, dict(softcap=5.0)),     # two chunks of 16 splits
])
def test_fused_decode_wider_sweep(monkeypatch, splits, b, sq, sk, h, hk, d, dtype, kw):
    _check(monkeypatch, splits, b, sq, sk, h, hk, d, dtype,
           fused={"l2_ahead": 3 * (sq > 2), "late_go": splits % 2 == 1,
                  "tmap_prefetch": b + sq < 5}, **kw)


@pytest.mark.long
@pytest.mark.parametrize("splits,b,sq,sk,h,hk,d,dtype,kw", [
    (3, 2, 4, 200, 16, 4, 64, np.float16, dict(causal=True)),
])
def test_cluster_merge_wider_sweep(monkeypatch, splits, b, sq, sk, h, hk, d, dtype, kw):
    """The splits of a tile as one cluster, merged through distributed shared memory: one
    launch, no partials, no tickets (decode_cluster.py). cluster_merge is in no decode
    plans row: its one interpreter case (causal, GQA 4, two batches, ragged Sk)."""
    _check(monkeypatch, splits, b, sq, sk, h, hk, d, dtype,
           fused={"cluster_merge": True, "fused_max_rows": 64, "tmap_prefetch": sq == 4},
           **kw)


@pytest.mark.long
def test_cluster_merge_falls_back_where_the_clusters_do_not_fit(monkeypatch):
    """Fewer clusters at once than tiles (a GPC too harvested for 16 CTAs): the ticket
    merge instead, still correct."""
    monkeypatch.setattr(decode, "clusters_fit", lambda *a: False)
    _check(monkeypatch, 3, 1, 1, 150, 8, 2, 64, "bf16",
           fused={"cluster_merge": True, "fused_max_rows": 4}, clustered=False)


def test_clusters_fit_asks_the_occupancy_calculator(monkeypatch):
    class Frame:
        def __init__(self, info):
            self.info = info

        def device(self, q):
            return self.info
    assert decode.clusters_fit(Frame(None), None, object(), 99)      # the interpreter
    monkeypatch.setattr(decode, "_resident", lambda kern, ordinal: 7)
    gpu = Frame(types.SimpleNamespace(ordinal=0))
    assert decode.clusters_fit(gpu, None, object(), 7)
    assert not decode.clusters_fit(gpu, None, object(), 8)


def test_cluster_split_counts():
    """A cluster-merging plan runs one cluster per tile: at most 16 CTAs and D / 8 (a column
    block each); other plans: no cluster."""
    plan = decode.DecodePlan(block_n=64, stages=6, fused=True, cluster_merge=True)
    assert decode.cluster_splits(plan, 16, 128) == 16 and decode.cluster_splits(plan, 33, 128) == 16
    assert decode.cluster_splits(plan, 16, 64) == 8 and decode.cluster_splits(plan, 2, 128) == 2
    assert decode.cluster_splits(dataclasses.replace(plan, cluster_max=8), 16, 128) == 8
    assert decode.cluster_splits(dataclasses.replace(plan, fused=False), 16, 128) == 0
    assert decode.cluster_splits(decode.DecodePlan(fused=True), 16, 128) == 0
    with pytest.raises(ValueError, match="1 to 8 splits at head dim 64"):
        ClusterMerge(9, 64, 4)
    for bad in (0, 17):
        with pytest.raises(ValueError, match="bad decode plan"):
            decode.DecodePlan(cluster_max=bad)


def test_which_calls_take_the_decode_path():
    assert decode.takes(1, 128, 4) and decode.takes(16, 64, 8) and decode.takes(16, 128, 64)
    assert not decode.takes(17, 128, 4)          # more rows: the main forward
    assert not decode.takes(1, 256, 4)           # head dims 192, 256: the main forward
    assert not decode.takes(1, 128, 3)           # a group that does not pack into 64 rows


def test_split_count_fills_the_gpu_within_the_keys():
    plan = decode.DecodePlan(block_n=128, stages=3, ctas_per_sm=1, min_blocks=2)
    assert decode.splits_for(plan, 8, 64, 132) == 16        # B=1, Hkv=8, Sk=8k: 128 CTAs
    assert decode.splits_for(plan, 8, 6, 132) == 3          # few keys: splits of 2 blocks
    assert decode.splits_for(plan, 512, 64, 132) == 1       # the tiles alone fill the GPU
    assert decode.splits_for(plan, 8, 1, 132) == 1


def test_fused_plan_only_where_a_tile_merges_few_rows(monkeypatch):
    """``fused_max_rows``: a fused plan stays fused where a tile holds at most that many
    query rows (heads x positions), else runs split then combine (one CTA merging all of
    a tile's rows alone is slow)."""
    plan = decode.DecodePlan(fused=True, fused_max_rows=16)
    assert plan.for_tile(1, 4).fused and plan.for_tile(4, 4).fused     # 4, 16 rows
    assert not plan.for_tile(5, 4).fused and not plan.for_tile(16, 4).fused   # 20, 64
    assert not plan.for_tile(1, 32).fused                              # 32 heads
    assert plan.for_tile(16, 4) == decode.DecodePlan(fused=False, fused_max_rows=16)
    assert decode.DecodePlan(fused=True).for_tile(16, 4).fused         # default: any rows
    for bad in (0, 65):
        with pytest.raises(ValueError, match="bad decode plan"):
            decode.DecodePlan(fused_max_rows=bad)
    monkeypatch.setattr(decode, "choose", lambda *a: plan)
    built = []

    def kernels(p, *a):
        built.append(p.fused)
        raise LookupError("planned")
    monkeypatch.setattr(decode, "kernels", kernels)
    for sq in (1, 16):
        q, k, v = _inputs(1, sq, 64, 8, 2, 64, np.float16, 0)
        with pytest.raises(LookupError):
            attention(q, k, v)
    assert built == [True, False]


def test_table_rows_take_the_fused_rows_key(monkeypatch):
    rows = ({"head_dims": [64], "dtypes": ["f16"],
             "plan": {"block_n": 64, "stages": 2, "fused": True, "fused_max_rows": 8}},)
    monkeypatch.setattr(decode, "rows", lambda: rows)
    decode.choose.cache_clear()
    try:
        assert decode.choose(64, "f16") == decode.DecodePlan(block_n=64, stages=2, fused=True,
                                                             fused_max_rows=8)
    finally:
        decode.choose.cache_clear()
