"""ptxdsl.ops.matmul with float8 operands (e4m3 / e5m2, per-tensor scales), on the CPU.

The Hopper kernel itself on the interpreter (m64nNk32 wgmma of 8-bit operands, 128-element
K stages, a cluster of 2 with multicast, split-K), the SIMT kernel through the public
call (numpy and torch CPU tensors), the dispatch that hands the Hopper kernel K-major
operands (copying the others once), the fast path of repeated torch calls (fake driver),
and the errors. Integer-valued inputs in [-4, 4] are exact in e4m3 and e5m2 and their
products and sums exact in f32, so every result is compared bit for bit.
"""
from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest

import ml_dtypes  # noqa: E402
from paths import ROOT  # noqa: E402
from ptxdsl.core.errors import LaunchError  # noqa: E402
from ptxdsl.ops import matmul  # noqa: E402
from ptxdsl.ops.matmul.hopper import build_hopper  # noqa: E402
from ptxdsl.ops.matmul.plan import bk_for, choose, one_row  # noqa: E402
from ptxdsl.core.types import bf16, e4m3, e5m2, f32  # noqa: E402

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
NP8 = {e4m3: E4M3, e5m2: E5M2}


def ints(rng, shape):
    return rng.integers(-4, 5, shape).astype(np.float32)


# ---------------------------------------------------------------- the Hopper kernel
@pytest.mark.parametrize("m,n,k,at,bt,cluster,split", [
    (128, 256, 128, e4m3, e4m3, 1, 1),     # one tile, one stage: four m64n256k32 steps
    # ragged M/N/K, a mix, a cluster of 2, the ring
    pytest.param(130, 200, 272, e4m3, e5m2, 2, 1, marks=pytest.mark.long),
    # split-K over a cluster (one tile row), ranks of 2 and 1 k-blocks
    pytest.param(16, 120, 272, e5m2, e5m2, 1, 2, marks=pytest.mark.long),
])
def test_interpreter_runs_the_fp8_hopper_kernel(m, n, k, at, bt, cluster, split):
    """The shipped kernel with 8-bit operands on the CPU: scale_a * scale_b applied in
    the epilogue, bit-exact f32 output."""
    if split > 1:
        p = one_row(m, n, k, at, f32, sms=2 * split, split=split)
    else:
        p = dataclasses.replace(choose(m, n, k, at, f32, sms=2), cluster=cluster)
    assert p.bk == 128 and p.split == split
    kern = build_hopper(p, at, f32, sms=2 * split, b_dtype=bt, scaled=True)
    text = kern.ptx()
    assert f"k32.f32.{at.name}.{bt.name}" in text
    rng = np.random.default_rng(m + n + k)
    a, w = ints(rng, (m, k)), ints(rng, (n, k))
    sa, sb = np.array([0.5], np.float32), np.array([0.25], np.float32)
    c = kern.interpret(a.astype(NP8[at]), w.astype(NP8[bt]), sa, sb,
                       np.full((m, n), np.nan, np.float32))
    np.testing.assert_array_equal(c, (a.astype(np.float64) @ w.astype(np.float64).T) / 8)


def test_fp8_plans_take_128_elements_of_k():
    assert bk_for(e4m3) == 128 and bk_for(bf16) == 64
    p = choose(1024, 6144, 4096, e4m3, bf16)
    assert p.bk == 128 and p.stage_bytes(e4m3) == dataclasses.replace(p, bk=64).stage_bytes(bf16)


def test_fp8_hopper_kernel_refuses_mn_major_operands():
    p = choose(256, 256, 256, e4m3, bf16)
    with pytest.raises(ValueError, match="K-major"):
        build_hopper(p, e4m3, bf16, b_major="MN")
    with pytest.raises(ValueError, match="one size"):
        build_hopper(p, e4m3, bf16, b_dtype=bf16)


# ---------------------------------------------------------------- the public call
# each layout once, each B type once (e5m2 with both majors of b)
@pytest.mark.parametrize("a_t,b_t,bt", [(False, True, E4M3), (False, False, E5M2),
                                        (True, True, E5M2)])
def test_numpy_fp8_matmul_on_the_interpreter(a_t, b_t, bt):
    rng = np.random.default_rng(3)
    m, n, k = 9, 21, 35
    a = ints(rng, (k, m)).T if a_t else ints(rng, (m, k))
    b = ints(rng, (n, k)).T if b_t else ints(rng, (k, n))
    bias = rng.standard_normal(n).astype(np.float32)
    c = matmul(a.astype(E4M3), b.astype(bt), out_dtype=np.float32, bias=bias,
               activation="relu", scale_a=0.5, scale_b=np.array([4.0], np.float32))
    np.testing.assert_allclose(c, np.maximum((a.astype(np.float64) @ b) * 2 + bias, 0),
                               rtol=1e-6, atol=1e-6)


def test_fp8_defaults_bf16_output_and_unit_scales():
    rng = np.random.default_rng(4)
    a, b = ints(rng, (5, 16)), ints(rng, (16, 7))
    c = matmul(a.astype(E4M3), b.astype(E4M3))
    assert c.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(c.astype(np.float64), a.astype(np.float64) @ b)


def test_fp8_batched_and_random_normal_within_output_rounding():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 6, 40)).astype(E4M3)
    b = rng.standard_normal((40, 10)).astype(E5M2)
    c = matmul(a, b, out_dtype=np.float32, scale_a=np.array([0.125], np.float32))
    ref = np.einsum("bmk,kn->bmn", a.astype(np.float64), b.astype(np.float64)) * 0.125
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


def test_torch_cpu_fp8_tensors():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8")
    rng = np.random.default_rng(6)
    a, b = ints(rng, (7, 48)), ints(rng, (48, 20))
    ta = torch.from_numpy(a).to(torch.float8_e4m3fn)
    tb = torch.from_numpy(np.ascontiguousarray(b.T)).to(torch.float8_e5m2).t()
    c = matmul(ta, tb, scale_a=torch.tensor([2.0]), scale_b=torch.tensor([0.5]),
               out_dtype=torch.float32)
    assert c.dtype == torch.float32
    assert torch.equal(c.double(), torch.from_numpy(a.astype(np.float64) @ b))
    with pytest.raises(LaunchError, match="not differentiable") as e:
        matmul(ta, tb.float().requires_grad_().to(torch.float8_e5m2))
    assert "test_fp8.py" in str(e.value)


@pytest.mark.parametrize("call,match", [
    (lambda a, b: matmul(a, b.astype(np.float16)), "both be float8"),
    (lambda a, b: matmul(a.astype(np.float16), b.astype(np.float16), scale_a=2.0),
     "float16 operands take none"),
    (lambda a, b: matmul(a, b, scale_a=np.ones(2, np.float32)), "one-element float32"),
    (lambda a, b: matmul(a, b, scale_b=np.ones(1, np.float64)), "one-element float32"),
    (lambda a, b: matmul(a, b, scale_a="2"), "scale_a must be a number"),
    (lambda a, b: matmul(a, b, scale_b=float("inf")), "finite"),
    (lambda a, b: matmul(a, b, out_dtype=E4M3), "out_dtype must be"),
    (lambda a, b: matmul(a, b, bias=np.zeros(6, np.float64)), "float16, bfloat16 or float32"),
])
def test_fp8_errors_name_the_callers_line(call, match):
    a, b = np.ones((4, 5), E4M3), np.ones((5, 6), E4M3)
    with pytest.raises(LaunchError, match=match) as e:
        call(a, b)
    assert "test_fp8.py" in str(e.value)


# ---------------------------------------------------------------- dispatch on sm_90
class _FakeHopper:
    """Stands in for the Hopper kernel: computes on the host, records what it was given."""

    name = "fake_hopper"

    def __init__(self):
        self.calls = []

    def interpret(self, *args):
        ka, kb, *rest, out = args
        sa, sb = rest[-2:]
        self.calls.append((ka, kb))
        a = ka.astype(np.float64)                 # (M, K), K-major
        b = kb.astype(np.float64).T               # given as (N, K)
        out[...] = (a @ b) * float(sa[0]) * float(sb[0])
        return out


@pytest.mark.parametrize("a_t,b_t", [(False, True), (False, False), (True, True), (True, False)])
def test_sm90_dispatch_gives_the_fp8_hopper_kernel_k_major_operands(monkeypatch, a_t, b_t):
    """On an sm_90 device an 8-bit product runs the Hopper kernel with A (M, K) and B as
    (N, K), both row-major: in place where the call's operands are so, else a copy."""
    from runtime_fakes import fake_sm90_dispatch
    fake = _FakeHopper()
    seen = []

    def hopper_kernel(m, n, k, dt, odt, bdt, act, sms, a_major, b_major, device, bt=None,
                      scaled=False, smem_scales=False):
        seen.append((a_major, b_major, dt, bt, scaled))
        return fake
    fake_sm90_dispatch(monkeypatch, hopper_kernel)
    rng = np.random.default_rng(9)
    m, n, k = 24, 40, 32
    a = (ints(rng, (k, m)).T if a_t else ints(rng, (m, k))).astype(E4M3)
    b = (ints(rng, (n, k)).T if b_t else ints(rng, (k, n))).astype(E5M2)
    c = matmul(a, b, out_dtype=np.float32, scale_b=0.5)
    np.testing.assert_array_equal(c, (a.astype(np.float64) @ b.astype(np.float64)) / 2)
    assert seen == [("K", "K", e4m3, e5m2, "tensor")]
    (ka, kb), = fake.calls
    assert ka.strides == (k, 1) and kb.strides == (k, 1)       # (M, K) and (N, K)
    assert np.shares_memory(ka, a) == (not a_t)                 # copied only if MN-major
    assert np.shares_memory(kb, b) == b_t


# ---------------------------------------------------------------- fast path (fake driver)
def test_fp8_fast_calls_take_each_calls_scales(monkeypatch, tmp_path):
    """Repeated torch calls with new operands and new scale tensors launch through the
    memo's entry with the new pointers; a None scale takes the recorded 1.0; a
    Python-number scale is never recorded."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8")
    from runtime_fakes import fake_gpu_for_ops
    cu = fake_gpu_for_ops(monkeypatch, tmp_path)
    from ptxdsl.ops.matmul import api
    real_hk = api.hopper_kernel

    def read8(addr, rows, cols, dt):
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * (rows * cols)).from_address(addr))
        return raw.copy().view(dt).reshape(rows, cols).astype(np.float64)

    def impl(*p, grid, block):
        maps = [x for x in p if isinstance(x, bytes)]
        a_at, b_at, c_at = (int.from_bytes(mp[:8], "little") for mp in maps)
        sa = ctypes.c_float.from_address(p[2]).value
        sb = ctypes.c_float.from_address(p[3]).value
        m, k, n = p[5:8]
        c = read8(a_at, m, k, E4M3) @ read8(b_at, n, k, E4M3).T * sa * sb
        dst = np.ctypeslib.as_array((ctypes.c_float * (m * n)).from_address(c_at))
        dst[:] = c.astype(np.float32).ravel()

    def hopper_kernel(*args, **kw):
        kern = real_hk(*args, **kw)
        cu.register(kern, impl)
        return kern
    monkeypatch.setattr(api, "hopper_kernel", hopper_kernel)
    monkeypatch.setattr(api, "KERNELS", type(api.KERNELS)())
    api.clear()
    try:
        g = torch.Generator().manual_seed(0)

        def operands():
            x = torch.randint(-4, 5, (3, 64), generator=g).float().to(torch.float8_e4m3fn)
            w = torch.randint(-4, 5, (40, 64), generator=g).float().to(torch.float8_e4m3fn)
            return x, w.t()

        def want(x, b, s):
            return x.double() @ b.double() * s
        for i in range(4):                      # the first records, the rest are fast
            x, b = operands()
            sa, sb = torch.tensor([0.5 * (i + 1)]), torch.tensor([2.0])
            c = matmul(x, b, out_dtype=torch.float32, scale_a=sa, scale_b=sb)
            assert torch.equal(c.double(), want(x, b, float(sa) * 2.0))
        assert len(api.MATMUL) == 1
        c = matmul(x, b, out_dtype=torch.float32, scale_b=torch.tensor([3.0]))
        assert torch.equal(c.double(), want(x, b, 3.0))      # scale_a None: 1.0
        c = matmul(x, b, out_dtype=torch.float32, scale_b=torch.tensor([5.0]))
        assert torch.equal(c.double(), want(x, b, 5.0)) and len(api.MATMUL) == 2
        for s in (1.5, 2.5):                    # numbers: the general path every time
            c = matmul(x, b, out_dtype=torch.float32, scale_a=s)
            assert torch.equal(c.double(), want(x, b, s))
        assert len(api.MATMUL) == 2
    finally:
        api.clear()
