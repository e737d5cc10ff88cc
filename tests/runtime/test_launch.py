"""The launcher on a fake GPU: the general path, the fast path, caches, contexts, errors.

``runtime_fakes.FakeCuda`` stands in for cuda.bindings (device memory is host
memory), so everything down to the packed kernel parameters is checked here;
tests/gpu/test_runtime_gpu.py repeats the essentials on a real GPU. The fast path with
the real (CPU) torch and its threads: test_fastpath_torch.py; launch limits,
clusters, cooperative and PDL launches, other array types: test_limits.py.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import ptxdsl
from ptxdsl import toolchain
from ptxdsl.core.errors import LaunchError, ToolchainError
from ptxdsl.runtime import cache as rcache
from ptxdsl.runtime import launcher as rlaunch
from ptxdsl.runtime.driver import CudaError
from launch_helpers import count_slow, rand, vadd_on
from runtime_fakes import CUresult
from runtime_kernels import build_fault, build_scale_rows, build_vadd, build_vadd4


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


def test_the_params_mode_packs_the_parameters(gpu, torch):
    mode = "params"
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
    monkeypatch.setenv("PTXDSL_LAUNCH", "params")
    assert rlaunch.Launcher(build_vadd()).mode == "params"
    assert rlaunch.LAUNCH_MODES == ("params", "c")
    for gone in ("ctypes", "warp-speed"):  # the ctypes mode was dropped
        monkeypatch.setenv("PTXDSL_LAUNCH", gone)
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
