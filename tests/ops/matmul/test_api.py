"""ptxdsl.ops.matmul on the CPU interpreter (the SIMT kernel) against float64 numpy:
shapes, layouts, batching, bias and activations, errors; the tile scheduler."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from paths import ROOT
import ptxdsl.interp  # noqa: F401  (the kernels run on it: a broken one fails here)
from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.errors import LaunchError
from ptxdsl.ops import matmul
from ptxdsl.ops.matmul.epilogue import reference as act_ref
from ptxdsl.ops.matmul.plan import Plan, choose, one_row, stages_for, SMEM_PER_CTA, tma_ok
from ptxdsl.ops.matmul.schedule import persistent_grid, tile_coords, tile_coords_py, tile_order
from ptxdsl.core.types import bf16, f16, f32, u32

SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RAGGED = [1, 7, 16, 65, 129]


def ints(rng, shape):
    """Integer-valued f16 in [-4, 4]: every product and sum is exact in f32 for K < 2^17/16."""
    return rng.integers(-4, 5, shape).astype(np.float16)


def ref(a, b, bias=None, act=None):
    z = a.astype(np.float64) @ b.astype(np.float64)
    if bias is not None:
        z = z + bias.astype(np.float64)
    return act_ref(z, act, np)


@SETTINGS
@given(m=st.sampled_from(RAGGED), n=st.sampled_from(RAGGED), k=st.sampled_from([1, 7, 65]),
       seed=st.integers(0, 2**16))
def test_integer_inputs_f32_out_are_bit_exact(m, n, k, seed):
    rng = np.random.default_rng(seed)
    a, b = ints(rng, (m, k)), ints(rng, (k, n))
    c = matmul(a, b, out_dtype=np.float32)
    assert c.dtype == np.float32 and c.shape == (m, n)
    np.testing.assert_array_equal(c, ref(a, b))


@pytest.mark.parametrize("a_t,b_t", [(False, False), (True, False), (False, True), (True, True)])
def test_row_and_column_major_operands_without_copies(a_t, b_t):
    rng = np.random.default_rng(3)
    m, n, k = 33, 20, 17
    a = ints(rng, (k, m)).T if a_t else ints(rng, (m, k))
    b = ints(rng, (n, k)).T if b_t else ints(rng, (k, n))
    np.testing.assert_array_equal(matmul(a, b, out_dtype="float32"), ref(a, b))


def test_strided_leading_dims_and_out():
    rng = np.random.default_rng(4)
    big_a, big_b = ints(rng, (40, 50)), ints(rng, (30, 70))
    a, b = big_a[3:20, 5:26], big_b[2:23, 1:40]       # row strides 50 and 70
    out = np.full((40, 64), np.nan, np.float32)[:17, 7:46]
    got = matmul(a, b, out=out, out_dtype=np.float32)
    assert got is out
    np.testing.assert_array_equal(out, ref(a, b))


def test_f16_output_within_one_rounding():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((65, 70)).astype(np.float16)
    b = rng.standard_normal((70, 31)).astype(np.float16)
    r = ref(a, b)
    c = matmul(a, b)
    assert c.dtype == np.float16
    # f32 accumulation then one rounding to f16: within an f16 ulp of the float64 result
    ulp = np.spacing(np.abs(r).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(c.astype(np.float64) - r) <= ulp + 1e-3 * np.abs(r).max())


@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu"])
def test_bias_and_activation_fused(act):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((19, 24)).astype(np.float16), \
        rng.standard_normal((24, 37)).astype(np.float16)
    bias = rng.standard_normal(37).astype(np.float32)
    c = matmul(a, b, bias=bias, activation=act, out_dtype=np.float32)
    r = ref(a, b, bias, act)
    # tanh.approx / ex2.approx: about 2^-10 relative in the activation
    assert np.max(np.abs(c - r)) <= 2e-3 * max(1.0, np.abs(r).max())


def test_batched_and_broadcast_operands():
    rng = np.random.default_rng(7)
    a3, b3, b2 = ints(rng, (3, 9, 11)), ints(rng, (3, 11, 5)), ints(rng, (11, 5))
    np.testing.assert_array_equal(matmul(a3, b3, out_dtype=np.float32), ref(a3, b3))
    np.testing.assert_array_equal(matmul(a3, b2, out_dtype=np.float32), ref(a3, b2))
    a2 = ints(rng, (9, 11))
    np.testing.assert_array_equal(matmul(a2, b3, out_dtype=np.float32), ref(a2, b3))


def test_k_zero_is_activation_of_bias():
    bias = np.array([-1.0, 2.0], np.float32)
    a, b = np.zeros((3, 0), np.float16), np.zeros((0, 2), np.float16)
    c = matmul(a, b, bias=bias, activation="relu", out_dtype=np.float32)
    np.testing.assert_array_equal(c, [[0.0, 2.0]] * 3)
    assert matmul(np.zeros((0, 4), np.float16), np.zeros((4, 3), np.float16)).shape == (0, 3)


@pytest.mark.parametrize("call,match", [
    (lambda a, b: matmul(a, b[:3]), "must equal b's first matrix dim"),
    (lambda a, b: matmul(a.astype(np.float32), b), "float16, bfloat16 and float8"),
    (lambda a, b: matmul(a, b, activation="tanh"), "activation must be"),
    (lambda a, b: matmul(a, b, out_dtype=np.int32), "out_dtype must be"),
    (lambda a, b: matmul(a, b, bias=np.zeros(3, np.float32)), r"bias must be a \(6,\)"),
    (lambda a, b: matmul(a, b, bias=np.zeros(6, np.float64)), "bias dtype"),
    (lambda a, b: matmul(a, b, out=np.zeros((4, 6), np.float32)), "out's dtype"),
    (lambda a, b: matmul(a, b, out=np.zeros((4, 5), np.float16)), "out must be"),
    (lambda a, b: matmul(a[None].repeat(2, 0), b[None].repeat(3, 0)), "batch sizes differ"),
    (lambda a, b: matmul(a[0], b), "2-D"),
])
def test_errors_name_the_callers_line(call, match):
    a, b = np.ones((4, 5), np.float16), np.ones((5, 6), np.float16)
    with pytest.raises(LaunchError, match=match) as e:
        call(a, b)
    assert "test_api.py" in str(e.value)


# ---------------------------------------------------------------- plan and scheduler
def test_plan_fits_shared_memory():
    for dt in (f16, bf16):
        for odt in (f16, bf16, f32):
            p = choose(4096, 4096, 4096, dt, odt)
            assert p.smem_bytes(dt, odt) <= SMEM_PER_CTA
            assert p.stages == stages_for(p, dt, odt) >= 3
    assert Plan().tiles(129, 257) == (2, 2)        # M rounded up to whole clusters
    assert tma_ok(0, 8, 4, bf16) and not tma_ok(0, 7, 4, bf16) and not tma_ok(8, 8, 4, bf16)


def test_one_row_splits_k_only_for_tiles_it_can_fill():
    """plan.one_row: a split never leaves the grid less busy than the unsplit plan, takes
    128-wide tiles, and is honoured when forced; every plan fits with 3 or more stages."""
    for m in (1, 16, 128):
        for n in (4096, 6144, 8192, 14336, 28672):
            for k in (128, 4096, 8192):
                p = one_row(m, n, k, bf16, bf16)
                assert p.split in (1, 2, 4) and (p.split == 1 or p.bn == 128)
                for odt in (bf16, f32):
                    q = one_row(m, n, k, bf16, odt)
                    assert q.smem_bytes(bf16, odt) <= SMEM_PER_CTA and q.stages >= 3
    assert one_row(16, 4096, 128, bf16, bf16).split == 1    # 2 k-blocks: nothing to split
    assert choose(16, 4096, 4096, bf16, split=2).split == 2
    with pytest.raises(ValueError, match="split"):
        Plan(cluster=2, split=2)


def test_split_k_ranges_cover_k_once():
    """splitk.k_range on the interpreter: the ranks' k-blocks tile [0, nk) in order."""
    from ptxdsl.ops.matmul.splitk import k_range
    cases = [(nk, s) for nk in (1, 3, 7, 64, 65) for s in (2, 3, 4)]

    @kernel(in_specs=(), out_specs=(Tile(len(cases) * 8, u32),), block=(1, 1, 1))
    def ranges(R):
        (pr,) = ptx.global_ptrs(R)
        for i, (nk, s) in enumerate(cases):
            nkr = reg.scalar(u32, init=nk)
            for r in range(s):
                rr = reg.scalar(u32, init=r)
                lo, hi = k_range(nkr, rr, s)
                ptx.inst.st.global_.u32(ptx.addr(pr + (i * 8 + 2 * r) * 4), lo)
                ptx.inst.st.global_.u32(ptx.addr(pr + (i * 8 + 2 * r + 1) * 4), hi)

    (out,) = (ranges.interpret(),)
    out = np.asarray(out).reshape(len(cases), 4, 2)
    for (nk, s), got in zip(cases, out):
        bounds = [tuple(int(v) for v in got[r]) for r in range(s)]
        assert bounds[0][0] == 0 and bounds[-1][1] == nk
        assert all(bounds[r][1] == bounds[r + 1][0] for r in range(s - 1))
        assert max(h - lo for lo, h in bounds) - min(h - lo for lo, h in bounds) <= 1


@given(rows=st.integers(1, 40), cols=st.integers(1, 40), group=st.sampled_from([1, 2, 8]))
@settings(max_examples=40, deadline=None)
def test_grouped_order_covers_every_tile_once(rows, cols, group):
    order = tile_order(rows, cols, group)
    assert sorted(order) == [(r, c) for r in range(rows) for c in range(cols)]
    # within a full group, consecutive tiles walk down a column first
    if rows >= group > 1 and cols > 1:
        assert order[:group] == [(r, 0) for r in range(group)]


def test_persistent_grid():
    assert persistent_grid(6, 132, 2) == 6
    # balanced: 500 cluster tiles on 66 slots take 8 rounds; 63 clusters do too
    assert persistent_grid(1000, 132, 2) == 126
    assert persistent_grid(2048, 132, 2) == 128          # 8192^3 in 128 x 256 tiles: 16 rounds
    assert persistent_grid(132, 132, 1) == 132           # one full round stays one round


@pytest.mark.parametrize("tiles,sms,cluster", [(t, s, c) for t in (1, 7, 131, 133, 264, 1000,
                                                                   2048, 8191)
                                               for s in (2, 114, 132) for c in (1, 2, 4)])
def test_balanced_grid_keeps_the_rounds(tiles, sms, cluster):
    """The balanced grid is never larger and never takes more rounds than one per SM."""
    units, slots = -(-tiles // cluster), max(1, sms // cluster)
    full = max(cluster, min(units, slots) * cluster)     # one CTA per SM, in whole clusters
    got = persistent_grid(tiles, sms, cluster)
    assert got % cluster == 0 and cluster <= got <= full
    assert -(-units // (got // cluster)) == -(-units // (full // cluster))


def test_device_tile_coords_match_the_python_model():
    rows, cols, group, n = 7, 5, 3, 35

    @kernel(in_specs=(), out_specs=(Tile(n, u32), Tile(n, u32)), block=(64, 1, 1))
    def coords(R, C):
        pr, pc = ptx.global_ptrs(R, C)
        t = reg.scalar(u32); ptx.inst.mov.u32(t, ptx.special.tid.x())
        nr = reg.scalar(u32, init=rows)
        with ptx.if_(t < n):
            r, c = tile_coords(t, nr, cols, group)
            ptx.inst.st.global_.u32(ptx.addr(pr + t * 4), r)
            ptx.inst.st.global_.u32(ptx.addr(pc + t * 4), c)

    r, c = coords.interpret()
    assert list(zip(r.tolist(), c.tolist())) == [tile_coords_py(t, rows, cols, group)
                                                 for t in range(n)]


class _FakeHopper:
    """Stands in for the Hopper kernel of the given operand majors: records what it was
    given, computes with numpy."""

    name = "fake_hopper"

    def __init__(self):
        self.calls = []
        self.majors = None

    def interpret(self, ka, kb, out):
        a_major, b_major = self.majors
        self.calls.append((ka, kb, a_major, b_major))
        a = ka if a_major == "K" else ka.T
        b = kb.T if b_major == "K" else kb
        out[...] = (a.astype(np.float64) @ b.astype(np.float64)).astype(out.dtype)
        return out

    __call__ = interpret


@pytest.mark.parametrize("a_t,b_t", [(False, True), (False, False), (True, True), (True, False)])
def test_sm90_dispatch_gives_the_hopper_kernel_operands_in_place(monkeypatch, a_t, b_t):
    """On an sm_90 device every aligned layout runs the Hopper kernel, reading each operand
    in place in its own major: a row-major a and a transposed b K-major, a column-major a
    and a row-major b MN-major (no copies)."""
    from runtime_fakes import fake_sm90_dispatch
    fake = _FakeHopper()

    def hopper_kernel(m, n, k, dt, odt, bdt, act, sms, a_major, b_major, device, bt=None,
                      scaled=False, smem_scales=False):
        fake.majors = (a_major, b_major)
        fake.device = device
        return fake
    fake_sm90_dispatch(monkeypatch, hopper_kernel)
    rng = np.random.default_rng(8)
    m, n, k = 24, 40, 32
    a = ints(rng, (k, m)).T if a_t else ints(rng, (m, k))
    b = ints(rng, (n, k)).T if b_t else ints(rng, (k, n))
    c = matmul(a, b, out_dtype=np.float32)
    np.testing.assert_array_equal(c, ref(a, b))
    (ka, kb, a_major, b_major), = fake.calls
    assert (a_major, b_major) == ("MN" if a_t else "K", "K" if b_t else "MN")
    assert fake.device == "H100"                   # no DRAM figures: the H100's tables
    assert ka.strides[1] == 2 and kb.strides[1] == 2            # row-major views ...
    assert np.shares_memory(ka, a) and np.shares_memory(kb, b)  # ... of the operands
    # an odd row stride (not a multiple of 16 bytes) is not TMA's: the SIMT kernel runs
    fake.calls.clear()
    odd = ints(rng, (m, k + 1))[:, :k]
    np.testing.assert_array_equal(matmul(odd, b, out_dtype=np.float32), ref(odd, b))
    assert fake.calls == []


def test_device_class_reads_the_dram_bandwidth():
    from ptxdsl.ops.matmul.plan import device_class
    from ptxdsl.runtime.driver import DeviceInfo

    def info(clock, bus):
        return DeviceInfo(ordinal=0, name="x", cc=(9, 0), total_mem=80 << 30,
                          max_threads_per_block=1024, max_block=(1024, 1024, 64),
                          max_grid=(2**31 - 1, 65535, 65535), max_smem_per_block=48 << 10,
                          max_smem_per_block_optin=227 << 10, sm_count=132,
                          cluster_launch=True, l2_bytes=50 << 20, mem_clock_khz=clock,
                          mem_bus_bits=bus)
    assert device_class(info(2_619_000, 5120)) == "H100"      # 3.35 TB/s
    assert device_class(info(3_201_000, 6144)) == "H200"      # 4.9 TB/s
    assert device_class(None) == device_class(info(0, 0)) == "H100"
