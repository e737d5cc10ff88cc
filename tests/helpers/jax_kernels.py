"""Kernels the JAX tests call through ``ptxdsl.runtime.jax_ffi.jax_call`` (CPU and GPU)."""
from __future__ import annotations

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.types import b16, bf16, f32, u32


@kernel(in_specs=(Tile("N", f32), Tile("N", f32)), out_specs=(Tile("N", f32),),
        grid=lambda N: ((N + 127) // 128, 1, 1), block=(128, 1, 1))
def axpy2(x, y, out):
    """out = 2 * x + y."""
    px, py, po = ptx.global_ptrs(x, y, out)
    i = reg.from_(ptx.special.ctaid.x(), u32) * 128 + reg.from_(ptx.special.tid.x(), u32)
    with ptx.if_(i < x.shape[0]):
        a = reg.scalar(f32)
        b = reg.scalar(f32)
        ptx.ld(f32, a, ptx.addr(px + i * 4))
        ptx.ld(f32, b, ptx.addr(py + i * 4))
        ptx.st(f32, ptx.addr(po + i * 4), a * 2.0 + b)


@kernel(in_specs=(Tile("R", 64, bf16),), out_specs=(Tile("R", 64, f32), Tile("R", 64, bf16)),
        grid=lambda R: (R, 1, 1), block=(64, 1, 1))
def widen_and_copy(x, wide, same):
    """wide = float(x), same = x: a bf16 input and a bf16 output."""
    px, pw, ps = ptx.global_ptrs(x, wide, same)
    i = reg.from_(ptx.special.ctaid.x(), u32) * 64 + reg.from_(ptx.special.tid.x(), u32)
    h = reg.scalar(bf16)
    ptx.ld(b16, h, ptx.addr(px + i * 2))
    ptx.st(f32, ptx.addr(pw + i * 4), ptx.cvt(f32, h))
    ptx.st(b16, ptx.addr(ps + i * 2), h)
