"""Running kernels on NVIDIA GPUs through cuda-python (no compiled extension of our own).

``launch(kernel, *args)`` is what ``kernel(*args)`` does; ``prepare(kernel,
*example_args)`` returns the kernel's :class:`Launcher`, whose call is the
fast path, and routes ``kernel(...)`` straight to that call (the kernel object
gets a per-kernel subclass whose ``__call__`` is the launcher's generated
function). A fast call finds its prepared entry first through the entry's
guard (torch's C++ ``TensorGuards.check``), else by its signature key in a
dict, else takes the general path; see :mod:`ptxdsl.runtime.launcher` and
:mod:`ptxdsl.runtime.fastpath`. The modules, one question each:

========== ==============================================================
driver     the CUDA driver: devices, primary contexts, modules, errors
cache      cubins on disk (keyed by PTX, arch, toolchain, options), modules in memory
compile    PTX -> cubin (ptxas or driver JIT) -> CUfunction on a device
args       what an argument is and whether it fits the Tile specs
memory     device buffers ptxdsl owns; staging numpy arrays through the GPU
launcher   the general path, making fast-path entries, ``prepare`` and ``launch``
limits     grid/block/shared-memory/cluster limits checked before a launch (the
           dynamic shared memory opt-in), cooperative residency, occupancy
fastpath   the parameter-buffer layout, the entries, the torch hooks (entry
           guard, output allocator; ``PTXDSL_TORCH_PRIVATE=0`` turns them
           off) and the generated per-kernel call
========== ==============================================================
"""
from __future__ import annotations

from .driver import CudaError
from .launcher import LAUNCH_MODES, Launcher, launch, prepare
from .memory import DeviceArray

__all__ = ["LAUNCH_MODES", "CudaError", "DeviceArray", "Launcher", "launch", "prepare"]
