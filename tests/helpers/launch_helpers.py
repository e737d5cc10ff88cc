"""Helpers of the launcher's fake-GPU tests (``test_runtime_launch``, ``_limits``,
``_fastpath_torch``, ``_cshim``); their fixtures (``gpu``, ``make_gpu``, ``torch``)
are in conftest.py."""
from __future__ import annotations

import numpy as np

from runtime_fakes import vadd_impl
from runtime_kernels import build_vadd


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
