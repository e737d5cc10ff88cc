"""Every interpreter test runs under a wall-clock guard: a test that would hang fails.

pytest-timeout is not a dependency; a SIGALRM-based fixture (POSIX main thread only)
does the same job for the ``test_interp_*`` and ``test_ops_*`` modules. The interpreter
also bounds the instructions it executes (``interpret(..., max_steps=)``), so a kernel
that spins forever is an error on its own; this guard is the second line.
"""
from __future__ import annotations

import os
import signal
import threading

import pytest

# Seconds one guarded test may take on a slow, shared 2-core machine.
INTERP_TEST_TIMEOUT = int(os.environ.get("PTXDSL_TEST_TIMEOUT", "900"))


@pytest.fixture(autouse=True)
def _interpreter_timeout(request):
    name = request.node.module.__name__.rsplit(".", 1)[-1]
    usable = (hasattr(signal, "SIGALRM")
              and threading.current_thread() is threading.main_thread())
    if not usable or not name.startswith(("test_interp_", "test_ops_", "test_examples",
                                          "test_docs")):
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
