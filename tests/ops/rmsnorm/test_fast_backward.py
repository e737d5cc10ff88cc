"""``rms_norm_backward``'s repeated torch calls on a fake GPU (no GPU needed).

CPU torch tensors pose as cuda:0 tensors (``runtime_fakes.cpu_torch_as_cuda``) and the
fake driver runs the launched (cooperative, fused) backward kernel on the CPU
interpreter, over numpy views of the memory its pointers point at. So a fast call (the
memo's guarded entry of the last signature, or the signature's entry by key) gives the
right dx and dw only if it passed every pointer in its place, the stream's scratch
included. Every call has new tensors (new pointers) and is checked against float64.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from runtime_fakes import fake_gpu_for_ops  # noqa: E402

EPS = 1e-6
M, N = 3, 64


def _view(addr: int, shape, stride_elems: int, np_dtype) -> np.ndarray:
    item = np.dtype(np_dtype).itemsize
    if len(shape) == 1:
        nbytes, strides = shape[0] * item, (item,)
    else:
        nbytes = ((shape[0] - 1) * stride_elems + shape[1]) * item
        strides = (stride_elems * item, item)
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(addr))
    return np.lib.stride_tricks.as_strided(raw.view(np_dtype), shape, strides)


def _impl(k, grid_rows):
    """Kernel ``k`` (fused, f32 rows of N) on the interpreter over the memory its
    parameters point at: DY, X, W, RSTD, WS, DX, DW, DWP, M, sdy, sx."""
    def run(*p, grid, block):
        dy, x, w, rs, ws, dx, dw, dwp, m, sdy, sx = p
        k.interpret(_view(dy, (m, N), sdy, np.float32), _view(x, (m, N), sx, np.float32),
                    _view(w, (N,), 1, np.float32), _view(rs, (m,), 1, np.float32),
                    _view(ws, (2,), 1, np.uint32), _view(dx, (m, N), N, np.float32),
                    _view(dw, (N,), 1, np.float32), _view(dwp, (grid_rows, N), N, np.float32))
    return run


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    cu = fake_gpu_for_ops(monkeypatch, tmp_path)
    from ptxdsl.ops._common.workspace import WORKSPACE
    from ptxdsl.ops.rmsnorm import api, plan
    real_bk = api.backward_kernel
    monkeypatch.setattr(plan, "KERNELS", type(plan.KERNELS)())
    built = []

    def backward_kernel(*args, **kw):
        p, k = real_bk(*args, **kw)
        assert p.fused
        cu.register(k, _impl(k, p.grid))
        built.append(k)
        return p, k
    monkeypatch.setattr(api, "backward_kernel", backward_kernel)
    api.clear()
    WORKSPACE.release()
    yield built
    api.clear()
    WORKSPACE.release()


def _want(dy, x, w, offset=0.0):
    x64, dy64, w64 = x.double(), dy.double(), w.double() + offset
    rstd = torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + EPS)
    g = dy64 * w64
    dx = rstd * (g - x64 * rstd ** 2 * (g * x64).mean(-1, keepdim=True))
    return dx, (dy64 * x64 * rstd).sum(0)


@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_repeated_backward_calls_take_the_guard_then_the_key(fake_gpu, offset):
    from ptxdsl.ops import rms_norm_backward
    from ptxdsl.ops.rmsnorm import api
    g = torch.Generator().manual_seed(1)

    def call():
        x, dy, w = torch.randn(M, N, generator=g), torch.randn(M, N, generator=g), \
            torch.randn(N, generator=g)
        rstd = torch.rsqrt((x.double() ** 2).mean(-1) + EPS).float()
        dx, dw = rms_norm_backward(dy, x, w, rstd, offset=offset)
        want_dx, want_dw = _want(dy, x, w, offset)
        assert torch.allclose(dx.double(), want_dx, rtol=1e-5, atol=1e-5)
        assert torch.allclose(dw.double(), want_dw, rtol=1e-5, atol=1e-5)
        return dy, x, w, rstd
    dy, x, w, rstd = call()                     # the general path records the entry
    assert len(api.BACKWARD) == 1
    hot = api.BACKWARD.hot
    assert hot(dy, x, w, rstd, offset) is not None
    assert hot(dy[:2], x[:2], w, rstd[:2], offset) is None      # another signature
    assert hot(dy, x, w, rstd, offset + 0.5) is None            # another offset
    for _ in range(3):                          # new tensors: the guarded entry
        call()
    assert len(api.BACKWARD) == 1 and len(fake_gpu) == 1 and api.BACKWARD.hot is hot
    # a pointer 4 bytes past 16: the guard passes, the entry declines, the key decides
    xs = torch.randn(M * N + 1, generator=g)[1:].view(M, N)
    assert xs.data_ptr() % 16 == 4
    assert hot(dy, xs, w, rstd, offset) is None


def test_other_row_counts_alternate_through_their_own_entries(fake_gpu):
    """Fewer rows, fewer CTAs (a kernel per power of two): calls alternating between row
    counts each find their own signature. Grids this small sum dW in one cluster (or
    one CTA), so their recorded calls pass no workspace (null WS and DWP pointers)."""
    from ptxdsl.ops import rms_norm_backward
    from ptxdsl.ops.rmsnorm import api
    g = torch.Generator().manual_seed(2)
    global M
    saved = M
    try:
        for m in (1, 3, 2, 1, 3):
            M = m
            x, dy, w = torch.randn(m, N, generator=g), torch.randn(m, N, generator=g), \
                torch.randn(N, generator=g)
            rstd = torch.rsqrt((x.double() ** 2).mean(-1) + EPS).float()
            dx, dw = rms_norm_backward(dy, x, w, rstd)
            want_dx, want_dw = _want(dy, x, w)
            assert torch.allclose(dx.double(), want_dx, rtol=1e-5, atol=1e-5)
            assert torch.allclose(dw.double(), want_dw, rtol=1e-5, atol=1e-5)
    finally:
        M = saved
    assert len(api.BACKWARD) == 3
    from ptxdsl.runtime import driver
    launches = driver.get().cu.launches
    assert [(r["grid"][0], r["cluster"]) for r in launches] == [
        (1, None), (4, (4, 1, 1)), (2, (2, 1, 1)), (1, None), (4, (4, 1, 1))]
    assert launches[0]["params"][4] and launches[0]["params"][7]   # the general path's
    assert all(r["params"][4] == r["params"][7] == 0 for r in launches[3:])  # recorded
