"""Attention forward on Hopper (``ptxdsl.ops.attention``): :mod:`.api` checks a call,
:mod:`.varlen` runs packed sequences, :mod:`.plan` picks its :class:`~.config.Config` from
``plans.json``, :mod:`.fwd` builds the warp-specialized wgmma kernel (its per-block math in
:mod:`.softmax`); :mod:`.reference` is the float64 numpy version the tests and the
benchmark check against. The backward: :mod:`.bwd_api` (``attention_backward`` and its
varlen form), :mod:`.bwd_config` (its plan table), :mod:`.bwd_prep` and :mod:`.bwd` (its
kernels), :mod:`.bwd_reference`; :mod:`.torch_op` makes the torch path differentiable."""
from .api import KERNELS, attention, forward_kernel
from .bwd_api import attention_backward, attention_varlen_backward, backward_kernels
from .bwd_reference import attention_backward_reference
from .reference import attention_reference
from .varlen import attention_varlen

__all__ = ["attention", "attention_varlen", "attention_reference", "forward_kernel",
           "KERNELS", "attention_backward", "attention_varlen_backward",
           "attention_backward_reference", "backward_kernels"]
