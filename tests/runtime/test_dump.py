"""PTXDSL_DUMP_DIR (ptxdsl.runtime.dump) and the `ptxdsl` logger (ptxdsl.core.log) around compiles."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from ptxdsl import Tile, kernel, ptx, reg, toolchain
from ptxdsl.runtime.dump import dump, stem
from ptxdsl.core.errors import ToolchainError
from ptxdsl.core.log import configure_from_env, logger
from ptxdsl.runtime import cache as rc
from ptxdsl.runtime.compile import build_image, resolve_toolchain
from ptxdsl.core.types import f32, u32

from paths import HELPERS, ROOT


def _ptxas():
    try:
        return toolchain.find_ptxas()
    except ToolchainError:
        return None


needs_ptxas = pytest.mark.skipif(_ptxas() is None, reason="no ptxas (pip install -e '.[test]')")


def make():
    @kernel(in_specs=(Tile(32, f32),), out_specs=(Tile(32, f32),), block=(32, 1, 1),
            arch="sm_80")
    def dumped(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        t = reg.scalar(u32)
        ptx.inst.mov.u32(t, ptx.special.tid.x())
        a = reg.scalar(f32)
        ptx.inst.ld.global_.f32(a, ptx.addr(px + t * 4))
        ptx.inst.st.global_.f32(ptx.addr(py + t * 4), a * 3.0)
    return dumped


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXDSL_DUMP_DIR", str(tmp_path / "dump"))
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PTXDSL_CACHE", raising=False)
    monkeypatch.delenv("PTXDSL_COMPILER", raising=False)
    return tmp_path / "dump", tmp_path / "cache"


def test_dump_is_off_without_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("PTXDSL_DUMP_DIR", raising=False)
    assert dump("k", "ab" * 32, ptx="x") == []


def test_dump_writes_one_stem_per_compilation(dirs):
    out, _ = dirs
    paths = dump("my kernel", "0123456789abcdef" * 4, ptx="//ptx", cubin=b"\x7fELF", sass="S")
    assert sorted(os.path.basename(p) for p in paths) == [
        "my_kernel-0123456789abcdef.cubin", "my_kernel-0123456789abcdef.ptx",
        "my_kernel-0123456789abcdef.sass"]
    assert (out / "my_kernel-0123456789abcdef.cubin").read_bytes() == b"\x7fELF"


def test_unwritable_dump_dir_is_logged_not_raised(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("PTXDSL_DUMP_DIR", str(blocker / "sub"))
    with caplog.at_level(logging.WARNING, logger="ptxdsl"):
        assert dump("k", "ab" * 32, ptx="x") == []
    assert "cannot write" in caplog.text


@needs_ptxas
def test_check_and_sass_dump_ptx_cubin_sass(dirs):
    out, _ = dirs
    k = make()
    k.check()
    files = sorted(os.listdir(out))
    assert len(files) == 2 and files[0].startswith("dumped-") and files[0].endswith(".cubin")
    assert files[1] == files[0].replace(".cubin", ".ptx")
    assert (out / files[1]).read_text() == k.ptx()
    assert (out / files[0]).read_bytes().startswith(b"\x7fELF")
    if toolchain.find_tool("cuobjdump") or toolchain.find_tool("nvdisasm"):
        k.sass()
        assert (out / files[0].replace(".cubin", ".sass")).exists()


@needs_ptxas
def test_launch_compile_logs_miss_then_hit_and_dumps_both_times(dirs, caplog):
    out, cache = dirs
    k = make()
    compiled = k.compile()
    tools = resolve_toolchain(None)
    disk = rc.DiskCache()
    with caplog.at_level(logging.DEBUG, logger="ptxdsl"):
        first = build_image(k, compiled, "sm_80", disk=disk, tools=tools)
        second = build_image(k, compiled, "sm_80", disk=disk, tools=tools)
    assert (first.origin, second.origin) == ("ptxas", "disk")
    text = caplog.text
    assert "cubin cache miss" in text and "compiled dumped for sm_80" in text
    assert "cubin cache hit" in text
    s = stem("dumped", first.key)
    assert (out / f"{s}.ptx").read_text() == compiled.ptx
    assert (out / f"{s}.cubin").read_bytes() == first.data
    # The cache entry is the plain cubin, its metadata beside it.
    assert open(disk.path(first.key), "rb").read() == first.data
    assert first.data.startswith(b"\x7fELF")
    assert '"kernel": "dumped"' in open(disk.meta_path(first.key)).read()


@needs_ptxas
def test_cuobjdump_reads_a_cache_entry(dirs):
    tool = toolchain.find_tool("cuobjdump")
    if tool is None:
        pytest.skip("no cuobjdump (pip install nvidia-cuda-cuobjdump)")
    k = make()
    img = build_image(k, k.compile(), "sm_80", disk=rc.DiskCache(), tools=resolve_toolchain(None))
    proc = subprocess.run([tool, "-sass", rc.DiskCache().path(img.key)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dumped" in proc.stdout


def test_ptxdsl_log_env_attaches_one_handler(monkeypatch):
    before = list(logger.handlers), logger.level
    try:
        assert configure_from_env("debug") and configure_from_env("1")
        assert logger.level == logging.DEBUG
        assert sum(type(h).__name__ == "_EnvHandler" for h in logger.handlers) == 1
        assert not configure_from_env("0")
    finally:
        logger.handlers[:] = before[0]
        logger.setLevel(before[1])


def test_ptxdsl_log_debug_for_a_run(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import numpy as np, ptxdsl\n"
                      "from tests.runtime.test_dump import make\n"
                      "make().ptx()\n")
    env = dict(os.environ, PTXDSL_LOG="debug", PYTHONPATH=os.pathsep.join([ROOT, HELPERS]))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "[ptxdsl.compile] traced dumped for sm_80" in proc.stderr


def test_ops_log_their_kernel_choice(caplog):
    import numpy as np
    from ptxdsl.ops import matmul, rms_norm
    with caplog.at_level(logging.DEBUG, logger="ptxdsl.ops"):
        rms_norm(np.ones((2, 64), np.float32), np.ones(64, np.float32))
        matmul(np.ones((4, 8), np.float16), np.ones((8, 4), np.float16))
    text = caplog.text
    assert "rms_norm 2x64 f32" in text and "matmul 4x4x8 f16->f16" in text
