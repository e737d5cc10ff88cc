"""ptxdsl.custom_op: a user's @kernel as a torch.library custom op (CPU: the interpreter)."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from ptxdsl import PtxdslError, Tile, custom_op, kernel, ptx, reg
from ptxdsl.core.types import f32, u32

torch = pytest.importorskip("torch")


@kernel(in_specs=(Tile("B", 32, f32), Tile(32, f32)),
        out_specs=(Tile("B", 32, f32), Tile("B", 32, f32)),
        grid=lambda B: (B, 1, 1), block=(32, 1, 1))
def scale_shift(X, W, Y, Z):
    px, pw, py, pz = ptx.global_ptrs(X, W, Y, Z)
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    c = reg.scalar(u32)
    ptx.inst.mov.u32(c, ptx.special.ctaid.x())
    off = (c * 32 + t) * 4
    x = reg.scalar(f32)
    ptx.inst.ld.global_.f32(x, ptx.addr(px + off))
    w = reg.scalar(f32)
    ptx.inst.ld.global_.f32(w, ptx.addr(pw + t * 4))
    ptx.inst.st.global_.f32(ptx.addr(py + off), x * w)
    ptx.inst.st.global_.f32(ptx.addr(pz + off), x + w)


def fresh(name):
    return f"ptxdsl_test_{uuid.uuid4().hex[:8]}::{name}"


@pytest.fixture(scope="module")
def op():
    return custom_op(scale_shift, fresh("scale_shift"))


def test_op_runs_on_cpu_tensors(op):
    x, w = torch.randn(3, 32), torch.randn(32)
    y, z = op(x, w)
    torch.testing.assert_close(y, x * w)
    torch.testing.assert_close(z, x + w)


def test_compile_fullgraph_keeps_the_op(op):
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if "scale_shift" in str(n.target))
        return gm

    f = torch.compile(lambda x, w: op(x, w)[0] * 2, fullgraph=True, backend=backend)
    x, w = torch.randn(2, 32), torch.randn(32)
    torch.testing.assert_close(f(x, w), 2 * x * w)
    assert len(seen) == 1


def test_opcheck(op):
    torch.library.opcheck(op, (torch.randn(2, 32), torch.randn(32)))


def test_fake_binds_named_dims_symbolically(op):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        y, z = op(torch.empty(7, 32), torch.empty(32))
    assert y.shape == (7, 32) and z.dtype == torch.float32


def test_an_output_dim_no_input_has_is_refused():
    @kernel(in_specs=(Tile(4, f32),), out_specs=(Tile("B", 4, f32),))
    def k(X, Y):
        pass
    with pytest.raises(PtxdslError, match="appear in no input"):
        custom_op(k, fresh("k"))


def test_name_must_be_qualified():
    with pytest.raises(PtxdslError, match="mylib::"):
        custom_op(scale_shift, "plain")


def test_kernel_itself_still_takes_numpy(op):
    y, z = scale_shift.interpret(np.ones((1, 32), np.float32), np.full(32, 2, np.float32))
    assert (y == 2).all() and (z == 3).all()
