"""What the GPU tests share: their mark (with the reason they skip on a machine without
a usable GPU) and torch on an sm_90 device for the sm_90a kernels."""
from __future__ import annotations

import pytest

import ptxdsl
from ptxdsl.runtime import driver as rdriver

NEEDS_GPU = [pytest.mark.gpu,
             pytest.mark.skipif(not ptxdsl.gpu_available(),
                                reason="no usable CUDA GPU/driver: "
                                       + (rdriver.driver_unavailable_reason() or "0 devices"))]


def torch_sm90():
    """torch, or a skip: without torch, or without a CUDA device of compute capability 9.0."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (H100/H200) for sm_90a kernels")
    return torch
