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


def torch_cuda():
    """torch for the op tests, or a skip: without torch, and (the whole module) where a
    GPU is usable but this torch has no CUDA."""
    torch = pytest.importorskip("torch")
    if ptxdsl.gpu_available() and not torch.cuda.is_available():  # pragma: no cover
        pytest.skip("torch has no CUDA", allow_module_level=True)
    return torch
