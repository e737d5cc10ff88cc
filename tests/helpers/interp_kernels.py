"""Softmax, SwiGLU and LayerNorm written the way the seed writes RMSNorm (one CTA per
row, warp butterflies, per-warp partials in shared memory, ``bar.sync``), shared by the
interpreter tests (tests/interp/test_kernels.py) and the GPU differential tests
(tests/gpu/test_interp_vs_gpu.py)."""
from __future__ import annotations

import functools

import numpy as np

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.types import f32, u32

LOG2E = 1.4426950408889634


def block_reduce(value, partials, lane, warp_id, num_warps, op, warp_op):
    """Every thread gets op over the CTA: warp butterfly, partials, one barrier."""
    warp_op(value)
    with ptx.if_(lane == 0):
        partials[warp_id] = value
    ptx.bar.sync(0)
    total = partials[0]
    for i in range(1, num_warps):
        op(total, total, partials[i])
    ptx.bar.sync(0)  # partials are reused by the next reduction
    return total


def row_setup(block):
    tid = reg.scalar(u32)
    ptx.inst.mov.u32(tid, ptx.special.tid.x())
    row = reg.scalar(u32)
    ptx.inst.mov.u32(row, ptx.special.ctaid.x())
    return tid, row, tid & 31, tid >> 5


@functools.lru_cache(maxsize=None)
def build_softmax(N, block=128):
    items = N // block
    nw = block // 32

    @kernel(in_specs=(Tile("B", N, f32),), out_specs=(Tile("B", N, f32),),
            grid=lambda B: (B, 1, 1), block=(block, 1, 1))
    def softmax(X, Y):
        partials = smem.alloc(f32, (nw,))
        px, py = ptx.global_ptrs(X, Y)
        tid, row, lane, warp_id = row_setup(block)
        off = row * (N * 4)
        px += off
        py += off
        x = reg.array(f32, items)
        for i in range(items):
            ptx.inst.ld.global_.f32(x[i], ptx.addr(px + tid * 4, i * block * 4))
        m = reg.scalar(f32, init=-np.inf)
        for i in range(items):
            ptx.inst.max.f32(m, m, x[i])
        m = block_reduce(m, partials, lane, warp_id, nw, ptx.inst.max.f32, ptx.warp.reduce_max)
        s = reg.scalar(f32, init=0.0)
        for i in range(items):
            ptx.inst.sub.f32(x[i], x[i], m)
            ptx.inst.mul.f32(x[i], x[i], LOG2E)
            ptx.inst.ex2.approx.f32(x[i], x[i])
            ptx.inst.add.f32(s, s, x[i])
        s = block_reduce(s, partials, lane, warp_id, nw, ptx.inst.add.f32, ptx.warp.reduce_sum)
        for i in range(items):
            y = reg.scalar(f32)
            ptx.inst.div.rn.f32(y, x[i], s)
            ptx.inst.st.global_.f32(ptx.addr(py + tid * 4, i * block * 4), y)
    return softmax


@functools.lru_cache(maxsize=None)
def build_swiglu(N, block=32):
    """Y = silu(A) * G with a run-time column loop whose trip count differs per thread."""
    @kernel(in_specs=(Tile("B", N, f32), Tile("B", N, f32)), out_specs=(Tile("B", N, f32),),
            grid=lambda B: (B, 1, 1), block=(block, 1, 1))
    def swiglu(A, G, Y):
        pa, pg, py = ptx.global_ptrs(A, G, Y)
        tid, row, _, _ = row_setup(block)
        base = row * N
        for j in ptx.range_(tid, N, block):
            idx = base + j
            a, g = reg.scalar(f32), reg.scalar(f32)
            ptx.inst.ld.global_.f32(a, ptx.addr(pa + idx * 4))
            ptx.inst.ld.global_.f32(g, ptx.addr(pg + idx * 4))
            e = reg.scalar(f32)
            ptx.inst.mul.f32(e, a, -LOG2E)
            ptx.inst.ex2.approx.f32(e, e)             # exp(-a)
            ptx.inst.add.f32(e, e, 1.0)
            y = reg.scalar(f32)
            ptx.inst.div.rn.f32(y, a, e)              # silu(a)
            ptx.inst.mul.f32(y, y, g)
            ptx.inst.st.global_.f32(ptx.addr(py + idx * 4), y)
    return swiglu


@functools.lru_cache(maxsize=None)
def build_layer_norm(N, block=128, eps=1e-5):
    items = N // block
    nw = block // 32

    @kernel(in_specs=(Tile("B", N, f32), Tile(N, f32), Tile(N, f32)),
            out_specs=(Tile("B", N, f32),), grid=lambda B: (B, 1, 1), block=(block, 1, 1))
    def layer_norm(X, W, Bias, Y):
        partials = smem.alloc(f32, (nw,))
        px, pw, pb, py = ptx.global_ptrs(X, W, Bias, Y)
        tid, row, lane, warp_id = row_setup(block)
        off = row * (N * 4)
        px += off
        py += off
        x = reg.array(f32, items)
        s = reg.scalar(f32, init=0.0)
        for i in range(items):
            ptx.inst.ld.global_.f32(x[i], ptx.addr(px + tid * 4, i * block * 4))
            ptx.inst.add.f32(s, s, x[i])
        s = block_reduce(s, partials, lane, warp_id, nw, ptx.inst.add.f32, ptx.warp.reduce_sum)
        mean = reg.scalar(f32)
        ptx.inst.mul.f32(mean, s, 1.0 / N)
        v = reg.scalar(f32, init=0.0)
        for i in range(items):
            ptx.inst.sub.f32(x[i], x[i], mean)
            ptx.inst.fma.rn.f32(v, x[i], x[i], v)
        v = block_reduce(v, partials, lane, warp_id, nw, ptx.inst.add.f32, ptx.warp.reduce_sum)
        ptx.inst.mul.f32(v, v, 1.0 / N)
        ptx.inst.add.f32(v, v, eps)
        rstd = reg.scalar(f32)
        ptx.inst.rsqrt.approx.f32(rstd, v)
        for i in range(items):
            w, b = reg.scalar(f32), reg.scalar(f32)
            ptx.inst.ld.global_.f32(w, ptx.addr(pw + tid * 4, i * block * 4))
            ptx.inst.ld.global_.f32(b, ptx.addr(pb + tid * 4, i * block * 4))
            y = reg.scalar(f32)
            ptx.inst.mul.f32(y, x[i], rstd)
            ptx.inst.fma.rn.f32(y, y, w, b)
            ptx.inst.st.global_.f32(ptx.addr(py + tid * 4, i * block * 4), y)
    return layer_norm
