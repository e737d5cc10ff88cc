"""The Hopper GEMM's epilogue (ptxdsl/ops/matmul/store.py) on the interpreter: one consumer
warpgroup stores a known 64 x bn accumulator through the swizzled staging panels and TMA,
with stmatrix.x4 (16-bit outputs) or st.shared, bias and activation; ragged edges clip."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the kernels run on it: a broken one fails here)
from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.ops.matmul.epilogue import reference
from ptxdsl.ops.matmul.layout import Layout
from ptxdsl.ops.matmul.plan import Plan
from ptxdsl.ops.matmul.store import store_tile
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import bf16, bf16_bits_to_f32, f16, f32, u8, u32

def value(row, col):
    """The accumulator's test pattern: small integers, exact in every output type."""
    return ((row * 7 + col * 3) % 61) - 30


def build_store(p: Plan, odt, bias=None, act=None):
    """Grid (N / bn, M / 64): CTA (x, y) fills its accumulator registers with
    ``value(64 y + row, bn x + col)`` and stores them with :func:`store_tile`."""
    L = Layout(p, bf16, odt)
    c = Tile("M", "N", odt, stride="sc", tma=TMA(box=(p.wg_m, 128 // odt.bytes), swizzle=128))
    ins = (Tile("N", bias),) if bias is not None else ()

    @kernel(in_specs=ins, out_specs=(c,), arg_names=(("bias",) if bias else ()) + ("C",),
            grid=lambda M, N: (-(-N // p.bn), -(-M // 64), 1), block=(128, 1, 1),
            arch="sm_90a")
    def store(*args):
        C = args[-1]
        pbias = ptx.global_ptrs(args[0])[0] if bias is not None else None
        tma_c = C.tma_desc()
        n = ptx.dim("N")
        lane = reg.scalar(u32); ptx.inst.mov.u32(lane, ptx.special.tid.x())
        cx = reg.scalar(u32); ptx.inst.mov.u32(cx, ptx.special.ctaid.x())
        cy = reg.scalar(u32); ptx.inst.mov.u32(cy, ptx.special.ctaid.y())
        base = smem.alloc(u8, (L.c_consumer,), align=1024, dynamic=True).base
        warp, lw = lane >> 5, lane & 31
        frow = warp * 16 + (lw >> 2)
        fcol = (lw & 3) * 2
        row0, n0 = cy * 64, cx * p.bn
        acc = reg.array(f32, p.bn // 2)
        for i in range(p.bn // 2):
            r = row0 + frow + 8 * ((i // 2) % 2)
            col = n0 + fcol + (i % 2 + 8 * (i // 4))
            v = (r * 7 + col * 3) % 61
            f = reg.scalar(f32)
            ptx.inst.cvt.rn.f32.u32(f, v)
            ptx.inst.sub.f32(acc[i], f, 30.0)
        store_tile(acc, p, L, odt, odt.bytes, bias, act, base, lane, frow, fcol, 1, row0, n0,
                   n, tma_c, pbias)
        with ptx.if_(lane == 0):
            ptx.inst("cp.async.bulk.wait_group", 0)
    return store


def _out(c, odt):
    return bf16_bits_to_f32(c).astype(np.float64) if odt == bf16 else c.astype(np.float64)


@pytest.mark.parametrize("odt,bn,stmatrix,m,n", [
    (bf16, 128, True, 64, 128), (bf16, 256, True, 100, 200), (f16, 128, True, 70, 136),
    (bf16, 128, False, 64, 128), (f32, 128, True, 72, 100)])
def test_epilogue_stores_the_accumulator(odt, bn, stmatrix, m, n):
    p = Plan(bn=bn, cluster=1, split=1 if stmatrix else 2)   # split-K stages with st.shared
    kern = build_store(p, odt)
    text = kern.ptx()
    assert ("stmatrix.sync.aligned.m8n8.x4.shared.b16" in text) == (stmatrix and odt != f32)
    npdt = {bf16: np.uint16, f16: np.float16, f32: np.float32}[odt]
    init = np.full((m, n), 0x7FC0, np.uint16) if odt == bf16 else np.full((m, n), np.nan, npdt)
    c = kern.interpret(init)
    rows, cols = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    np.testing.assert_array_equal(_out(c, odt), value(rows, cols))


def test_epilogue_bias_and_activation_with_stmatrix():
    p = Plan(bn=128, cluster=1)
    m, n = 64, 136
    kern = build_store(p, bf16, bias=f32, act="relu")
    bias = (np.arange(n) % 9 - 4).astype(np.float32)
    c = kern.interpret(bias, np.zeros((m, n), np.uint16))
    rows, cols = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    want = reference(value(rows, cols) + bias.astype(np.float64), "relu", np)
    np.testing.assert_array_equal(_out(c, bf16), want)


def test_stmatrix_stages_16_bit_outputs_unless_k_is_split():
    assert Plan().stmatrix and not Plan(cluster=1, split=2).stmatrix
