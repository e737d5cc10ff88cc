"""ptxdsl.ops.matmul on a real GPU (H100/H200) against float64 products.

Integer-valued inputs in [-4, 4] with f32 output: bit-exact. Random normal inputs: bf16
output within one bf16 rounding of the float64 product (relative Frobenius error under
4e-3). Ragged shapes in M, N and K; the Hopper kernel (each operand K-major or MN-major,
read in place) and the SIMT fallback (odd strides); bias and activations; torch autograd.
Run: ``PYTHONPATH=. python -m pytest tests/gpu/test_ops_matmul_gpu.py``.
"""
from __future__ import annotations

import pytest

import ptxdsl

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not ptxdsl.gpu_available(), reason="no usable CUDA GPU")]

torch = pytest.importorskip("torch")
if ptxdsl.gpu_available() and not torch.cuda.is_available():  # pragma: no cover
    pytest.skip("torch has no CUDA", allow_module_level=True)

from ptxdsl.ops import matmul  # noqa: E402
from ptxdsl.ops.matmul.epilogue import reference as act_ref  # noqa: E402

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
# (M, N, K): squares, one tile, one tile row (no cluster), ragged in each of M, N, K
SHAPES = [(4096, 4096, 4096), (128, 256, 64), (128, 4096, 512), (379, 1000, 72),
          (1, 256, 64), (7, 72, 8), (65, 520, 136), (257, 264, 4104), (2048, 6144, 4096)]


def ints(*shape, dtype=torch.bfloat16):
    return torch.randint(-4, 5, shape, device="cuda").to(dtype)


def poison(m, n, dtype):
    return torch.full((m, n), float("nan"), device="cuda", dtype=dtype)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_integer_inputs_bit_exact(m, n, k):
    a, w = ints(m, k), ints(n, k)
    out = poison(m, n, torch.float32)
    matmul(a, w.t(), out=out, out_dtype=torch.float32)
    assert torch.equal(out.double(), a.double() @ w.double().t())


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_random_normal_within_output_rounding(m, n, k, dtype):
    a = torch.randn(m, k, device="cuda").to(dtype)
    w = torch.randn(n, k, device="cuda").to(dtype)
    c = matmul(a, w.t())
    ref = a.double() @ w.double().t()
    assert c.dtype == dtype and bool(torch.isfinite(c).all())
    err = ((c.double() - ref).norm() / ref.norm()).item()
    assert err < 4e-3


@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("odt", [torch.bfloat16, torch.float32])
def test_bias_and_activation(act, odt):
    m, n, k = 300, 520, 200
    a, w = torch.randn(m, k, device="cuda").to(torch.bfloat16), \
        torch.randn(n, k, device="cuda").to(torch.bfloat16)
    bias = torch.randn(n, device="cuda")
    c = matmul(a, w.t(), bias=bias, activation=act, out_dtype=odt)
    ref = act_ref(a.double() @ w.double().t() + bias.double(), act, _TorchNp)
    tol = 4e-3 if odt == torch.bfloat16 else 2e-3
    assert ((c.double() - ref).norm() / ref.norm()).item() < tol


class _TorchNp:
    tanh, exp = torch.tanh, torch.exp
    maximum = staticmethod(lambda x, y: torch.clamp(x, min=y))


@pytest.mark.parametrize("layout", ["nn", "tn", "tt", "strided", "odd"])
def test_other_layouts(layout):
    m, n, k = 200, 136, 72
    a, b = ints(m, k), ints(k, n)
    if layout in ("tn", "tt"):
        a = a.t().contiguous().t()
    if layout == "tt":
        b = b.t().contiguous().t()
    if layout == "strided":
        a = ints(m, k + 24)[:, 8:8 + k]
        b = ints(n, k + 8)[:, :k].t()
    if layout == "odd":                    # row strides that are not multiples of 16 bytes
        a = ints(m, k + 3)[:, :k]
        b = ints(n, k + 1)[:, :k].t()
    c = matmul(a, b, out_dtype=torch.float32)
    assert torch.equal(c.double(), a.double() @ b.double())


# (M, N, K) with M and N multiples of 8, so that a column-major a and a row-major b
# have 16-byte rows: TMA reads them in place (MN-major)
MN_SHAPES = [(4096, 4096, 4096), (128, 256, 64), (1, 256, 72), (16, 4104, 4096),
             (136, 1000, 72), (264, 520, 136), (2048, 6144, 4096)]


@pytest.mark.parametrize("m,n,k", MN_SHAPES)
@pytest.mark.parametrize("layout", ["nn", "tn", "tt"])
def test_mn_major_operands_in_place_bit_exact(m, n, k, layout):
    """a @ b with b row-major (K, N) and/or a column-major: the Hopper kernel reads them as
    MN-major tiles (transpose bits), without copies; the op records a fast-path entry."""
    from ptxdsl.ops.matmul import api, fast
    a = ints(m, k) if layout == "nn" else ints(k, m).t()
    b = ints(k, n) if layout != "tt" else ints(n, k).t()
    out = poison(m, n, torch.float32)
    matmul(a, b, out=out, out_dtype=torch.float32)
    assert torch.equal(out.double(), a.double() @ b.double())
    c = matmul(a, b)
    assert fast.key(a, b, None, None, None) in fast.FAST.entries   # no copy was needed
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item() < 4e-3
    assert not HOPPER or any(key[0] == "hopper" and key[-2:] == ("MN" if layout != "nn" else "K",
                                                    "K" if layout == "tt" else "MN")
               for key in api.KERNELS._kernels)


def test_batched():
    a, w = ints(3, 130, 64), ints(3, 72, 64)
    c = matmul(a, w.transpose(1, 2), out_dtype=torch.float32)
    assert torch.equal(c.double(), a.double() @ w.double().transpose(1, 2))


def test_autograd_backward_is_two_matmuls():
    a = torch.randn(96, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(80, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    bias = torch.randn(80, device="cuda", requires_grad=True)
    y = matmul(a, w.t(), bias=bias, activation="silu", out_dtype=torch.float32)
    dy = torch.randn_like(y)
    y.backward(dy)
    a64, w64, b64 = (t.detach().double().requires_grad_() for t in (a, w, bias))
    torch.nn.functional.silu(a64 @ w64.t() + b64).backward(dy.double())
    for got, want in ((a.grad, a64.grad), (w.grad, w64.grad), (bias.grad, b64.grad)):
        assert ((got.double() - want).norm() / want.norm()).item() < 1e-2
