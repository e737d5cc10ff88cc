"""The launcher on a fake GPU: launch limits (block, grid, shared memory, clusters,
cooperative and resident grids, programmatic dependent launches) and other array types
(``__cuda_array_interface__``).
"""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl
from ptxdsl.core.errors import LaunchError, TraceError
from ptxdsl.runtime import launcher as rlaunch
from launch_helpers import count_slow, rand, vadd_on
from runtime_fakes import f32_array, vadd_impl
from runtime_kernels import build_pdl_vadd, build_vadd


# ---------------------------------------------------------------- limits
def test_block_larger_than_the_kernel_fits(make_gpu):
    gpu = make_gpu(max_threads=128)
    k = vadd_on(gpu)
    with pytest.raises(LaunchError, match=r"256 threads but this kernel fits at most 128 .*32 "
                                          r"registers"):
        k(rand(8), rand(8))


def test_grid_over_the_device_limit(gpu):
    from ptxdsl import Tile, kernel, ptx
    from ptxdsl.core.types import f32

    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
            grid=lambda N: (1, N, 1), block=(32, 1, 1))
    def tall(X, Y):
        ptx.global_ptrs(X, Y)

    gpu.cu.register(tall)
    with pytest.raises(LaunchError, match=r"grid \(1, 70000, 1\) exceeds .* axis y"):
        tall(np.zeros(70000, np.float32))


def test_large_dynamic_shared_memory_opts_in_once(gpu):
    k = vadd_on(gpu)
    k(rand(8), rand(8), shared_mem=100 * 1024)
    k(rand(8), rand(8), shared_mem=100 * 1024)
    assert gpu.cu.calls["cuFuncSetAttribute"] == 1
    assert gpu.cu.launches[-1]["smem"] == 100 * 1024
    with pytest.raises(LaunchError, match="over the 232448 bytes"):
        k(rand(8), rand(8), shared_mem=300 * 1024)


def test_per_call_options_do_not_leak_into_the_fast_path(gpu, torch):
    k = vadd_on(gpu)
    a = torch.tensor_on(rand(64))
    k(a, a, shared_mem=4096)
    k(a, a, shared_mem=4096)
    assert len(rlaunch.prepare(k).entries) == 0
    k(a, a)
    k(a, a)
    assert [r["smem"] for r in gpu.cu.launches] == [4096, 4096, 0, 0]


def test_cluster_launch(gpu):
    k = vadd_on(gpu)
    k(rand(1024), rand(1024), cluster=(2, 1, 1))
    assert gpu.cu.launches[-1]["cluster"] == (2, 1, 1)
    with pytest.raises(LaunchError, match=r"grid \(3, 1, 1\) is not a multiple of cluster"):
        k(rand(600), rand(600), cluster=2)


def _on_every_path(gpu, torch, launcher, carried):
    """Launch through the general path, the fast path, a bound launch and a numpy call;
    ``carried(record)`` must hold for each launch the fake recorded."""
    misses = count_slow(launcher)
    for i in range(3):  # general path, then the fast path
        a, b = torch.tensor_on(rand(1000, i)), torch.tensor_on(rand(1000, i + 5))
        c = launcher(a, b)
        np.testing.assert_array_equal(c.numpy(), a.numpy() + b.numpy())
        assert carried(gpu.cu.launches[-1])
    assert len(misses) == 1
    bound = launcher.bind(a, b, c)
    bound(b.data_ptr(), a.data_ptr(), c.data_ptr())
    assert carried(gpu.cu.launches[-1])
    launcher(rand(100), rand(100))  # numpy, general path
    assert carried(gpu.cu.launches[-1])


def test_cooperative_kernels_launch_cooperatively_on_every_path(gpu, torch):
    mode = "params"
    k = build_vadd(f"vadd_coop_{mode}", cooperative=True)
    gpu.cu.register(k, vadd_impl)
    _on_every_path(gpu, torch, rlaunch.prepare(k, mode=mode), lambda r: r.get("cooperative"))


def test_pdl_kernels_carry_the_attribute_on_every_path(gpu, torch):
    """kernel(pdl=True): every launch is a cuLaunchKernelEx with programmatic stream
    serialization (general path, fast path, bound launch, numpy)."""
    mode = "params"
    k = build_pdl_vadd(f"vadd_pdl_{mode}")
    gpu.cu.register(k, vadd_impl)
    launcher = rlaunch.prepare(k, mode=mode)
    assert launcher.mode == "params" and launcher.pdl
    _on_every_path(gpu, torch, launcher, lambda r: r.get("pdl") and r["cluster"] is None)


def test_pdl_off_by_environment(gpu, monkeypatch):
    """PTXDSL_PDL=0: the same kernel launched plainly (its griddepcontrol then waits for
    nothing), e.g. to compare with and without."""
    monkeypatch.setenv("PTXDSL_PDL", "0")
    k = build_pdl_vadd("vadd_pdl_off")
    gpu.cu.register(k, vadd_impl)
    launcher = rlaunch.Launcher(k, mode="params")
    assert not launcher.pdl
    a, b = rand(300), rand(300, 1)
    np.testing.assert_array_equal(launcher(a, b), a + b)
    assert "pdl" not in gpu.cu.launches[-1] and gpu.cu.calls.get("cuLaunchKernelEx", 0) == 0


def test_cooperative_grid_must_be_resident(gpu):
    k = build_vadd("vadd_coop_big", cooperative=True)
    gpu.cu.register(k, vadd_impl)
    # The fake holds 2048 // 256 = 8 CTAs of 256 threads per SM, on 132 SMs.
    assert rlaunch.prepare(k).resident_ctas(0) == 8 * 132
    k(rand(256 * 8 * 132), rand(256 * 8 * 132))
    with pytest.raises(LaunchError, match=r"cooperative grid of 1057 CTAs must be resident at "
                                          r"once.*8 CTA\(s\) of this kernel per SM x 132 SMs"):
        k(rand(256 * 8 * 132 + 1), rand(256 * 8 * 132 + 1))
    assert not vadd_on(gpu, "vadd_plain").cooperative


def test_resident_ctas_must_fit_and_launch_plainly(gpu):
    """``resident=n``: a plain launch (no cooperative attribute) of a grid larger than
    the device holds, refused only when the device cannot hold ``n`` CTAs at once."""
    n = 256 * 8 * 132 * 2  # twice the CTAs the fake holds at once
    k = build_vadd("vadd_resident", resident=8 * 132)
    gpu.cu.register(k, vadd_impl)
    a, b = rand(n), rand(n, 1)
    np.testing.assert_array_equal(k(a, b), a + b)
    assert not gpu.cu.launches[-1].get("cooperative")
    k2 = build_vadd("vadd_resident_big", resident=8 * 132 + 1)
    gpu.cu.register(k2, vadd_impl)
    with pytest.raises(LaunchError, match=r"1057 of its 2112 CTAs \(resident=1057\) must be "
                                          r"resident at once.*make fewer CTAs wait"):
        k2(a, b)
    with pytest.raises(TraceError, match="resident must be a positive int"):
        build_vadd("vadd_resident_bad", resident=0)


def test_cluster_needs_hopper(make_gpu):
    gpu = make_gpu(devices=((8, 0),))
    k = build_vadd(arch="sm_80")
    gpu.cu.register(k)
    with pytest.raises(LaunchError, match="cannot launch clusters"):
        k(rand(512), rand(512), cluster=2)


# ---------------------------------------------------------------- other array types
class FakeCAI:
    """A __cuda_array_interface__ producer over fake-device (host) memory."""

    def __init__(self, array, stream=None):
        self.a = array
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str,
                                         "data": (array.ctypes.data, False), "strides": None,
                                         "version": 3, "stream": stream}


def test_cai_inputs_give_a_device_array(gpu, monkeypatch):
    monkeypatch.setattr(gpu.drv, "pointer_device", lambda ptr: 0, raising=False)
    k = vadd_on(gpu)
    a, b = rand(100, 1), rand(100, 2)
    c = k(FakeCAI(a), FakeCAI(b))
    from ptxdsl.runtime.memory import DeviceArray
    assert isinstance(c, DeviceArray)
    np.testing.assert_array_equal(c.copy_to_host(), a + b)
    np.testing.assert_array_equal(np.asarray(c), a + b)
    assert c.__cuda_array_interface__["shape"] == (100,)
    live = gpu.cu.live_allocations()
    c.free()
    assert gpu.cu.live_allocations() == live - 1


def test_cai_producer_stream_is_waited_for(gpu, monkeypatch):
    monkeypatch.setattr(gpu.drv, "pointer_device", lambda ptr: 0, raising=False)
    k = vadd_on(gpu)
    a = rand(16)
    k(FakeCAI(a, stream=0x500), FakeCAI(a, stream=0x500), stream=0x600)
    assert gpu.cu.calls.get("cuStreamWaitEvent") == 2
    k(FakeCAI(a, stream=1), FakeCAI(a, stream=1))  # legacy default = our stream 0
    assert gpu.cu.calls.get("cuStreamWaitEvent") == 2


def test_gpu_available_with_the_fake(gpu):
    assert ptxdsl.gpu_available() is True
    assert f32_array(0, 0).shape == (0,)


def test_dynamic_shared_memory_is_sized_raised_and_counted(gpu):
    """A kernel with a dynamic shared array: every launch passes its bytes, the function's
    limit is raised past 48 KiB before the first launch (and before an occupancy query),
    and resident_ctas counts with the kernel's own shared memory by default."""
    from ptxdsl import Tile, kernel, ptx, reg, smem
    from ptxdsl.core.types import f32, u32

    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
            grid=lambda N: (N // 256, 1, 1), block=(256, 1, 1), name="dyn_smem_copy")
    def dyn_copy(A, B):
        big = smem.alloc(f32, (256, 64), dynamic=True)  # 64 KiB
        pa, pb = ptx.global_ptrs(A, B)
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        off = (cta * 256 + tid) * 4
        a = reg.scalar(f32); ptx.inst.ld.global_.f32(a, ptx.addr(pa + off))
        big[tid, 63] = a
        ptx.bar.sync(0)
        ptx.inst.st.global_.f32(ptx.addr(pb + off), big[255 - tid, 63])

    assert dyn_copy.dynamic_shared == 64 * 1024
    assert ".extern .shared .align 16 .b8 smem0[];" in dyn_copy.ptx()

    def impl(pa, pb, n, *, grid, block):
        a, b = f32_array(pa, n), f32_array(pb, n)
        b[:] = a.reshape(-1, 256)[:, ::-1].reshape(-1)

    gpu.cu.register(dyn_copy, impl)
    launcher = rlaunch.prepare(dyn_copy)
    # 228 KiB per SM / (64 KiB + 1 KiB reserved) = 3 CTAs per SM, once the limit is raised.
    assert launcher.resident_ctas(0) == 3 * 132
    assert launcher.resident_ctas(0, smem=0) == 8 * 132
    x = rand(512)
    y = dyn_copy(x)
    assert gpu.cu.launches[-1]["smem"] == 64 * 1024
    np.testing.assert_array_equal(y, x.reshape(-1, 256)[:, ::-1].reshape(-1))
    np.testing.assert_array_equal(dyn_copy.interpret(x), y)


def test_resident_clusters_asks_the_driver_and_allows_sixteen(gpu):
    """``Launcher.resident_clusters``: cuOccupancyMaxActiveClusters for the kernel's
    cluster shape and dynamic shared memory; clusters of more than 8 CTAs get the
    non-portable attribute first (the driver refuses them without it)."""
    from ptxdsl import Tile, kernel, ptx, smem
    from ptxdsl.core.types import f32, u8

    def build(c, nbytes):
        @kernel(in_specs=(Tile("N", f32),), out_specs=(), grid=(c, 1, 1), block=(512, 1, 1),
                cluster=(c, 1, 1), arch="sm_90a", name=f"clusters{c}_{nbytes}")
        def body(A):
            if nbytes:
                smem.alloc(u8, (nbytes,), dynamic=True)
            ptx.cluster.sync()
        return body

    big = build(16, 150 * 1024)  # one CTA per SM: each of the 8 GPCs holds one cluster
    assert rlaunch.prepare(big).resident_clusters(0) == 8
    attrs = next(iter(gpu.cu.functions.values()))["attrs"]
    assert attrs["CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED"] == 1
    small = build(4, 0)          # four CTAs of 512 threads per SM
    assert rlaunch.prepare(small).resident_clusters(0) == 6 * 16 + 2 * 18
