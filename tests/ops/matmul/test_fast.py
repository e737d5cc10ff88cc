"""ops.matmul's repeated torch calls on a fake Hopper (no GPU): CPU torch tensors pose as
cuda:0 tensors (runtime_fakes.cpu_torch_as_cuda) and the fake driver "runs" the Hopper
kernel with numpy, reading A, B and C where the call's *tensor maps* point. So a fast
call (the memo's bound launch, runtime/memo.py) is right only if it re-pointed every map
at the new tensors: written into the parameter buffer directly where the driver keeps the
address as a plain u64, through cuTensorMapReplaceAddress otherwise."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from runtime_fakes import fake_gpu_for_ops  # noqa: E402

from ptxdsl.core.types import bf16_bits_to_f32  # noqa: E402


def _read(addr, rows, cols, stride):
    n = (rows - 1) * stride + cols
    raw = np.ctypeslib.as_array((ctypes.c_uint16 * n).from_address(addr))
    full = np.lib.stride_tricks.as_strided(raw, (rows, cols), (stride * 2, 2))
    return bf16_bits_to_f32(np.array(full)).astype(np.float64)


def _impl(a_major, b_major, with_bias):
    """The fake kernel: C = A @ B (+ bias) from the maps' addresses (bytes 0..7)."""
    def run(*p, grid, block):
        maps = [x for x in p if isinstance(x, bytes)]
        a_at, b_at, c_at = (int.from_bytes(m[:8], "little") for m in maps)
        n_ptr = 4 if with_bias else 3
        m, k, n, sa, sb, sc = p[n_ptr:n_ptr + 6]
        a = _read(a_at, m, k, sa) if a_major == "K" else _read(a_at, k, m, sa).T
        b = _read(b_at, n, k, sb).T if b_major == "K" else _read(b_at, k, n, sb)
        c = a @ b
        if with_bias:
            c = c + _read(p[2], 1, n, n)[0]
        out = torch.from_numpy(c.astype(np.float32)).to(torch.bfloat16).view(torch.int16)
        dst = np.ctypeslib.as_array((ctypes.c_int16 * ((m - 1) * sc + n)).from_address(c_at))
        for r in range(m):
            dst[r * sc:r * sc + n] = out[r].numpy()
    return run


@pytest.fixture
def fake_hopper(monkeypatch, tmp_path):
    cu = fake_gpu_for_ops(monkeypatch, tmp_path)
    from ptxdsl.ops.matmul import api
    real_hk = api.hopper_kernel

    def hopper_kernel(m, n, k, dt, odt, bdt, act, sms, a_major="K", b_major="K",
                      device="H100", bt=None, scaled=False, smem_scales=False):
        kern = real_hk(m, n, k, dt, odt, bdt, act, sms, a_major, b_major, device, bt, scaled,
                       smem_scales)
        cu.register(kern, _impl(a_major, b_major, bdt is not None))
        return kern
    monkeypatch.setattr(api, "hopper_kernel", hopper_kernel)
    monkeypatch.setattr(api, "KERNELS", type(api.KERNELS)())
    api.clear()
    yield cu
    api.clear()


def _plain_address_maps(cu, monkeypatch):
    """The fake encodes a serial number beside the address; a driver that keeps only the
    address (what the direct write needs) is the fake with those bytes zeroed."""
    real = cu.cuTensorMapEncodeTiled

    def encode(*args):
        r = real(*args)
        if not r[0]:
            ctypes.c_uint64.from_address(r[1].ptr + 8).value = 0
        return r
    monkeypatch.setattr(cu, "cuTensorMapEncodeTiled", encode)


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("layout", ["lin", "nn"])
def test_fast_calls_repoint_every_tensor_map(fake_hopper, monkeypatch, direct, layout):
    from ptxdsl.ops import matmul
    from ptxdsl.ops.matmul import api
    cu = fake_hopper
    if direct:
        _plain_address_maps(cu, monkeypatch)
    g = torch.Generator().manual_seed(0)

    def operands():
        x = torch.randint(-4, 5, (3, 64), generator=g).to(torch.bfloat16)
        w = torch.randint(-4, 5, (40, 64), generator=g).to(torch.bfloat16)
        return x, (w.t() if layout == "lin" else w.t().contiguous())
    x, b = operands()
    c = matmul(x, b)                          # general path: records the signature
    assert torch.equal(c.double(), x.double() @ b.double())
    assert len(api.MATMUL) == 1
    before = cu.calls.get("cuTensorMapReplaceAddress", 0)
    for _ in range(3):                        # new tensors, same signature: fast calls
        x, b = operands()
        c = matmul(x, b)
        assert torch.equal(c.double(), x.double() @ b.double())
    repoints = cu.calls.get("cuTensorMapReplaceAddress", 0) - before
    assert repoints == (0 if direct else 3 * 3)
    hot = api.MATMUL.hot                      # later calls: found by the guard, not the key
    x2, b2 = operands()
    c = hot(x2, b2, None, None, None, None, None)
    assert torch.equal(c.double(), x2.double() @ b2.double())
    # the same shape and strides at a pointer 2 bytes past 16: the guard passes, the
    # entry declines (the key, which holds the alignment, decides)
    xm = torch.randint(-4, 5, (3 * 64 + 1,), generator=g).to(torch.bfloat16)[1:].view(3, 64)
    assert xm.data_ptr() % 16 == 2 and hot(xm, b2, None, None, None, None, None) is None
    assert hot(x2.float(), b2, None, None, None, None, None) is None
    assert hot(x2[:2], b2, None, None, None, None, None) is None
    assert hot(x2, b2, None, None, None, None, "relu") is None
    (kern,) = api.KERNELS._kernels.values()
    tm = kern.runtime_cache.get("launcher").tmaps
    assert (tm.address_offset() == 0) == direct


def test_fast_call_with_bias_and_a_copied_bias_is_not_recorded(fake_hopper, monkeypatch):
    from ptxdsl.ops import matmul
    from ptxdsl.ops.matmul import api
    _plain_address_maps(fake_hopper, monkeypatch)
    x = torch.randint(-4, 5, (5, 64)).to(torch.bfloat16)
    w = torch.randint(-4, 5, (48, 64)).to(torch.bfloat16)
    for _ in range(3):
        bias = torch.randint(-4, 5, (48,)).to(torch.bfloat16)
        c = matmul(x, w.t(), bias=bias)
        assert torch.equal(c.double(), x.double() @ w.double().t() + bias.double())
    assert len(api.MATMUL) == 1
    strided = torch.randint(-4, 5, (96,)).to(torch.bfloat16)[::2]
    c = matmul(x, w.t(), bias=strided)
    assert torch.equal(c.double(), x.double() @ w.double().t() + strided.double())
    assert len(api.MATMUL) == 1                # copied: the general path each time
