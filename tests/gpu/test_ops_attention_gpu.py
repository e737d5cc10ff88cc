"""ptxdsl.ops.attention on an sm_90 GPU against the float64 reference of the same inputs:
causal aligned bottom-right with Sq != Sk, sliding windows, GQA / MQA, softcap, ragged
lengths, every head dim, f16 and bf16, ``out=``, the LSE, and bit-identical repeats."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention
from ptxdsl.ops.attention import attention_reference

pytestmark = NEEDS_GPU


def _run(b, sq, sk, h, hk, d, dtype="bfloat16", **kw):
    torch = torch_sm90()
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
    assert np.abs(o - ref).max() <= 2e-2 * max(np.abs(ref).max(), 1e-30)
    got = lse.cpu().numpy()
    empty = np.isinf(rlse)
    np.testing.assert_array_equal(np.isneginf(got), empty)
    fin = ~empty
    if fin.any():
        assert (np.abs(got[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1)).max() <= 1e-3


@pytest.mark.parametrize("d", [64, 96, 128, 192, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_head_dims(d, causal):
    _run(2, 300, 300, 4, 4, d, causal=causal)


@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, dict(causal=True)), (63, 200, dict(causal=True)), (200, 63, dict(causal=True)),
    (100, 1000, {}), (1000, 1000, dict(window_size=(100, 0))),
    (257, 300, dict(window_size=(32, 16))), (64, 512, dict(softcap=30.0, softmax_scale=0.2)),
])
def test_masks_and_ragged_lengths(sq, sk, kw):
    _run(1, sq, sk, 4, 2, 128, **kw)


def test_gqa_mqa_and_f16():
    _run(2, 256, 384, 8, 1, 64, "float16", causal=True)
    _run(1, 512, 512, 32, 8, 128, "float16")


@pytest.mark.parametrize("sq,kw", [(1, {}), (5, dict(causal=True)), (32, {}),
                                   (64, dict(window_size=(40, 0)))])
def test_pack_gqa(sq, kw):
    """Few query rows: the 4 query heads of each K/V head share one tile (pack_gqa; at
    Sq = 32 full, the packed layout's own plan row: two Q buffers, K ahead of V)."""
    from ptxdsl.ops.attention.api import packs
    assert packs(4, sq)
    _run(2, sq, 700, 32, 8, 128, **kw)


def test_out_and_strided_inputs():
    """Slices of one packed qkv tensor are read in place through their tensor maps' strides
    (no copy: the call is recorded for repeat calls, which only calls without copies are),
    and a repeat call runs the recorded launch with the same result."""
    torch = torch_sm90()
    from ptxdsl.ops.attention.api import FORWARD
    FORWARD.clear()
    x = torch.randn(1, 256, 3 * 4, 128, device="cuda", dtype=torch.bfloat16)
    q, k, v = x[:, :, :4], x[:, :, 4:8], x[:, :, 8:]       # one packed qkv tensor
    out = torch.empty(1, 256, 4, 128, device="cuda", dtype=torch.bfloat16)
    assert attention(q, k, v, causal=True, out=out) is out
    assert len(FORWARD) == 1
    ref, _ = attention_reference(*(t.float().cpu().numpy() for t in (q, k, v)), causal=True)
    assert np.abs(out.float().cpu().numpy() - ref).max() <= 2e-2 * np.abs(ref).max()
    first = out.clone()
    assert attention(q, k, v, causal=True, out=out) is out and torch.equal(out, first)
    got, lse = attention(q, k, v, causal=True, return_lse=True)
    again, lse2 = attention(q, k, v, causal=True, return_lse=True)   # the memo's launch
    assert torch.equal(got, first) and torch.equal(again, got) and torch.equal(lse, lse2)


def test_cuda_graph_capture():
    """The call launches on torch's current stream: captured in a CUDA graph (dense,
    packed GQA and varlen), a replay after new inputs are copied in (new sequence offsets
    too) gives what an eager call gives."""
    torch = torch_sm90()
    from ptxdsl.ops import attention_varlen
    g = torch.Generator(device="cuda").manual_seed(5)
    def rnd(*s):
        return torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v = rnd(2, 300, 8, 128), rnd(2, 300, 2, 128), rnd(2, 300, 2, 128)
    qs = rnd(2, 4, 8, 128)                                   # packed GQA (Sq = 4)
    qv, kv, vv = rnd(600, 8, 128), rnd(600, 2, 128), rnd(600, 2, 128)
    cq = torch.tensor([0, 100, 101, 600], device="cuda", dtype=torch.int32)
    ck = torch.tensor([0, 300, 350, 600], device="cuda", dtype=torch.int32)
    calls = [lambda: attention(q, k, v, causal=True), lambda: attention(qs, k, v),
             lambda: attention_varlen(qv, kv, vv, cq, ck, 600, 600, causal=True)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                            # warm-up: build, load, record
        for f in calls:
            f()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [f() for f in calls]
    for t in (q, k, v, qs, qv, kv, vv):
        t.copy_(torch.randn(t.shape, device="cuda", generator=g).to(t.dtype))
    cq.copy_(torch.tensor([0, 7, 400, 600], device="cuda", dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    for got, f in zip(outs, calls):
        assert torch.equal(got, f())


def test_varlen():
    """One launch over packed sequences; the offsets stay on the device."""
    torch = torch_sm90()
    from ptxdsl.ops import attention_varlen
    lq, lk = [100, 1, 300], [100, 50, 257]
    g = torch.Generator(device="cuda").manual_seed(11)
    q = torch.randn(sum(lq), 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(sum(lk), 2, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(sum(lk), 2, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    cq = torch.tensor(np.cumsum([0] + lq), device="cuda", dtype=torch.int32)
    ck = torch.tensor(np.cumsum([0] + lk), device="cuda", dtype=torch.int32)
    out, lse = attention_varlen(q, k, v, cq, ck, 300, 257, causal=True, return_lse=True)
    for i in range(3):
        a, b, ka, kb = int(cq[i]), int(cq[i + 1]), int(ck[i]), int(ck[i + 1])
        ref, rlse = attention_reference(*(t.float().cpu().numpy()[None] for t in (
            q[a:b], k[ka:kb], v[ka:kb])), causal=True)
        got = out[a:b].float().cpu().numpy()
        assert np.abs(got - ref[0]).max() <= 2e-2 * np.abs(ref).max()
        fin = np.isfinite(rlse[0])
        assert np.abs(lse[:, a:b].cpu().numpy()[fin] - rlse[0][fin]).max() <= 1e-3 * max(
            np.abs(rlse[0][fin]).max(), 1)


def _varlen_case(lq, lk, h, hk, seed, d=128, **kw):
    """attention_varlen on the GPU against the float64 reference of each sequence alone,
    and bit-identical on a repeat call; returns the inputs and the result."""
    torch = torch_sm90()
    from ptxdsl.ops import attention_varlen
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(sum(lq), h, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(sum(lk), hk, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(sum(lk), hk, d, device="cuda", dtype=torch.bfloat16, generator=g)
    cq = torch.tensor(np.cumsum([0] + lq), device="cuda", dtype=torch.int32)
    ck = torch.tensor(np.cumsum([0] + lk), device="cuda", dtype=torch.int32)
    out, lse = attention_varlen(q, k, v, cq, ck, max(lq), max(lk), return_lse=True, **kw)
    again, lse2 = attention_varlen(q, k, v, cq, ck, max(lq), max(lk), return_lse=True, **kw)
    assert torch.equal(out, again) and torch.equal(lse, lse2)
    o, l_ = out.float().cpu().numpy().astype(np.float64), lse.cpu().numpy()
    assert np.isfinite(o).all() and not np.isnan(l_).any()
    cqh, ckh = cq.cpu().numpy(), ck.cpu().numpy()
    step = max(1, len(lq) // 24)                  # at most ~24 sequences checked
    for i in range(0, len(lq), step):
        a, b, ka, kb = cqh[i], cqh[i + 1], ckh[i], ckh[i + 1]
        if a == b:
            continue
        if ka == kb:
            assert (o[a:b] == 0).all() and np.isneginf(l_[:, a:b]).all()
            continue
        ref, rlse = attention_reference(*(t.float().cpu().numpy()[None] for t in (
            q[a:b], k[ka:kb], v[ka:kb])), **kw)
        assert np.abs(o[a:b] - ref[0]).max() <= 2e-2 * max(np.abs(ref).max(), 1.0), i
        empty = np.isinf(rlse[0])
        np.testing.assert_array_equal(np.isneginf(l_[:, a:b]), empty)
        fin = ~empty
        if fin.any():
            assert (np.abs(l_[:, a:b][fin] - rlse[0][fin]) / np.maximum(
                np.abs(rlse[0][fin]), 1)).max() <= 1e-3
    return (q, k, v, cq, ck), out, lse


@pytest.mark.parametrize("h,hk,kw", [(32, 8, dict(causal=True)), (32, 8, {}),
                                     (16, 2, dict(window_size=(100, 0))),
                                     (8, 4, dict(causal=True)), (16, 1, dict(causal=True))])
def test_varlen_gqa_packed(h, hk, kw):
    """GQA packing in the varlen forward (groups 4, 8, 2; MQA of 16 unpacked) at ragged
    lengths, causal aligned bottom-right per sequence, a sliding window; packed and
    unpacked, ordered and in numbering order agree (bit for bit where the tiles are the
    same)."""
    torch = torch_sm90()
    from ptxdsl.core.types import bf16, f32
    from ptxdsl.ops.attention import varlen
    from ptxdsl.runtime.adapter import Frame
    lq, lk = [1, 63, 100, 200, 1000, 0, 517], [1, 63, 130, 200, 1000, 7, 600]
    (q, k, v, cq, ck), out, lse = _varlen_case(lq, lk, h, hk, h + hk, **kw)
    frame = Frame(q, "attention")
    group = varlen.packed_group(h, hk)
    for g, ordered in ((group, False), (1, True)):
        o2, l2 = torch.empty_like(out), frame.empty((h, sum(lq)), q, f32)
        varlen.run(frame, bf16, q, k, v, cq, ck, o2, l2, causal=kw.get("causal", False),
                   softmax_scale=None, window_size=kw.get("window_size", (-1, -1)),
                   softcap=0.0, group=g, ordered=ordered)
        if g == group:
            assert torch.equal(o2, out) and torch.equal(l2, lse)
        else:
            assert (o2.float() - out.float()).abs().max() <= 2e-2 * out.float().abs().max()


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_longest_first_many_sequences(causal):
    """The order pass over many sequences (NV above its 256 threads: several numbers per
    thread; empty and one-token sequences among them), the forward's snake over many
    rounds of the persistent grid: every tile once (each sampled sequence right)."""
    rng = np.random.default_rng(3)
    lens = [int(x) for x in rng.integers(0, 600, 300)]
    lens[5], lens[9], lens[100] = 0, 1, 4000
    _varlen_case(lens, lens, 32, 8, 17, causal=causal)
