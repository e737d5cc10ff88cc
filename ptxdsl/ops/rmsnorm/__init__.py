"""RMSNorm: ``x / sqrt(mean(x^2, -1) + eps) * weight``, forward and backward.

=========== ==============================================================
api         ``rms_norm``, ``rms_norm_backward``, ``RMSNorm``: checks, dispatch
quant_api   ``rms_norm_quant``: RMSNorm with FP8 (e4m3) output and its scale
plan        which kernel a call runs (the table's row, ptxas / occupancy asked)
plan_long   the cluster plans of long rows from the table's configurations
config      the plan table (plans.json): rows -> kernel configurations
fast        repeated torch calls: per-signature closures that allocate and launch
autograd    the ``torch.autograd.Function`` and ``nn.Module`` (torch only)
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
from .api import KERNELS, RMSNorm, rms_norm, rms_norm_backward
from .quant_api import rms_norm_quant

__all__ = ["KERNELS", "RMSNorm", "rms_norm", "rms_norm_backward", "rms_norm_quant"]
