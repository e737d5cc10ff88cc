"""Imported PTX with tensor-map parameters on the GPU: a DSL TMA copy kernel's PTX,
parsed back, launched with ``(tensor, ptxdsl.TMA(...))`` arguments copies the tensor
(the map encoded by ptxdsl at the tensor's device address), as on the interpreter."""
from __future__ import annotations

import pytest

from gpu_env import NEEDS_GPU

pytestmark = NEEDS_GPU
torch = pytest.importorskip("torch")

import ptxdsl  # noqa: E402
from ptxdsl.core.tensormap import TMA  # noqa: E402
from tma_kernels import build_copy  # noqa: E402


def test_tensor_map_arguments_copy_through_tma():
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("TMA needs sm_90")
    k = ptxdsl.from_ptx(build_copy((8, 32), 0, dump=False).ptx())
    a = torch.arange(16 * 64, dtype=torch.float32, device="cuda").reshape(16, 64)
    c = torch.zeros_like(a)
    k(None, None, None, 0, 0, 0, (a, TMA(box=(8, 32))), (c, (8, 32)), grid=(2, 2, 1),
      block=128)
    torch.cuda.synchronize()
    assert torch.equal(c, a)
