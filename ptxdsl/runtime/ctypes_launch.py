"""Launching through ctypes on the driver library cuda.bindings loaded: the ``ctypes``
launch mode (:class:`CtypesLauncher`), and the library itself for the launch shim
(:mod:`.cshim`), which takes its entry points from there."""
from __future__ import annotations

import ctypes
import os


def libcuda():
    """The CUDA driver library (the one already loaded in this process, by cuda.bindings)."""
    name = "nvcuda.dll" if os.name == "nt" else "libcuda.so.1"
    return (ctypes.WinDLL if os.name == "nt" else ctypes.CDLL)(name)


class CtypesLauncher:
    """``cuLaunchKernel`` called through ctypes on the driver library that
    cuda.bindings already loaded (same process, same contexts): an alternative
    with a different per-call cost, measured in ``bench/launch_overhead.py`` and
    chosen with ``PTXDSL_LAUNCH=ctypes``. Returns the CUresult as an int."""

    def __init__(self, cooperative: bool = False):
        lib = libcuda()
        fn = lib.cuLaunchCooperativeKernel if cooperative else lib.cuLaunchKernel
        fn.restype = ctypes.c_int
        # No argtypes: ctypes converts ints to C int (grid/block/smem all fit) and
        # passes c_void_p objects as they are, which is the cheapest conversion.
        fn.argtypes = None
        self.fn = fn
        self._voidp: dict[int, ctypes.c_void_p] = {}

    def handle(self, value: int) -> ctypes.c_void_p:
        p = self._voidp.get(value)
        if p is None:
            p = self._voidp[value] = ctypes.c_void_p(value or None)
        return p
