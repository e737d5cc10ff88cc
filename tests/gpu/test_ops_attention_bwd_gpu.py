"""ptxdsl.ops.attention_backward on an sm_90 GPU: dq, dk, dv against the float64 reference
(max error <= 3e-2 of the largest value, bf16), GQA sums, masks and ragged lengths, head
dims 64 to 256 (96 included), the deterministic mode bitwise identical across runs, autograd through
``ptxdsl.ops.attention`` against torch SDPA's backward, and the varlen backward (one
launch each over every packed sequence) against the reference per sequence."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward, attention_varlen, attention_varlen_backward
from ptxdsl.ops.attention import attention_backward_reference

pytestmark = NEEDS_GPU


def _inputs(b, sq, sk, h, hk, d, seed=0):
    torch = torch_sm90()
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    return mk(b, sq, h, d), mk(b, sk, hk, d), mk(b, sk, hk, d), mk(b, sq, h, d)


def _check(b, sq, sk, h, hk, d, **kw):
    q, k, v, do = _inputs(b, sq, sk, h, hk, d, sq + sk + d)
    fkw = {x: y for x, y in kw.items() if x != "deterministic"}
    out, lse = attention(q, k, v, return_lse=True, **fkw)
    got = attention_backward(do, q, k, v, out, lse, **kw)
    ref = attention_backward_reference(*(x.float().cpu().numpy() for x in (do, q, k, v)), **fkw)
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        g = g.float().cpu().numpy().astype(np.float64)
        assert np.isfinite(g).all(), name
        # (a floor for gradients that are 0 exactly: one key per row gives dS = 0)
        assert np.abs(g - r).max() <= 3e-2 * max(np.abs(r).max(), 1e-2), name
    return (q, k, v, do, out, lse), got


@pytest.mark.parametrize("d", [64, 96, 128, 192, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_head_dims(d, causal):
    _check(2, 300, 300, 4, 4, d, causal=causal)


@pytest.mark.parametrize("d", [96, 192, 256])
@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, dict(causal=True)), (63, 200, dict(causal=True)), (200, 63, dict(causal=True)),
    (257, 300, dict(window_size=(32, 16))), (64, 512, dict(softcap=30.0, softmax_scale=0.2)),
    (130, 190, dict(softcap=5.0, causal=True)),
])
def test_wide_head_dims_masks_and_ragged_lengths(d, sq, sk, kw):
    """Head dims 192 and 256 (col_split: 64-key CTAs, the columns split between the
    consumer warpgroups; 192's second warpgroup reads B operands from mid-panel)."""
    _check(1, sq, sk, 4, 2, d, **kw)


@pytest.mark.parametrize("d", [96, 192, 256])
def test_wide_head_dims_deterministic_is_bitwise_identical(d):
    torch = torch_sm90()
    (q, k, v, do, out, lse), first = _check(1, 700, 700, 4, 2, d, causal=True,
                                            deterministic=True)
    for _ in range(2):
        again = attention_backward(do, q, k, v, out, lse, causal=True, deterministic=True)
        for a, b in zip(first, again):
            assert torch.equal(a, b)


@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, dict(causal=True)), (63, 200, dict(causal=True)), (200, 63, dict(causal=True)),
    (100, 1000, {}), (1000, 1000, dict(window_size=(100, 0))),
    (257, 300, dict(window_size=(32, 16))), (64, 512, dict(softcap=30.0, softmax_scale=0.2)),
])
def test_masks_and_ragged_lengths(sq, sk, kw):
    _check(1, sq, sk, 4, 2, 128, **kw)


def test_gqa_sums_over_the_group():
    _check(2, 256, 384, 8, 1, 64, causal=True)
    _check(1, 512, 512, 32, 8, 128)


def _repeats_bitwise(torch, *dims_and_causal):
    """The deterministic backward of ``_check``'s shape, checked against float64, gives
    the same bits in three more calls."""
    *dims, causal = dims_and_causal
    (q, k, v, do, out, lse), first = _check(*dims, causal=causal, deterministic=True)
    for _ in range(3):
        again = attention_backward(do, q, k, v, out, lse, causal=causal, deterministic=True)
        for a, b in zip(first, again):
            assert torch.equal(a, b)


@pytest.mark.parametrize("causal", [False, True])
def test_deterministic_is_bitwise_identical(causal):
    torch = torch_sm90()
    _repeats_bitwise(torch, 2, 1000, 1000, 8, 2, 128, causal)


def test_autograd_matches_sdpa_backward():
    torch = torch_sm90()
    import torch.nn.functional as F
    q, k, v, do = _inputs(2, 512, 512, 8, 2, 128, 9)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    attention(*leaves, causal=True).backward(do)
    ref = [x.clone().requires_grad_() for x in (q, k, v)]
    F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in ref), is_causal=True,
                                   enable_gqa=True).transpose(1, 2).backward(do)
    for a, b in zip(leaves, ref):
        err = (a.grad.float() - b.grad.float()).abs().max() / b.grad.float().abs().max()
        assert err <= 3e-2, err


def test_cuda_graph_capture_of_a_training_step():
    torch = torch_sm90()
    q, k, v, do = _inputs(1, 256, 256, 4, 4, 64, 3)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]

    def step():
        for t in leaves:
            t.grad = None
        attention(*leaves, causal=True).backward(do)
        return [t.grad for t in leaves]

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        want = [g.clone() for g in step()]       # warm-up: kernels built and loaded
    torch.cuda.current_stream().wait_stream(s)
    for t in leaves:
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = step()
    for t in got:
        t.zero_()
    graph.replay()
    torch.cuda.synchronize()
    # dk, dv sum in registers (bitwise); dq's f32 additions land in any order
    torch.testing.assert_close(got[0], want[0], rtol=1e-2, atol=1e-2)
    for a, b in zip(got[1:], want[1:]):
        assert torch.equal(a, b)


def _varlen_case(lens_q, lens_k, h, hk, d, seed, **kw):
    torch = torch_sm90()
    g = torch.Generator(device="cuda").manual_seed(seed)
    tq, tk = sum(lens_q), sum(lens_k)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, do, k, v = mk(tq, h, d), mk(tq, h, d), mk(tk, hk, d), mk(tk, hk, d)
    cu = lambda lens: torch.tensor(np.cumsum([0] + lens), dtype=torch.int32, device="cuda")
    cq, ck = cu(lens_q), cu(lens_k)
    out, lse = attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), return_lse=True,
                                **kw)
    return q, k, v, do, out, lse, cq, ck


def _check_each(got, q, k, v, do, cq, ck, **kw):
    cq, ck = cq.tolist(), ck.tolist()
    for i in range(len(cq) - 1):
        a, e, ka, kb = cq[i], cq[i + 1], ck[i], ck[i + 1]
        parts = [x.float().cpu().numpy().astype(np.float64)
                 for x in (got[0][a:e], got[1][ka:kb], got[2][ka:kb])]
        assert all(np.isfinite(x).all() for x in parts), i
        if a == e or ka == kb:
            assert all((x == 0).all() for x in parts), i
            continue
        ref = attention_backward_reference(
            *(x.float().cpu().numpy()[None] for x in (do[a:e], q[a:e], k[ka:kb], v[ka:kb])),
            **kw)
        for name, g, r in zip(("dq", "dk", "dv"), parts, ref):
            assert np.abs(g[None] - r).max() <= 3e-2 * max(np.abs(r).max(), 1e-2), (i, name)


@pytest.mark.parametrize("d", [64, 128, 192, 256])
@pytest.mark.parametrize("kw", [dict(causal=True), dict(window_size=(100, 20)), {}])
def test_varlen_one_launch_matches_each_sequence(d, kw):
    """Packed sequences with empty, length-1 and keyless ones, GQA: three launches in all,
    each sequence's gradients against the float64 reference."""
    lens_q, lens_k = [0, 1, 300, 77, 1024, 5, 40], [3, 1, 300, 200, 1024, 0, 129]
    q, k, v, do, out, lse, cq, ck = _varlen_case(lens_q, lens_k, 8, 2, d, d, **kw)
    got = attention_varlen_backward(do, q, k, v, out, lse, cq, ck, 1024, 1024, **kw)
    _check_each(got, q, k, v, do, cq, ck, **kw)


def test_varlen_deterministic_and_graph_replay_with_new_offsets():
    """Deterministic varlen: bitwise repeats. A CUDA graph of the varlen backward replays
    with other offsets of the same totals (the kernels read them; nothing on the host)."""
    torch = torch_sm90()
    lens_q, lens_k = [500, 0, 300, 224], [400, 64, 300, 260]
    q, k, v, do, out, lse, cq, ck = _varlen_case(lens_q, lens_k, 8, 2, 128, 5, causal=True)
    first = attention_varlen_backward(do, q, k, v, out, lse, cq, ck, 500, 400, causal=True,
                                      deterministic=True)
    _check_each(first, q, k, v, do, cq, ck, causal=True)
    again = attention_varlen_backward(do, q, k, v, out, lse, cq, ck, 500, 400, causal=True,
                                      deterministic=True)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    dq, dk, dv = (torch.empty_like(x) for x in (q, k, k))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):                   # warm-up: kernels built and loaded
        attention_varlen_backward(do, q, k, v, out, lse, cq, ck, 500, 400, causal=True,
                                  dq=dq, dk=dk, dv=dv)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        attention_varlen_backward(do, q, k, v, out, lse, cq, ck, 500, 400, causal=True,
                                  dq=dq, dk=dk, dv=dv)
    new_q, new_k = [100, 700, 1, 223], [64, 500, 200, 260]
    cq.copy_(torch.tensor(np.cumsum([0] + new_q), dtype=torch.int32))
    ck.copy_(torch.tensor(np.cumsum([0] + new_k), dtype=torch.int32))
    out2, lse2 = attention_varlen(q, k, v, cq, ck, 700, 500, causal=True, return_lse=True)
    out.copy_(out2)
    lse.copy_(lse2)
    graph.replay()
    torch.cuda.synchronize()
    _check_each((dq, dk, dv), q, k, v, do, cq, ck, causal=True)


@pytest.mark.parametrize("d", [64, 96, 128, 192, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_autograd_matches_sdpa_per_sequence(d, causal):
    """Autograd through attention_varlen (GQA, ragged, a sequence without rows and one
    without keys) against SDPA's backward in f32 run sequence by sequence, causal aligned
    bottom-right as an explicit mask."""
    torch = torch_sm90()
    import torch.nn.functional as F
    lens_q, lens_k = [0, 1, 300, 77, 513, 5], [3, 1, 300, 200, 600, 0]
    g = torch.Generator(device="cuda").manual_seed(d)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
    q, do, k, v = mk(sum(lens_q), 8, d), mk(sum(lens_q), 8, d), mk(sum(lens_k), 2, d), \
        mk(sum(lens_k), 2, d)
    cq, ck = (np.cumsum([0] + lens).tolist() for lens in (lens_q, lens_k))
    cu = lambda c: torch.tensor(c, dtype=torch.int32, device="cuda")
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    attention_varlen(*leaves, cu(cq), cu(ck), max(lens_q), max(lens_k),
                     causal=causal).backward(do)
    ref = [x.float().requires_grad_() for x in (q, k, v)]      # SDPA in f32
    for i in range(len(lens_q)):
        a, e, ka, kb = cq[i], cq[i + 1], ck[i], ck[i + 1]
        if a == e or ka == kb:
            continue
        mask = None
        if causal:      # row r sees keys j <= r + sk - sq
            rows = torch.arange(e - a, device="cuda")[:, None] + (kb - ka) - (e - a)
            mask = torch.arange(kb - ka, device="cuda")[None, :] <= rows
        o = F.scaled_dot_product_attention(ref[0][a:e].transpose(0, 1)[None],
                                           ref[1][ka:kb].transpose(0, 1)[None],
                                           ref[2][ka:kb].transpose(0, 1)[None],
                                           attn_mask=mask, enable_gqa=True)
        o[0].transpose(0, 1).backward(do[a:e].float())
    for name, a, b in zip(("dq", "dk", "dv"), leaves, ref):
        want = b.grad if b.grad is not None else torch.zeros_like(b)
        assert torch.isfinite(a.grad).all(), name
        err = (a.grad.float() - want.float()).abs().max() / want.float().abs().max()
        assert err <= 3e-2, (name, float(err))


@pytest.mark.parametrize("cfg", [
    dict(overlap=1, dq_split=True, ds_double=True), dict(overlap=2, dq_split=True, ds_double=True),
])
@pytest.mark.parametrize("causal", [False, True])
def test_head_dim_128_candidates_match_float64(monkeypatch, cfg, causal):
    """lab/attention_bwd_plans.py --set h128's variants (not plan rows yet) on the GPU,
    ragged and GQA: what the lab times must be right."""
    from ptxdsl.ops.attention import bwd_api
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    c = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, **cfg)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    _check(2, 333, 517, 4, 2, 128, causal=causal)


H64 = [dict(), dict(overlap=1), dict(stages=3), dict(stages=3, overlap=1), dict(ds_double=True),
       dict(overlap=1, ds_double=True),
       # --set h64b: FA3's and FA4's dQ writer warp, FA4's order (dV, dQ, dK)
       dict(overlap=1, ds_double=True, dq_warp=True), dict(overlap=1, ds_double=True, dk_last=True),
       dict(overlap=1, ds_double=True, dq_warp=True, dk_last=True), dict(overlap=1, dq_warp=True)]


@pytest.mark.parametrize("cfg", H64)
@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, dict(causal=True)), (63, 200, dict(causal=True)), (200, 63, dict(causal=True)),
    (100, 1000, {}), (1000, 1000, dict(window_size=(100, 0))), (333, 517, dict(causal=True)),
    (257, 300, dict(window_size=(32, 16))), (64, 512, dict(softcap=30.0, softmax_scale=0.2)),
])
def test_head_dim_64_block_m_128_matches_float64(monkeypatch, cfg, sq, sk, kw):
    """lab/attention_bwd_plans.py --set h64's variants (BwdConfig.block_m = 128, not a plan
    row yet): 128 query rows a step, ragged (the last block's second half past SQP), GQA."""
    from ptxdsl.ops.attention import bwd_api
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    c = BwdConfig(**{"stages": 2, "dq_tma": True, "dq_swizzle": True, "block_m": 128, **cfg})
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    _check(2, sq, sk, 4, 2, 64, **kw)


@pytest.mark.parametrize("cfg", H64)
@pytest.mark.parametrize("causal", [False, True])
def test_head_dim_64_block_m_128_deterministic_is_bitwise_identical(monkeypatch, cfg, causal):
    """block_m 128's deterministic mode: a semaphore per 64-row block, one turn per
    n-block (each warpgroup adds its own 64 rows)."""
    torch = torch_sm90()
    from ptxdsl.ops.attention import bwd_api
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    c = BwdConfig(**{"stages": 2, "dq_tma": True, "dq_swizzle": True, "block_m": 128, **cfg})
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    _repeats_bitwise(torch, 2, 1000, 1100, 8, 2, 64, causal)


@pytest.mark.parametrize("varlen", [False, True])
def test_lse_gradient_reaches_q_and_k(varlen):
    """A loss of out and the LSE (return_lse=True) through autograd, dense and varlen: the
    LSE's gradient (dlse · P joins dS) against f32 torch autograd of the same loss."""
    torch = torch_sm90()
    g = torch.Generator(device="cuda").manual_seed(11)
    lens_q, lens_k = [300, 77, 1], [300, 200, 9]
    tq, tk = sum(lens_q), sum(lens_k)
    mk = lambda *s: torch.randn(*s, device="cuda", generator=g)
    q, k, v = (x.to(torch.bfloat16).requires_grad_() for x in (mk(tq, 8, 128), mk(tk, 2, 128),
                                                             mk(tk, 2, 128)))
    do, w = mk(tq, 8, 128), mk(8, tq)
    cq, ck = (np.cumsum([0] + lens).tolist() for lens in (lens_q, lens_k))
    if varlen:
        cu = lambda c: torch.tensor(c, dtype=torch.int32, device="cuda")
        out, lse = attention_varlen(q, k, v, cu(cq), cu(ck), 300, 300, causal=True,
                                    return_lse=True)
        ((out.float() * do).sum() + (lse * w).sum()).backward()
    else:                            # the three sequences as three batches of one
        cq, ck = [0, 300], [0, 300]
        out, lse = attention(q[None, :300], k[None, :300], v[None, :300], causal=True,
                             return_lse=True)
        ((out[0].float() * do[:300]).sum() + (lse[0] * w[:, :300]).sum()).backward()
    r = [x.detach().float().requires_grad_() for x in (q, k, v)]
    loss = 0
    for i in range(len(cq) - 1):
        a, e, ka, kb = cq[i], cq[i + 1], ck[i], ck[i + 1]
        s = torch.einsum("qhd,khd->hqk", r[0][a:e], r[1][ka:kb].repeat_interleave(4, 1))
        s = s * 128 ** -0.5
        seen = torch.arange(kb - ka, device="cuda")[None, :] <= \
            torch.arange(e - a, device="cuda")[:, None] + (kb - ka) - (e - a)
        s = s.masked_fill(~seen, float("-inf"))
        o = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), r[2][ka:kb].repeat_interleave(4, 1))
        loss = loss + (o * do[a:e]).sum() + (torch.logsumexp(s, -1) * w[:, a:e]).sum()
    loss.backward()
    for name, t, ref in zip(("dq", "dk", "dv"), (q, k, v), r):
        err = (t.grad.float() - ref.grad).abs().max() / ref.grad.abs().max()
        assert err <= 3e-2, (name, float(err))


# ---- head dim 192's panel_split layout (lab/attention_bwd_plans.py --set h192 candidates)
def _panel_split(stages, pds, overlap=0):
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    return BwdConfig(stages=stages, dq_tma=True, dq_swizzle=True, col_split=True,
                     panel_split=True, pds_smem=pds, overlap=overlap)


@pytest.mark.parametrize("cfg", [(2, True), (1, True), (2, False), (2, False, 1)],
                         ids=["s2pds", "s1pds", "s2", "s2ov1"])
@pytest.mark.parametrize("sq,sk,kw", [
    (1, 1, dict(causal=True)), (63, 200, dict(causal=True)), (200, 63, dict(causal=True)),
    (257, 300, dict(window_size=(32, 16))), (64, 512, dict(softcap=30.0, softmax_scale=0.2)),
    (130, 190, dict(softcap=5.0, causal=True)), (1000, 1000, {}),
])
def test_head_dim_192_panel_split(monkeypatch, cfg, sq, sk, kw):
    """panel_split (each consumer warpgroup an n64 and an n32 piece of dK, dV, dQ): masks,
    ragged lengths, GQA, softcap vs float64."""
    from ptxdsl.ops.attention import bwd_api
    c = _panel_split(*cfg)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    _check(1, sq, sk, 4, 2, 192, **kw)


@pytest.mark.parametrize("cfg", [(2, True), (1, True)], ids=["s2pds", "s1pds"])
def test_head_dim_192_panel_split_deterministic_and_varlen(monkeypatch, cfg):
    torch = torch_sm90()
    from ptxdsl.ops.attention import bwd_api
    c = _panel_split(*cfg)
    monkeypatch.setattr(bwd_api, "choose_bwd", lambda *_a: c)
    (q, k, v, do, out, lse), first = _check(1, 700, 700, 4, 2, 192, causal=True,
                                            deterministic=True)
    again = attention_backward(do, q, k, v, out, lse, causal=True, deterministic=True)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    lens_q, lens_k = [0, 1, 300, 77, 1024, 5, 40], [3, 1, 300, 200, 1024, 0, 129]
    q, k, v, do, out, lse, cq, ck = _varlen_case(lens_q, lens_k, 8, 2, 192, 19, causal=True)
    got = attention_varlen_backward(do, q, k, v, out, lse, cq, ck, 1024, 1024, causal=True)
    _check_each(got, q, k, v, do, cq, ck, causal=True)
