"""The fused decode plan captured in CUDA graphs on an sm_90 GPU: the graph holds the
op's kernels and no memset (each call's tickets are a slice of the capture's arena,
zeroed outside the graph), replays match the eager result, the arena's words are zero
again after them, and two graphs replayed concurrently on two streams do not share
tickets."""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention
from ptxdsl.ops.attention import decode

pytestmark = NEEDS_GPU


@pytest.fixture
def fused(monkeypatch):
    from ptxdsl.ops._common.capture_arena import CAPTURES
    from ptxdsl.ops.attention.api import FORWARD
    plan = decode.DecodePlan(block_n=64, stages=6, fused=True)
    monkeypatch.setattr(decode, "choose", lambda *a: plan)
    FORWARD.clear()
    yield CAPTURES
    FORWARD.clear()


def _node_types(torch):
    """The node types of the graph being captured on torch's current stream."""
    from ptxdsl.runtime import driver
    drv = driver.get()
    cu = drv.cu
    res = drv.check(cu.cuStreamGetCaptureInfo(drv.stream(torch.cuda.current_stream()
                                                         .cuda_stream)),
                    "cuStreamGetCaptureInfo")
    assert res[0] == cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
    graph = res[2]
    _, n = drv.check(cu.cuGraphGetNodes(graph, 0), "cuGraphGetNodes")
    nodes, _ = drv.check(cu.cuGraphGetNodes(graph, n), "cuGraphGetNodes")
    return [drv.check(cu.cuGraphNodeGetType(node), "cuGraphNodeGetType") for node in nodes]


def _inputs(torch, seed, sk=9000):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    return mk(1, 1, 32, 128), mk(1, sk, 8, 128), mk(1, sk, 8, 128)


def _capture(torch, fn):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
        types = _node_types(torch)
    return graph, types


def test_fused_graph_has_no_memset_and_replays(fused):
    from ptxdsl.runtime import driver
    torch = torch_sm90()
    cu = driver.get().cu
    q, k, v = _inputs(torch, 7)
    want = attention(q, k, v)
    outs = [torch.empty_like(q) for _ in range(2)]
    attention(q, k, v, out=outs[0])                      # the memo's entry, as the graph's
    torch.cuda.synchronize()
    before = fused.captures()

    def calls():
        for o in outs:                                   # two calls: two slices of the arena
            attention(q, k, v, out=o)
    graph, types = _capture(torch, calls)
    assert fused.captures() == before + 1
    kernel = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
    assert types == [kernel, kernel], types              # one launch per call, no memset
    for o in outs:
        o.zero_()
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
    for o in outs:
        assert torch.equal(o, want)
    arena = fused._arenas[next(reversed(fused._arenas))]
    assert all(not bool(t.any()) for t, _ in arena)      # the kernels left their words zero


def test_two_graphs_replay_concurrently(fused):
    torch = torch_sm90()
    sets = [_inputs(torch, s, sk) for s, sk in ((1, 8192), (2, 16384))]
    wants = [attention(*x) for x in sets]
    outs = [torch.empty_like(x[0]) for x in sets]
    for x, o in zip(sets, outs):
        attention(*x, out=o)
    torch.cuda.synchronize()
    graphs = [_capture(torch, lambda x=x, o=o: attention(*x, out=o))[0]
              for x, o in zip(sets, outs)]
    streams = [torch.cuda.Stream() for _ in graphs]
    for _ in range(20):
        for o in outs:
            o.zero_()
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())
        for g, s in zip(graphs, streams):
            with torch.cuda.stream(s):
                g.replay()
        for s in streams:
            torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        for o, w in zip(outs, wants):
            assert torch.equal(o, w)


def test_cluster_merge_graph_is_one_kernel_per_call(monkeypatch):
    """A cluster-merging plan (``cluster_merge``) captured: one kernel node per call (a
    cluster launch with its programmatic dependency), no memset and no arena; replays
    match the eager result bit for bit."""
    from ptxdsl.ops._common.capture_arena import CAPTURES
    from ptxdsl.ops.attention.api import FORWARD
    from ptxdsl.runtime import driver
    # Clusters of 8: an H200 ran only 7 clusters of 16 at once, too few for B=1's 8 tiles,
    # and the op then takes the ticket merge (attention_decode_cluster_h200.json).
    plan = decode.DecodePlan(block_n=64, stages=6, fused=True, fused_max_rows=4,
                             cluster_merge=True, cluster_max=8)
    monkeypatch.setattr(decode, "choose", lambda *a: plan)
    FORWARD.clear()
    try:
        torch = torch_sm90()
        cu = driver.get().cu
        q, k, v = _inputs(torch, 3, 16384)
        want = attention(q, k, v)
        outs = [torch.empty_like(q) for _ in range(2)]
        attention(q, k, v, out=outs[0])
        torch.cuda.synchronize()
        before = CAPTURES.captures()

        def calls():
            for o in outs:
                attention(q, k, v, out=o)
        graph, types = _capture(torch, calls)
        kernel = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
        assert types == [kernel, kernel], types
        assert CAPTURES.captures() == before               # no tickets: no arena
        for o in outs:
            o.zero_()
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        for o in outs:
            assert torch.equal(o, want)
    finally:
        FORWARD.clear()
