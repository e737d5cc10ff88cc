"""ptxdsl: write PTX kernels as Python.

``from ptxdsl import kernel, reg, ptx, smem, Tile`` is the whole surface of a
kernel file; ``ptxdsl.types`` holds the types (``f32``, ``u32``, ...).

The package is laid out by stage: ``core/`` (types, IR, tracing, checks, PTX text),
``isa/`` (the instruction table), ``dsl/`` (what kernel bodies call), ``interp/`` (the
CPU interpreter), ``runtime/`` (cuda-python, caches, launches), ``ops/`` (ready kernels)
and ``cli/`` (the ``ptxdsl`` command).
"""
from __future__ import annotations

from .core import types
from .core.errors import PtxdslError
from .core.log import configure_from_env as _configure_log
from .core.specs import Layout, Tile
from .core.tensormap import TMA
from .core.version import __version__
from .dsl import ptx, reg, smem
from .dsl.intrinsic import intrinsic
from .dsl.template import auto_arch as detect_arch  # pyptx's name: the arch of GPU 0
from .frontend.module import from_ptx, parse_ptx
from .kernel import Kernel, interpret_requested, kernel
from .runtime.customop import custom_op  # imports torch only when called

_configure_log()  # PTXDSL_LOG=debug: the `ptxdsl` logger to stderr for this run


def gpu_available() -> bool:
    """Whether a CUDA driver and at least one GPU can be used from this process."""
    try:
        from .runtime.driver import gpu_available as _probe
    except ImportError:
        return False
    return _probe()


__all__ = ["kernel", "Kernel", "reg", "ptx", "smem", "Tile", "TMA", "Layout", "types",
           "PtxdslError", "gpu_available", "interpret_requested", "custom_op",
           "parse_ptx", "from_ptx", "intrinsic", "detect_arch", "__version__"]
