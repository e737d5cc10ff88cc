"""pyptx's spellings of the PTX text: ``from ptxdsl.pyptx import kernel, reg, smem, ptx``.

Everything here is ``ptxdsl``'s own (``reg``, ``smem``, ``ptx``, ``Tile``, ...) except
:func:`kernel`, which is :func:`ptxdsl.kernel` with ``style="pyptx"``: the PTX it
prints spells what pyptx 0.1.1 spells differently (the same checks and launches):

- ``.version``: at least pyptx's for the arch (8.5 for sm_90a, 8.8 for sm_100a, 8.7 for
  sm_12x) where plain ptxdsl prints the oldest PTX ISA the kernel needs (8.0 for sm_90a,
  which older drivers can JIT);
- shared arrays: ``smem_0, smem_1, ...`` for ``smem.alloc`` / ``smem.wgmma_tile``,
  ``mbar_0, ...`` for ``smem.mbarrier``, where ptxdsl numbers them all ``smem0, smem1``;
- a 64-bit offset ``p + a * b`` is pyptx's ``mul.lo`` + ``cvt.u64.u32`` where the trace
  proves the product below 2**32 (:mod:`ptxdsl.dsl.ranges`: as exact as ptxdsl's
  ``mul.wide``, and ptxas then gives pyptx's examples pyptx's register counts).

A pyptx program runs on ptxdsl with ``pyptx`` renamed to ``ptxdsl.pyptx`` in its
``from pyptx import ...`` lines (its ``pyptx.types`` / ``pyptx.specs`` imports become
``ptxdsl.types`` / ``ptxdsl.specs``). What stays different (register declarations,
special registers as operands, tensor maps passed by value) is listed in
``docs/coming-from-pyptx.md``.
"""
from __future__ import annotations

from . import (TMA, Kernel, Layout, PtxdslError, Tile, custom_op, detect_arch, from_ptx,
               gpu_available, interpret_requested, intrinsic, parse_ptx, ptx, reg, smem,
               types)
from .kernel import kernel as _kernel

__all__ = ["kernel", "Kernel", "reg", "ptx", "smem", "Tile", "TMA", "Layout", "types",
           "PtxdslError", "gpu_available", "interpret_requested", "custom_op",
           "parse_ptx", "from_ptx", "intrinsic", "detect_arch"]


def kernel(*args, **kwargs):
    """:func:`ptxdsl.kernel` with ``style="pyptx"`` (bare ``@kernel`` too)."""
    kwargs.setdefault("style", "pyptx")
    return _kernel(*args, **kwargs)
