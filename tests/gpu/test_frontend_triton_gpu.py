"""Imported Triton PTX launched by ptxdsl gives Triton's own results on the GPU.

Each kernel is compiled by Triton to PTX (``triton_kernels.compiled``, for the device's
compute capability), imported with ``ptxdsl.from_ptx`` and launched through ptxdsl's
runtime on fresh CUDA tensors; the same kernel launched by Triton itself on the same
inputs is the reference. The results agree bit for bit, except the row sum, whose
reduction Triton's own launch may order differently (within one ulp).
"""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU

pytestmark = NEEDS_GPU
torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

import ptxdsl  # noqa: E402
from triton_kernels import add, atomic_sum, compiled, matmul, row_sum, softmax  # noqa: E402


def _cc() -> int:
    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


def _import(fn, signature, constexprs, cc=None):
    text, smem, threads = compiled(fn, signature, constexprs, cc=cc or _cc())
    k = ptxdsl.from_ptx(text)
    return k, smem, threads, [None] * (len(k.params) - len(signature) + len(constexprs))


def test_elementwise():
    k, smem, threads, extra = _import(add, {"x_ptr": "*fp32", "y_ptr": "*fp32",
                                            "out_ptr": "*fp32", "n": "i32",
                                            "BLOCK": "constexpr"}, {"BLOCK": 256})
    n = 100_003
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    ours, ref = torch.empty_like(x), torch.empty_like(x)
    k(x, y, ours, n, *extra, grid=-(-n // 256), block=threads, shared=smem)
    add[(-(-n // 256),)](x, y, ref, n, BLOCK=256)
    torch.cuda.synchronize()
    assert torch.equal(ours, ref)


def test_reduction_through_shared_memory():
    k, smem, threads, extra = _import(row_sum, {"x_ptr": "*fp32", "out_ptr": "*fp32",
                                                "N": "constexpr"}, {"N": 256})
    x = torch.rand(1000, 256, device="cuda")
    ours, ref = torch.empty(1000, device="cuda"), torch.empty(1000, device="cuda")
    k(x, ours, *extra, grid=1000, block=threads, shared=smem)
    row_sum[(1000,)](x, ref, N=256)
    torch.cuda.synchronize()
    # Triton's own launch compiles for its own options: its sum may order the additions
    # differently (last-bit differences seen on an H200 with Triton 3.6)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=0)
    torch.testing.assert_close(ours, x.sum(1), rtol=1e-5, atol=0)


def test_atomic_add_with_scope():
    k, smem, threads, extra = _import(atomic_sum, {"x_ptr": "*fp32", "out_ptr": "*fp32",
                                                   "n": "i32", "BLOCK": "constexpr"},
                                      {"BLOCK": 128})
    x = torch.arange(30_000, device="cuda", dtype=torch.float32) % 7
    ours, ref = torch.zeros(1, device="cuda"), torch.zeros(1, device="cuda")
    k(x, ours, x.numel(), *extra, grid=-(-x.numel() // 128), block=threads, shared=smem)
    atomic_sum[(-(-x.numel() // 128),)](x, ref, x.numel(), BLOCK=128)
    torch.cuda.synchronize()
    assert ours.item() == ref.item() == float(x.sum().item())   # small integers: exact


@pytest.mark.parametrize("cc", [80, None])   # mma.sync; the device's own (wgmma on sm_90)
def test_dot_product_loop(cc):
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32",
           "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
    k, smem, threads, extra = _import(matmul, sig, {"BM": 64, "BN": 64, "BK": 32}, cc=cc)
    M, N, K = 256, 512, 1024
    a = torch.randint(-4, 5, (M, K), device="cuda").half()
    b = torch.randint(-4, 5, (K, N), device="cuda").half()
    ours = torch.empty(M, N, device="cuda")
    k(a, b, ours, M, N, K, *extra, grid=(M // 64, N // 64), block=threads, shared=smem)
    torch.cuda.synchronize()
    assert torch.equal(ours, a.float() @ b.float())   # small integers: exact in f32


def test_online_softmax():
    k, smem, threads, extra = _import(softmax, {"x_ptr": "*fp32", "out_ptr": "*fp32",
                                                "N": "i32", "BLOCK": "constexpr"},
                                      {"BLOCK": 128})
    x = torch.randn(300, 1000, device="cuda")
    ours, ref = torch.empty_like(x), torch.empty_like(x)
    k(x, ours, 1000, *extra, grid=300, block=threads, shared=smem)
    softmax[(300,)](x, ref, 1000, BLOCK=128)
    torch.cuda.synchronize()
    torch.testing.assert_close(ours, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    assert torch.equal(ours, ref)
