"""Running kernels on NVIDIA GPUs through cuda-python (and an optional launch shim).

``launch(kernel, *args)`` is what ``kernel(*args)`` does; ``prepare(kernel,
*example_args)`` returns the kernel's :class:`Launcher`, whose call is the
fast path, and routes ``kernel(...)`` straight to that call (each kernel object
is made with a class of its own, whose ``__call__`` becomes the launcher's
generated function). A fast call finds its prepared entry first through the
entry's guard (torch's C++ ``TensorGuards.check``), else by its signature key
(:class:`~ptxdsl.runtime.fastpath.Signatures`), else takes the general path;
see :mod:`ptxdsl.runtime.launcher` and :mod:`ptxdsl.runtime.fastpath`. The
modules, one question each:

============= ===========================================================
driver        the CUDA driver: devices, primary contexts, modules, errors
cache         cubins on disk (keyed by PTX, arch, toolchain, options), modules in memory
compile       PTX -> cubin (ptxas or driver JIT) -> CUfunction on a device
adapter       the one framework adapter: what an array argument is (pointer, shape,
              strides, dtype, device, stream), the one allocator of new arrays like
              it, and an op call's ``Frame``; read by the launcher and the ops
args          whether the arguments fit the Tile specs; named dims and strides
memory        device buffers ptxdsl owns; staging numpy arrays through the GPU
launcher      the general path, making fast-path entries, ``prepare`` and ``launch``
limits        grid/block/shared-memory/cluster limits checked before a launch (the
              dynamic shared memory opt-in), cooperative residency, occupancy
fastpath      the parameter-buffer layout, the entries (``Entry``, ``Signatures``),
              the generated per-kernel call and ``bind`` (a launch bound to a signature)
cshim         the launch shim (``_launch.c``): the fast launch in one C call, compiled
              at first use, optional (else plain cuda-python, the ``params`` mode)
memo          an op call -> its guard -> its bound launches, for every ready op
torch_private every private torch call (raw stream, current device, entry guard,
              output allocator), behind a version gate and ``PTXDSL_TORCH_PRIVATE``
tensormaps    TMA tensor maps: encoded per signature, re-pointed per call
============= ===========================================================
"""
from __future__ import annotations

from .driver import CudaError
from .launcher import LAUNCH_MODES, Launcher, launch, prepare
from .memory import DeviceArray

__all__ = ["LAUNCH_MODES", "CudaError", "DeviceArray", "Launcher", "launch", "prepare"]
