"""``ptx.tma.reduce``: a shared box added into a tensor by TMA (``cp.reduce.async.bulk.
tensor``), on the interpreter: two CTAs add their boxes into one row."""
from __future__ import annotations

import numpy as np

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import f32, u32


def _build():
    @kernel(in_specs=(Tile("C", 64, f32),),
            out_specs=(Tile("R", 64, f32, tma=TMA(box=(1, 64))),),
            grid=lambda C: (C, 1, 1), block=(64, 1, 1), arch="sm_90a")
    def add_rows(x, y):
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        stage = smem.alloc(f32, (64,), align=128)
        v = reg.scalar(f32)
        ptx.inst("ld.global.f32", v, ptx.addr(ptx.global_ptr(x) + (cta * 64 + tid) * 4))
        ptx.inst("st.shared.f32", stage.addr(tid), v)
        ptx.inst("fence.proxy.async.shared::cta")
        ptx.inst("bar.sync", 0)
        with ptx.if_(tid == 0):
            ptx.tma.reduce(y.tma_desc(), [0, 0], stage)
            ptx.tma.commit()
            ptx.tma.wait(0)
    return add_rows


def test_two_ctas_add_their_boxes():
    k = _build()
    assert "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group" in k.ptx()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    y0 = rng.standard_normal((1, 64)).astype(np.float32)
    y = k.interpret(x, y0.copy())
    np.testing.assert_allclose(y, y0 + x[0] + x[1], rtol=1e-6)
