"""ptxdsl: write PTX kernels as Python.

``from ptxdsl import kernel, reg, ptx, smem, Tile`` is the whole surface of a
kernel file; ``ptxdsl.types`` holds the types (``f32``, ``u32``, ...).
"""
from __future__ import annotations

__version__ = "0.1.0"

from . import reg, smem, types  # noqa: E402
from . import ptx  # noqa: E402
from .errors import PtxdslError  # noqa: E402
from .kernel import Kernel, interpret_requested, kernel  # noqa: E402
from .tensormap import TMA  # noqa: E402
from .tile import Layout, Tile  # noqa: E402
from .customop import custom_op  # noqa: E402  (imports torch only when called)
from .log import configure_from_env as _configure_log  # noqa: E402

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
           "__version__"]
