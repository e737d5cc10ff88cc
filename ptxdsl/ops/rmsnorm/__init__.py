"""RMSNorm: ``x / sqrt(mean(x^2, -1) + eps) * weight``, forward and backward.

=========== ==============================================================
api         ``rms_norm``, ``rms_norm_backward``: memo, checks, dispatch,
            and what the general path records for repeat calls
quant_api   ``rms_norm_quant``: RMSNorm with FP8 (e4m3) output and its scale
checks      the argument checks the ops share
plan        which kernel a call runs (the table's row, ptxas / occupancy asked), built kernels
plan_long   the cluster plans of long rows from the table's configurations
config      the plan table (plans.json): rows -> kernel configurations
autograd    the ``torch.autograd.Function`` (torch only)
module      ``RMSNorm``, the ``torch.nn.Module`` (torch only)
torch_op    ``torch.ops.ptxdsl.rms_norm`` / ``rms_norm_backward`` (torch.library)
fwd         the row-per-CTA / row-per-warp forward kernel and its ``Plan``
fwd_loop    the persistent forward kernel (a CTA loops over rows)
bwd         the backward kernel, its ``BwdPlan`` and the dw reduction
bwd_staged  the backward's cp.async-staged rows
row         forward row arithmetic shared by the forward kernels
bwd_row     backward row arithmetic shared by the backward schedules
fwd_cluster the forward over a cluster of CTAs per row (long rows, sm_90)
bwd_cluster the backward over clusters of CTAs (long rows, sm_90)
cluster_row a row split over a cluster; its sum through distributed shared memory
devices     what the plans read of a device (SMs, bandwidth, L2, clusters)
quant       the FP8-output kernel (dynamic per-row or static scale, fused residual)
=========== ==============================================================
"""
from .api import KERNELS, rms_norm, rms_norm_backward
# The kernel builders, public for reading and assembling kernels outside a call
# (examples/hopper/rms_norm*.py print and time them).
from .bwd import build_backward, plan_backward
from .fwd import build_forward, max_vec
from .fwd import plan as forward_plan
from .plan import quant_kernel
from .quant import FP8_MAX, MIN_SCALE
from .quant_api import rms_norm_quant


def RMSNorm(*args, **kwargs):
    """``torch.nn.Module`` running ptxdsl's RMSNorm kernels (forward and backward); see
    :class:`.module.RMSNorm`."""
    from .module import RMSNorm as _RMSNorm  # imports torch
    return _RMSNorm(*args, **kwargs)


__all__ = ["KERNELS", "RMSNorm", "rms_norm", "rms_norm_backward", "rms_norm_quant",
           "build_forward", "forward_plan", "build_backward", "plan_backward", "max_vec",
           "quant_kernel", "FP8_MAX", "MIN_SCALE"]
