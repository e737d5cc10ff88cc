"""Clusters on an H100/H200 against the CPU interpreter: the shared addresses and cluster
special registers each CTA sees (tests/helpers/cluster_kernels.py's build_cluster_addresses;
rank r's shared addresses carry r at bit 24), the Hopper GEMM's operand stages in a
2-CTA cluster (tests/ops/matmul/test_operands.py's build_stage_product: rank 1 read an
MN-major B's later atoms two K rows on while descriptors did not mask those bits), and
the kernels of tests/helpers/cluster_kernels.py run on both, which must agree bit for bit (and
with numpy): every cluster special register for 2-D/3-D cluster shapes, mapa /
getctarank / ld.shared::cluster (shared::cta, shared::cluster and generic addresses),
DSMEM reductions across a cluster of 4 (st.shared::cluster, st.async,
atom/red.shared::cluster, red.async), a TMA multicast across a cluster of 2 and 1-D bulk
copies (multicast, into a peer's shared memory, bulk_group stores). Every mbarrier wait
in those kernels loops on try_wait.parity.

Run: ``python -m pytest tests/gpu/test_cluster_interp_gpu.py -q``.
"""
from __future__ import annotations

import numpy as np
import pytest

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
    from cluster_kernels import build_cluster_addresses
    k = build_cluster_addresses(cluster, 8)
    gpu = np.asarray(k()).view(np.uint32).reshape(8, 4)
    cpu = np.asarray(k.interpret()).view(np.uint32).reshape(8, 4)
    assert gpu.tolist() == cpu.tolist()


@pytest.mark.parametrize("a_major,b_major,n", [("K", "MN", 128), ("MN", "MN", 256),
                                               ("MN", "K", 64), ("K", "K", 128)])
def test_stage_product_in_a_cluster(a_major, b_major, n):
    _needs_sm90()
    from stage_product import bf16_bits as _bits, build_stage_product
    m, k = 128, 128
    rng = np.random.default_rng(n)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    ka = _bits(a) if a_major == "K" else np.ascontiguousarray(_bits(a).T)
    kb = np.ascontiguousarray(_bits(b).T) if b_major == "K" else _bits(b)
    kern = build_stage_product(a_major, b_major, n, cluster=2)
    c = np.asarray(kern(ka, kb, np.full((m, n), np.nan, np.float32)))
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


# ---------------------------------------------------------------- tests/helpers/cluster_kernels.py
def _run_both(k, inputs, outputs_like):
    """(GPU outputs, interpreter outputs) of ``k``; both get zero-filled outputs shaped
    like ``outputs_like`` (they carry the named dims)."""
    cpu = k.interpret(*inputs, *[np.zeros_like(o) for o in outputs_like])
    gpu = k(*[np.ascontiguousarray(x) for x in inputs],
            *[np.zeros_like(o) for o in outputs_like])
    return _as_list(gpu), _as_list(cpu)


def _as_list(r) -> list:
    return [np.asarray(x) for x in (r if isinstance(r, tuple) else (r,))]


def _same(gpu, cpu):
    for g, c in zip(gpu, cpu):
        assert g.shape == c.shape
        np.testing.assert_array_equal(g.view(np.uint8), c.view(np.uint8))


@pytest.mark.parametrize("grid,cluster", [((4, 2, 1), (2, 2, 1)), ((2, 2, 2), (1, 1, 2)),
                                          ((8, 1, 1), (4, 1, 1))])
def test_cluster_special_registers(grid, cluster):
    _needs_sm90()
    import cluster_kernels as ck
    from cluster_kernels import expected_specials
    k = ck.build_specials(grid, cluster)
    like = np.zeros((grid[0] * grid[1] * grid[2], len(ck.SPECIALS)), np.uint32)
    gpu, cpu = _run_both(k, [], [like])
    _same(gpu, cpu)
    np.testing.assert_array_equal(cpu[0], expected_specials(grid, cluster))


@pytest.mark.parametrize("n", [2, 4])
def test_mapa_getctarank_dsmem_loads(n):
    _needs_sm90()
    import cluster_kernels as ck
    threads = 64
    k = ck.build_mapa(n, threads)
    gpu, cpu = _run_both(k, [], [np.zeros((2 * n, threads * ck.MAPA_FIELDS), np.uint32)])
    _same(gpu, cpu)


@pytest.mark.parametrize("mode", ["st", "async"])
def test_dsmem_reduction_cluster_of_4(mode):
    _needs_sm90()
    import cluster_kernels as ck
    x = np.random.default_rng(4).standard_normal((12, 128)).astype(np.float32)
    gpu, cpu = _run_both(ck.build_reduce(mode, 4, 128), [x], [np.zeros((3, 128), np.float32)])
    _same(gpu, cpu)


def test_dsmem_atomics_and_red_async_cluster_of_4():
    _needs_sm90()
    import cluster_kernels as ck
    x = np.random.default_rng(5).integers(0, 1 << 20, (8, 64), dtype=np.uint32)
    gpu, cpu = _run_both(ck.build_atomics(4, 64), [x], [np.zeros((2, 3 * 64), np.uint32)])
    _same(gpu, cpu)
    rows = x.reshape(2, 4, 64).astype(np.uint64)
    want = np.stack([rows.sum(1), rows.max(1), rows.sum(1)], 1).reshape(2, -1)
    np.testing.assert_array_equal(cpu[0], want)


@pytest.mark.parametrize("swizzle", [0, 128])
def test_tma_multicast_cluster_of_2(swizzle):
    _needs_sm90()
    import cluster_kernels as ck
    br, bc = ck.MC_BOX
    a = np.random.default_rng(swizzle).standard_normal((4 * br - 3, bc)).astype(np.float32)
    gpu, cpu = _run_both(ck.build_multicast(swizzle), [a],
                         [np.zeros((4, 2 * br * bc), np.uint32)])
    _same(gpu, cpu)


def test_bulk_copies_cluster_of_2():
    _needs_sm90()
    import cluster_kernels as ck
    x = np.random.default_rng(6).integers(0, 1 << 30, (4, 64), dtype=np.uint32)
    gpu, cpu = _run_both(ck.build_bulk(64), [x], [np.zeros((4, 64), np.uint32),
                                                  np.zeros((2, 64), np.uint32)])
    _same(gpu, cpu)
    np.testing.assert_array_equal(cpu[1], x[1::2] * 3 + 1)
