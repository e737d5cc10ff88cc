"""The launcher on a fake GPU: the general path, the fast path, caches, contexts, errors.

``runtime_fakes.FakeCuda`` stands in for cuda.bindings (device memory is host
memory), so everything down to the packed kernel parameters is checked here;
tests/gpu/test_runtime_gpu.py repeats the essentials on a real GPU.
"""
from __future__ import annotations

import sys
import threading
import types

import numpy as np
import pytest

import ptxdsl
from ptxdsl import toolchain
from ptxdsl.errors import LaunchError, ToolchainError, TraceError
from ptxdsl.runtime import cache as rcache
from ptxdsl.runtime import driver as rdriver
from ptxdsl.runtime import launcher as rlaunch
from ptxdsl.runtime.driver import CudaError
from ptxdsl.runtime import fastpath as rfast
from ptxdsl.runtime import torch_private
from runtime_fakes import (CUresult, FakeCtypesLauncher, cpu_torch_as_cuda, f32_array,
                           fake_driver, fake_torch_module, vadd_impl)
from runtime_kernels import (build_copy_bf16, build_fault, build_pdl_vadd, build_scale_rows,
                             build_vadd, build_vadd4)


@pytest.fixture
def make_gpu(monkeypatch, tmp_path):
    """Install a fake GPU (or several): ``gpu = make_gpu(devices=((9, 0),))``."""
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PTXDSL_COMPILER", "jit")  # no ptxas needed unless a test says so
    for var in ("PTXDSL_LAUNCH", "PTXDSL_SYNC", "PTXDSL_INTERPRET", "PTXDSL_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(rcache, "MODULES", rcache.ModuleCache())
    monkeypatch.setattr(rcache, "DISK", rcache.DiskCache())

    def make(**kw):
        drv, cu = fake_driver(monkeypatch, **kw)
        return types.SimpleNamespace(drv=drv, cu=cu)

    return make


@pytest.fixture
def gpu(make_gpu):
    return make_gpu()


@pytest.fixture
def torch(monkeypatch):
    t = fake_torch_module()
    monkeypatch.setitem(sys.modules, "torch", t)
    return t


def vadd_on(gpu, name="vadd"):
    k = build_vadd(name)
    gpu.cu.register(k, vadd_impl)
    return k


def count_slow(launcher):
    """Wrap the general path of ``launcher`` to count how often the fast path missed."""
    calls = []
    slow = launcher._g["SLOW"]

    def counting(args, stream, kw):
        calls.append(1)
        return slow(args, stream, kw)

    launcher._g["SLOW"] = counting
    return calls


def rand(n, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


# ---------------------------------------------------------------- numpy
def test_numpy_in_numpy_out(gpu):
    k = vadd_on(gpu)
    a, b = rand(1000, 1), rand(1000, 2)
    c = k(a, b)
    assert isinstance(c, np.ndarray) and c.dtype == np.float32
    np.testing.assert_array_equal(c, a + b)
    rec = gpu.cu.launches[-1]
    assert rec["grid"] == (4, 1, 1) and rec["block"] == (256, 1, 1)
    assert rec["params"][3] == 1000
    assert gpu.cu.live_allocations() == 0  # staging buffers freed


def test_numpy_explicit_outputs_are_filled(gpu):
    k = vadd_on(gpu)
    a, b = rand(300, 1), rand(300, 2)
    out = np.full(300, 7, np.float32)
    assert k(a, b, out) is out
    np.testing.assert_array_equal(out, a + b)
    wide = np.zeros(600, np.float32)
    k(a, b, wide[::2])  # a strided output view is filled too
    np.testing.assert_array_equal(wide[::2], a + b)


def test_numpy_strided_inputs_are_staged(gpu):
    k = vadd_on(gpu)
    a = rand(800, 3)
    np.testing.assert_array_equal(k(a[::2], a[1::2]), a[::2] + a[1::2])


def test_no_device_memory_leak_over_many_numpy_calls(gpu):
    k = vadd_on(gpu)
    a = rand(64)
    for _ in range(500):
        k(a, a)
    assert gpu.cu.live_allocations() == 0


# ---------------------------------------------------------------- dynamic shapes
def test_one_module_serves_every_n(gpu):
    k = vadd_on(gpu)
    for n in (1000, 5000, 1, 257):
        a, b = rand(n, n), rand(n, n + 1)
        np.testing.assert_array_equal(k(a, b), a + b)
        assert gpu.cu.launches[-1]["params"][3] == n
        assert gpu.cu.launches[-1]["grid"] == ((n + 255) // 256, 1, 1)
    assert gpu.cu.loads == [("ptx", 0)]
    assert len(rcache.MODULES) == 1


def test_zero_size_skips_the_launch(gpu):
    k = vadd_on(gpu)
    c = k(np.zeros(0, np.float32), np.zeros(0, np.float32))
    assert c.shape == (0,) and gpu.cu.launches == []


def test_row_stride_parameter(gpu, torch):
    k = build_scale_rows(64)
    gpu.cu.register(k)
    wide = torch.tensor_on(rand(8 * 100).reshape(8, 100))
    k(wide[:, 10:74])
    ptr_x, ptr_y, m, sx = gpu.cu.launches[-1]["params"]
    assert (m, sx) == (8, 100)
    assert ptr_x == wide.data_ptr() + 40


# ---------------------------------------------------------------- the torch fast path
def test_fast_path_after_first_call(gpu, torch):
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    misses = count_slow(launcher)
    a, b = torch.tensor_on(rand(1000, 1)), torch.tensor_on(rand(1000, 2))
    c1 = k(a, b)
    assert len(misses) == 1 and len(launcher.entries) == 1
    c2 = k(a, b)
    assert len(misses) == 1, "second call with the same signature must take the fast path"
    assert isinstance(c2, torch.Tensor) and c2 is not c1
    np.testing.assert_array_equal(c2.numpy(), a.numpy() + b.numpy())
    out = torch.empty((1000,), dtype=torch.float32, device=torch.device("cuda", 0))
    assert k(a, b, out) is out  # explicit output: one more miss, then fast
    assert k(a, b, out) is out
    assert len(misses) == 2
    np.testing.assert_array_equal(out.numpy(), a.numpy() + b.numpy())


def test_fast_path_packs_new_pointers_every_call(gpu, torch):
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    misses = count_slow(launcher)
    for i in range(20):
        a, b = torch.tensor_on(rand(500, i)), torch.tensor_on(rand(500, i + 100))
        c = launcher(a, b)
        np.testing.assert_array_equal(c.numpy(), a.numpy() + b.numpy())
    assert len(misses) == 1


def test_fast_path_reads_each_pointer_once(gpu, torch):
    k = vadd_on(gpu)
    a, b = torch.tensor_on(rand(100)), torch.tensor_on(rand(100))
    out = torch.empty((100,), dtype=torch.float32, device=torch.device("cuda", 0))
    k(a, b, out)
    before = a.data_ptr_calls
    k(a, b, out)
    assert a.data_ptr_calls - before == 1


def test_new_shape_is_a_new_entry_not_a_new_module(gpu, torch):
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    for n in (10, 20, 30, 10):
        launcher(torch.tensor_on(rand(n)), torch.tensor_on(rand(n)))
    assert len(launcher.entries) == 3 and gpu.cu.loads == [("ptx", 0)]


def test_entries_are_bounded(gpu, torch, monkeypatch):
    monkeypatch.setattr(rlaunch, "_MAX_ENTRIES", 3)
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    for n in range(1, 12):
        launcher(torch.tensor_on(rand(n)), torch.tensor_on(rand(n)))
    assert len(launcher.entries) <= 3


def test_torch_current_stream_and_explicit_stream(gpu, torch):
    k = vadd_on(gpu)
    a, b = torch.tensor_on(rand(64)), torch.tensor_on(rand(64))
    torch.raw_stream = 0x1234
    k(a, b)
    k(a, b)
    assert [r["stream"] for r in gpu.cu.launches] == [0x1234, 0x1234]
    k(a, b, stream=0x99)

    class TorchStream:
        cuda_stream = 0x77

    k(a, b, stream=TorchStream())
    assert [r["stream"] for r in gpu.cu.launches[2:]] == [0x99, 0x77]


def test_fast_path_still_checks_alignment(gpu, torch):
    k = build_vadd4()
    gpu.cu.register(k)
    flat = np.zeros(64 * 4 + 16, np.float32)
    start = (-flat.ctypes.data // 4) % 4
    good = torch.tensor_on(flat[start:start + 256].reshape(64, 4))
    k(good, good)
    k(good, good)
    bad = torch.tensor_on(flat[start + 1:start + 257].reshape(64, 4))
    with pytest.raises(LaunchError, match="not 16-byte aligned"):
        k(bad, bad)


def test_fast_path_refuses_what_the_general_path_refuses(gpu, torch):
    k = vadd_on(gpu)
    a = torch.tensor_on(rand(64))
    k(a, a)
    with pytest.raises(LaunchError, match="torch tensor on cpu"):
        k(torch.tensor_on(rand(64), -1), a)
    with pytest.raises(LaunchError, match="float16"):
        k(torch.tensor_on(rand(64).astype(np.float16)), a)
    with pytest.raises(LaunchError, match="is not contiguous"):
        k(torch.tensor_on(rand(128))[::2], a)


def test_generated_source_is_specialised(gpu, torch):
    src = rlaunch.prepare(build_vadd4()).source
    assert "& 15" in src  # the alignment masks are written out
    assert "a0.device" in src and "for " not in src.split("def KEY_ALL")[0]
    assert "e[0](a0, a1, a2)" in src and "e[0](a0, a1)" in src  # the entries' guards


@pytest.mark.parametrize("mode", ["params", "ctypes"])
def test_every_launch_mode_packs_the_same_parameters(gpu, torch, mode, monkeypatch):
    monkeypatch.setattr(rdriver, "CtypesLauncher", lambda coop=False: FakeCtypesLauncher(gpu.cu))
    k = vadd_on(gpu, f"vadd_{mode}")
    launcher = rlaunch.prepare(k, mode=mode)
    assert launcher.mode == mode
    misses = count_slow(launcher)
    for i in range(3):
        a, b = torch.tensor_on(rand(300, i)), torch.tensor_on(rand(300, i + 9))
        c = launcher(a, b)
        np.testing.assert_array_equal(c.numpy(), a.numpy() + b.numpy())
        assert gpu.cu.launches[-1]["params"] == [a.data_ptr(), b.data_ptr(), c.data_ptr(), 300]
    assert len(misses) == 1


def test_launch_mode_from_environment(gpu, monkeypatch):
    monkeypatch.setattr(rdriver, "CtypesLauncher", lambda coop=False: FakeCtypesLauncher(gpu.cu))
    monkeypatch.setenv("PTXDSL_LAUNCH", "ctypes")
    assert rlaunch.Launcher(build_vadd()).mode == "ctypes"
    monkeypatch.setenv("PTXDSL_LAUNCH", "warp-speed")
    with pytest.raises(LaunchError, match="PTXDSL_LAUNCH"):
        rlaunch.Launcher(build_vadd())


def test_threads_share_a_launcher_safely(gpu, torch):
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    errors = []

    def worker(seed):
        try:
            for i in range(40):
                a, b = torch.tensor_on(rand(256, seed * 1000 + i)), torch.tensor_on(rand(256, i))
                c = launcher(a, b)
                np.testing.assert_array_equal(c.numpy(), a.numpy() + b.numpy())
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_concurrent_first_calls_compile_once(gpu, torch, monkeypatch):
    k = vadd_on(gpu)
    built = []
    real = rlaunch.load_function

    def counting(*a, **kw):
        built.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(rlaunch, "load_function", counting)
    barrier = threading.Barrier(8)
    results = []

    def first_call(i):
        barrier.wait()
        a = torch.tensor_on(rand(100, i))
        results.append(np.array_equal(k(a, a).numpy(), a.numpy() * 2))

    threads = [threading.Thread(target=first_call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 8
    assert built == [1] and gpu.cu.loads == [("ptx", 0)]


def test_warm_prepares_without_launching(gpu, torch):
    k = vadd_on(gpu)
    a = torch.tensor_on(rand(128))
    launcher = rlaunch.prepare(k, a, a)
    assert gpu.cu.launches == [] and len(launcher.entries) == 1
    misses = count_slow(launcher)
    launcher(a, a)
    assert misses == [] and len(gpu.cu.launches) == 1


def test_kernel_call_goes_through_the_cached_launcher(gpu):
    k = vadd_on(gpu)
    k(rand(8), rand(8))
    assert isinstance(k.runtime_cache["launcher"], rlaunch.Launcher)
    assert rlaunch.prepare(k) is k.runtime_cache["launcher"]


def test_kernel_call_is_the_launchers_call(gpu):
    from ptxdsl.kernel import Kernel
    k, k2 = vadd_on(gpu), vadd_on(gpu, "vadd_two")
    launcher = rlaunch.prepare(k)
    # No Kernel.__call__ in between: the kernel object's call is the generated function.
    assert type(k).__call__ is launcher._g["__call__"]
    assert isinstance(k, Kernel) and type(k).__name__ == "Kernel"
    assert rlaunch.prepare(k) is launcher and type(k).__call__ is launcher._g["__call__"]
    # each kernel is made with a class of its own (never swapped afterwards), whose call
    # stays Kernel.__call__ until the kernel has a launcher
    assert type(k2) is not type(k) and type(k2).__call__ is Kernel.__call__
    np.testing.assert_array_equal(k2(rand(8), rand(8, 1)), rand(8) + rand(8, 1))
    assert type(k2).__call__ is rlaunch.prepare(k2)._g["__call__"] and type(k2) is not type(k)
    misses = count_slow(launcher)
    np.testing.assert_array_equal(k(rand(8), rand(8, 1)), rand(8) + rand(8, 1))
    assert len(misses) == 1  # numpy: the general path, through the routed call


def test_allocating_fast_path_after_a_torch_device_switch(make_gpu, torch):
    gpu = make_gpu(devices=((9, 0), (9, 0)))
    k = vadd_on(gpu)
    a = torch.tensor_on(rand(32), 0)
    k(a, a)
    k(a, a)
    gpu.drv.enter(1)  # `with torch.cuda.device(1):`
    torch.current_device_index = 1
    c = k(a, a)  # the fast path's allocator would use the current device: not here
    assert c.get_device() == 0
    np.testing.assert_array_equal(c.numpy(), a.numpy() * 2)
    assert gpu.cu.launches[-1]["device"] == 0 and gpu.drv.current_device() == 1


# ---------------------------------------------------------------- the fast path with real torch
# CPU tensors posing as cuda:0 tensors (runtime_fakes.cpu_torch_as_cuda): the fast path
# runs as it does on a GPU, with torch's own tensor guards and allocator.
@pytest.fixture
def real_torch(monkeypatch):
    pytest.importorskip("torch")
    return cpu_torch_as_cuda(monkeypatch)


def test_real_torch_fast_path_uses_the_tensor_guard(gpu, real_torch):
    torch = real_torch
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    misses = count_slow(launcher)
    a, b = torch.randn(1000), torch.randn(1000)
    out = torch.empty(1000)
    c1, c2 = k(a, b), k(a, b)
    k(a, b, out)
    k(a, b, out)
    assert len(misses) == 2 and len(launcher.entries) == 2
    assert torch.equal(c2, a + b) and torch.equal(out, a + b) and c2 is not c1
    assert c2.shape == (1000,) and c2.stride() == (1,) and c2.dtype == torch.float32
    hot_in, hot_all = launcher._g["HOT_IN"], launcher._g["HOT_ALL"]
    assert isinstance(hot_in, rfast.Entry) and isinstance(hot_all, rfast.Entry)
    assert type(hot_in[0].__self__).__name__ == "TensorGuards"  # a C++ guard, not the key
    assert hot_in[0](a, b) and not hot_in[0](a, b[:999])
    for i in range(5):  # new tensors of the same signature: guard hits, new pointers
        x, y = torch.randn(1000), torch.randn(1000)
        assert torch.equal(k(x, y), x + y)
        assert gpu.cu.launches[-1]["params"][:2] == [x.data_ptr(), y.data_ptr()]
    assert len(misses) == 2


def test_real_torch_same_shape_other_layout_or_dtype_misses(gpu, real_torch):
    torch = real_torch
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    misses = count_slow(launcher)
    a = torch.randn(64)
    k(a, a.clone())
    k(a, a.clone())
    assert len(misses) == 1
    with pytest.raises(LaunchError, match="is not contiguous"):
        k(torch.randn(128)[::2], a)  # same shape, stride 2
    with pytest.raises(LaunchError, match="float16"):
        k(torch.randn(64).half(), a)
    with pytest.raises(LaunchError, match="float16"):
        k(a, a.clone(), torch.empty(64, dtype=torch.float16))
    assert len(misses) == 4


def test_real_torch_misaligned_tensor_of_the_same_signature_misses(gpu, real_torch):
    torch = real_torch
    k = build_vadd4()
    gpu.cu.register(k)
    flat = torch.zeros(64 * 4 + 4)
    assert flat.data_ptr() % 16 == 0
    good, bad = flat[:256].view(64, 4), flat[1:257].view(64, 4)
    assert good.shape == bad.shape and good.stride() == bad.stride()
    k(good, good.clone())
    k(good, good.clone())
    e = rlaunch.prepare(k)._g["HOT_IN"]
    assert e[0](bad, good.clone())  # the guard cannot tell: the alignment mask must
    with pytest.raises(LaunchError, match="not 16-byte aligned"):
        k(bad, good.clone())
    with pytest.raises(LaunchError, match="not 16-byte aligned"):
        k(good, good.clone(), flat[1:257].view(64, 4))


def test_real_torch_new_row_stride_is_a_new_entry(gpu, real_torch):
    torch = real_torch
    k = build_scale_rows(64)
    gpu.cu.register(k)
    launcher = rlaunch.prepare(k)
    w100, w128 = torch.randn(8, 100), torch.randn(8, 128)
    for wide, start in ((w100, 10), (w100, 10), (w128, 0), (w128, 0), (w100, 10)):
        y = k(wide[:, start:start + 64])
        assert y.shape == (8, 64) and y.stride() == (64, 1)  # outputs are contiguous
        ptr_x, ptr_y, m, sx = gpu.cu.launches[-1]["params"]
        assert (m, sx) == (8, wide.shape[1]) and ptr_y == y.data_ptr()
        assert ptr_x == wide.data_ptr() + 4 * start
    assert len(launcher.entries) == 2


def test_real_torch_aliased_grad_and_inference_mode_calls(gpu, real_torch):
    torch = real_torch
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    misses = count_slow(launcher)
    a = torch.randn(256)
    k(a, a)
    for _ in range(3):  # the same tensor twice: the guard refuses aliases, the key hits
        assert torch.equal(k(a, a), a * 2)
    w = torch.randn(256, requires_grad=True)
    with torch.no_grad():
        assert torch.equal(k(a, w), a + w)  # requires_grad: the guard differs, the key not
    with torch.inference_mode():
        assert torch.equal(k(a, a.clone()), a * 2)
    assert len(misses) == 1


def test_real_torch_allocates_the_general_paths_dtype(gpu, real_torch):
    torch = real_torch
    k = build_copy_bf16()
    gpu.cu.register(k)
    x = torch.randn(99).to(torch.bfloat16)
    y1, y2 = k(x), k(x)
    assert y1.dtype == y2.dtype == torch.bfloat16 and y2.shape == (99,)


def test_real_torch_private_helpers_can_be_turned_off(gpu, real_torch, monkeypatch):
    torch = real_torch
    monkeypatch.setenv("PTXDSL_TORCH_PRIVATE", "0")
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    misses = count_slow(launcher)
    a, b, out = torch.randn(64), torch.randn(64), torch.empty(64)
    k(a, b, out)
    k(a, b, out)
    assert len(misses) == 1 and torch.equal(out, a + b)
    assert launcher._g["HOT_ALL"][0] is torch_private.never  # the key found it
    e = launcher.entries[launcher._g["KEY_ALL"]((a, b, out))]
    assert e is launcher._g["HOT_ALL"]


def test_tensor_guards_are_used_only_when_they_check_what_the_fast_path_needs():
    torch = pytest.importorskip("torch")
    from torch._C._dynamo import guards
    assert torch_private._checked_tensor_guards(torch, guards) is guards.TensorGuards

    class Lax:
        def __init__(self, *tensors, **kw):
            self.check = lambda *a: True

    assert torch_private._checked_tensor_guards(torch, types.SimpleNamespace(TensorGuards=Lax)) is None
    assert torch_private._checked_tensor_guards(torch, None) is None
    old = types.SimpleNamespace(__version__="1.13.1", empty=torch.empty)
    assert torch_private._checked_tensor_guards(old, guards) is None


def _gil_releasing_launches(gpu, monkeypatch):
    """The real cuLaunchKernel reads the parameters with the GIL released: let other
    threads run (and pack their pointers) between the call and the read."""
    import time
    real = gpu.cu.cuLaunchKernel

    def launch(*a):
        time.sleep(0.0002)
        return real(*a)

    monkeypatch.setattr(gpu.cu, "cuLaunchKernel", launch)


def test_real_torch_threads_never_launch_each_others_pointers(gpu, real_torch, monkeypatch):
    torch = real_torch
    _gil_releasing_launches(gpu, monkeypatch)
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    n = 512
    a0 = torch.randn(n)
    launcher(a0, a0)  # entries made (and owned) by this thread
    launcher(a0, a0, torch.empty(n))
    errors = []
    start = threading.Barrier(5)

    def worker(seed):
        try:
            start.wait()
            g = torch.Generator().manual_seed(seed)
            for i in range(30):
                a, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
                if i % 2:
                    c = launcher(a, b)
                else:
                    c = torch.empty(n)
                    launcher(a, b, c)
                if not torch.equal(c, a + b):
                    errors.append(f"thread {seed}, call {i}: wrong result")
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(1, 5)]
    for t in threads:
        t.start()
    worker(0)  # the owner launches at the same time
    for t in threads:
        t.join()
    assert errors == []
    assert launcher.slow_calls == 2


def test_real_torch_bound_launch_from_two_threads(gpu, real_torch, monkeypatch):
    torch = real_torch
    _gil_releasing_launches(gpu, monkeypatch)
    k = vadd_on(gpu)
    a, b, c = torch.randn(300), torch.randn(300), torch.empty(300)
    run = rlaunch.prepare(k).bind(a, b, c)
    errors = []

    def worker(seed):
        for _ in range(20):
            x, y, z = torch.randn(300), torch.randn(300), torch.empty(300)
            run(x.data_ptr(), y.data_ptr(), z.data_ptr())
            if not torch.equal(z, x + y):
                errors.append(seed)

    t = threading.Thread(target=worker, args=(1,))
    t.start()
    worker(0)  # the thread that bound it, at the same time
    t.join()
    assert errors == []


def test_fake_torch_threads_never_launch_each_others_pointers(gpu, torch, monkeypatch):
    _gil_releasing_launches(gpu, monkeypatch)
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    a0 = torch.tensor_on(rand(256))
    launcher(a0, a0)
    errors = []

    def worker(seed):
        for i in range(20):
            a, b = torch.tensor_on(rand(256, seed * 100 + i)), torch.tensor_on(rand(256, i))
            if not np.array_equal(launcher(a, b).numpy(), a.numpy() + b.numpy()):
                errors.append((seed, i))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(1, 5)]
    for t in threads:
        t.start()
    worker(0)
    for t in threads:
        t.join()
    assert errors == []


# ---------------------------------------------------------------- devices and specialisation
def test_each_device_gets_its_own_module(make_gpu, torch):
    gpu = make_gpu(devices=((9, 0), (9, 0)))
    k = vadd_on(gpu)
    a0 = torch.tensor_on(rand(64), 0)
    a1 = torch.tensor_on(rand(64), 1)
    k(a1, a1)
    k(a0, a0)
    k(a1, a1)
    assert sorted(gpu.cu.loads) == [("ptx", 0), ("ptx", 1)]
    assert [r["device"] for r in gpu.cu.launches] == [1, 0, 1]
    launcher = rlaunch.prepare(k)
    s0, s1 = launcher.specialisation(0), launcher.specialisation(1)
    assert s0[0] == 0 and s1[0] == 1 and s0[1:] == s1[1:]  # same arch and key, two modules
    assert len(rcache.MODULES) == 2


def test_plain_arch_is_assembled_for_each_device(make_gpu):
    gpu = make_gpu(devices=((9, 0), (8, 6)))
    k = build_vadd(arch="sm_80")
    gpu.cu.register(k)
    launcher = rlaunch.prepare(k)
    d0, d1 = launcher.specialisation(0), launcher.specialisation(1)
    assert (d0[1], d1[1]) == ("sm_90", "sm_86") and d0[2] != d1[2]


def test_arch_specific_kernel_on_another_gpu_is_refused(make_gpu):
    gpu = make_gpu(devices=((8, 0),))
    k = vadd_on(gpu)
    with pytest.raises(LaunchError, match=r"targets sm_90a.*only on compute capability 9.0.*sm_80"):
        k(rand(8), rand(8))


def test_target_arch_rules():
    from ptxdsl.runtime.compile import target_arch
    assert target_arch("sm_90a", (9, 0)) == "sm_90a"
    assert target_arch("sm_80", (9, 0)) == "sm_90"
    assert target_arch("sm_80", (8, 0)) == "sm_80"
    with pytest.raises(LaunchError, match="only sm_75"):
        target_arch("sm_80", (7, 5))
    with pytest.raises(LaunchError):
        target_arch("sm_100a", (9, 0))


def test_device_option_for_host_only_calls(make_gpu):
    gpu = make_gpu(devices=((9, 0), (9, 0)))
    k = vadd_on(gpu)
    k(rand(8), rand(8), device=1)
    assert gpu.cu.launches[-1]["device"] == 1


# ---------------------------------------------------------------- compiling and caching
def test_jit_error_points_at_the_python_line(gpu):
    k = vadd_on(gpu)
    compiled = k.compile()
    lines = compiled.ptx.split("\n")
    bad = next(i for i, line in enumerate(lines, 1) if "ld.global.f32" in line)
    gpu.cu.jit_error = (f"ptxas application ptx input, line {bad}; error   : Unknown symbol "
                        f"'nope'\nptxas fatal   : Ptx assembly aborted due to errors")
    with pytest.raises(ToolchainError) as info:
        k(rand(8), rand(8))
    err = info.value
    assert "driver's PTX JIT rejected kernel vadd" in str(err)
    assert f"line {bad}: Unknown symbol 'nope'" in str(err) and "ld.global.f32" in str(err)
    assert err.loc == compiled.emitted.source_of(bad)
    assert err.loc.file.endswith("runtime_kernels.py")


def test_ptxas_error_points_at_the_python_line(gpu, monkeypatch):
    monkeypatch.setenv("PTXDSL_COMPILER", "ptxas")
    monkeypatch.setattr(toolchain, "find_ptxas", lambda: "/fake/ptxas")
    monkeypatch.setattr(rcache, "_identity_memo", {})
    monkeypatch.setattr(toolchain, "ptxas_version", lambda path=None: (13, 0))
    k = vadd_on(gpu)
    compiled = k.compile()
    bad = next(i for i, line in enumerate(compiled.ptx.split("\n"), 1) if "st.global" in line)

    def reject(ptx, arch, **kw):
        raise toolchain.PtxasError(f"ptxas kernel.ptx, line {bad}; error   : Illegal operand",
                                   ptx, arch=arch, returncode=255)

    monkeypatch.setattr(toolchain, "assemble", reject)
    with pytest.raises(ToolchainError, match=r"ptxas -arch=sm_90a rejected kernel vadd: "
                                             r"line \d+: Illegal operand") as info:
        k(rand(8), rand(8))
    assert info.value.loc == compiled.emitted.source_of(bad)


needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas installed")


@needs_ptxas
def test_disk_cache_hit_in_a_new_process(gpu, monkeypatch):
    monkeypatch.setenv("PTXDSL_COMPILER", "ptxas")
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    assert launcher.function(0).origin == "ptxas"
    # "New process": fresh module cache, fresh kernel object with the same PTX.
    monkeypatch.setattr(rcache, "MODULES", rcache.ModuleCache())
    k2 = vadd_on(gpu)
    assert rlaunch.prepare(k2).function(0).origin == "disk"
    np.testing.assert_array_equal(k2(rand(5), rand(5, 1)), rand(5) + rand(5, 1))


@needs_ptxas
def test_corrupt_disk_entry_is_rebuilt(gpu, monkeypatch):
    monkeypatch.setenv("PTXDSL_COMPILER", "ptxas")
    k = vadd_on(gpu)
    kf = rlaunch.prepare(k).function(0)
    path = rcache.DISK.path(kf.key)
    with open(path, "r+b") as f:
        f.seek(60)
        f.write(b"garbage!")
    monkeypatch.setattr(rcache, "MODULES", rcache.ModuleCache())
    k2 = vadd_on(gpu)
    assert rlaunch.prepare(k2).function(0).origin == "ptxas"
    assert rcache.DISK.get(kf.key) is not None


@needs_ptxas
def test_cubin_the_driver_refuses_falls_back_to_jit(gpu, monkeypatch):
    monkeypatch.setenv("PTXDSL_COMPILER", "ptxas")
    gpu.cu.cubin_error = CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU
    k = vadd_on(gpu)
    np.testing.assert_array_equal(k(rand(9), rand(9)), rand(9) * 2)
    kf = rlaunch.prepare(k).function(0)
    assert kf.origin == "jit" and gpu.cu.loads == [("ptx", 0)]
    assert rcache.DISK.get(kf.key) is None  # the refused cubin is not kept


# ---------------------------------------------------------------- contexts
def test_thread_without_a_context_gets_the_primary_one(gpu, torch):
    k = vadd_on(gpu)
    a = torch.tensor_on(rand(32))
    k(a, a)  # main thread
    out = []

    def worker():
        out.append(k(a, a).numpy())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    np.testing.assert_array_equal(out[0], a.numpy() * 2)


def test_other_current_context_is_restored(make_gpu, torch):
    gpu = make_gpu(devices=((9, 0), (9, 0)))
    k = vadd_on(gpu)
    gpu.drv.enter(1)  # the user (e.g. torch.cuda.set_device(1)) made device 1 current
    torch.current_device_index = 1
    assert gpu.drv.current_device() == 1
    a = torch.tensor_on(rand(32), 0)
    k(a, a)
    k(a, a)
    assert gpu.drv.current_device() == 1
    assert gpu.cu.calls.get("cuCtxPushCurrent", 0) >= 2
    assert [r["device"] for r in gpu.cu.launches] == [0, 0]


def test_fast_path_notices_a_torch_device_switch(make_gpu, torch):
    gpu = make_gpu(devices=((9, 0), (9, 0)))
    k = vadd_on(gpu)
    a = torch.tensor_on(rand(32), 0)
    k(a, a)
    k(a, a)  # fast; our guess for this thread is now "device 0 is current"
    gpu.drv.enter(1)  # `with torch.cuda.device(1):` ...
    torch.current_device_index = 1
    pushes = gpu.cu.calls.get("cuCtxPushCurrent", 0)
    np.testing.assert_array_equal(k(a, a).numpy(), a.numpy() * 2)
    assert gpu.cu.calls.get("cuCtxPushCurrent", 0) == pushes + 1
    assert gpu.cu.calls.get("launch_in_wrong_context", 0) == 0  # never tried in the wrong one
    assert gpu.drv.current_device() == 1


def test_fast_path_recovers_from_a_stale_context_guess(gpu, torch):
    k = vadd_on(gpu)
    a = torch.tensor_on(rand(32))
    k(a, a)
    k(a, a)
    gpu.cu._ctx_stack.clear()  # someone made no context current behind our back
    assert gpu.drv.tls.device == 0  # ... while our guess says device 0
    np.testing.assert_array_equal(k(a, a).numpy(), a.numpy() * 2)
    assert gpu.cu.calls["launch_in_wrong_context"] == 1  # failed once, then relaunched
    assert gpu.drv.current_device() == 0


# ---------------------------------------------------------------- errors
def test_launch_error_names_the_kernel(gpu, torch):
    k = vadd_on(gpu)
    a = torch.tensor_on(rand(32))
    k(a, a)
    gpu.cu.launch_error = CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(CudaError, match="kernel vadd: cuLaunchKernel failed: "
                                        "CUDA_ERROR_INVALID_VALUE"):
        k(a, a)  # fast path
    with pytest.raises(CudaError, match="kernel vadd: .*CUDA_ERROR_INVALID_VALUE"):
        k(rand(4), rand(4))  # general path


def test_sticky_error_says_the_context_is_gone(gpu):
    k = vadd_on(gpu)
    gpu.cu.launch_error = CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(CudaError) as info:
        k(rand(4), rand(4))
    err = info.value
    assert err.sticky and err.kernel == "vadd" and isinstance(err, ptxdsl.PtxdslError)
    assert "sticky" in str(err) and "PTXDSL_SYNC=1" in str(err) and "restart" in str(err)


def test_sync_attributes_a_fault_to_its_kernel(gpu, torch):
    k = build_fault()
    gpu.cu.register(k)
    gpu.cu.sync_error = CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    x = torch.tensor_on(np.zeros(1, np.float32))
    with pytest.raises(CudaError, match=r"kernel bad_store: the launch \(found when waiting "
                                        r"for it\) failed: CUDA_ERROR_ILLEGAL_ADDRESS"):
        k(x, sync=True)


def test_ptxdsl_sync_env_synchronises_the_fast_path(gpu, torch, monkeypatch):
    monkeypatch.setenv("PTXDSL_SYNC", "1")
    k = vadd_on(gpu)
    launcher = rlaunch.prepare(k)
    assert "SYNC(e, s)" in launcher.source
    a = torch.tensor_on(rand(32))
    for _ in range(3):
        launcher(a, a)
    assert gpu.cu.calls["cuStreamSynchronize"] == 3


def test_argument_count_and_types(gpu):
    k = vadd_on(gpu)
    with pytest.raises(LaunchError, match=r"vadd\(A, B\) -> C: takes 2 input\(s\) and "
                                          r"optionally 1 output\(s\), got 1"):
        k(rand(4))
    with pytest.raises(LaunchError, match=r"input B \(argument 2\) is a list, not an array"):
        k(rand(4), [1.0, 2.0])
    with pytest.raises(LaunchError, match="unknown keyword argument.*blocks"):
        k(rand(4), rand(4), blocks=3)


# ---------------------------------------------------------------- limits
def test_block_larger_than_the_kernel_fits(make_gpu):
    gpu = make_gpu(max_threads=128)
    k = vadd_on(gpu)
    with pytest.raises(LaunchError, match=r"256 threads but this kernel fits at most 128 .*32 "
                                          r"registers"):
        k(rand(8), rand(8))


def test_grid_over_the_device_limit(gpu):
    from ptxdsl import Tile, kernel, ptx
    from ptxdsl.types import f32

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


@pytest.mark.parametrize("mode", ["params", "ctypes"])
def test_cooperative_kernels_launch_cooperatively_on_every_path(gpu, torch, mode, monkeypatch):
    monkeypatch.setattr(rdriver, "CtypesLauncher",
                        lambda coop=False: FakeCtypesLauncher(gpu.cu, coop))
    k = build_vadd(f"vadd_coop_{mode}", cooperative=True)
    gpu.cu.register(k, vadd_impl)
    _on_every_path(gpu, torch, rlaunch.prepare(k, mode=mode), lambda r: r.get("cooperative"))


@pytest.mark.parametrize("mode", ["params", "ctypes"])
def test_pdl_kernels_carry_the_attribute_on_every_path(gpu, torch, mode, monkeypatch):
    """kernel(pdl=True): every launch is a cuLaunchKernelEx with programmatic stream
    serialization (general path, fast path, bound launch, numpy); ctypes, which has no
    such launch, falls back to the params mode."""
    monkeypatch.setattr(rdriver, "CtypesLauncher",
                        lambda coop=False: FakeCtypesLauncher(gpu.cu, coop))
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
    from ptxdsl.types import f32, u32

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
    from ptxdsl.types import f32, u8

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
