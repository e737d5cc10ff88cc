"""ptxdsl.ops.matmul with row-wise and block-wise float8 scales on a real GPU (H100/H200).

Integer operands in [-4, 4] with power-of-two scales and an f32 output: bit-exact against
the float64 reference of the scaled product. Random normal operands, bf16 output: within
bf16 rounding of the float64 reference, and row-wise beside ``torch._scaled_mm`` (cuBLAS)
in the same mode. Ragged shapes; one tile row (split-K plans); bias and activation.
Run: ``python -m pytest tests/gpu/test_ops_matmul_fp8_modes_gpu.py``.
"""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU, torch_cuda

pytestmark = NEEDS_GPU
torch = torch_cuda()
if not hasattr(torch, "float8_e4m3fn"):  # pragma: no cover
    pytest.skip("torch has no float8", allow_module_level=True)

from ptxdsl.ops import matmul  # noqa: E402

E4M3 = torch.float8_e4m3fn
SHAPES = [(4096, 4096, 4096), (379, 1000, 144), (16, 4096, 4096), (65, 520, 272),
          (2048, 7168, 2048)]


def ints(*shape):
    return torch.randint(-4, 5, shape, device="cuda").float().to(E4M3)


def pow2(*shape):
    return (2.0 ** torch.randint(-3, 3, shape, device="cuda")).float()


def scales(mode, m, n, k):
    if mode == "row":
        return pow2(m, 1), pow2(1, n)
    kb, nb = -(-k // 128), -(-n // 128)
    return pow2(kb, m).t(), pow2(kb, nb)         # scale_a column-major, as cuBLAS keeps it


def reference(a, w, sa, sb, mode):
    """float64 ``a @ w.T`` under the scales."""
    a, w = a.double(), w.double()
    if mode == "row":
        return (a @ w.t()) * sa.double() * sb.double()
    k, n = a.shape[1], w.shape[0]
    out = torch.zeros(a.shape[0], n, dtype=torch.float64, device="cuda")
    for kb in range(-(-k // 128)):
        ks = slice(128 * kb, 128 * kb + 128)
        cols = sb[kb].double().repeat_interleave(128)[:n]
        out += (a[:, ks] @ w[:, ks].t()) * sa[:, kb:kb + 1].double() * cols
    return out


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("mode", ["row", "block"])
def test_integer_inputs_bit_exact(mode, m, n, k):
    a, w = ints(m, k), ints(n, k)
    sa, sb = scales(mode, m, n, k)
    out = torch.full((m, n), float("nan"), device="cuda")
    matmul(a, w.t(), out=out, out_dtype=torch.float32, scale_a=sa, scale_b=sb)
    assert torch.equal(out.double(), reference(a, w, sa, sb, mode))


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("mode", ["row", "block"])
def test_random_normal_bf16_with_bias_and_gelu(mode, m, n, k):
    a = torch.randn(m, k, device="cuda").to(E4M3)
    w = torch.randn(n, k, device="cuda").to(E4M3)
    sa, sb = scales(mode, m, n, k)
    bias = torch.randn(n, device="cuda")
    c = matmul(a, w.t(), scale_a=sa, scale_b=sb, bias=bias, activation="gelu")
    assert c.dtype == torch.bfloat16 and bool(torch.isfinite(c).all())
    ref = torch.nn.functional.gelu(reference(a, w, sa, sb, mode) + bias.double(),
                                   approximate="tanh")
    assert ((c.double() - ref).norm() / ref.norm()).item() < 4e-3


@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (379, 1008, 144)])
def test_row_wise_beside_cublas(m, n, k):
    a = torch.randn(m, k, device="cuda").to(E4M3)
    w = torch.randn(n, k, device="cuda").to(E4M3)
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    c = matmul(a, w.t(), scale_a=sa, scale_b=sb)
    cb = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    ref = reference(a, w, sa, sb, "row")
    assert ((c.double() - cb.double()).norm() / ref.norm()).item() < 6e-3


@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1040), (4096, 2048, 4096)])
@pytest.mark.parametrize("fields", [dict(m_waves=2), dict(m_waves=2, cluster=1),
                                    dict(kb_pairs=True), dict(kb_pairs=True, cluster=1),
                                    dict(bn=256), dict(bn=256, cluster=1),
                                    dict(kb_roll=2, cluster=1), dict(kb_roll=4),
                                    dict(bn=256, kb_roll=2, cluster=1),
                                    dict(bn=256, kb_roll=4, cluster=1),
                                    dict(bn=256, cluster=1, smem_scales=True),
                                    dict(kb_roll=4, cluster=1, smem_scales=True),
                                    dict(bn=256, kb_roll=4, cluster=1, smem_scales=True),
                                    dict(kb_roll=8, cluster=1, smem_scales=True),
                                    dict(bn=256, kb_roll=8, cluster=1, smem_scales=True),
                                    dict(kb_roll=4, cluster=1, smem_scales=True,
                                         kb_stagger=True),
                                    dict(kb_roll=8, cluster=1, smem_scales=True,
                                         kb_stagger=True),
                                    dict(bn=256, kb_roll=2, cluster=1, smem_scales=True,
                                         kb_stagger=True),
                                    dict(bn=256, kb_roll=4, cluster=1, kb_stagger=True),
                                    dict(bn=160, cluster=1, smem_scales=True),
                                    dict(bn=160, kb_roll=4, cluster=1, smem_scales=True),
                                    dict(bn=160, kb_roll=8, cluster=1, smem_scales=True),
                                    dict(bn=160, kb_roll=4, cluster=1, smem_scales=True,
                                         kb_stagger=True),
                                    # scale_b through the ring too (sb_ring)
                                    dict(bn=256, kb_roll=4, cluster=1, smem_scales=True,
                                         sb_ring=True),
                                    dict(bn=256, kb_roll=8, cluster=1, smem_scales=True,
                                         sb_ring=True),
                                    dict(kb_roll=4, cluster=1, smem_scales=True,
                                         sb_ring=True),
                                    dict(cluster=2, smem_scales=True, sb_ring=True),
                                    dict(bn=160, kb_roll=4, cluster=1, smem_scales=True,
                                         sb_ring=True)])
def test_block_wise_plan_variants_bit_exact(fields, m, n, k):
    """The block-wise kernel's 256-row tiles (``m_waves``), k-block pairs (``kb_pairs``),
    256-column tiles in halves (``bn=256``), rolling k-blocks (``kb_roll``, 256 columns
    in 64-column chunks; ``kb_stagger``: the second consumer's iterations offset),
    160-column tiles across two scale_b blocks, scale_a through the ring
    (``smem_scales``) and scale_b too (``sb_ring``), built from the plan: integer inputs, f32 output, bit-exact (ragged
    M, N and K: an odd count of k-blocks, the last 16 long)."""
    import dataclasses
    from ptxdsl.core.types import e4m3, f32
    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.ops.matmul.plan import choose, fitted, for_scaling
    p = for_scaling(choose(m, n, k, e4m3, f32, device="H200"), "block", e4m3, f32)
    p = fitted(dataclasses.replace(p, **{"bn": 128, "cluster": 2, "kb_roll": 0,
                                         "smem_scales": False, **fields}), e4m3, f32)
    kern = build_hopper(p, e4m3, f32, scaled="block")
    a, w = ints(m, k), ints(n, k)
    sa, sb = scales("block", m, n, k)
    out = torch.full((m, n), float("nan"), device="cuda")
    kern(a, w, sa.t(), sb, out)
    assert torch.equal(out.double(), reference(a, w, sa, sb, "block"))
