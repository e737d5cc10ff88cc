"""Tensor maps and cluster launches on a fake GPU: what cuTensorMapEncodeTiled is asked,
the bounded cache of encodings, re-pointing per call (general and fast path), and
cuLaunchKernelEx with the kernel's cluster dims on the fast path."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.errors import LaunchError, TraceError
from ptxdsl.runtime.tensormaps import TensorMapCache
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import bf16, f32, u32, u64
from runtime_fakes import FakeCuda


def tma_kernel(name="tmak", tma=None, cluster=None, out_tma=False):
    """A kernel that names the tensor maps of A (and C): the runtime must fill them."""
    tma = tma or TMA(box=(64, 64), swizzle=128)

    @kernel(in_specs=(Tile("M", "K", bf16, tma=tma),),
            out_specs=(Tile("M", "K", bf16, tma=TMA(box=(32, 64)) if out_tma else None),),
            grid=(2, 1, 1), block=(128, 1, 1), name=name, cluster=cluster)
    def k(A, C):
        d = A.tma_desc()
        r = reg.scalar(u64, init=d)
        if out_tma:
            r += C.tma_desc()
        (pc,) = ptx.global_ptrs(C)
        ptx.inst.st.global_.u64(ptx.addr(pc), r)
    return k


def launched_tmaps(gpu, k):
    """(address, encode arguments) of each tensor map of the last launch."""
    params = gpu.cu.launches[-1]["params"]
    names = [p.kind for p in k.program().params]
    return [gpu.cu.decode_tmap(v) for v, kind in zip(params, names) if kind == "tmap"]


# ---------------------------------------------------------------- the description
def test_spec_encode_arguments_are_innermost_first():
    spec = TMA(box=(64, 32), swizzle=64, l2_promotion=128, oob_fill="nan").spec_for(
        bf16, (300, 96), (128, 1), address=0x1000)
    args = spec.encode_args(FakeCuda())
    dt, rank, addr, dims, strides, box, el, ilv, swz, l2, oob = args
    assert (dt, rank, addr) == ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 2, 0x1000)
    assert (dims, strides, box, el) == ([96, 300], [256], [32, 64], [1, 1])
    assert (ilv, swz, l2, oob) == ("CU_TENSOR_MAP_INTERLEAVE_NONE", "CU_TENSOR_MAP_SWIZZLE_64B",
                                   "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
                                   "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA")
    assert spec.box_bytes == 64 * 32 * 2


def test_split_and_pad_give_the_rank3_hopper_map():
    # pyptx's tma_rank=3: (H, W) -> (W/64, H, 64), box (bw/64, bh, 64 [+8 padded])
    t = TMA(box=(128, 64), swizzle=128, split=64)
    s = t.spec_for(bf16, (4096, 1024))
    assert (s.shape, s.strides, s.box) == ((16, 4096, 64), (128, 2048, 2), (1, 128, 64))
    p = TMA(box=(256, 64), split=64, pad=8).spec_for(bf16, (512, 256))
    assert (p.shape, p.box) == ((4, 512, 64), (1, 256, 72))
    assert t.static_box_bytes(bf16) == 128 * 64 * 2


@pytest.mark.parametrize("kw, strides, match", [
    (dict(box=(64, 128), swizzle=128), None, "wider than the 128-byte swizzle span"),
    (dict(box=(300, 64)), None, "1 to 256"),
    (dict(box=(8, 4)), None, "multiple of 16 bytes"),
    (dict(box=(8, 8)), (3, 1), "positive multiple of 16 bytes"),
])
def test_spec_rules_are_checked_before_the_driver(kw, strides, match):
    with pytest.raises(TraceError, match=match):
        TMA(**kw).spec_for(bf16, (512, 512), strides)


def test_extent_one_dims_get_a_legal_stride():
    """A (1, K) view's row stride may be anything (torch gives a transposed (K, 1) column 1
    element); TMA never steps along that dim, so the map uses the row's span instead (the
    GPU refused matmul(a, b) for a column-major a of one row before)."""
    s = TMA(box=(128, 64), swizzle=128).spec_for(bf16, (1, 72), (1, 1))
    assert s.strides == (144, 2)
    assert TMA(box=(8, 8)).spec_for(bf16, (1, 8), (1, 1)).strides == (16, 2)
    with pytest.raises(TraceError, match="positive multiple of 16 bytes"):
        TMA(box=(8, 8)).spec_for(bf16, (2, 8), (1, 1))     # two rows: the stride is used


def test_tma_settings_are_checked_at_definition():
    with pytest.raises(TraceError, match="swizzle"):
        TMA(box=(8, 8), swizzle=48)
    with pytest.raises(TraceError, match="pad= .* needs split"):
        TMA(box=(8, 8), pad=8)
    with pytest.raises(TraceError, match="no TMA settings"):
        @kernel(in_specs=(Tile(8, 8, bf16),), block=(32, 1, 1))
        def k(A):
            A.tma_desc()
        k.ptx()


def test_tmap_parameter_is_a_grid_constant_byte_array():
    k = tma_kernel()
    text = k.ptx()
    assert ".param .align 64 .b8 A_tmap[128]" in text
    assert "mov.b64 %rd0, A_tmap;" in text and "cvta.param.u64 %rd1, %rd0;" in text


# ---------------------------------------------------------------- the cache
def test_cache_is_bounded_and_counts(gpu):
    cache = TensorMapCache(gpu.drv, capacity=2)
    specs = [TMA(box=(8, 8)).spec_for(f32, (64, 64 + 4 * i)) for i in range(3)]
    cache.get(specs[0]), cache.get(specs[1]), cache.get(specs[0])
    assert (cache.hits, cache.misses, len(cache)) == (1, 2, 2)
    cache.get(specs[2])  # evicts specs[1], the least recently used
    cache.get(specs[0])
    assert (cache.hits, cache.misses, len(cache)) == (2, 3, 2)
    cache.get(specs[1])
    assert cache.misses == 4 and len(gpu.cu.tmap_encodes) == 4


def test_address_is_not_part_of_the_key():
    a = TMA(box=(8, 8)).spec_for(f32, (64, 64), address=0x1000)
    assert a.key == a.with_address(0x2000).key


# ---------------------------------------------------------------- launches
def bf16_host(shape):
    """Host bf16 data as numpy holds it: uint16 bit patterns."""
    return np.zeros(shape, np.uint16)


def test_launch_passes_the_encoded_map_pointing_at_the_tensor(gpu):
    k = tma_kernel()
    gpu.cu.register(k)
    a = bf16_host((256, 128))
    k(a)
    (m,) = launched_tmaps(gpu, k)
    assert m["dims"] == [128, 256] and m["strides"] == [256] and m["box"] == [64, 64]
    assert m["swizzle"] == "CU_TENSOR_MAP_SWIZZLE_128B"
    staged = gpu.cu.launches[-1]["params"][0]  # A_ptr, as staged on the (fake) device
    assert m["address"] == staged
    k(bf16_host((256, 128)))
    assert len(gpu.cu.tmap_encodes) == 1  # same shape: re-pointed, not re-encoded
    assert launched_tmaps(gpu, k)[0]["address"] == gpu.cu.launches[-1]["params"][0]
    k(bf16_host((512, 128)))  # a new shape (dynamic M): a new encoding
    assert len(gpu.cu.tmap_encodes) == 2
    assert launched_tmaps(gpu, k)[0]["dims"] == [128, 512]


def test_fast_path_repoints_without_encoding(gpu, torch):
    k = tma_kernel("tmafast", out_tma=True)
    gpu.cu.register(k)
    a0 = torch.tensor_on(np.zeros((128, 64), np.uint16))
    a0.dtype = torch.bfloat16
    k(a0)                         # general path: makes the entry
    launcher = k.runtime_cache["launcher"]
    slow = launcher.slow_calls
    encodes = len(gpu.cu.tmap_encodes)
    for i in range(3):
        a = torch.tensor_on(np.zeros((128, 64), np.uint16))
        a.dtype = torch.bfloat16
        out = k(a)
        maps = launched_tmaps(gpu, k)
        assert [m["address"] for m in maps] == [a.data_ptr(), out.data_ptr()]
    assert launcher.slow_calls == slow, "the fast path was not taken"
    assert len(gpu.cu.tmap_encodes) == encodes
    assert gpu.cu.calls["cuTensorMapReplaceAddress"] >= 6
    assert "REPOINT(tm[1], p1)" in launcher.source


def test_misaligned_tensor_is_refused_with_a_reason(gpu, torch):
    k = tma_kernel("tmamis")
    gpu.cu.register(k)
    base = np.zeros(128 * 64 + 8, np.uint16)
    a = torch.tensor_on(base[1:1 + 128 * 64].reshape(128, 64))
    a.dtype = torch.bfloat16
    with pytest.raises(LaunchError, match="16-byte aligned"):
        k(a)


def test_bad_shape_for_the_box_names_the_argument(gpu):
    k = tma_kernel("tmabad", tma=TMA(box=(64, 64), split=64))
    gpu.cu.register(k)
    with pytest.raises(LaunchError, match="tensor map of A .*multiples of 64"):
        k(bf16_host((64, 96)))


# ---------------------------------------------------------------- clusters
def cluster_kernel(name="clk"):
    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
            grid=lambda N: (N // 64, 1, 1), block=(64, 1, 1), name=name, cluster=(2, 1, 1))
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        r = reg.scalar(u32)
        ptx.inst.mov.u32(r, ptx.sreg("%cluster_ctarank"))
        ptx.inst.st.global_.u32(ptx.addr(py), r)
    return k


def test_cluster_kernel_launches_clusters_on_the_fast_path(gpu, torch):
    k = cluster_kernel()
    gpu.cu.register(k)
    x = torch.tensor_on(np.zeros(256, np.float32))
    k(x)
    launcher = k.runtime_cache["launcher"]
    slow = launcher.slow_calls
    for _ in range(3):
        k(torch.tensor_on(np.zeros(256, np.float32)))
    assert launcher.slow_calls == slow
    assert gpu.cu.launches[-1]["cluster"] == (2, 1, 1)
    assert gpu.cu.launches[-1]["grid"] == (4, 1, 1)
    assert gpu.cu.calls["cuLaunchKernelEx"] == 4
    # a per-call cluster= override goes the general way and leaves no entry behind
    k(torch.tensor_on(np.zeros(256, np.float32)), cluster=(4, 1, 1))
    assert gpu.cu.launches[-1]["cluster"] == (4, 1, 1)


def test_cluster_grid_must_divide(gpu):
    k = cluster_kernel("clk2")
    gpu.cu.register(k)
    with pytest.raises(LaunchError, match="not a multiple of cluster"):
        k(np.zeros(192, np.float32))
