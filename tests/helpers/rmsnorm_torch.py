"""float64 RMSNorm references and the error measures the GPU tests hold the op to, on torch
tensors (torch is imported by the caller's module; these only use its tensors)."""
from __future__ import annotations

EPS = 1e-6


def ref(x, w, eps: float = EPS):
    """float64 ``x * rsqrt(mean(x^2) + eps) * w``."""
    x64 = x.double()
    return x64 * ((x64 * x64).mean(-1, keepdim=True) + eps).rsqrt() * w.double()


def ulps(out, ref64, dtype):
    """|out - round(ref)| in units of the last place of ``dtype`` at round(ref)."""
    import torch
    r = ref64.to(dtype)
    up = torch.nextafter(r.abs().float().to(dtype), torch.tensor(float("inf"), dtype=dtype,
                                                                  device=r.device))
    ulp = (up.double() - r.abs().double()).clamp_min(1e-30)
    return ((out.double() - r.double()).abs() / ulp).max().item()


def assert_matches(y, r, dt: str):
    """f32: within 2e-6 of each row's largest value; halves: within 1 ulp of the
    correctly rounded float64 reference ``r``."""
    import torch
    if dt == "f32":
        err = ((y.double() - r).abs().amax(-1) / r.abs().amax(-1).clamp_min(1e-30)).max().item()
        assert err <= 2e-6
    else:
        assert ulps(y, r, {"f16": torch.float16, "bf16": torch.bfloat16}[dt]) <= 1.0
