"""The driver wrapper and ``ptxdsl doctor`` without a GPU (a fake cuda.bindings)."""
from __future__ import annotations

import pytest

import ptxdsl
from ptxdsl.core.errors import PtxdslError
from ptxdsl.runtime import driver as rd
from runtime_fakes import CUresult, FakeCuda, fake_driver


def test_gpu_available_is_false_and_quiet_without_a_driver(monkeypatch):
    monkeypatch.setattr(rd, "_driver", None)
    monkeypatch.setattr(rd, "_driver_error", ImportError("No module named 'cuda'"))
    assert ptxdsl.gpu_available() is False
    with pytest.raises(PtxdslError, match="cuda-python is not installed.*PTXDSL_INTERPRET=1"):
        rd.get()


def test_missing_libcuda_is_explained(monkeypatch):
    monkeypatch.setattr(rd, "_driver", None)
    monkeypatch.setattr(rd, "_driver_error", RuntimeError(
        '"cuda" is an NVIDIA driver library and can only be found via system search'))
    with pytest.raises(PtxdslError, match=r"NVIDIA driver library \(libcuda\) was not found"):
        rd.get()


def test_get_initialises_once_and_remembers_failure(monkeypatch):
    made = []

    class Boom(rd.Driver):
        def __init__(self):
            made.append(1)
            raise rd.CudaError("CUDA_ERROR_NO_DEVICE", "cuInit")

    monkeypatch.setattr(rd, "_driver", None)
    monkeypatch.setattr(rd, "_driver_error", None)
    monkeypatch.setattr(rd, "Driver", Boom)
    assert ptxdsl.gpu_available() is False
    assert ptxdsl.gpu_available() is False
    assert made == [1]


def test_set_driver_swaps_and_resets(monkeypatch):
    drv, _ = fake_driver()
    monkeypatch.setattr(rd, "_driver", None)
    prev = rd.set_driver(drv)
    try:
        assert rd.get() is drv and ptxdsl.gpu_available()
    finally:
        rd.set_driver(prev)


def test_device_info(monkeypatch):
    drv, cu = fake_driver(devices=((9, 0), (8, 6)))
    assert drv.device_count() == 2 and drv.version() == 13000
    d = drv.device(1)
    assert d.cc == (8, 6) and d.arch == "sm_86" and d.name.startswith("Fake GPU 1")
    assert d.max_grid == (2**31 - 1, 65535, 65535) and d.max_smem_per_block_optin == 227 * 1024
    assert not d.cluster_launch and drv.device(0).cluster_launch
    with pytest.raises(rd.CudaError, match="device 5 does not exist; 2 visible"):
        drv.device(5)


def test_enter_sets_pushes_and_leaves():
    drv, cu = fake_driver(devices=((9, 0), (9, 0)))
    assert drv.current_device() == -1
    assert drv.enter(0) is False  # nothing current: set it, for good
    assert drv.current_device() == 0 and drv.tls.device == 0
    assert drv.enter(0) is False  # already current
    assert drv.enter(1) is True   # another one current: pushed
    assert drv.current_device() == 1
    drv.leave()
    assert drv.current_device() == 0


def test_check_raises_named_errors():
    drv, _ = fake_driver()
    assert drv.check((CUresult.CUDA_SUCCESS, 5), "x") == 5
    assert drv.check((CUresult.CUDA_SUCCESS, 1, 2), "x") == (1, 2)
    with pytest.raises(rd.CudaError) as info:
        drv.check((CUresult.CUDA_ERROR_OUT_OF_MEMORY, None), "cuMemAlloc")
    err = info.value
    assert err.name == "CUDA_ERROR_OUT_OF_MEMORY" and err.call == "cuMemAlloc"
    assert "out of memory" in str(err) and not err.sticky
    assert drv.error_name(700) == "CUDA_ERROR_ILLEGAL_ADDRESS"  # plain ints too


def test_sticky_errors():
    err = rd.CudaError("CUDA_ERROR_ILLEGAL_ADDRESS", "cuStreamSynchronize", kernel="k")
    assert err.sticky and str(err).startswith("kernel k: cuStreamSynchronize failed")
    assert "restart the process" in str(err)
    again = rd.CudaError("CUDA_ERROR_INVALID_VALUE", "cuLaunchKernel").for_kernel("k2")
    assert again.kernel == "k2" and "kernel k2: cuLaunchKernel" in str(again)


def test_jit_log_comes_back_in_the_error():
    drv, cu = fake_driver()
    drv.enter(0)
    cu.jit_error = "ptxas application ptx input, line 3; error   : bad"
    with pytest.raises(rd.CudaError) as info:
        drv.load_module(b".version 8.0\0", jit=True)
    assert info.value.name == "CUDA_ERROR_INVALID_PTX"
    assert "line 3; error   : bad" in info.value.detail


def test_streams_are_cached_objects():
    drv, cu = fake_driver()
    s = drv.stream(0x10)
    assert drv.stream(0x10) is s and int(s) == 0x10


def test_memory_roundtrip():
    import ctypes

    import numpy as np
    drv, cu = fake_driver()
    drv.enter(0)
    src = np.arange(16, dtype=np.float32)
    dst = np.zeros(16, np.float32)
    p = drv.mem_alloc(src.nbytes)
    drv.memcpy_htod(p, src.ctypes.data, src.nbytes, 0)
    drv.memcpy_dtoh(dst.ctypes.data, p, src.nbytes, 0)
    drv.mem_free(p)
    assert (dst == src).all() and cu.live_allocations() == 0
    free, total = drv.mem_info()
    assert free == total
    assert ctypes.sizeof(ctypes.c_void_p) == 8


# ---------------------------------------------------------------- doctor
def test_doctor_without_a_gpu(monkeypatch):
    from ptxdsl.cli import doctor
    monkeypatch.setattr(rd, "_driver", None)
    monkeypatch.setattr(rd, "_driver_error", ImportError("No module named 'cuda'"))
    report = doctor.doctor()
    assert report["gpu"].startswith("no (cuda-python is not installed")
    assert report["devices"] == 0 and "cache dir" in report
    assert any("CPU interpreter" in p for p in report["problems"])
    text = doctor.format_report(report)
    assert "cache dir" in text and "problem:" in text


def test_doctor_with_a_fake_gpu(monkeypatch, tmp_path):
    from ptxdsl.cli import doctor
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path))
    fake_driver(monkeypatch, devices=((9, 0),))
    report = doctor.doctor()
    assert report["gpu"] == "yes" and report["devices"] == 1
    assert "sm_90" in report["device 0"] and report["driver"].startswith("CUDA 13.0")
    assert report["cache dir"] == str(tmp_path)


def test_cli_doctor_uses_the_runtime_report(monkeypatch, capsys):
    from ptxdsl.cli import command as cli
    fake_driver(monkeypatch)
    code = cli.main(["doctor"])
    out = capsys.readouterr().out
    assert "Fake GPU 0" in out and code in (0, 1)


def test_fake_cuda_is_self_consistent():
    cu = FakeCuda()
    assert cu.cuInit(0) == (CUresult.CUDA_SUCCESS,)


def test_doctor_reports_nvdisasm_and_what_to_install(monkeypatch):
    from ptxdsl.cli import doctor
    from ptxdsl import toolchain
    fake_driver(monkeypatch)
    real = toolchain.toolchain_report()
    monkeypatch.setattr(toolchain, "toolchain_report",
                        lambda: dict(real, cuobjdump="/x/cuobjdump", nvdisasm=None, problems=[]))
    report = doctor.doctor()
    assert "nvdisasm" in report and report["nvdisasm"] is None
    assert any("nvidia-cuda-nvdisasm" in p for p in report["problems"])
    monkeypatch.setattr(toolchain, "toolchain_report",
                        lambda: dict(real, cuobjdump=None, nvdisasm="/x/nvdisasm", problems=[]))
    report = doctor.doctor()
    assert report["nvdisasm"] == "/x/nvdisasm"
    assert not any("disassembler" in p or "nvdisasm" in p for p in report["problems"])
