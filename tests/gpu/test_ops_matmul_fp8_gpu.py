"""ptxdsl.ops.matmul with float8 operands on a real GPU (H100/H200).

Integer-valued inputs in [-4, 4] (exact in e4m3 and e5m2) with f32 output: bit-exact
against a float64 product times the scales. Random normal inputs: bf16 output within
bf16 rounding of the float64 product of the 8-bit values, and against
``torch._scaled_mm`` (cuBLAS) on the same operands. Ragged shapes; the Hopper kernel
(K-major operands, 8-bit wgmma) and the SIMT kernel (K not a multiple of 16); every
layout (K-major copies); repeated calls with new operands and scales (the fast path).
Run: ``python -m pytest tests/gpu/test_ops_matmul_fp8_gpu.py``.
"""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU, torch_cuda

pytestmark = NEEDS_GPU
torch = torch_cuda()
if not hasattr(torch, "float8_e4m3fn"):  # pragma: no cover
    pytest.skip("torch has no float8", allow_module_level=True)

from ptxdsl.ops import matmul  # noqa: E402

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
# (M, N, K): squares, one tile, one tile row (split-K), ragged M and N, K past a stage
SHAPES = [(4096, 4096, 4096), (128, 256, 128), (16, 4096, 4096), (379, 1000, 144),
          (1, 256, 128), (7, 72, 16), (65, 520, 272), (257, 264, 4112), (2048, 6144, 4096)]


def ints(*shape, dtype=E4M3):
    return torch.randint(-4, 5, shape, device="cuda").float().to(dtype)


def scales(a, b):
    return (torch.tensor([a], device="cuda"), torch.tensor([b], device="cuda"))


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("bt", [E4M3, E5M2])
def test_integer_inputs_bit_exact(m, n, k, bt):
    a, w = ints(m, k), ints(n, k, dtype=bt)
    sa, sb = scales(0.5, 0.25)
    out = torch.full((m, n), float("nan"), device="cuda")
    matmul(a, w.t(), out=out, out_dtype=torch.float32, scale_a=sa, scale_b=sb)
    assert torch.equal(out.double(), a.double() @ w.double().t() / 8)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_random_normal_against_float64_and_cublas(m, n, k):
    a = torch.randn(m, k, device="cuda").to(E4M3)
    w = torch.randn(n, k, device="cuda").to(E4M3)
    sa, sb = scales(0.75, 1.5)
    c = matmul(a, w.t(), scale_a=sa, scale_b=sb)
    assert c.dtype == torch.bfloat16 and bool(torch.isfinite(c).all())
    ref = a.double() @ w.double().t() * 1.125
    assert ((c.double() - ref).norm() / ref.norm()).item() < 4e-3
    if k % 16 == 0 and n % 16 == 0:
        cb = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        assert ((c.double() - cb.double()).norm() / ref.norm()).item() < 6e-3


@pytest.mark.parametrize("a_col,b_col", [(False, False), (True, False), (True, True)])
def test_other_layouts_are_copied_to_k_major(a_col, b_col):
    m, n, k = 200, 136, 272
    a, b = ints(m, k), ints(k, n)
    aa = a.t().contiguous().t() if a_col else a          # column-major: MN-major
    bb = b.t().contiguous().t() if b_col else b          # column-major: K-major
    c = matmul(aa, bb, out_dtype=torch.float32, scale_a=2.0)
    assert torch.equal(c.double(), a.double() @ b.double() * 2)


def test_bias_activation_and_odd_k_simt():
    m, n, k = 33, 70, 45                     # K * 1 byte: not TMA's, the SIMT kernel
    a, w = ints(m, k), ints(n, k, dtype=E5M2)
    bias = torch.randn(n, device="cuda")
    c = matmul(a, w.t(), bias=bias, activation="relu", out_dtype=torch.float32,
               scale_b=torch.tensor([0.5], device="cuda"))
    want = torch.relu(a.double() @ w.double().t() * 0.5 + bias.double())
    assert torch.allclose(c.double(), want, rtol=1e-6, atol=1e-6)


def test_repeated_calls_with_new_operands_and_scales():
    from ptxdsl.ops.matmul import api
    api.clear()
    m, n, k = 256, 512, 512
    for i in range(4):
        a, w = ints(m, k), ints(n, k)
        sa, sb = scales(0.5 * (i + 1), 0.25)
        c = matmul(a, w.t(), out_dtype=torch.float32, scale_a=sa, scale_b=sb)
        assert torch.equal(c.double(), a.double() @ w.double().t() * (0.125 * (i + 1)))
    assert len(api.MATMUL) == 1                                 # a scaled entry was recorded
    assert api.MATMUL.lookup(a, w.t(), None, sa, sb, torch.float32, None) is not None


@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu"])
def test_hopper_scale_then_bias_then_activation(act):
    """The Hopper epilogue's order: act(scale_a * scale_b * acc + bias)."""
    from ptxdsl.ops.matmul.epilogue import reference as act_ref

    class TorchNp:
        tanh, exp = torch.tanh, torch.exp
        maximum = staticmethod(lambda x, y: torch.clamp(x, min=y))
    m, n, k = 256, 384, 256
    a, w = ints(m, k), ints(n, k)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    c = matmul(a, w.t(), bias=bias, activation=act, out_dtype=torch.float32, scale_a=0.5,
               scale_b=torch.tensor([0.25], device="cuda"))
    ref = act_ref(a.double() @ w.double().t() / 8 + bias.double(), act, TorchNp)
    assert ((c.double() - ref).norm() / ref.norm()).item() < 2e-3


def test_batched_and_mixed_formats():
    """3-D operands (a batch of A with one shared B) and an e5m2 x e4m3 mix on the Hopper
    kernel, bit-exact."""
    a = ints(3, 130, 272, dtype=E5M2)
    w = ints(264, 272)
    c = matmul(a, w.t(), out_dtype=torch.float32, scale_b=torch.tensor([2.0], device="cuda"))
    assert c.shape == (3, 130, 264)
    assert torch.equal(c.double(), a.double() @ w.double().t() * 2)
