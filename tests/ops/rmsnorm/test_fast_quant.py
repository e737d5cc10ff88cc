"""``rms_norm_quant``'s repeated torch calls on a fake GPU (no GPU needed).

CPU torch tensors pose as cuda:0 tensors (``runtime_fakes.cpu_torch_as_cuda``) and the
fake driver runs each launched kernel on the CPU interpreter, over numpy views of the
memory its pointer parameters point at. So a repeat call (the memo's guarded entry of
the last signature, or a signature's entry by key) gives the right bytes only if it
passed every pointer in its place: x, (the residual), the weight, (the static scale), y,
(h), (the scales). Each fast call is checked against the kernel interpreted directly on
the same numpy data, with new tensors (new pointers) every call.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "float8_e4m3fn"):  # pragma: no cover
    pytest.skip("torch without float8_e4m3fn", allow_module_level=True)

from runtime_fakes import fake_gpu_for_ops  # noqa: E402

EPS = 1e-6
M, N = 3, 64


def _view(addr: int, shape, stride_elems: int, np_dtype) -> np.ndarray:
    """A numpy view of a (rows, n) array (or a vector) at a fake-device address."""
    item = np.dtype(np_dtype).itemsize
    if len(shape) == 1:
        nbytes = shape[0] * item
        strides = (item,)
    else:
        nbytes = ((shape[0] - 1) * stride_elems + shape[1]) * item
        strides = (stride_elems * item, item)
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(addr))
    return np.lib.stride_tricks.as_strided(raw.view(np_dtype), shape, strides)


def _impl(k, residual: bool, dynamic: bool):
    """Run kernel ``k`` (f32 rows of N) on the interpreter, on the memory its parameters
    point at: X, [R], W, [S], Y, [H], [SCALE], M, sx, [sr]."""
    def run(*p, grid, block):
        nptr = 3 + 2 * residual + 1
        ptrs, rest = list(p[:nptr]), p[nptr:]
        m, sx = rest[0], rest[1]
        sr = rest[2] if residual else None
        it = iter(ptrs)
        args = [_view(next(it), (m, N), sx, np.float32)]
        if residual:
            args.append(_view(next(it), (m, N), sr, np.float32))
        args.append(_view(next(it), (N,), 1, np.float32))
        if not dynamic:
            args.append(_view(next(it), (1,), 1, np.float32))
        args.append(_view(next(it), (m, N), N, np.uint8))
        if residual:
            args.append(_view(next(it), (m, N), sr, np.float32))
        if dynamic:
            args.append(_view(next(it), (m,), 1, np.float32))
        k.interpret(*args)
    return run


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    cu = fake_gpu_for_ops(monkeypatch, tmp_path)
    from ptxdsl.ops.rmsnorm import plan, quant_api
    real_qk = quant_api.quant_kernel
    # Fresh kernels: a cached one keeps its launcher, bound to an earlier test's driver.
    monkeypatch.setattr(plan, "KERNELS", type(plan.KERNELS)())
    built = []

    def quant_kernel(n, dt, wdt, vec, residual, dynamic, eps, offset, arch):
        k = real_qk(n, dt, wdt, vec, residual, dynamic, eps, offset, arch)
        cu.register(k, _impl(k, residual, dynamic))
        built.append((k, residual, dynamic))
        return k
    monkeypatch.setattr(quant_api, "quant_kernel", quant_kernel)
    quant_api.clear()
    yield cu, built
    quant_api.clear()


def _expect(k, dynamic, x, w, scale=None, r=None):
    """Kernel ``k`` interpreted directly on numpy copies: (bytes, scales)."""
    y = np.zeros((M, N), np.uint8)
    sc = np.zeros(M, np.float32)
    rr = None if r is None else r.numpy().copy()
    args = [x.numpy().copy()] + ([rr] if r is not None else []) + [w.numpy().copy()]
    args += [] if dynamic else [np.array([scale], np.float32)]
    args += [y] + ([rr] if r is not None else []) + ([sc] if dynamic else [])
    k.interpret(*args)
    return y, sc


def _new(g):
    return torch.randn(M, N, generator=g), torch.randn(N, generator=g)


@pytest.mark.parametrize("form", ["dynamic", "float", "tensor"])
def test_the_guarded_launch_passes_every_pointer(fake_gpu, monkeypatch, form):
    from ptxdsl.ops import rms_norm_quant
    from ptxdsl.ops.rmsnorm import quant_api
    cu, built = fake_gpu
    g = torch.Generator().manual_seed(1)
    dynamic = form == "dynamic"
    scales = [0.004, 0.01, 0.02, 0.03]
    x, w = _new(g)

    def given(i):
        if form == "float":
            return 0.01
        if form == "tensor":
            return torch.tensor([scales[i]])
        return None
    y, s = rms_norm_quant(x, w, EPS, scale=given(0))     # the general path records it
    (k, _, _), = built
    hot = quant_api.QUANT.hot
    # From here on every call must be served by the guarded entry.
    monkeypatch.setattr(quant_api, "_general", None)
    monkeypatch.setattr(type(quant_api.QUANT), "lookup", None)  # no key lookups
    launches = len(cu.launches)
    for i in range(1, 4):
        x, w = _new(g)
        sc_in = given(i)
        y, s = rms_norm_quant(x, w, EPS, scale=sc_in)
        sv = None if dynamic else float(sc_in) if form == "float" else scales[i]
        want_y, want_s = _expect(k, dynamic, x, w, sv)
        assert y.dtype == torch.float8_e4m3fn and y.shape == (M, N)
        np.testing.assert_array_equal(y.view(torch.uint8).numpy(), want_y)
        if dynamic:
            assert s.shape == (M, 1)
            np.testing.assert_array_equal(s.numpy()[:, 0], want_s)
        else:
            assert s is sc_in
    assert len(cu.launches) == launches + 3 and quant_api.QUANT.hot is hot
    # another form of scale (or another static number): another entry
    assert hot(x, w, None, None, EPS, 0.0, 0.5) is None
    if form != "tensor":
        assert hot(x, w, None, torch.tensor([0.5]), EPS, 0.0, None) is None


def test_recorded_closures_with_a_residual_and_on_alignment_changes(fake_gpu, monkeypatch):
    from ptxdsl.ops import rms_norm_quant
    from ptxdsl.ops.rmsnorm import quant_api
    _, built = fake_gpu
    g = torch.Generator().manual_seed(2)
    for dynamic in (True, False):
        for i in range(3):
            x, w = _new(g)
            r = torch.randn(M, N, generator=g)
            r0, h = r.clone(), x + r
            y, s = rms_norm_quant(x, w, EPS, residual=r, scale=None if dynamic else 0.02)
            assert torch.equal(r, h)                      # written back in place
            k = [k for k, res, dyn in built if res and dyn == dynamic][-1]
            want_y, want_s = _expect(k, dynamic, x, w, None if dynamic else 0.02, r0)
            np.testing.assert_array_equal(y.view(torch.uint8).numpy(), want_y)
            if dynamic:
                np.testing.assert_array_equal(s.numpy()[:, 0], want_s)
    assert len(quant_api.QUANT) == 2 and len(built) == 2   # one general call per form
    # A misaligned x (4 bytes past a 16-byte boundary) is another signature: the guarded
    # entry declines it, and its own kernel (narrower accesses) runs.
    x, w = _new(g)
    rms_norm_quant(x, w, EPS)
    big = torch.randn(M * N + 1, generator=g)
    xs = big[1:].view(M, N)
    assert xs.data_ptr() % 16 == 4
    y, s = rms_norm_quant(xs, w, EPS)
    k = built[-1][0]
    want_y, want_s = _expect(k, True, xs, w)
    np.testing.assert_array_equal(y.view(torch.uint8).numpy(), want_y)
    np.testing.assert_array_equal(s.numpy()[:, 0], want_s)
    assert len(built) == 4 and len(quant_api.QUANT) == 4
