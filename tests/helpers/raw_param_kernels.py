"""A kernel with raw parameters that name no dim (a scalar of each kind and an array), for
the launcher's tests on the fake GPU (tests/runtime/test_raw_params_launch.py) and the
real one (tests/gpu/test_raw_params_gpu.py)."""
from __future__ import annotations

import numpy as np

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.types import b64, f32, s32, u32
from runtime_fakes import f32_array


def make_affine(name="affine", tag=True):
    """y[i] = x[i] * scale + shift + pair[0] - pair[1] (pair: two s32 in an 8-byte array;
    ``tag``: an unused u64 parameter after them)."""
    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), block=(32, 1, 1),
            name=name, raw_params=[("u32", "N"), ("f32", "scale"), ("s32", "shift"),
                                   ("b8.align8.array8", "pair")] + [("u64", "tag")] * tag)
    def affine(X, Y):
        n = ptx.param(u32, "N")
        scale = ptx.param(f32, "scale")
        shift = ptx.param(s32, "shift")
        pa = ptx.param(b64, "pair")
        p0, p1 = reg.scalar(s32), reg.scalar(s32)
        ptx.inst.ld.param.s32(p0, ptx.addr(pa))
        ptx.inst.ld.param.s32(p1, ptx.addr(pa, 4))
        px, py = ptx.global_ptrs(X, Y)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid < n):
            off = reg.scalar(b64)
            ptx.inst.mul.wide.u32(off, tid, 4)
            x, y, f = reg.scalar(f32), reg.scalar(f32), reg.scalar(f32)
            ptx.inst.ld.global_.f32(x, ptx.addr(px + off))
            total = reg.scalar(s32)
            ptx.inst.add.s32(total, shift, p0)
            ptx.inst.sub.s32(total, total, p1)
            ptx.inst.cvt.rn.f32.s32(f, total)
            ptx.inst.fma.rn.f32(y, x, scale, f)
            ptx.inst.st.global_.f32(ptx.addr(py + off), y)
    return affine


def affine_impl(px, py, n, scale, shift, pair, tag, *, grid, block):
    """What the kernel does, for the fake GPU (shift arrives as its u32 bits)."""
    shift = shift - (1 << 32) if shift >> 31 else shift
    p0, p1 = np.frombuffer(pair, np.int32)
    f32_array(py, n)[:] = f32_array(px, n) * np.float32(scale) + np.float32(shift + p0 - p1)


def make_add_from_pointer(name="add_from_pointer"):
    """y[i] = x[i] + b[i], ``b`` a raw pointer (``bias``, .u64) given by keyword: GPU
    only (the interpreter's memory has no address a caller could pass)."""
    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), block=(128, 1, 1),
            grid=lambda N: ((N + 127) // 128, 1, 1), name=name,
            raw_params=[("u32", "N"), ("u64", "bias")])
    def add_from_pointer(X, Y):
        n = ptx.param(u32, "N")
        pb = reg.scalar(b64)
        ptx.inst.cvta.to.global_.u64(pb, ptx.param(b64, "bias"))
        px, py = ptx.global_ptrs(X, Y)
        i = reg.scalar(u32, init=ptx.special.ctaid.x())
        t = reg.scalar(u32, init=ptx.special.tid.x())
        ptx.inst.mad.lo.u32(i, i, 128, t)
        with ptx.if_(i < n):
            off = reg.scalar(b64)
            ptx.inst.mul.wide.u32(off, i, 4)
            x, b, y = reg.scalar(f32), reg.scalar(f32), reg.scalar(f32)
            ptx.inst.ld.global_.f32(x, ptx.addr(px + off))
            ptx.inst.ld.global_.f32(b, ptx.addr(pb + off))
            ptx.inst.add.f32(y, x, b)
            ptx.inst.st.global_.f32(ptx.addr(py + off), y)
    return add_from_pointer
