"""``Plan.stream_k`` (:mod:`ptxdsl.ops.matmul.streamk`): the CTAs' shares of the k-blocks
and who adds what (pure arithmetic, the same expressions the kernel records), the plan's
checks, the PTX it adds, and exact results on the CPU interpreter (long): tiles split
over two and three CTAs, owners that also contribute, several tiles per CTA, ragged
M, N, K, both majors of B, f32 and bf16 out."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.core.types import bf16, f32, f32_to_bf16_bits
from ptxdsl.ops.matmul import streamk
from ptxdsl.ops.matmul.config import Plan
from matmul_lab import assemble_one_per_option  # noqa: E402


def _segments(lo, hi, nk):
    """streamk.walk's segments in Python: (tile, k0, k1)."""
    t0 = lo // nk
    return [(t, lo - t * nk if t == t0 else 0, min(hi - t * nk, nk))
            for t in range(t0, (hi + nk - 1) // nk)]


@pytest.mark.parametrize("tiles,nk,g", [(3, 4, 5), (96, 64, 132), (4, 9, 3), (4, 4, 7),
                                        (1, 7, 7), (896, 64, 132), (5, 1, 5)])
def test_shares_cover_each_k_block_once_and_owners_count_their_contributors(tiles, nk, g):
    """Every k-block of every tile in exactly one CTA's share, in order; a CTA contributes
    (a segment not starting at k-block 0) at most once, in its first segment, and owns (a
    first segment not reaching nk) at most once, in its last; an owner's count is the
    CTAs after it that touch its tile, each a contributor of it."""
    total = tiles * nk
    seen, contrib, owners = [], {}, {}
    for c in range(g):
        lo, hi = streamk.share(c, total, g)
        assert hi > lo
        segs = _segments(lo, hi, nk)
        for i, (t, k0, k1) in enumerate(segs):
            assert 0 <= k0 < k1 <= nk
            seen += [t * nk + kb for kb in range(k0, k1)]
            if k0 > 0:
                assert i == 0 and c not in contrib
                contrib[c] = t
            elif k1 < nk:
                assert i == len(segs) - 1
                owners[c] = t
    assert seen == list(range(total))
    for c, t in owners.items():
        n = streamk.last_cta(t, nk, total, g) - c
        assert n >= 1 and all(contrib.get(c + r) == t for r in range(1, n + 1))
    assert sorted(contrib.values()) == sorted(
        t for c, t in owners.items() for _ in range(streamk.last_cta(t, nk, total, g) - c))


def test_plan_and_grid_checks():
    """stream_k takes clusters along M only, no a_rows or epi_in_ring; the grid is one
    CTA per SM in whole clusters (no more clusters than the k-blocks) and is refused past
    the workspace's flags."""
    for bad in (dict(cluster=1, split=2), dict(cluster=1, cluster_n=2),
                dict(cluster=1, a_rows=64), dict(cluster=1, epi_in_ring=True)):
        with pytest.raises(ValueError, match="stream_k"):
            Plan(stream_k=True, **bad)
    p = Plan(bn=128, cluster=1, stream_k=True)
    assert p.options_tag == "_sk" and Plan(bn=128, cluster=1).options_tag == ""
    assert streamk.grid(p, 128, 6144, 4096, 132) == 132
    assert streamk.grid(p, 128, 256, 128, 132) == 4          # 2 tiles x 2 k-blocks
    c2 = Plan(bn=128, cluster=2, stream_k=True)
    assert streamk.layout(c2, 1024, 14336, 4096) == (448, 64)   # cluster tiles
    assert streamk.grid(c2, 1024, 14336, 4096, 132) == 132
    assert streamk.grid(c2, 256, 256, 64, 132) == 4           # 2 cluster tiles x 1
    with pytest.raises(ValueError, match="stream_k"):
        streamk.grid(p, 128 * 128, 128 * 128, 64, 132)       # 16384 tiles: past the flags
    assert streamk.workspace_elems(p, 132) == streamk.FLAG_CAP + 132 * 2 * 64 * 128


def _exact(p, m, n, k, sms, b_major, out, seed):
    from ptxdsl.ops.matmul.hopper import build_hopper
    kern = build_hopper(p, bf16, out, sms=sms, b_major=b_major)
    assert kern.stream_k_plan == p and "_sk" in kern.name
    rng = np.random.default_rng(seed)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    kb = f32_to_bf16_bits(b) if b_major == "MN" else np.ascontiguousarray(f32_to_bf16_bits(b.T))
    g = streamk.grid(p, m, n, k, sms)
    ws = [np.zeros(streamk.FLAG_CAP, np.uint32),
          np.full(g * streamk.partial_bytes(p) // 4, np.nan, np.float32)]
    want = a.astype(np.float64) @ b.astype(np.float64)
    if out == f32:
        c = kern.interpret(f32_to_bf16_bits(a), kb, *ws, np.full((m, n), np.nan, np.float32))
        np.testing.assert_array_equal(c, want)
    else:
        c = kern.interpret(f32_to_bf16_bits(a), kb, *ws)
        np.testing.assert_array_equal(np.asarray(c).view(np.uint16),
                                      f32_to_bf16_bits(want.astype(np.float32)))


@pytest.mark.long
@pytest.mark.parametrize("bn,m,n,k,sms,b_major,odt,cluster", [
    (128, 200, 264, 264, 4, "MN", "f32", 2),    # clusters of 2 along M, B shared
])
def test_interpreter_runs_stream_k(bn, m, n, k, sms, b_major, odt, cluster):
    """Exact on the interpreter (integer-valued inputs, float64 reference): stream_k, a lab
    option, once at its most demanding (clusters, ragged M and N, an MN-major B)."""
    out = f32 if odt == "f32" else bf16
    _exact(Plan(bn=bn, cluster=cluster, stages=2, stream_k=True), m, n, k, sms, b_major,
           out, m + n + k)


def test_lab_stream_k_candidates_are_stream_k_plans():
    """lab/matmul_trailing.py --set streamk: each candidate is built as named (stream-K
    ones one CTA per SM with the ring fitted; widths of part-atoms for x @ W.T only)."""
    import importlib.util
    import os
    from ptxdsl.ops.matmul.plan import SMEM_PER_CTA
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "lab",
                        "matmul_trailing.py")
    spec = importlib.util.spec_from_file_location("matmul_trailing", path)
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    for shape, cands in lab.STREAM_K.items():
        got = lab.candidates(*shape, table=lab.STREAM_K)
        for name, (fields, layouts) in cands.items():
            for lay in layouts:
                p = got[(name, lay)]
                assert p.stream_k == fields.get("stream_k", False) and p.bn == fields["bn"]
                assert p.smem_bytes(bf16, bf16) <= SMEM_PER_CTA
                assert not (p.bn % 64 and lay == lab.NN)


@pytest.mark.long
def test_op_passes_the_streams_workspace_on_every_call(monkeypatch, tmp_path):
    """On a fake Hopper (tests/ops/matmul/test_fast.py's): a plans-table row naming
    stream_k makes the op pass the stream's workspace, flags then partials, on the general
    path and on every recorded repeat call (the scratch looked up per call)."""
    torch = pytest.importorskip("torch")
    import ctypes
    from runtime_fakes import fake_gpu_for_ops
    from ptxdsl.core.types import bf16_bits_to_f32
    from ptxdsl.ops import matmul
    from ptxdsl.ops.matmul import api
    from ptxdsl.ops.matmul.plan import fitted
    cu = fake_gpu_for_ops(monkeypatch, tmp_path)
    real_hk, seen = api.hopper_kernel, []

    def read(addr, rows, cols, stride):
        raw = np.ctypeslib.as_array((ctypes.c_uint16 * ((rows - 1) * stride + cols))
                                    .from_address(addr))
        full = np.lib.stride_tricks.as_strided(raw, (rows, cols), (stride * 2, 2))
        return bf16_bits_to_f32(np.array(full)).astype(np.float64)

    def run(*prm, grid, block):     # C = A @ Bt.T from the maps; the workspace noted
        maps = [x for x in prm if isinstance(x, bytes)]
        a_at, b_at, c_at = (int.from_bytes(mp[:8], "little") for mp in maps)
        # pointers A, B, flags, partials, C; dims M, K, N, the workspace's; strides
        seen.append((prm[2], prm[3], prm[8:10], grid))
        (m, k, n), (sa, sb, sc) = prm[5:8], prm[10:13]
        c = read(a_at, m, k, sa) @ read(b_at, n, k, sb).T
        out = torch.from_numpy(c.astype(np.float32)).to(torch.bfloat16).view(torch.int16)
        dst = np.ctypeslib.as_array((ctypes.c_int16 * ((m - 1) * sc + n)).from_address(c_at))
        for r in range(m):
            dst[r * sc:r * sc + n] = out[r].numpy()

    def hopper_kernel(*args, **kw):
        kern = real_hk(*args, **kw)
        cu.register(kern, run)
        return kern
    monkeypatch.setattr(api, "hopper_kernel", hopper_kernel)
    monkeypatch.setattr(api, "KERNELS", type(api.KERNELS)())
    monkeypatch.setattr(api, "choose", lambda m, n, k, dt, odt, sms, **_kw: fitted(
        Plan(bn=64, cluster=1, stream_k=True), dt, odt))
    monkeypatch.setattr(streamk, "WORKSPACE", streamk.Workspace())
    api.clear()
    try:
        g = torch.Generator().manual_seed(0)
        for _ in range(3):
            x = torch.randint(-4, 5, (3, 64), generator=g).to(torch.bfloat16)
            w = torch.randint(-4, 5, (40, 64), generator=g).to(torch.bfloat16)
            c = matmul(x, w.t())
            assert torch.equal(c.double(), x.double() @ w.double().t())
        assert len(api.MATMUL) == 1 and len(seen) == 3
        (buf, _, base), = streamk.WORKSPACE._buffers.values()
        assert buf.numel() == streamk.HEADER + streamk.workspace_elems(
            Plan(bn=64, cluster=1, stream_k=True), 1)     # one tile of one k-block: 1 CTA
        assert all((f, p, d, gr) == (base + streamk.FLAGS_AT, base + streamk.PARTIALS_AT,
                                     (streamk.FLAG_CAP, 2 * 64 * 64), (1, 1, 1))
                   for f, p, d, gr in seen)
    finally:
        api.clear()


@pytest.mark.long
@pytest.mark.ptxas
def test_lab_stream_k_set_assembles_clean():
    """``lab/matmul_trailing.py --check --set streamk``: ptxas -v of one stream-K candidate
    (:func:`matmul_lab.assemble_one_per_option`) shows no spills and no warnings."""
    import importlib.util
    import os
    if os.system("ptxas --version > /dev/null 2>&1"):
        pytest.skip("no ptxas")
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "lab",
                        "matmul_trailing.py")
    spec = importlib.util.spec_from_file_location("matmul_trailing", path)
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    opts = ("stream_k",)
    assert assemble_one_per_option(lab, list(lab.STREAM_K), lab.STREAM_K, opts) == set(opts)
