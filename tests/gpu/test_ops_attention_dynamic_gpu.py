"""Config.dynamic on an sm_90 GPU: the plan rows' configs made dynamic, through
ptxdsl.ops.attention (the stream's workspace word as the tile counter): against the float64
reference at small shapes, against float32 SDPA with far more tiles than SMs, repeat calls
bit-identical (the memo's replay passes the same word), the word zero after every call,
and a CUDA graph's replays."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops.attention import api, attention_reference
from ptxdsl.ops.attention.plan import choose
from ptxdsl.runtime.memo import Memo

pytestmark = NEEDS_GPU


@pytest.fixture
def dynamic(monkeypatch):
    """Every plan row dynamic on a persistent grid (one CTA a tile, the hd256 causal
    row's, has no tile counter; producer and consumers at the dynamic defaults: 32 and
    the rest of the launch's register pool), and
    a fresh memo (no recorded launch of a static kernel answers)."""
    def chosen(d, dtype, mask, *rest):
        return dataclasses.replace(choose(d, dtype, mask, *rest), dynamic=True,
                                   persistent=True, producer_regs=0, consumer_regs=0)
    monkeypatch.setattr(api, "choose", chosen)
    monkeypatch.setattr(api, "FORWARD", Memo("attention", 4, 5))


def _word(torch):
    from ptxdsl.ops._common.workspace import ATTENTION_TILES, WORKSPACE
    from ptxdsl.runtime import torch_private
    hooks, dev = torch_private.hooks(torch), torch.cuda.current_device()
    torch.cuda.synchronize()
    buf, _ = WORKSPACE.torch_buffer(hooks, dev, hooks.raw_stream(dev), 0)
    return int(buf[ATTENTION_TILES].item())


@pytest.mark.parametrize("d,causal,sq,h,hk", [(64, True, 300, 4, 4), (128, True, 1000, 3, 1),
                                              (256, True, 700, 2, 2), (128, False, 500, 2, 2),
                                              (256, True, 4, 8, 2)])   # the last: packed GQA
def test_dynamic_matches_float64(dynamic, d, causal, sq, h, hk):
    torch = torch_sm90()
    g = torch.Generator(device="cuda").manual_seed(sq + d)
    q = torch.randn(1, sq, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(1, sq + 17, hk, d, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(2))
    assert "_dyn" in api.forward_kernel(d, "bf16", causal=causal,
                                        layout="packed" if sq == 4 else "dense",
                                        group=h // hk if sq == 4 else 1).name
    out, lse = api.attention(q, k, v, causal=causal, return_lse=True)
    assert _word(torch) == 0
    for _ in range(3):                                   # recorded, then hot
        again = api.attention(q, k, v, causal=causal)
        assert torch.equal(out, again) and _word(torch) == 0
    ref, rlse = attention_reference(*(x.float().cpu().numpy() for x in (q, k, v)),
                                    causal=causal)
    o = out.float().cpu().numpy().astype(np.float64)
    assert np.abs(o - ref).max() <= 2e-2 * np.abs(ref).max()
    got = lse.cpu().numpy()
    fin = ~np.isinf(rlse)
    assert (np.abs(got[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1)).max() <= 1e-3


@pytest.mark.parametrize("d", [64, 128, 256])
def test_dynamic_many_tiles_and_a_graph(dynamic, d):
    """S = 4k causal, 2048 / d heads: hundreds of tiles over the SMs; a CUDA graph of two
    calls replayed three times after new inputs gives the eager result."""
    torch = torch_sm90()
    import torch.nn.functional as F
    g = torch.Generator(device="cuda").manual_seed(d)
    h = 2048 // d
    q, k, v = (torch.randn(1, 4096, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
               for _ in range(3))
    out = api.attention(q, k, v, causal=True)
    ref = F.scaled_dot_product_attention(*(x.float().transpose(1, 2) for x in (q, k, v)),
                                         is_causal=True).transpose(1, 2)
    assert ((out.float() - ref).abs().max() / ref.abs().max()).item() <= 2e-2
    assert _word(torch) == 0
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        api.attention(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [api.attention(q, k, v, causal=True) for _ in range(2)]
    for _ in range(3):
        for t in (q, k, v):
            t.copy_(torch.randn(t.shape, device="cuda", generator=g).to(t.dtype))
        graph.replay()
        torch.cuda.synchronize()
        eager = api.attention(q, k, v, causal=True)
        assert all(torch.equal(o, eager) for o in outs)


@pytest.mark.parametrize("d,h,hk", [(64, 8, 8), (128, 8, 2)])
def test_plan_rows_past_1k_keys(d, h, hk):
    """The causal rows from 1025 keys as the table has them (dynamic, head sections, two Q
    buffers): B 2, S 3000 (a ragged last m-block), MHA and GQA (sections count K/V heads),
    against float32 SDPA, the word zero after each call, repeat calls bit-identical."""
    torch = torch_sm90()
    import torch.nn.functional as F
    from ptxdsl.ops.attention.config import Mask
    c = choose(d, "bf16", Mask(-1, 0), seqlen=3000)
    assert c.dynamic and c.head_sections and c.q_double
    g = torch.Generator(device="cuda").manual_seed(d + h)
    q = torch.randn(2, 3000, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(2, 3000, hk, d, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(2))
    out = api.attention(q, k, v, causal=True)
    assert _word(torch) == 0
    ref = F.scaled_dot_product_attention(*(x.float().transpose(1, 2) for x in (q, k, v)),
                                         is_causal=True, enable_gqa=h != hk).transpose(1, 2)
    assert ((out.float() - ref).abs().max() / ref.abs().max()).item() <= 2e-2
    for _ in range(2):
        assert torch.equal(api.attention(q, k, v, causal=True), out) and _word(torch) == 0
