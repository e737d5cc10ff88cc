"""Raw parameters that name no dim, launched on the GPU with their values by keyword (as
on the interpreter): scalars, an array and a raw device pointer; the same results as the
interpreter. CPU tests of the packing: tests/runtime/test_raw_params_launch.py.

Run: ``python -m pytest tests/gpu/test_raw_params_gpu.py -q``
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu_env import NEEDS_GPU
from ptxdsl.core.errors import LaunchError
from raw_param_kernels import make_add_from_pointer, make_affine

pytestmark = NEEDS_GPU


def test_scalars_and_an_array_by_keyword_match_the_interpreter():
    k = make_affine("affine_gpu")
    x = np.arange(20, dtype=np.float32)
    pair = np.array([10, 3], np.int32)
    for kw in (dict(scale=0.5, shift=-2, pair=pair, tag=1),
               dict(scale=-3.0, shift=2 ** 31 - 1, pair=pair.tobytes(), tag=2 ** 64 - 1)):
        y = k(x, **kw)
        np.testing.assert_array_equal(y, k.interpret(x, **kw))


def test_torch_tensors_and_new_values_every_call():
    torch = pytest.importorskip("torch")
    k = make_affine("affine_gpu_torch")
    x = torch.arange(30, dtype=torch.float32, device="cuda")
    for s in range(3):   # every call packs its own values
        y = k(x, scale=float(s), shift=s, pair=np.array([s, 1], np.int32), tag=0)
        torch.testing.assert_close(y, x * s + (2 * s - 1), rtol=0, atol=0)


def test_a_raw_device_pointer_by_keyword():
    torch = pytest.importorskip("torch")
    k = make_add_from_pointer()
    x = torch.randn(1000, device="cuda")
    b = torch.randn(1000, device="cuda")
    y = k(x, bias=b.data_ptr())
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x + b, rtol=0, atol=0)
    with pytest.raises(LaunchError, match=r"raw parameter bias \(\.u64\) names no dim"):
        k(x)


def test_jax_call_on_the_gpu_passes_the_raw_values():
    jax = pytest.importorskip("jax")
    if jax.default_backend() != "gpu":
        pytest.skip("jax runs on the CPU here")
    from ptxdsl.runtime.jax_ffi import jax_call
    k = make_affine("affine_gpu_jax")
    pair = np.array([4, 1], np.int32)
    f = jax.jit(jax_call(k, scale=2.0, shift=1, pair=pair, tag=3))
    x = np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(f(x)), x * 2 + (1 + 4 - 1))
