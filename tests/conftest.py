"""Fixtures every test module may ask for by name, and the interpreter tests' time guard.

``make_gpu`` / ``gpu``: a fake GPU (``runtime_fakes.FakeCuda`` behind the real driver
wrapper, fresh module and disk caches, the launcher's environment switches cleared);
``torch``: a fake torch module (``runtime_fakes.fake_torch_module``) in ``sys.modules``.

Every interpreter test runs under a wall-clock guard: a test that would hang fails.
pytest-timeout is not a dependency; a SIGALRM-based fixture (POSIX main thread only)
does the same job for the tests in ``interp/``, ``ops/`` and ``docs/`` (and top-level
``test_interp_*`` / ``test_ops_*`` files). The interpreter
also bounds the instructions it executes (``interpret(..., max_steps=)``), so a kernel
that spins forever is an error on its own; this guard is the second line.
"""
from __future__ import annotations

import os
import pathlib
import signal
import sys
import threading
import types

import pytest

from ptxdsl.runtime import cache as rcache
from runtime_fakes import fake_driver, fake_torch_module

# Seconds one guarded test may take on a slow, shared 2-core machine.
INTERP_TEST_TIMEOUT = int(os.environ.get("PTXDSL_TEST_TIMEOUT", "900"))


# Folders whose tests run kernels on the interpreter, and the top-level spellings that new
# test files use until they are sorted into folders.
GUARDED_FOLDERS = ("interp", "ops", "docs")
GUARDED_NAMES = ("test_interp_", "test_ops_", "test_examples", "test_docs")
TESTS = pathlib.Path(__file__).resolve().parent


def _runs_the_interpreter(path: pathlib.Path) -> bool:
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return False
    return parts[0] in GUARDED_FOLDERS or parts[-1].startswith(GUARDED_NAMES)


@pytest.fixture(autouse=True)
def _interpreter_timeout(request):
    usable = (hasattr(signal, "SIGALRM")
              and threading.current_thread() is threading.main_thread())
    if not usable or not _runs_the_interpreter(request.node.path):
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"{request.node.nodeid} ran longer than {INTERP_TEST_TIMEOUT} s "
                           f"(PTXDSL_TEST_TIMEOUT)")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(INTERP_TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


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
