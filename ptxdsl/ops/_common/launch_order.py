"""Programmatic dependent launch for the ops' kernels.

A kernel of ``ptxdsl.ops`` built for sm_90 or newer is declared ``pdl=True``: its launch
may begin while the kernel ahead of it on the stream is still draining, so that its
CTAs are already placed and past their setup when that kernel's last CTA exits (the
gap between two short kernels is a few microseconds of launch latency and CTA
dispatch otherwise). :func:`after_previous_kernel` is the kernel's first step: every
thread waits there for the previous kernel (its writes visible), before its own first
global access, and the kernel then lets the next one begin. ``PTXDSL_PDL=0`` launches
them plainly (the two instructions then return at once).
"""
from __future__ import annotations

from ...arch import parse_arch
from ... import ptx

__all__ = ["after_previous_kernel", "pdl_for"]


def pdl_for(arch: str) -> bool:
    """Whether kernels for ``arch`` are launched as programmatic dependents."""
    return parse_arch(arch).sm >= 90


def after_previous_kernel(pdl: bool) -> None:
    """Emit the wait for the previous kernel and the go-ahead for the next (nothing when
    ``pdl`` is False). Call it before the kernel's first global memory access; what
    comes before it (special registers, parameters, shared-memory setup) overlaps the
    previous kernel's tail."""
    if pdl:
        ptx.inst.griddepcontrol.wait()
        ptx.inst.griddepcontrol.launch_dependents()
