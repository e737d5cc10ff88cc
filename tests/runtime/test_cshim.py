"""The launch shim (``ptxdsl/runtime/_launch.c``, the ``c`` launch mode) without a GPU.

The shim is built with this machine's C compiler into the test's folder (a copy of
its own: the module keeps the driver's entry points in C statics) and given ctypes
callbacks in place of the driver's ``cuLaunchKernel``, ``cuLaunchCooperativeKernel``
and ``cuLaunchKernelEx``. The callbacks check what the shim packed and passed, and
forward to the fake GPU of ``runtime_fakes`` for the launcher tests, so the generated
fast path of the ``c`` mode runs end to end here. tests/gpu/test_runtime_gpu.py runs
the real driver's launches through it.
"""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

from ptxdsl.core.errors import LaunchError
from ptxdsl.runtime import cshim
from ptxdsl.runtime import driver as rdriver
from ptxdsl.runtime import launcher as rlaunch
from runtime_fakes import CUfunction, CUstream, vadd_impl
from runtime_kernels import build_pdl_vadd, build_vadd
from launch_helpers import count_slow, rand

LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                          ctypes.c_void_p, ctypes.c_void_p)
COOP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                        ctypes.c_void_p)
EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                      ctypes.c_void_p)
# CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, _COOPERATIVE, _PROGRAMMATIC_STREAM_SERIALIZATION
CLUSTER_ID, COOP_ID, PDL_ID = 4, 2, 6


class Dims(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class Value(ctypes.Union):
    _fields_ = [("raw", ctypes.c_char * 64), ("cluster", Dims), ("flag", ctypes.c_int)]


class Attr(ctypes.Structure):  # CUlaunchAttribute
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", Value)]


class Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("g", ctypes.c_uint * 7), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(Attr)), ("count", ctypes.c_uint)]


def fresh_shim(folder):
    """A copy of the shim of its own (statics and all), built into ``folder``."""
    try:
        path = cshim.build(target=str(folder / f"{cshim.NAME}-test.so"))
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"the launch shim cannot be built here: {exc}")
    return cshim._import(path)


class Recorder:
    """ctypes callbacks standing in for the driver; ``calls`` holds what each got,
    ``forward`` (optional) turns a call into the fake GPU's launch."""

    def __init__(self, result=0, forward=None):
        self.calls, self.result, self.forward = [], result, forward
        self.cbs = (LAUNCH(self._plain), COOP(self._coop), EX(self._ex))  # kept alive

    def addresses(self):
        return [ctypes.cast(cb, ctypes.c_void_p).value for cb in self.cbs]

    def _done(self, rec):
        self.calls.append(rec)
        return self.forward(rec) if self.forward else self.result

    def _plain(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        return self._done(dict(kind="plain", f=f, dims=(gx, gy, gz, bx, by, bz, smem),
                               stream=stream or 0, params=params, extra=extra))

    def _coop(self, f, gx, gy, gz, bx, by, bz, smem, stream, params):
        return self._done(dict(kind="coop", f=f, dims=(gx, gy, gz, bx, by, bz, smem),
                               stream=stream or 0, params=params))

    def _ex(self, config, f, params, extra):
        c = Config.from_address(config)
        attrs = [(c.attrs[i].id, tuple(getattr(c.attrs[i].value.cluster, a) for a in "xyz")
                  if c.attrs[i].id == CLUSTER_ID else c.attrs[i].value.flag)
                 for i in range(c.count)]
        return self._done(dict(kind="ex", f=f, dims=tuple(c.g), stream=c.stream or 0,
                               params=params, extra=extra, attrs=attrs))


def test_the_shim_packs_the_pointers_and_passes_the_launch_through(tmp_path):
    shim = fresh_shim(tmp_path)
    with pytest.raises(RuntimeError, match="entry points"):
        shim.launch(1, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0)
    rec = Recorder(result=0)
    shim.init(*rec.addresses(), CLUSTER_ID, COOP_ID, PDL_ID)
    buf = ctypes.create_string_buffer(64)
    base = ctypes.addressof(buf)
    ptrs = (0x7F00_0000_1000, 2**64 - 16, 0)
    assert shim.launch(0x1234, 3, 2, 1, 128, 1, 1, 4096, 0x55, 0x66, base, *ptrs) == 0
    assert np.frombuffer(buf.raw[:24], np.uint64).tolist() == list(ptrs)
    assert buf.raw[24:] == bytes(40)  # nothing past the pointers
    assert rec.calls[-1] == dict(kind="plain", f=0x1234, dims=(3, 2, 1, 128, 1, 1, 4096),
                                 stream=0x55, params=0x66, extra=None)
    assert shim.launch_coop(0x99, 132, 1, 1, 512, 1, 1, 0, 0, 0x66, base, 5) == 0
    assert rec.calls[-1]["kind"] == "coop" and rec.calls[-1]["stream"] == 0
    assert np.frombuffer(buf.raw[:8], np.uint64)[0] == 5
    C, P = cshim.EX_COOPERATIVE, cshim.EX_PDL
    for cx, flags, want in ((2, 0, [(CLUSTER_ID, (2, 1, 1))]),
                            (2, C, [(CLUSTER_ID, (2, 1, 1)), (COOP_ID, 1)]),
                            (2, C | P, [(CLUSTER_ID, (2, 1, 1)), (COOP_ID, 1), (PDL_ID, 1)]),
                            (0, P, [(PDL_ID, 1)]),            # no cluster: no such attribute
                            (0, C | P, [(COOP_ID, 1), (PDL_ID, 1)])):
        assert shim.launch_ex(0x42, 8, 1, 1, 384, 1, 1, 200_000, 7, 0x66, base, cx, 1, 1,
                              flags, 11, 12) == 0
        assert rec.calls[-1]["attrs"] == want
        assert rec.calls[-1]["dims"] == (8, 1, 1, 384, 1, 1, 200_000)
        assert rec.calls[-1]["stream"] == 7 and rec.calls[-1]["f"] == 0x42
    assert np.frombuffer(buf.raw[:16], np.uint64).tolist() == [11, 12]
    rec.result = 700  # CUDA_ERROR_ILLEGAL_ADDRESS: returned as the driver gave it
    assert shim.launch(1, 1, 1, 1, 32, 1, 1, 0, 0, 0x66, base) == 700
    calls = len(rec.calls)
    with pytest.raises(OverflowError):
        shim.launch(1, 1, 1, 1, 32, 1, 1, 0, 0, 0x66, base, -1)   # not a pointer
    with pytest.raises(TypeError, match="at least 11"):
        shim.launch(1, 1, 1)
    with pytest.raises(TypeError):
        shim.launch(1, 1, 1, 1, 32, 1, 1, 0, 0, 0x66, base, "x")
    assert len(rec.calls) == calls  # nothing launched on bad arguments


def test_no_compiler_means_the_params_mode(tmp_path, monkeypatch):
    """Where the shim cannot be built, load() says why and launchers use ``params``."""
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(OSError):
        cshim.build(target=str(tmp_path / "x.so"))
    monkeypatch.setattr(cshim, "_loaded", {})
    monkeypatch.setattr(cshim, "_target", lambda source: str(tmp_path / "y.so"))
    assert cshim.load() is None and "could not be built" in cshim.reason()


def _on_fake_gpu(gpu, shim, monkeypatch):
    """``shim`` given callbacks that launch on the fake GPU, as the driver's launcher."""
    cu = gpu.cu

    def forward(rec):
        f, dims, s = CUfunction(rec["f"]), rec["dims"], CUstream(rec["stream"])
        if rec["kind"] == "plain":
            r = cu.cuLaunchKernel(f, *dims, s, rec["params"], 0)
        elif rec["kind"] == "coop":
            r = cu.cuLaunchCooperativeKernel(f, *dims, s, rec["params"])
        else:
            r = cu.cuLaunchKernel(f, *dims, s, rec["params"], 0)
            if not r[0]:
                got = dict(rec["attrs"])
                cu.launches[-1]["cluster"] = got.get(CLUSTER_ID)
                cu.launches[-1]["cooperative"] = got.get(COOP_ID) == 1
                cu.launches[-1]["pdl"] = got.get(PDL_ID) == 1
        return int(r[0])
    rec = Recorder(forward=forward)
    shim.init(*rec.addresses(), CLUSTER_ID, COOP_ID, PDL_ID)
    monkeypatch.setattr(gpu.drv, "c_launcher", lambda: shim, raising=False)
    return rec


@pytest.mark.parametrize("kind", ["plain", "cooperative", "cluster", "pdl"])
def test_c_mode_launches_through_the_shim(gpu, torch, tmp_path, monkeypatch, kind):
    rec = _on_fake_gpu(gpu, fresh_shim(tmp_path), monkeypatch)
    k = (build_pdl_vadd("vadd_c_pdl") if kind == "pdl" else
         build_vadd(f"vadd_c_{kind}", cooperative=kind == "cooperative"))
    gpu.cu.register(k, vadd_impl)
    launcher = rlaunch.prepare(k, mode="c")
    assert launcher.mode == "c"
    cluster = (2, 1, 1) if kind == "cluster" else None
    if cluster:  # a kernel's own cluster shape: every launch goes through cuLaunchKernelEx
        k.cluster = cluster
        launcher = rlaunch.Launcher(k, mode="c")
        assert launcher.mode == "c" and launcher.cluster == cluster
        assert "CX, CY, CZ, FLAGS" in launcher.source
    misses = count_slow(launcher)
    for i in range(3):  # the general path, then the shim's
        a, b = torch.tensor_on(rand(512, i)), torch.tensor_on(rand(512, i + 7))
        c = launcher(a, b)
        np.testing.assert_array_equal(c.numpy(), a.numpy() + b.numpy())
        assert gpu.cu.launches[-1]["params"] == [a.data_ptr(), b.data_ptr(), c.data_ptr(), 512]
    assert len(misses) == 1 and len(rec.calls) == 2
    want = {"plain": "plain", "cooperative": "coop", "cluster": "ex", "pdl": "ex"}[kind]
    assert {r["kind"] for r in rec.calls} == {want}
    if cluster:
        assert gpu.cu.launches[-1]["cluster"] == cluster
    if kind == "cooperative":
        assert gpu.cu.launches[-1]["cooperative"]
    if kind == "pdl":   # the attribute alone: no cluster dimensions
        assert gpu.cu.launches[-1]["pdl"] and gpu.cu.launches[-1]["cluster"] is None
    # the bound launch (what ptxdsl.ops records) too
    bound = launcher.bind(a, b, c)
    d = torch.tensor_on(rand(512, 99))
    bound(d.data_ptr(), b.data_ptr(), c.data_ptr())
    assert rec.calls[-1]["kind"] == want
    np.testing.assert_array_equal(c.numpy(), d.numpy() + b.numpy())


def test_c_mode_failed_launch_raises_through_the_careful_path(gpu, torch, tmp_path,
                                                             monkeypatch):
    rec = _on_fake_gpu(gpu, fresh_shim(tmp_path), monkeypatch)
    k = build_vadd("vadd_c_err")
    gpu.cu.register(k, vadd_impl)
    launcher = rlaunch.prepare(k, mode="c")
    a, b = torch.tensor_on(rand(64)), torch.tensor_on(rand(64, 1))
    launcher(a, b)
    launcher(a, b)
    assert len(rec.calls) == 1
    rec.forward = lambda r: 700  # the shim's launch fails: the error names the kernel
    with pytest.raises(rdriver.CudaError, match="vadd_c_err"):
        launcher(a, b)


def test_c_mode_without_the_shim_is_the_params_mode(gpu, monkeypatch):
    monkeypatch.setattr(gpu.drv, "c_launcher", lambda: None, raising=False)
    k = build_vadd("vadd_c_none")
    gpu.cu.register(k, vadd_impl)
    assert rlaunch.Launcher(k, mode="c").mode == "params"
    monkeypatch.setenv("PTXDSL_LAUNCH", "c")
    assert rlaunch.Launcher(k).mode == "params"
    monkeypatch.setenv("PTXDSL_LAUNCH", "cuda-graph")
    with pytest.raises(LaunchError, match="params, c"):
        rlaunch.Launcher(k)
