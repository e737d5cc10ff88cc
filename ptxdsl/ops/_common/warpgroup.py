"""A consumer warpgroup's index in uniform registers (the attention forward's and
backward's ``uniform_cons``, the GEMM's ``Plan.uniform_cons``). ``tid >> 7`` is the same in
a warp, but ptxas does not know it: every wgmma descriptor and shared address derived from
it sits in vector registers and is moved by ``R2UR`` before each wgmma. Read from lane 0 through
``shfl.sync.idx`` (CUTLASS's ``canonical_warp_group_idx``), ptxas keeps them in uniform
registers (the verifier treats the result as warp-uniform, :mod:`ptxdsl.core.verify`)."""
from __future__ import annotations

from ...core.types import u32
from ...dsl import ptx, reg


def consumer_index(wg, uniform: bool):
    """``wg - 1``: this consumer warpgroup's number from its warpgroup ``wg`` (``uniform``:
    lane 0's, through ``shfl.sync.idx``)."""
    if not uniform:
        return wg - 1
    w = reg.scalar(u32)
    ptx.inst("shfl.sync.idx.b32", w, wg - 1, 0, 0x1F, 0xFFFFFFFF)
    return w


__all__ = ["consumer_index"]
