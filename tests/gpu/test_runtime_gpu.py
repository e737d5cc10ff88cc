"""The GPU runtime on a real GPU (H100/H200): correctness for numpy, torch and cupy
inputs against float64 references, dynamic shapes, caches, contexts, errors, leaks.

Run: ``python -m pytest tests/gpu -q`` (every test skips with a reason
when there is no GPU, torch or cupy). Timing lives in ``bench/launch_overhead.py``.
"""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

import ptxdsl  # noqa: E402
from gpu_env import NEEDS_GPU  # noqa: E402
from ptxdsl.core.errors import LaunchError, PtxdslError  # noqa: E402
from ptxdsl.runtime import cache as rcache  # noqa: E402
from ptxdsl.runtime import driver as rdriver  # noqa: E402
from ptxdsl.runtime import launcher as rlauncher  # noqa: E402
from runtime_kernels import (build_copy_bf16, build_scale_rows, build_vadd,  # noqa: E402
                             build_vadd4)

pytestmark = NEEDS_GPU


def _torch():
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


def _drv():
    return rdriver.get()


def _arch() -> str:
    cc = _drv().device(0).cc
    return f"sm_{cc[0]}{cc[1]}{'a' if cc[0] >= 9 else ''}"


def _rand(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


_counter = [0]


def _fresh(builder, *a, **kw):
    """A kernel object nobody launched yet (a unique name keeps the caches apart)."""
    _counter[0] += 1
    return builder(*a, name=f"{builder.__name__[6:]}_{os.getpid()}_{_counter[0]}", arch=_arch(),
                   **kw)


# ---------------------------------------------------------------- basics
@pytest.mark.parametrize("n", [1, 255, 256, 1000, 4097, 1 << 20])
def test_vadd_numpy_matches_float64(n):
    k = _fresh(build_vadd)
    a, b = _rand(n, 1), _rand(n, 2)
    c = k(a, b)
    assert isinstance(c, np.ndarray) and c.shape == (n,)
    np.testing.assert_allclose(c, a.astype(np.float64) + b, rtol=1e-6, atol=1e-6)


def test_vadd_torch_allocated_and_explicit_outputs():
    torch = _torch()
    k = _fresh(build_vadd)
    a = torch.randn(5000, device="cuda")
    b = torch.randn(5000, device="cuda")
    c = k(a, b)
    assert isinstance(c, torch.Tensor) and c.device == a.device and c.dtype == torch.float32
    torch.testing.assert_close(c, a + b)
    out = torch.empty_like(a)
    assert k(a, b, out) is out
    torch.testing.assert_close(out, a + b)


def test_fast_path_is_taken_and_correct():
    torch = _torch()
    k = _fresh(build_vadd)
    launcher = rlauncher.prepare(k)
    misses = []
    slow = launcher._g["SLOW"]
    launcher._g["SLOW"] = lambda *a: (misses.append(1), slow(*a))[1]
    a = torch.randn(3000, device="cuda")
    b = torch.randn(3000, device="cuda")
    out = torch.empty_like(a)
    for _ in range(50):
        a.add_(1.0)
        launcher(a, b, out)
        c = launcher(a, b)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a + b)
    torch.testing.assert_close(c, a + b)
    assert len(misses) == 2, f"expected one miss per signature, got {len(misses)}"


@pytest.mark.parametrize("mode", rlauncher.LAUNCH_MODES)
def test_every_launch_mode(mode):
    torch = _torch()
    k = _fresh(build_vadd)
    launcher = rlauncher.prepare(k, mode=mode)
    for n in (1000, 1000, 33, 33):  # each size: general path, then the fast path
        a = torch.randn(n, device="cuda")
        b = torch.randn(n, device="cuda")
        out = torch.empty_like(a)
        launcher(a, b, out)
        c = launcher(a, b)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, a + b)
        torch.testing.assert_close(c, a + b)
    assert len(launcher.entries) == 4


def test_bf16_tensors_and_numpy_bit_patterns():
    torch = _torch()
    k = _fresh(build_copy_bf16)
    x = torch.randn(999, device="cuda").to(torch.bfloat16)
    y = k(x)
    assert y.dtype == torch.bfloat16 and torch.equal(x, y)
    bits = np.arange(999, dtype=np.uint16)  # numpy has no bfloat16: bit patterns
    assert np.array_equal(k(bits), bits)
    with pytest.raises(LaunchError, match="needs bfloat16"):
        k(x.view(torch.int16))


def test_cupy_inputs_give_cupy_outputs():
    cupy = pytest.importorskip("cupy")
    k = _fresh(build_vadd)
    a = cupy.asarray(_rand(1000, 1))
    b = cupy.asarray(_rand(1000, 2))
    c = k(a, b)
    assert isinstance(c, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(c), cupy.asnumpy(a) + cupy.asnumpy(b), rtol=1e-6)


def test_cai_and_dlpack_only_objects_are_zero_copy():
    torch = _torch()
    k = _fresh(build_vadd)
    a = torch.randn(777, device="cuda")
    b = torch.randn(777, device="cuda")

    class CAIOnly:
        def __init__(self, t):
            self.t = t
            self.__cuda_array_interface__ = t.__cuda_array_interface__

    class DLPackOnly:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    for wrap in (CAIOnly, DLPackOnly):
        c = k(wrap(a), wrap(b))
        assert type(c).__name__ == "DeviceArray", type(c)
        np.testing.assert_allclose(c.copy_to_host(), (a + b).cpu().numpy(), rtol=1e-6)
        out = torch.empty_like(a)
        k(wrap(a), wrap(b), wrap(out))
        torch.cuda.synchronize()
        torch.testing.assert_close(out, a + b)


# ---------------------------------------------------------------- the seed and the examples
def _rms_ref(x, w, eps=1e-6):
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * w.astype(np.float64)


@pytest.mark.parametrize("B,N", [(4, 1024), (64, 4096), (2048, 8192)])
def test_seed_rmsnorm_numpy_and_torch(B, N):
    from seed_kernels import build_rms_norm
    k = build_rms_norm(B, N, arch=_arch())
    x, w = _rand((B, N), B), _rand(N, N, 0.1) + 1
    ref = _rms_ref(x, w)
    y = k(x, w)
    assert np.max(np.abs(y - ref)) / np.abs(ref).max() < 1e-5
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        yt = k(torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda())
        assert np.max(np.abs(yt.cpu().numpy() - ref)) / np.abs(ref).max() < 1e-5
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            yc = k(cupy.asarray(x), cupy.asarray(w))
            assert np.max(np.abs(cupy.asnumpy(yc) - ref)) / np.abs(ref).max() < 1e-5


def _example(name):
    path = os.path.join(ROOT, "examples", "hopper")
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"examples/hopper/{name}.py does not import: {exc}")


# Error bound per example, relative to max |reference| (the examples' own checks are
# per element or per row; these are the same order, measured one way for all).
_BOUND = {"vector_add": 1e-6, "softmax": 1e-5, "layer_norm": 5e-5, "swiglu": 1e-5}

# name -> builder attribute, builder args from (B, N), inputs from (rng, B, N)
_EXAMPLES = {
    "vector_add": ("build_vector_add", lambda B, N: (), lambda r, B, N: (
        r.standard_normal(B * N).astype(np.float32), r.standard_normal(B * N).astype(np.float32))),
    "softmax": ("build_softmax", lambda B, N: (N,), lambda r, B, N: (
        (r.standard_normal((B, N)) * 3).astype(np.float32),)),
    "layer_norm": ("build_layer_norm", lambda B, N: (N,), lambda r, B, N: (
        (r.standard_normal((B, N)) * 2 + 5).astype(np.float32),
        (r.standard_normal(N) * 0.1 + 1).astype(np.float32),
        (r.standard_normal(N) * 0.1).astype(np.float32))),
    "swiglu": ("build_swiglu", lambda B, N: (N,), lambda r, B, N: (
        (r.standard_normal((B, N)) * 4).astype(np.float32),
        r.standard_normal((B, N)).astype(np.float32))),
}


@pytest.mark.parametrize("name", sorted(_EXAMPLES))
@pytest.mark.parametrize("framework", ["numpy", "torch", "cupy"])
def test_examples_match_float64(name, framework):
    mod = _example(name)
    builder, bargs, make = _EXAMPLES[name]
    if not hasattr(mod, builder) or not hasattr(mod, "reference"):
        pytest.skip(f"examples/hopper/{name}.py has no {builder}/reference")
    B, N = 33, 4096
    inputs = make(np.random.default_rng(7), B, N)
    k = getattr(mod, builder)(*bargs(B, N))
    ref = mod.reference(*inputs)
    if framework == "numpy":
        out = k(*inputs)
    elif framework == "torch":
        torch = _torch()
        out = k(*[torch.from_numpy(x).cuda() for x in inputs]).cpu().numpy()
    else:
        cupy = pytest.importorskip("cupy")
        out = cupy.asnumpy(k(*[cupy.asarray(x) for x in inputs]))
    out = out[0] if isinstance(out, tuple) else out
    err = float(np.max(np.abs(out - ref)) / max(1e-3, float(np.abs(ref).max())))
    assert err < _BOUND[name], f"{name} via {framework}: max error {err:.2e} relative to max |ref|"


# ---------------------------------------------------------------- dynamic shapes, strides
def test_dynamic_n_reuses_one_module():
    torch = _torch()
    k = _fresh(build_vadd)
    launcher = rlauncher.prepare(k)
    loads = rcache.MODULES.loads
    for n in (1, 17, 1000, 65536, 123457):
        a = torch.randn(n, device="cuda")
        torch.testing.assert_close(k(a, a), a * 2)
        np.testing.assert_allclose(k(a.cpu().numpy(), a.cpu().numpy()), a.cpu().numpy() * 2)
    assert rcache.MODULES.loads - loads == 1
    assert list(launcher.functions) == [torch.cuda.current_device()]
    print("specialisation:", launcher.specialisation(torch.cuda.current_device()))


def test_row_slices_with_a_named_stride():
    torch = _torch()
    k = _fresh(build_scale_rows, 64)
    wide = torch.randn(50, 100, device="cuda")
    view = wide[:, 8:72]
    torch.testing.assert_close(k(view), view * 2)
    every_other = torch.randn(50, 128, device="cuda")[:, ::2]  # (50, 64), inner stride 2
    with pytest.raises(LaunchError, match="inner dims must be contiguous"):
        k(every_other)


def test_vector_alignment_is_enforced():
    torch = _torch()
    k = _fresh(build_vadd4)
    base = torch.randn(4 * 1001, device="cuda")
    good = base[:4000].view(1000, 4)
    torch.testing.assert_close(k(good, good), good * 2)
    bad = base[1:4001].view(1000, 4)
    with pytest.raises(LaunchError, match="not 16-byte aligned"):
        k(bad, bad)


# ---------------------------------------------------------------- streams and devices
def test_torch_current_stream_orders_the_launch():
    torch = _torch()
    k = _fresh(build_vadd)
    s = torch.cuda.Stream()  # torch's pool streams do not wait for the default stream
    x = torch.zeros(1 << 26, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        for _ in range(10):
            x.add_(1.0)  # ~ms of work queued on s, still running when we launch
        y = k(x, x)  # must queue behind the adds on s, not on the default stream
    s.synchronize()
    assert float(y.min()) == 20.0 and float(y.max()) == 20.0


def test_explicit_stream():
    torch = _torch()
    k = _fresh(build_vadd)
    s = torch.cuda.Stream()
    a = torch.randn(10000, device="cuda")
    torch.cuda.synchronize()
    out = torch.empty_like(a)
    k(a, a, out, stream=s)
    s.synchronize()
    torch.testing.assert_close(out, a * 2)
    k(a, a, out, stream=s.cuda_stream)
    s.synchronize()


def test_fast_path_can_be_captured_in_a_cuda_graph():
    torch = _torch()
    k = _fresh(build_vadd)
    a = torch.randn(5000, device="cuda")
    b = torch.randn(5000, device="cuda")
    out = torch.empty_like(a)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the default stream, as torch advises
        for _ in range(3):
            k(a, b, out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        k(a, b, out)
    a.copy_(torch.arange(5000, device="cuda", dtype=torch.float32))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a + b)


def test_call_does_not_change_torchs_current_device():
    torch = _torch()
    k = _fresh(build_vadd)
    before = torch.cuda.current_device()
    a = torch.randn(100, device="cuda")
    k(a, a)
    k(a.cpu().numpy(), a.cpu().numpy())
    assert torch.cuda.current_device() == before


def test_new_threads_launch_and_compile_once():
    torch = _torch()
    k = _fresh(build_vadd)
    a = torch.randn(4096, device="cuda")
    torch.cuda.synchronize()
    barrier = threading.Barrier(8)
    results, errors = [], []
    loads = rcache.MODULES.loads

    def first_call():
        try:
            barrier.wait()
            out = torch.empty_like(a)
            k(a, a, out, sync=True)
            results.append(bool(torch.equal(out, a * 2)))
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == [True] * 8
    assert rcache.MODULES.loads - loads == 1


def test_two_gpus_get_their_own_modules():
    torch = _torch()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    k = _fresh(build_vadd)
    launcher = rlauncher.prepare(k)
    for dev in (1, 0, 1):
        a = torch.randn(1000, device=f"cuda:{dev}")
        torch.testing.assert_close(k(a, a), a * 2)
    with torch.cuda.device(1):
        a0 = torch.randn(1000, device="cuda:0")
        torch.testing.assert_close(k(a0, a0), a0 * 2)
        assert torch.cuda.current_device() == 1
    assert sorted(launcher.functions) == [0, 1]
    s0, s1 = launcher.specialisation(0), launcher.specialisation(1)
    print("specialisations:", s0, s1)
    with pytest.raises(LaunchError, match="different GPUs"):
        k(torch.randn(8, device="cuda:0"), torch.randn(8, device="cuda:1"))


# ---------------------------------------------------------------- compile paths and caches
def test_disk_cache_then_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(rcache, "MODULES", rcache.ModuleCache())
    if ptxdsl.toolchain.find_ptxas() is None:
        pytest.skip("no ptxas: the driver JIT is used and cubins are not cached")
    k = build_vadd(name="vadd_disk", arch=_arch())
    t0 = time.perf_counter()
    kf = rlauncher.prepare(k).function(0)
    cold = time.perf_counter() - t0
    assert kf.origin == "ptxas"
    monkeypatch.setattr(rcache, "MODULES", rcache.ModuleCache())
    k2 = build_vadd(name="vadd_disk", arch=_arch())
    t0 = time.perf_counter()
    kf2 = rlauncher.prepare(k2).function(0)
    warm = time.perf_counter() - t0
    assert kf2.origin == "disk"
    print(f"cold {cold * 1e3:.1f} ms {kf.timings}; disk hit {warm * 1e3:.2f} ms {kf2.timings}")
    np.testing.assert_allclose(k2(_rand(10), _rand(10)), _rand(10) * 2, rtol=1e-6)


def test_driver_jit_path(monkeypatch):
    monkeypatch.setenv("PTXDSL_COMPILER", "jit")
    k = _fresh(build_vadd)
    kf = rlauncher.prepare(k).function(0)
    assert kf.origin in ("jit", "memory")
    np.testing.assert_allclose(k(_rand(100), _rand(100)), _rand(100) * 2, rtol=1e-6)


def test_driver_jit_log_reaches_the_error():
    drv = _drv()
    pushed = drv.enter(0)
    try:
        with pytest.raises(rdriver.CudaError) as info:
            drv.load_module(b".version 8.0\n.target sm_90\n.address_size 64\nnot ptx;\n\0",
                            jit=True)
    finally:
        if pushed:
            drv.leave()
    err = info.value
    print("JIT error:", err.name, "|", err.detail)
    assert err.name in ("CUDA_ERROR_INVALID_PTX", "CUDA_ERROR_INVALID_IMAGE")
    assert "line" in err.detail, "the JIT error log buffer came back empty"


def test_large_dynamic_shared_memory_and_clusters():
    k = _fresh(build_vadd)
    info = _drv().device(0)
    a = _rand(4096)
    big = min(100 * 1024, info.max_smem_per_block_optin)
    np.testing.assert_allclose(k(a, a, shared_mem=big), a * 2, rtol=1e-6)
    with pytest.raises(LaunchError, match="shared memory"):
        k(a, a, shared_mem=info.max_smem_per_block_optin + 1)
    if info.cluster_launch:
        np.testing.assert_allclose(k(a, a, cluster=(2, 1, 1)), a * 2, rtol=1e-6)
        with pytest.raises(LaunchError, match="not a multiple of cluster"):
            k(_rand(600), _rand(600), cluster=(2, 1, 1))


# ---------------------------------------------------------------- errors
def test_argument_errors():
    torch = _torch()
    k = _fresh(build_vadd)
    with pytest.raises(LaunchError, match=r"torch tensor on cpu.*\.cuda\(\)"):
        k(torch.randn(8), torch.randn(8, device="cuda"))
    with pytest.raises(LaunchError, match="dtype float16"):
        k(torch.randn(8, device="cuda").half(), torch.randn(8, device="cuda"))
    with pytest.raises(LaunchError, match="N=7, but A"):
        k(torch.randn(8, device="cuda"), torch.randn(7, device="cuda"))
    with pytest.raises(LaunchError, match="not contiguous"):
        x = torch.randn(16, device="cuda")[::2]
        k(x, x)


_FAULT_SCRIPT = textwrap.dedent("""
    import sys
    sys.path[:0] = [{root!r}, {tests!r}]
    import numpy as np
    from ptxdsl.runtime.driver import CudaError
    from runtime_kernels import build_fault, build_vadd
    k = build_fault(arch={arch!r})
    try:
        k(np.zeros(1, np.float32), sync=True)
        print("NO-ERROR")
    except CudaError as e:
        print("FAULT", e.kernel, e.name, e.sticky)
        print("MESSAGE", str(e).replace(chr(10), " "))
    try:
        build_vadd(arch={arch!r})(np.zeros(4, np.float32), np.zeros(4, np.float32))
        print("AFTER ok")
    except Exception as e:
        print("AFTER", type(e).__name__, getattr(e, "name", ""))
""")


def test_kernel_fault_is_reported_with_the_kernel_name():
    # In a subprocess: an illegal address poisons the context for the rest of the process.
    code = _FAULT_SCRIPT.format(root=ROOT, tests=os.path.join(ROOT, "tests", "helpers"), arch=_arch())
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    print(proc.stdout, proc.stderr[-2000:])
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert "FAULT" in lines, proc.stdout + proc.stderr[-2000:]
    kernel_name, err_name, sticky = lines["FAULT"].split()
    assert kernel_name == "bad_store"
    assert err_name in rdriver.STICKY_ERRORS, err_name  # ILLEGAL_ADDRESS on H100
    assert sticky == "True" and "sticky" in lines["MESSAGE"]
    assert lines["AFTER"] != "ok", "a sticky error should fail later launches"


# ---------------------------------------------------------------- leaks
def _free_bytes(dev=0):
    drv = _drv()
    pushed = drv.enter(dev)
    try:
        return drv.mem_info()[0]
    finally:
        if pushed:
            drv.leave()


def test_no_device_memory_leak_over_10000_calls():
    torch = _torch()
    k = _fresh(build_vadd)
    a = torch.randn(1 << 16, device="cuda")
    out = torch.empty_like(a)
    for _ in range(100):  # warm: compile, caching allocator pools, entries
        k(a, a, out)
        k(a, a)
    torch.cuda.synchronize()
    free0, alloc0 = _free_bytes(), torch.cuda.memory_allocated()
    for _ in range(10_000):
        k(a, a, out)
        k(a, a)
    torch.cuda.synchronize()
    free1, alloc1 = _free_bytes(), torch.cuda.memory_allocated()
    print(f"free before {free0} after {free1} (delta {free0 - free1} B); "
          f"torch allocated {alloc0} -> {alloc1}")
    assert alloc1 == alloc0
    assert free0 - free1 <= 2 << 20, f"{free0 - free1} bytes of device memory went missing"


def test_no_leak_in_the_numpy_path():
    k = _fresh(build_vadd)
    a = _rand(1 << 16)
    k(a, a)
    free0 = _free_bytes()
    for _ in range(1000):
        k(a, a)
    free1 = _free_bytes()
    print(f"numpy path: free before {free0} after {free1}")
    assert free0 - free1 <= 2 << 20


def test_gpu_available_and_doctor():
    from ptxdsl.cli import doctor
    assert ptxdsl.gpu_available()
    report = doctor.doctor()
    print(doctor.format_report(report))
    assert report["gpu"] == "yes" and report["devices"] >= 1


def test_error_types_are_ptxdsl_errors():
    assert issubclass(rdriver.CudaError, PtxdslError) and issubclass(LaunchError, PtxdslError)
