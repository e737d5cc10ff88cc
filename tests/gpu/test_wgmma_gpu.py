"""wgmma on an H100/H200 against the interpreter and float64 numpy: every swizzle mode
(none, 32, 64, 128 bytes), B K-major and MN-major, N from 8 to 256.

The shared-memory images of A and B are laid out on the host (tests/helpers/wgmma_kernels.py,
from the PTX ISA's canonical layouts) and copied verbatim; the descriptors come from
``ptx.wgmma.descriptor``. A disagreement between the GPU and the interpreter means the
interpreter reads descriptor bits differently from the hardware.

Run: ``python -m pytest tests/gpu/test_wgmma_gpu.py -q``.
"""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl  # noqa: E402
from gpu_env import NEEDS_GPU

pytestmark = NEEDS_GPU


def _needs_sm90():
    from ptxdsl.runtime import driver
    major, minor = driver.get().device(0).cc
    if (major, minor) != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU (H100/H200)")


CASES = [(n, s, mn) for s in (0, 32, 64, 128) for mn in (False, True) for n in (8, 64, 256)
         if not (mn and n == 8 and s)]  # an MN-major B narrower than one swizzle span


@pytest.mark.parametrize("n,swizzle,mn", CASES,
                         ids=[f"n{n}-sw{s}-{'mn' if mn else 'k'}" for n, s, mn in CASES])
def test_wgmma_gpu_vs_interpreter(n, swizzle, mn):
    _needs_sm90()
    from wgmma_kernels import build_wgmma, random_case
    a_img, b_img, ref = random_case(n, swizzle, mn, seed=n + swizzle)
    k = build_wgmma(n, swizzle, mn, len(a_img), len(b_img))
    gpu = np.asarray(k(a_img, b_img), np.float64).reshape(64, n)
    cpu = np.asarray(k.interpret(a_img, b_img), np.float64).reshape(64, n)
    # the tensor core adds 16 bf16 products in f32 with its own order and alignment
    bound = 17 * 2.0 ** -23 * random_case.abs_sum + 1e-30
    assert np.all(np.abs(cpu - ref) <= bound), "interpreter off the float64 reference"
    bad = np.abs(gpu - ref) > bound
    assert not bad.any(), (f"GPU differs from the reference at {int(bad.sum())} of {bad.size} "
                           f"elements (first at {np.argwhere(bad)[0]}): the descriptor/layout "
                           f"reading disagrees with the hardware")


def test_wide_k_major_tile_from_tma_stripes_gpu():
    """A (64, 128) bf16 K-major tile (256-byte rows) held as two 128-byte swizzled stripes,
    each filled by its own TMA box: what the hardware reads must be A, as the interpreter
    reads it (tests/helpers/wide_tile_kernels.py)."""
    _needs_sm90()
    from wide_tile_kernels import build_wide_tma, wide_case
    a, b_img, ref = wide_case()
    k = build_wide_tma()
    gpu = np.asarray(k(a, b_img), np.float64).reshape(64, 16)
    cpu = np.asarray(k.interpret(a, b_img), np.float64).reshape(64, 16)
    np.testing.assert_allclose(cpu, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gpu, ref, rtol=1e-3, atol=1e-3)
