"""Kernels written in seed 003's style that the core was not built around: softmax, SwiGLU
(silu from ex2.approx + rcp.approx) and LayerNorm.

They use only the seed's API (kernel, reg, ptx, smem, Tile, f32/u32) and must trace,
validate and assemble unchanged for sm_80 and sm_90a. When the CPU interpreter is
available they are also checked against numpy, so a kernel that assembles but
computes nonsense (a wrong operand order, say) fails too.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ptxdsl import kernel, reg, ptx, smem, Tile
from ptxdsl import toolchain
from ptxdsl.core.types import f32, u32

WARP_SIZE = 32
LOG2E = 1.4426950408889634
needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas found")


def _block_reduce(val, partials, stats, lane, warp_id, tid, num_warps, op):
    """Seed step 5, for sum or max: warp butterfly, per-warp partials, thread 0 folds."""
    getattr(ptx.warp, f"reduce_{op}")(val)
    with ptx.if_(lane == 0):
        partials[warp_id, 0] = val
    ptx.bar.sync(0)
    with ptx.if_(tid == 0):
        acc = reg.scalar(f32)
        ptx.inst.mov.f32(acc, partials[0, 0])
        for i in range(1, num_warps):
            getattr(ptx.inst, "add" if op == "sum" else "max").f32(acc, acc, partials[i, 0])
        stats[0, 0] = acc
    ptx.bar.sync(0)
    ptx.inst.mov.f32(val, stats[0, 0])


# ---------------------------------------------------------------- softmax
def build_softmax(B, N, block=128, arch="sm_90a"):
    num_warps = block // WARP_SIZE
    items_per_thread = N // block
    v4_iters = items_per_thread // 4

    @kernel(in_specs=(Tile(B, N, f32),), out_specs=(Tile(B, N, f32),),
            grid=(B, 1, 1), block=(block, 1, 1), arch=arch)
    def softmax(X, Y):
        partials = smem.alloc(f32, (num_warps, 1))
        stats = smem.alloc(f32, (1, 1))
        px, py = ptx.global_ptrs(X, Y)
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        row = reg.scalar(u32); ptx.inst.mov.u32(row, ptx.special.ctaid.x())
        row_off = row * (N * 4)
        px += row_off
        py += row_off
        lane = tid & (WARP_SIZE - 1)
        warp_id = tid >> 5

        x = reg.array(f32, items_per_thread)
        elem_base = tid << 2
        for j in range(v4_iters):
            idx = elem_base if j == 0 else elem_base + (j * block * 4)
            ptx.inst.ld.global_.v4.f32([x[j*4 + k] for k in range(4)], ptx.addr(px + idx * 4))

        row_max = reg.scalar(f32, init=-math.inf)
        for i in range(items_per_thread):
            ptx.inst.max.f32(row_max, row_max, x[i])
        _block_reduce(row_max, partials, stats, lane, warp_id, tid, num_warps, "max")

        # e^(x - max) = 2^(x*log2e - max*log2e): one fma and one ex2 per element
        neg_max_l2e = reg.scalar(f32)
        ptx.inst.mul.f32(neg_max_l2e, row_max, -LOG2E)
        total = reg.scalar(f32, init=0.0)
        for i in range(items_per_thread):
            ptx.inst.fma.rn.f32(x[i], x[i], LOG2E, neg_max_l2e)
            ptx.inst.ex2.approx.ftz.f32(x[i], x[i])
            ptx.inst.add.f32(total, total, x[i])
        _block_reduce(total, partials, stats, lane, warp_id, tid, num_warps, "sum")

        inv = reg.scalar(f32)
        ptx.inst.rcp.approx.f32(inv, total)
        for j in range(v4_iters):
            idx = elem_base if j == 0 else elem_base + (j * block * 4)
            ys = []
            for k in range(4):
                y = reg.scalar(f32)
                ptx.inst.mul.f32(y, x[j*4 + k], inv)
                ys.append(y)
            ptx.inst.st.global_.v4.f32(ptx.addr(py + idx * 4), ys)
        ptx.ret()

    return softmax


# ---------------------------------------------------------------- SwiGLU
def build_swiglu(B, N, block=256, arch="sm_90a"):
    """out = silu(gate) * up, silu(g) = g / (1 + e^-g); each thread handles 4 elements."""
    per_cta = block * 4
    assert (B * N) % per_cta == 0

    @kernel(in_specs=(Tile(B, N, f32), Tile(B, N, f32)), out_specs=(Tile(B, N, f32),),
            grid=((B * N) // per_cta, 1, 1), block=(block, 1, 1), arch=arch)
    def swiglu(G, U, O):
        pg, pu, po = ptx.global_ptrs(G, U, O)
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        idx = reg.scalar(u32)
        ptx.inst.mad.lo.u32(idx, cta, block, tid)     # global thread index
        off = idx * 16                                 # 4 f32 per thread
        g = [reg.scalar(f32) for _ in range(4)]
        u = [reg.scalar(f32) for _ in range(4)]
        ptx.inst.ld.global_.nc.v4.f32(g, ptx.addr(pg + off))
        ptx.inst.ld.global_.nc.v4.f32(u, ptx.addr(pu + off))
        out = []
        for k in range(4):
            e = reg.scalar(f32)
            ptx.inst.mul.f32(e, g[k], -LOG2E)
            ptx.inst.ex2.approx.f32(e, e)              # e^-g
            ptx.inst.add.f32(e, e, 1.0)
            sig = reg.scalar(f32)
            ptx.inst.rcp.approx.f32(sig, e)            # sigmoid(g)
            y = reg.scalar(f32)
            ptx.inst.mul.f32(y, g[k], sig)
            ptx.inst.mul.f32(y, y, u[k])
            out.append(y)
        ptx.inst.st.global_.v4.f32(ptx.addr(po + off), out)

    return swiglu


# ---------------------------------------------------------------- LayerNorm
def build_layer_norm(B, N, block=128, eps=1e-5, arch="sm_90a"):
    num_warps = block // WARP_SIZE
    items_per_thread = N // block

    @kernel(in_specs=(Tile(B, N, f32), Tile(N, f32), Tile(N, f32)),
            out_specs=(Tile(B, N, f32),), grid=(B, 1, 1), block=(block, 1, 1), arch=arch)
    def layer_norm(X, W, Bias, Y):
        partials = smem.alloc(f32, (num_warps, 1))
        stats = smem.alloc(f32, (1, 1))
        px, pw, pb, py = ptx.global_ptrs(X, W, Bias, Y)
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        row = reg.scalar(u32); ptx.inst.mov.u32(row, ptx.special.ctaid.x())
        row_byte_off = row * (N * 4)
        px += row_byte_off
        py += row_byte_off
        lane = tid & (WARP_SIZE - 1)
        warp_id = tid >> 5

        # strided scalar loads: element tid + i*block (the seed's non-v4 path)
        x = reg.array(f32, items_per_thread)
        s = reg.scalar(f32, init=0.0)
        for i in range(items_per_thread):
            idx = reg.scalar(u32)
            ptx.inst.add.u32(idx, tid, i * block)
            ptx.inst.ld.global_.f32(x[i], ptx.addr(px + idx * 4))
            ptx.inst.add.f32(s, s, x[i])
        _block_reduce(s, partials, stats, lane, warp_id, tid, num_warps, "sum")
        mean = reg.scalar(f32)
        ptx.inst.mul.f32(mean, s, 1.0 / N)

        # two-pass variance: sum((x - mean)^2)
        var = reg.scalar(f32, init=0.0)
        for i in range(items_per_thread):
            ptx.inst.sub.f32(x[i], x[i], mean)
            ptx.inst.fma.rn.f32(var, x[i], x[i], var)
        ptx.bar.sync(0)  # everyone has read stats before it is reused
        _block_reduce(var, partials, stats, lane, warp_id, tid, num_warps, "sum")
        rstd = reg.scalar(f32)
        ptx.inst.fma.rn.f32(rstd, var, 1.0 / N, eps)
        ptx.inst.rsqrt.approx.f32(rstd, rstd)

        for i in range(items_per_thread):
            idx = reg.scalar(u32)
            ptx.inst.add.u32(idx, tid, i * block)
            off = idx * 4
            w = reg.scalar(f32); ptx.inst.ld.global_.f32(w, ptx.addr(pw + off))
            b = reg.scalar(f32); ptx.inst.ld.global_.f32(b, ptx.addr(pb + off))
            y = reg.scalar(f32)
            ptx.inst.mul.f32(y, x[i], rstd)
            ptx.inst.fma.rn.f32(y, y, w, b)
            ptx.inst.st.global_.f32(ptx.addr(py + off), y)
        ptx.ret()

    return layer_norm


KERNELS = {
    "softmax": (lambda arch: build_softmax(4, 1024, arch=arch),
                ["ld.global.v4.f32", "max.f32", "ex2.approx.ftz.f32", "rcp.approx.f32",
                 "shfl.sync.bfly.b32", "bar.sync", "st.global.v4.f32", "mul.wide.u32"]),
    "swiglu": (lambda arch: build_swiglu(8, 512, arch=arch),
               ["ld.global.nc.v4.f32", "ex2.approx.f32", "rcp.approx.f32", "mad.lo.u32",
                "mul.wide.u32", "st.global.v4.f32"]),
    "layer_norm": (lambda arch: build_layer_norm(4, 384, arch=arch),
                   ["ld.global.f32", "fma.rn.f32", "rsqrt.approx.f32", "shfl.sync.bfly.b32",
                    "bar.sync", "st.global.f32"]),
}


def _opcodes(text):
    return {re.sub(r"^@!?%\w+\s+", "", ln.strip()).split()[0].rstrip(";")
            for ln in text.splitlines() if ln.startswith("\t") and not ln.startswith("\t.")}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_traces_and_validates(name, arch):
    build, want = KERNELS[name]
    text = build(arch).ptx()
    missing = [w for w in want if w not in _opcodes(text)]
    assert not missing, f"{name}: {missing}"


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_assembles(name, arch):
    res = KERNELS[name][0](arch).check()
    r = next(iter(res.resources.values()))
    assert r.spill_stores == 0


# ---------------------------------------------------------------- numbers, on the CPU interpreter
def _interpret(k, *args):
    return k.interpret(*args)


def test_softmax_numbers():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 1024)).astype(np.float32) * 3
    out = _interpret(build_softmax(4, 1024), x)
    y = out[0] if isinstance(out, (list, tuple)) else out
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-7)


def test_swiglu_numbers():
    rng = np.random.default_rng(1)
    g, u = (rng.standard_normal((8, 512)).astype(np.float32) for _ in range(2))
    out = _interpret(build_swiglu(8, 512), g, u)
    y = out[0] if isinstance(out, (list, tuple)) else out
    np.testing.assert_allclose(y, g / (1 + np.exp(-g)) * u, rtol=2e-5, atol=1e-6)


def test_layer_norm_numbers():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 384)).astype(np.float32)
    w, b = rng.standard_normal(384).astype(np.float32), rng.standard_normal(384).astype(np.float32)
    out = _interpret(build_layer_norm(4, 384), x, w, b)
    y = out[0] if isinstance(out, (list, tuple)) else out
    mu = x.mean(axis=1, keepdims=True)
    ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
