"""Clusters on an H100/H200 against the CPU interpreter: the shared addresses and cluster
special registers each CTA sees (tests/test_interp_hopper.py's build_cluster_addresses;
rank r's shared addresses carry r at bit 24), and the Hopper GEMM's operand stages in a
2-CTA cluster (tests/test_ops_matmul_operands.py's build_stage_product: rank 1 read an
MN-major B's later atoms two K rows on while descriptors did not mask those bits).

Run: ``PYTHONPATH=. python -m pytest tests/gpu/test_cluster_interp_gpu.py -q``.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [p for p in (os.path.join(ROOT, "tests"), ROOT) if p not in sys.path]

import ptxdsl  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not ptxdsl.gpu_available(), reason="no usable CUDA GPU")]


def _needs_sm90():
    from ptxdsl.runtime import driver
    if driver.get().device(0).cc != (9, 0):
        pytest.skip("clusters and wgmma: an sm_90 GPU (H100/H200)")


@pytest.mark.parametrize("cluster", [1, 2, 4])
def test_cluster_addresses_match_the_interpreter(cluster):
    _needs_sm90()
    from test_interp_hopper import build_cluster_addresses
    k = build_cluster_addresses(cluster, 8)
    gpu = np.asarray(k()).view(np.uint32).reshape(8, 4)
    cpu = np.asarray(k.interpret()).view(np.uint32).reshape(8, 4)
    assert gpu.tolist() == cpu.tolist()


@pytest.mark.parametrize("a_major,b_major,n", [("K", "MN", 128), ("MN", "MN", 256),
                                               ("MN", "K", 64), ("K", "K", 128)])
def test_stage_product_in_a_cluster(a_major, b_major, n):
    _needs_sm90()
    from test_ops_matmul_operands import _bits, build_stage_product
    m, k = 128, 128
    rng = np.random.default_rng(n)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    ka = _bits(a) if a_major == "K" else np.ascontiguousarray(_bits(a).T)
    kb = np.ascontiguousarray(_bits(b).T) if b_major == "K" else _bits(b)
    kern = build_stage_product(a_major, b_major, n, cluster=2)
    c = np.asarray(kern(ka, kb, np.full((m, n), np.nan, np.float32)))
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))
