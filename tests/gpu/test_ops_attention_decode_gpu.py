"""The split-KV decode path of ptxdsl.ops.attention (Sq <= 16) on an sm_90 GPU against
the float64 reference: GQA / MQA / MHA groups, head dims 64 and 128, f16 and bf16,
causal and windows aligned bottom-right, softcap, ragged Sk, the table's split count and
forced ones (more splits than key blocks), ``out=``, the LSE and bit-identical repeats."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention
from ptxdsl.ops.attention import attention_reference, decode

pytestmark = NEEDS_GPU


def _run(b, sq, sk, h, hk, d, dtype="bfloat16", splits=None, monkeypatch=None, **kw):
    torch = torch_sm90()
    if splits is not None:
        monkeypatch.setattr(decode, "splits_for", lambda *a: splits)
    g = torch.Generator(device="cuda").manual_seed(sq * 7 + sk + d)
    dt = getattr(torch, dtype)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dt, generator=g)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=dt, generator=g)
    v = torch.randn(b, sk, hk, d, device="cuda", dtype=dt, generator=g)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    again = attention(q, k, v, **kw)
    assert torch.equal(out, again)                       # deterministic
    ref, rlse = attention_reference(*(x.float().cpu().numpy() for x in (q, k, v)), **kw)
    o = out.float().cpu().numpy().astype(np.float64)
    assert np.isfinite(o).all() and not np.isnan(lse.cpu().numpy()).any()
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    assert np.abs(o - ref).max() <= tol * max(np.abs(ref).max(), 1e-30)
    got = lse.cpu().numpy()
    empty = np.isinf(rlse)
    np.testing.assert_array_equal(np.isneginf(got), empty)
    assert (o.transpose(0, 2, 1, 3)[empty] == 0).all()
    fin = ~empty
    if fin.any():
        assert (np.abs(got[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1)).max() <= 1e-3


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("sq", [1, 16])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_decode_shapes(d, sq, causal):
    _run(2, sq, 4099, 32, 8, d, causal=causal)


@pytest.mark.parametrize("sq,sk,h,hk,kw", [
    (1, 1, 8, 8, dict(causal=True)), (5, 3, 4, 1, dict(causal=True)),     # rows with no key
    (16, 1000, 8, 1, dict(window_size=(100, 0))), (3, 777, 16, 2, dict(window_size=(30, 5))),
    (4, 2048, 8, 4, dict(softcap=30.0, softmax_scale=0.2)),
])
def test_masks_groups_and_ragged_lengths(sq, sk, h, hk, kw):
    _run(1, sq, sk, h, hk, 128, **kw)


@pytest.mark.parametrize("splits", [1, 7, 64])
def test_forced_split_counts(monkeypatch, splits):
    _run(1, 2, 1500, 8, 2, 64, dtype="float16", splits=splits, monkeypatch=monkeypatch,
         causal=True)


def test_out_is_written_in_place():
    torch = torch_sm90()
    q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8192, 8, 128, device="cuda", dtype=torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    assert attention(q, k, k, out=out) is out and torch.isfinite(out).all()


def test_repeat_calls_replay_both_launches():
    """The second call of a signature replays the split and combine launches recorded by
    the first (the op's memo), on the new call's tensors and fresh partials."""
    torch = torch_sm90()
    from ptxdsl.ops.attention.api import FORWARD
    g = torch.Generator(device="cuda").manual_seed(5)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    q, k, v = mk(2, 1, 32, 128), mk(2, 3000, 8, 128), mk(2, 3000, 8, 128)
    first, lse1 = attention(q, k, v, return_lse=True)
    n = len(FORWARD)
    q2, k2, v2 = mk(2, 1, 32, 128), mk(2, 3000, 8, 128), mk(2, 3000, 8, 128)
    second, lse2 = attention(q2, k2, v2, return_lse=True)
    assert len(FORWARD) == n                             # no new entry: the memo ran it
    ref, rlse = attention_reference(*(x.float().cpu().numpy() for x in (q2, k2, v2)))
    o = second.float().cpu().numpy().astype(np.float64)
    assert np.abs(o - ref).max() <= 2e-2 * np.abs(ref).max()
    assert np.abs(lse2.cpu().numpy() - rlse).max() <= 1e-3 * np.abs(rlse).max()
    assert torch.equal(attention(q, k, v, return_lse=True)[0], first)


@pytest.fixture
def fused_memo():
    """The op's memo emptied before and after (its entries would replay another plan)."""
    from ptxdsl.ops.attention.api import FORWARD
    FORWARD.clear()
    yield FORWARD
    FORWARD.clear()


@pytest.mark.parametrize("d,bn,st", [(64, 128, 6), (128, 64, 6)])
@pytest.mark.parametrize("sq,sk,kw", [(1, 8192, {}), (16, 4099, dict(causal=True)),
                                      (3, 777, dict(window_size=(30, 5)))])
def test_fused_plan(monkeypatch, fused_memo, d, bn, st, sq, sk, kw):
    """A fused plan (the last split of each tile merges): correct, bitwise repeatable
    (split order, whichever split finishes last), the stream's tickets left zero."""
    from ptxdsl.ops.attention.counter import TICKETS
    plan = decode.DecodePlan(block_n=bn, stages=st, fused=True)
    monkeypatch.setattr(decode, "choose", lambda *a: plan)
    _run(2, sq, sk, 32, 8, d, **kw)
    torch = torch_sm90()
    torch.cuda.synchronize()
    assert TICKETS._buffers and all(not bool(t.any()) for t, _, _ in TICKETS._buffers.values())


def test_fused_plan_memo_and_graph(monkeypatch, fused_memo):
    """The fused plan's recorded launch replays on new tensors (the stream's tickets), and
    a CUDA graph of it replays to the eager result."""
    torch = torch_sm90()
    plan = decode.DecodePlan(block_n=64, stages=6, fused=True)
    monkeypatch.setattr(decode, "choose", lambda *a: plan)
    g = torch.Generator(device="cuda").manual_seed(7)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    q, k, v = mk(1, 1, 32, 128), mk(1, 9000, 8, 128), mk(1, 9000, 8, 128)
    first = attention(q, k, v)
    n = len(fused_memo)
    again = attention(q, k, v)
    assert len(fused_memo) == n and torch.equal(first, again)     # the memo's replay
    out = torch.empty_like(q)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        attention(q, k, v, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        attention(q, k, v, out=out)
    out.zero_()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, first)


@pytest.mark.parametrize("bn,st,l2a,late,tmap", [(64, 6, 0, True, True), (64, 6, 6, True, True),
                                                 (128, 3, 3, True, False), (64, 6, 3, False, True)])
def test_late_go_and_prefetch_plans(monkeypatch, fused_memo, bn, st, l2a, late, tmap):
    """The tail plans (a late go-ahead for the next launch, tensor-map and L2 prefetches
    ahead of the wait): correct alone, fused (Sq = 1) and split + combine (Sq = 16), and
    in launches queued back to back on new inputs (the next launch placed while this one
    drains), each against its reference."""
    plan = decode.DecodePlan(block_n=bn, stages=st, fused=True, fused_max_rows=4,
                             l2_ahead=l2a, late_go=late, tmap_prefetch=tmap)
    monkeypatch.setattr(decode, "choose", lambda *a: plan)
    _run(1, 1, 16384, 32, 8, 128)
    _run(2, 16, 4099, 32, 8, 128, causal=True)
    torch = torch_sm90()
    g = torch.Generator(device="cuda").manual_seed(11)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    calls = [(mk(1, 1, 32, 128), mk(1, 8192, 8, 128), mk(1, 8192, 8, 128)) for _ in range(4)]
    torch.cuda.synchronize()
    outs = [attention(*c) for c in calls]                  # queued, no sync between
    for (q, k, v), out in zip(calls, outs):
        ref, _ = attention_reference(*(x.float().cpu().numpy() for x in (q, k, v)))
        o = out.float().cpu().numpy().astype(np.float64)
        assert np.abs(o - ref).max() <= 2e-2 * np.abs(ref).max()


@pytest.mark.parametrize("b,sq,sk,d,splits,extra,kw", [
    (1, 1, 16384, 128, None, {}, {}),                      # 16 splits: clusters of 16
    (2, 4, 3001, 128, 5, {"fused_max_rows": 16}, dict(causal=True)),   # uneven column blocks
    (1, 2, 1500, 64, 12, {"tmap_prefetch": True, "fused_max_rows": 8},
     dict(window_size=(300, 0))),                          # 12 asked: 8 (D / 8)
    (8, 1, 4099, 128, None, {"cluster_max": 8}, {}),       # 2 splits a tile: clusters of 2
])
def test_cluster_merge_plan(monkeypatch, b, sq, sk, d, splits, extra, kw):
    """A tile's splits as one cluster, merged through distributed shared memory (the
    plan's ``cluster_merge``): one launch, no partials, no tickets; repeat calls replay it
    (the op's memo) bit-identically."""
    from ptxdsl.ops.attention.api import FORWARD
    plan = decode.DecodePlan(**{"block_n": 64, "stages": 6, "fused": True,
                                "fused_max_rows": 4, "cluster_merge": True, **extra})
    monkeypatch.setattr(decode, "choose", lambda *a: plan)
    FORWARD.clear()
    try:
        _run(b, sq, sk, 32, 8, d, splits=splits, monkeypatch=monkeypatch if splits else None,
             **kw)
    finally:
        FORWARD.clear()
