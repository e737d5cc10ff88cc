"""Running kernels on NVIDIA GPUs through cuda-python (no compiled extension of our own).

``launch(kernel, *args)`` is what ``kernel(*args)`` calls; ``prepare(kernel,
*example_args)`` returns the kernel's :class:`Launcher`, whose call is the
fast path (see :mod:`ptxdsl.runtime.launcher`). The modules, one question each:

========== ==============================================================
driver     the CUDA driver: devices, primary contexts, modules, errors
cache      cubins on disk (keyed by PTX, arch, toolchain, options), modules in memory
compile    PTX -> cubin (ptxas or driver JIT) -> CUfunction on a device
args       what an argument is and whether it fits the Tile specs
memory     device buffers ptxdsl owns; staging numpy arrays through the GPU
launcher   the general path, the fast-path entries, and the entry points
fastpath   the parameter-buffer layout and the generated per-kernel call
========== ==============================================================
"""
from __future__ import annotations

from .driver import CudaError
from .launcher import LAUNCH_MODES, Launcher, launch, prepare
from .memory import DeviceArray

__all__ = ["LAUNCH_MODES", "CudaError", "DeviceArray", "Launcher", "launch", "prepare"]
