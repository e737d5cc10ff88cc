"""Attention forward on Hopper (``ptxdsl.ops.attention``): :mod:`.api` checks a call,
:mod:`.plan` picks its :class:`~.config.Config` from ``plans.json``, :mod:`.fwd` builds the
warp-specialized wgmma kernel (its per-block math in :mod:`.softmax`); :mod:`.reference`
is the float64 numpy version the tests and the benchmark check against."""
from .api import KERNELS, attention
from .reference import attention_reference

__all__ = ["attention", "attention_reference", "KERNELS"]
