"""Tensor maps in parameter memory: the 128 bytes the launcher writes for a tensor-map
parameter (``X.tma_desc()``), and the tensor map a TMA copy's operand names.

The bytes are an opaque handle (a magic word and an index into the launch's
``param`` space's ``tensormaps``, each a :class:`~ptxdsl.core.tensormap.TensorMapSpec`);
an address that holds no handle is an error.
"""
from __future__ import annotations

import numpy as np

from .addressing import WINDOWS


_MAGIC = 0x50544458_544D4150   # "PTDX" "TMAP"


def tensormap_handle(index: int) -> np.ndarray:
    """The 128 parameter bytes that stand for tensor map ``index`` of the launch."""
    words = np.zeros(16, np.uint64)
    words[0] = _MAGIC
    words[1] = index
    words[2] = _MAGIC ^ index
    return words


def tensormap_spec(mach, instr, t: int, addr: int):
    """The tensor map whose handle lies at parameter address ``addr`` (thread ``t``'s
    operand; a generic address into the param window, or a param address)."""
    psp = mach.spaces["param"]
    pw = WINDOWS["param"]
    a = addr - pw if pw <= addr < pw + (1 << 32) else addr
    specs = getattr(psp, "tensormaps", [])
    ok = psp.in_bounds(np.asarray([a], np.uint64), 128)[0] and a % 64 == 0
    if ok:
        w = psp.read(np.asarray([a - psp.base], np.int64), np.uint64, 3)[0]
        ok = int(w[0]) == _MAGIC and int(w[2]) == _MAGIC ^ int(w[1]) and int(w[1]) < len(specs)
    if not ok:
        mach.fail(instr, f"the tensor-map operand {addr:#x} is not a tensor map: the "
                         f"interpreter reads tensor maps passed as kernel parameters "
                         f"(X.tma_desc(), or its .param symbol)", t)
    return specs[int(w[1])]
