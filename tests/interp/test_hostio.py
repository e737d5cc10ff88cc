"""ptxdsl.interp.hostio: torch tensors on the interpreter (skips without torch)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.errors import LaunchError
from ptxdsl.core.types import bf16, f32, u32

torch = pytest.importorskip("torch")


@kernel(in_specs=(Tile("B", 32, f32),), out_specs=(Tile("B", 32, f32),), block=(32, 1, 1),
        grid=lambda B: (B, 1, 1))
def twice(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    c = reg.scalar(u32)
    ptx.inst.mov.u32(c, ptx.special.ctaid.x())
    off = (c * 32 + t) * 4
    a = reg.scalar(f32)
    ptx.inst.ld.global_.f32(a, ptx.addr(px + off))
    ptx.inst.st.global_.f32(ptx.addr(py + off), a + a)


@kernel(in_specs=(Tile(32, bf16),), out_specs=(Tile(32, bf16),), block=(32, 1, 1))
def copy_bf16(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    h = reg.scalar(bf16)
    ptx.inst.ld.global_.b16(h, ptx.addr(px + t * 2))
    ptx.inst.st.global_.b16(ptx.addr(py + t * 2), h)


def test_torch_in_torch_out():
    x = torch.arange(64, dtype=torch.float32).reshape(2, 32)
    y = twice.interpret(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (2, 32)
    torch.testing.assert_close(y, 2 * x)


def test_kernel_call_with_torch_under_interpret(monkeypatch):
    monkeypatch.setenv("PTXDSL_INTERPRET", "1")
    x = torch.randn(3, 32)
    torch.testing.assert_close(twice(x), 2 * x)


def test_explicit_torch_output_is_written_in_place():
    x = torch.randn(2, 32)
    y = torch.full((2, 32), float("nan"))
    out = twice.interpret(x, y)
    assert out is y
    torch.testing.assert_close(y, 2 * x)


def test_explicit_non_contiguous_torch_output():
    x = torch.randn(2, 32)
    big = torch.zeros(32, 2)
    y = big.t()  # (2, 32), not contiguous
    twice.interpret(x, y)
    torch.testing.assert_close(big.t(), 2 * x)


def test_numpy_input_torch_output():
    x = np.ones((1, 32), np.float32)
    y = torch.zeros(1, 32)
    twice.interpret(x, y)
    assert torch.equal(y, torch.full((1, 32), 2.0))


def test_numpy_in_numpy_out():
    y = twice.interpret(np.ones((1, 32), np.float32))
    assert isinstance(y, np.ndarray)


def test_bf16_tensors_round_trip():
    x = torch.randn(32).to(torch.bfloat16)
    y = copy_bf16.interpret(x)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, x)
    z = torch.zeros(32, dtype=torch.bfloat16)
    copy_bf16.interpret(x, z)
    assert torch.equal(z, x)


def test_float64_tensor_gets_torch_advice():
    with pytest.raises(LaunchError) as info:
        twice.interpret(torch.zeros(1, 32, dtype=torch.float64))
    msg = str(info.value)
    assert ".to(torch.float32)" in msg and "astype" not in msg


def test_float64_array_gets_numpy_advice():
    with pytest.raises(LaunchError) as info:
        twice.interpret(np.zeros((1, 32)))
    msg = str(info.value)
    assert ".astype(np.float32)" in msg and "torch" not in msg


def test_requires_grad_tensor_is_read():
    x = torch.randn(1, 32, requires_grad=True)
    torch.testing.assert_close(twice.interpret(x), 2 * x.detach())
