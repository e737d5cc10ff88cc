"""The launcher's torch fast path with the real (CPU) torch, and its thread safety.

``runtime_fakes.cpu_torch_as_cuda`` makes CPU tensors pass for tensors on cuda:0, so
the fast path runs as it does on a GPU, with torch's own tensor guards and allocator;
the launches go to ``runtime_fakes.FakeCuda``.
"""
from __future__ import annotations

import threading
import types

import numpy as np
import pytest

from ptxdsl.core.errors import LaunchError
from ptxdsl.runtime import fastpath as rfast
from ptxdsl.runtime import launcher as rlaunch
from ptxdsl.runtime import torch_private
from launch_helpers import count_slow, rand, vadd_on
from runtime_fakes import cpu_torch_as_cuda
from runtime_kernels import build_copy_bf16, build_scale_rows, build_vadd4


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
