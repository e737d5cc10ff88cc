"""``RMSNorm``: a ``torch.nn.Module`` running ptxdsl's RMSNorm kernels (imported only when
torch is in use)."""
from __future__ import annotations

import torch

from ...core.errors import LaunchError, user_location
from .api import rms_norm
from .checks import eps_value, offset_value


class RMSNorm(torch.nn.Module):
    """Drop-in ``torch.nn.RMSNorm``-like module (weight initialised to ones).

    ``offset``: Gemma's ``y = x * rstd * (offset + weight)`` (Gemma: ``offset=1.0``,
    with the weight then initialised to zeros, as Gemma's own module does)."""

    def __init__(self, dim: int, eps: float = 1e-6, *, offset: float = 0.0, device=None,
                 dtype=None):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise LaunchError(f"RMSNorm: dim must be a positive int, got {dim!r}",
                              user_location())
        self.eps = eps_value(eps, "RMSNorm")
        self.offset = offset_value(offset)
        init = torch.zeros if self.offset else torch.ones
        self.weight = torch.nn.Parameter(init(dim, device=device, dtype=dtype))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps, offset=self.offset)

    def extra_repr(self) -> str:
        extra = f", offset={self.offset}" if self.offset else ""
        return f"{self.weight.shape[0]}, eps={self.eps}{extra}"
