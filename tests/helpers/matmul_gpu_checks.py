"""The GEMM plan-option GPU tests' check: a kernel built from a plan is exact with
integer-valued bf16 inputs and f32 output (against float64), and with random normal
inputs and bf16 output within bf16 rounding and the same bits on a second run."""
from __future__ import annotations


def exact_and_repeatable(torch, plan_for, m: int, n: int, k: int, b_major: str) -> None:
    """``plan_for(out_dtype)``: the :class:`~ptxdsl.ops.matmul.config.Plan` to build for
    that output dtype; ``b_major``: ``"K"`` (B as (N, K), ``x @ w.T``) or ``"MN"`` (B as
    (K, N), ``a @ b``)."""
    from ptxdsl.core.types import bf16, f32
    from ptxdsl.ops.matmul.hopper import build_hopper
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def ints(*shape):
        return torch.randint(-4, 5, shape, device="cuda").to(torch.bfloat16)

    def as_b(w):             # (N, K) as the kernel takes B
        return w.t().contiguous() if b_major == "MN" else w
    a, w = ints(m, k), ints(n, k)
    out = torch.full((m, n), float("nan"), device="cuda")
    build_hopper(plan_for(f32), bf16, f32, sms=sms, b_major=b_major)(a, as_b(w), out)
    torch.cuda.synchronize()
    assert torch.equal(out.double(), a.double() @ w.double().t())
    kb = build_hopper(plan_for(bf16), bf16, bf16, sms=sms, b_major=b_major)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    y = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    c1, c2 = (torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
              for _ in range(2))
    kb(x, as_b(y), c1)
    kb(x, as_b(y), c2)
    torch.cuda.synchronize()
    ref = x.double() @ y.double().t()
    assert ((c1.double() - ref).norm() / ref.norm()).item() < 4e-3
    assert torch.equal(c1, c2)


__all__ = ["exact_and_repeatable"]
