"""pyptx's Ampere GEMM examples trace and assemble on ptxdsl with only their imports renamed.

The examples are read at test time from the pyptx mirror (or an installed pyptx, see
``bench/pyptx_examples.py``), never copied here; without them those tests skip with the
reason. A small kernel of our own, written in the same API style (``ptx.mma.sync``,
``ptx.ldmatrix``, ``ptx.cp.async_``, ``smem.base()``, ``kernel(smem=, extern_smem=)``),
runs on the interpreter against numpy so the surface is exercised without the mirror.
The GPU half (results and speed beside pyptx) is tests/gpu/test_pyptx_compat_gpu.py.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from paths import ROOT
sys.path.insert(0, os.path.join(ROOT, "bench"))

import pyptx_examples  # noqa: E402
from ptxdsl import Tile, kernel, ptx, reg, smem, toolchain  # noqa: E402
from ptxdsl.core.types import b32, bf16, f32, u32  # noqa: E402

PTXAS = toolchain.find_ptxas()
AMPERE = [("gemm", "build_gemm", (64, 32, 64)),
          ("gemm_pipelined", "build_gemm_pipelined", (128, 128, 128)),
          ("gemm_highperf_ampere", "build_gemm_highperf", (256, 256, 128))]


def _load(name):
    try:
        return pyptx_examples.load(name, "ampere")
    except pyptx_examples.Unavailable as e:
        pytest.skip(str(e))


def _builder(mod, preferred):
    if hasattr(mod, preferred):
        return getattr(mod, preferred)
    names = [n for n in dir(mod) if n.startswith("build_")]
    assert names, f"{mod.__name__} has no build_* function"
    return getattr(mod, names[0])


@pytest.mark.parametrize("name,build,shape", AMPERE, ids=[a[0] for a in AMPERE])
def test_ampere_example_traces_and_assembles(name, build, shape):
    mod = _load(name)
    k = _builder(mod, build)(*shape)
    text = k.ptx()
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in text
    if PTXAS is None:
        pytest.skip("no ptxas")
    k.check()          # ptxas assembles it (resources, no spills required)


@pytest.mark.parametrize("name,build,shape", AMPERE[:2], ids=[a[0] for a in AMPERE[:2]])
def test_ampere_example_runs_on_the_interpreter(name, build, shape):
    mod = _load(name)
    k = _builder(mod, build)(*shape)
    m, n, kk = shape
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, kk)).astype(np.float32)
    bt = rng.standard_normal((n, kk)).astype(np.float32)
    a16 = (a.view(np.uint32) >> 16).astype(np.uint16)
    b16 = (bt.view(np.uint32) >> 16).astype(np.uint16)
    d = k.interpret(a16, b16)
    d = d[0] if isinstance(d, (tuple, list)) else d
    ref = ((a16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
           @ (b16.astype(np.uint32) << 16).view(np.float32).astype(np.float64).T)
    assert np.allclose(d, ref, rtol=1e-4, atol=1e-3)


# ---------------------------------------------------------------- our own kernel, same style
def build_style_gemm(M: int, N: int, K: int):
    """One warp per 16x16 tile of D = A @ B_T^T: cp.async into dynamic shared memory,
    ldmatrix, mma.sync, pyptx's spelling throughout (a test of the API surface)."""
    smem_bytes = 2 * 16 * K * 2

    @kernel(in_specs=(Tile(M, K, bf16), Tile(N, K, bf16)), out_specs=(Tile(M, N, f32),),
            grid=(N // 16, M // 16, 1), block=(32, 1, 1), arch="sm_80", smem=smem_bytes,
            extern_smem=True)
    def style_gemm(A, B_T, D):
        pa, pb, pd = ptx.global_ptrs(A, B_T, D)
        base = smem.base()
        lane = reg.scalar(u32)
        ptx.inst.mov.u32(lane, ptx.special.tid.x())
        m0 = reg.scalar(u32)
        ptx.inst.mov.u32(m0, ptx.special.ctaid.y())
        n0 = reg.scalar(u32)
        ptx.inst.mov.u32(n0, ptx.special.ctaid.x())
        # 16 rows x K of A then of B_T into shared memory, 16 bytes per cp.async
        chunks = 16 * K // 8
        for c in range(0, chunks, 32):
            idx = lane + c
            row, col = idx // (K // 8), idx % (K // 8)
            off = (row * K + col * 8) * 2
            ptx.cp.async_.cg(ptx.addr(base + off), ptx.addr(pa + ((m0 * 16) * K * 2 + off)), 16)
            ptx.cp.async_.cg(ptx.addr(base + (off + 16 * K * 2)),
                             ptx.addr(pb + ((n0 * 16) * K * 2 + off)), 16)
        ptx.cp.async_.commit_group()
        ptx.cp.async_.wait_group(0)
        ptx.bar.sync(0)
        acc = [[reg.scalar(f32, init=0.0) for _ in range(4)] for _ in range(2)]
        a_fr = reg.array(b32, 4)
        b_fr = reg.array(b32, 4)
        r = lane & 15
        half = lane >> 4
        for k0 in range(0, K, 16):
            ptx.ldmatrix(dst=list(a_fr), src=ptx.addr(base + (r * K + k0 + half * 8) * 2),
                         layout="m8n8.x4")
            ptx.ldmatrix(dst=list(b_fr), src=ptx.addr(base + (16 * K + r * K + k0
                                                             + half * 8) * 2),
                         layout="m8n8.x4")
            for j in range(2):   # two n8 halves: B rows 8j..8j+7 are b_fr[j], b_fr[j + 2]
                ptx.mma.sync(shape=(16, 8, 16), dtype_d=f32, dtype_a=bf16, dtype_b=bf16,
                             dtype_c=f32, d=acc[j], a=list(a_fr), b=[b_fr[j], b_fr[j + 2]],
                             c=acc[j], a_layout="row", b_layout="col")
        gid, tig = lane >> 2, lane & 3
        for j in range(2):
            for i, (dr, dc) in enumerate([(0, 0), (0, 1), (8, 0), (8, 1)]):
                row = m0 * 16 + gid + dr
                col = n0 * 16 + j * 8 + tig * 2 + dc
                ptx.inst.st.global_.f32(ptx.addr(pd + (row * N + col) * 4), acc[j][i])
        ptx.ret()

    return style_gemm


def test_pyptx_style_kernel_on_the_interpreter():
    M, N, K = 32, 32, 64
    k = build_style_gemm(M, N, K)
    text = k.ptx()
    for want in ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "cp.async.cg.shared.global",
                 "cp.async.commit_group", "cp.async.wait_group 0", ".extern .shared",
                 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"):
        assert want in text, want
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((M, K)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b = (rng.standard_normal((N, K)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    d = k.interpret(a, b)
    d = d[0] if isinstance(d, (tuple, list)) else d
    f = lambda x: (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)  # noqa: E731
    assert np.allclose(d, f(a) @ f(b).T, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(PTXAS is None, reason="no ptxas")
def test_pyptx_style_kernel_assembles():
    build_style_gemm(64, 64, 64).check()


def test_ptxdsl_spelling_from_fragments():
    """ptx.mma(d, a, b) reads shape, types and layouts from Fragments."""
    from ptxdsl.dsl.tensorcore import fragment

    @kernel(grid=(1, 1, 1), block=(32, 1, 1), arch="sm_80")
    def own():
        a = fragment("a", "m16n8k16", "bf16", init=0)
        b = fragment("b", "m16n8k16", "bf16", init=0)
        acc = fragment("c", "m16n8k16", "f32", init=0.0)
        ptx.mma(acc, a, b)

    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in own.ptx()
