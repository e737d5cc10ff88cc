"""ptxdsl.ops.matmul on a real GPU (H100/H200) against float64 products.

Integer-valued inputs in [-4, 4] with f32 output: bit-exact. Random normal inputs: bf16
output within one bf16 rounding of the float64 product (relative Frobenius error under
4e-3). Ragged shapes in M, N and K; the Hopper kernel (each operand K-major or MN-major,
read in place) and the SIMT fallback (odd strides); bias and activations; torch autograd.
Run: ``python -m pytest tests/gpu/test_ops_matmul_gpu.py``.
"""
from __future__ import annotations

import dataclasses

import pytest

from gpu_env import NEEDS_GPU, torch_cuda

pytestmark = NEEDS_GPU
torch = torch_cuda()

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
    from ptxdsl.ops.matmul import api
    a = ints(m, k) if layout == "nn" else ints(k, m).t()
    b = ints(k, n) if layout != "tt" else ints(n, k).t()
    out = poison(m, n, torch.float32)
    matmul(a, b, out=out, out_dtype=torch.float32)
    assert torch.equal(out.double(), a.double() @ b.double())
    c = matmul(a, b)
    assert api.MATMUL.key((a, b, None, None, None, None, None)) in api.MATMUL.entries  # no copy
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item() < 4e-3
    assert not HOPPER or any(key[0] == "hopper" and key[-2:] == ("MN" if layout != "nn" else "K",
                                                    "K" if layout == "tt" else "MN")
               for key in api.KERNELS._kernels)


def _finish_or_exit(seconds=20.0):
    """Wait for the GPU's queued work, polling; a kernel still running after ``seconds``
    (a deadlocked pipeline) ends the process with a message instead of hanging the run."""
    import os
    import sys
    import time
    ev = torch.cuda.Event()
    ev.record()
    end = time.time() + seconds
    while not ev.query():
        if time.time() > end:
            sys.stderr.write(f"\nGPU work still running after {seconds} s: a deadlocked "
                             f"kernel; exiting\n")
            sys.stderr.flush()
            os._exit(3)
        time.sleep(0.001)


def _assert_exact(kern, a, w, a_arg=None, b_arg=None):
    """Run ``kern`` on integer-valued ``a`` (M, K) and ``w`` (N, K) (passed as ``a_arg`` /
    ``b_arg`` where the kernel takes another major) into a NaN-filled f32 C, and check it
    bit for bit against the float64 ``a @ w.T``."""
    out = poison(a.shape[0], w.shape[0], torch.float32)
    kern(a if a_arg is None else a_arg, w if b_arg is None else b_arg, out)
    _finish_or_exit()
    assert torch.equal(out.double(), a.double() @ w.double().t())


def _assert_rounded(c, ref):
    """A 16-bit C within one bf16 rounding of the float64 ``ref`` (relative Frobenius)."""
    assert ((c.double() - ref).norm() / ref.norm()).item() < 4e-3


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("m,n,k,split", [(16, 4096, 4096, 4), (1, 8192, 8192, 2),
                                         (128, 4096, 4096, 4), (37, 264, 520, 2),
                                         (16, 136, 136, 4), (128, 28672, 1024, 4)])
@pytest.mark.parametrize("b_major", ["K", "MN"])
def test_split_k_kernel(m, n, k, split, b_major):
    """The split-K kernel (plan.one_row with a forced split: a cluster of ``split`` CTAs
    along K, partial sums gathered by rank 0 through DSMEM): integer inputs bit-exact with
    f32 output, random normal within bf16 rounding, and the same bits on a second run
    (the reduction order is fixed). (16, 136, 136) gives rank 0 no k-block; the last
    shape runs 7 tiles per cluster."""
    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.ops.matmul.plan import one_row
    from ptxdsl.core.types import bf16, f32
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a, w = ints(m, k), ints(n, k)
    bk = w.t() if b_major == "MN" else w          # (K, N) row-major or (N, K)
    if b_major == "MN":
        bk = bk.contiguous()
    kern = build_hopper(one_row(m, n, k, bf16, f32, sms, split=split), bf16, f32, sms=sms,
                        b_major=b_major)
    _assert_exact(kern, a, w, b_arg=bk)
    p = one_row(m, n, k, bf16, bf16, sms, split=split)
    assert p.split == split
    kb = build_hopper(p, bf16, bf16, sms=sms, b_major=b_major)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    y = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    yk = y.t().contiguous() if b_major == "MN" else y
    c1, c2 = poison(m, n, torch.bfloat16), poison(m, n, torch.bfloat16)
    kb(x, yk, c1)
    kb(x, yk, c2)
    _finish_or_exit()
    _assert_rounded(c1, x.double() @ y.double().t())
    assert torch.equal(c1, c2)


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("m,n,k,cn,a_major", [(1, 4096, 4096, 4, "K"), (16, 8192, 520, 4, "K"),
                                              (104, 520, 264, 2, "MN"), (16, 392, 200, 4, "K")])
def test_clusters_along_n(m, n, k, cn, a_major):
    """Clusters along N (each CTA loads its share of A with .multicast::cluster): integer
    inputs bit-exact with f32 output (ragged N, A in either major: an MN-major A's rows
    are M long, a multiple of 8 for TMA's 16-byte strides)."""
    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.ops.matmul.plan import Plan
    from ptxdsl.core.types import bf16, f32
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a, w = ints(m, k), ints(n, k)
    bn = 64 if n <= 4096 else 128
    p = Plan(bn=bn, cluster=1, cluster_n=cn, stages=4)
    at = a if a_major == "K" else a.t().contiguous()        # (M, K) or At (K, M)
    _assert_exact(build_hopper(p, bf16, f32, sms=sms, a_major=a_major), a, w, a_arg=at)


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("m,n,k,cluster,a_rows,bias", [
    (1024, 14336, 4096, 2, 0, False), (379, 1000, 520, 2, 0, True), (250, 456, 72, 1, 0, True),
    (16, 28672, 8192, 1, 16, False), (7, 1000, 264, 1, 16, True)])
def test_224_wide_tiles(m, n, k, cluster, a_rows, bias):
    """128 x 224 tiles (m64n224 consumers; C's last 64-column panel of a tile overlaps the
    one before it, and both store the shared columns): integer inputs bit-exact with f32
    output, bf16 output with a bias and gelu within rounding, ragged N that ends inside a
    tile's overlapped panel (1000 = 4 x 224 + 104, 456 = 2 x 224 + 8); a plan of this width
    given an MN-major B takes 256 (for_majors) and stays exact."""
    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.ops.matmul.plan import Plan, for_majors, most_stages, stages_for
    from ptxdsl.core.types import bf16, f32
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a, w = ints(m, k), ints(n, k)
    p = Plan(bn=224, cluster=cluster, a_rows=a_rows)
    p = dataclasses.replace(p, stages=stages_for(p, bf16, f32, most_stages(224)))
    _assert_exact(build_hopper(p, bf16, f32, sms=sms), a, w)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    y = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    bv = torch.randn(n, device="cuda").to(torch.bfloat16) if bias else None
    kw = {"bias": bf16, "activation": "gelu"} if bias else {}
    pb = dataclasses.replace(p, stages=stages_for(p, bf16, bf16, most_stages(224)))
    c = poison(m, n, torch.bfloat16)
    build_hopper(pb, bf16, bf16, sms=sms, **kw)(x, y, *((bv,) if bias else ()), c)
    _finish_or_exit()
    ref = x.double() @ y.double().t()
    if bias:
        ref = act_ref(ref + bv.double(), "gelu", _TorchNp)
    _assert_rounded(c, ref)
    if n % 8 == 0 and a_rows == 0:          # B stored (K, N): MN-major, 64-column boxes
        q = for_majors(p, bf16, f32, "K", "MN")
        assert q.bn == 256
        _assert_exact(build_hopper(q, bf16, f32, sms=sms, b_major="MN"), a, w,
                      b_arg=w.t().contiguous())


@pytest.mark.skipif(not HOPPER, reason="the Hopper kernel needs sm_90")
@pytest.mark.parametrize("m,n,k,a_rows,split", [
    (1, 4096, 4096, 16, 1), (16, 8192, 8192, 16, 1), (7, 392, 200, 16, 1),
    (29, 136, 520, 32, 1), (64, 264, 72, 64, 1), (16, 4096, 14336, 16, 2),
    (1, 4096, 4096, 16, 2), (5, 200, 1000, 16, 4)])
def test_a_rows_of_a(m, n, k, a_rows, split):
    """Plan.a_rows (only A's first rows loaded per stage, the others zeroed once), also
    with K split over a cluster: integer inputs bit-exact with f32 output, bf16 output
    within rounding, and through the op at the measured M <= 16 shapes, whose plans use
    it; more rows than a_rows are refused."""
    from ptxdsl.ops.matmul.api import describe
    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.ops.matmul.plan import Plan, stages_for
    from ptxdsl.core.types import bf16, f32
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a, w = ints(m, k), ints(n, k)
    p = Plan(bn=64, cluster=1, a_rows=a_rows, split=split)
    p = dataclasses.replace(p, stages=stages_for(p, bf16, f32, 8))   # fits either output
    _assert_exact(build_hopper(p, bf16, f32, sms=sms), a, w)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    y = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    c = poison(m, n, torch.bfloat16)
    build_hopper(p, bf16, bf16, sms=sms)(x, y, c)
    _finish_or_exit()
    _assert_rounded(c, x.double() @ y.double().t())
    if (n, k) in ((4096, 4096), (8192, 8192), (4096, 14336)):
        assert f"a_rows={a_rows}" in describe(m, n, k, sms=sms)
        got = matmul(a, w.t(), out_dtype=torch.float32)
        _finish_or_exit()
        assert torch.equal(got.double(), a.double() @ w.double().t())
    big = ints(a_rows + 1, k)
    with pytest.raises(Exception, match="a_rows"):
        build_hopper(p, bf16, f32, sms=sms)(big, w, poison(a_rows + 1, n, torch.float32))


@pytest.mark.parametrize("layout", ["lin", "nn", "bias"])
def test_repeated_calls_on_new_tensors(layout):
    """The per-signature fast path (a bound launch whose tensor maps are re-pointed per
    call, by writing the address into the parameter buffer where the driver keeps it as
    a plain u64): every call on fresh tensors of one signature is exact (f32 output)."""
    from ptxdsl.ops.matmul import api
    m, n, k = 72, 264, 136
    for i in range(5):
        a, w = ints(m, k), ints(n, k)
        b = w.t().contiguous() if layout == "nn" else w.t()
        bias = ints(n) if layout == "bias" else None
        c = matmul(a, b, bias=bias, out_dtype=torch.float32)
        ref = a.double() @ b.double() + (bias.double() if bias is not None else 0)
        assert torch.equal(c.double(), ref), f"call {i}"
    assert api.MATMUL.key((a, b, bias, None, None, torch.float32, None)) in api.MATMUL.entries
    if HOPPER:
        kern = next(v for key, v in api.KERNELS._kernels.items() if key[0] == "hopper")
        tm = kern.runtime_cache.get("launcher").tmaps
        print(f"tensor-map address field: {tm.address_offset()}")


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
