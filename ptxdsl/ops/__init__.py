"""Ready-made kernels written in the DSL, with array-framework glue."""
from .rms_norm import KERNELS, RMSNorm, rms_norm, rms_norm_backward

__all__ = ["rms_norm", "rms_norm_backward", "RMSNorm", "KERNELS"]
