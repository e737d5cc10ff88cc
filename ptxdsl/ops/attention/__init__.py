"""Attention forward on Hopper (``ptxdsl.ops.attention``): :mod:`.api` checks a call,
:mod:`.varlen` runs packed sequences, :mod:`.plan` picks its :class:`~.config.Config` from
``plans.json``, :mod:`.fwd` builds the warp-specialized wgmma kernel (its per-block math in
:mod:`.softmax`); :mod:`.reference` is the float64 numpy version the tests and the
benchmark check against."""
from .api import KERNELS, attention, forward_kernel
from .reference import attention_reference
from .varlen import attention_varlen

__all__ = ["attention", "attention_varlen", "attention_reference", "forward_kernel",
           "KERNELS"]
