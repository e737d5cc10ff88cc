"""Programmatic dependent launch for the ops' kernels.

A kernel of ``ptxdsl.ops`` built for sm_90 or newer is declared ``pdl=True``: its launch
may begin while the kernel ahead of it on the stream is still draining, so that its
CTAs are already placed and past their setup when that kernel's last CTA exits (the
gap between two short kernels is a few microseconds of launch latency and CTA
dispatch otherwise). :func:`after_previous_kernel` is the kernel's first step: every
thread waits there for the previous kernel (its writes visible), before its own first
global access. ``PTXDSL_PDL=0`` launches them plainly (the instructions then return at
once).

When to let the next kernel start (``griddepcontrol.launch_dependents``), measured on
an H200 (``bench/results/rmsnorm_pdl_h200.json``):

* a grid of one work item per CTA gives the go-ahead in its last wave only. The
  go-ahead takes effect once every CTA has given it *or exited*, so the CTAs of the
  last wave alone decide when, and giving it costs: 32768 one-row CTAs that all gave
  it took 40.4 µs where the same kernel without it took 32.9 (the copy of the same
  bytes: 34.5);
* a persistent grid (CTAs that loop over the work) gives none: its CTAs are all placed
  at once, so a go-ahead would place the next kernel's CTAs beside its own, in
  whatever room is left, from the start (1024 x 16384 f32: 34.9 µs with a go-ahead as
  each CTA began its last row, 34.3 without).
"""
from __future__ import annotations

from ...core.arch import parse_arch
from ...core.types import u32
from ...dsl import ptx, reg

__all__ = ["after_previous_kernel", "pdl_for"]

# CTAs of any size an SM holds at most (2048 threads; Hopper).
THREADS_PER_SM = 2048


def pdl_for(arch: str) -> bool:
    """Whether kernels for ``arch`` are launched as programmatic dependents."""
    return parse_arch(arch).sm >= 90


def after_previous_kernel(pdl: bool, threads: int = 0) -> None:
    """Emit the wait for the previous kernel and the go-ahead for the next (nothing when
    ``pdl`` is False). Call it before the kernel's first global memory access; what
    comes before it (special registers, parameters, shared-memory setup) overlaps the
    previous kernel's tail. ``threads``: the CTA's threads in a grid of one work item
    per CTA, whose CTAs of the last wave (at most ``%nsmid`` x 2048 / threads from the
    end of a 1-D grid) give the go-ahead; 0: a persistent grid, which gives none."""
    if not pdl:
        return
    ptx.inst.griddepcontrol.wait()
    if not threads:
        return
    per_sm = max(1, THREADS_PER_SM // threads)
    cta, nsm, ncta = reg.scalar(u32), reg.scalar(u32), reg.scalar(u32)
    ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
    ptx.inst.mov.u32(nsm, ptx.special.nsmid())
    ptx.inst.mov.u32(ncta, ptx.special.nctaid.x())
    ptx.inst.griddepcontrol.launch_dependents(pred=cta + nsm * per_sm >= ncta)
