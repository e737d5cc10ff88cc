"""Ready-made kernels written in the DSL, with array-framework glue."""
from .rms_norm import KERNELS, RMSNorm, rms_norm, rms_norm_backward
from .matmul import matmul  # noqa: E402  (the function shadows the subpackage name)

__all__ = ["rms_norm", "rms_norm_backward", "RMSNorm", "KERNELS", "matmul"]
