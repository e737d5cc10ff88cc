"""The special registers (``%tid.x``, ``%laneid``, ``%cluster_ctarank``, ...): one table.

Each :class:`SpecialReg` names a register family, its type, its axes (``x``, ``y``,
``z`` for ``%tid.x`` ...; none for ``%laneid``), the ``sm_`` it needs and its
scope: the widest group of threads that all read the same value (``"thread"``: it
may differ between two threads of a warp; ``"grid"``: one value per launch).

Three readers: the tracer (:mod:`ptxdsl.dsl.special`: ``ptx.special.<name>`` and
``ptx.sreg("%name")`` take their names, types and arch checks from here), the
verifier (which conditions are uniform, by scope) and the interpreter (the width of
the value it reads).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.types import PtxType, pred, u32, u64

__all__ = ["SpecialReg", "FAMILIES", "SPECIAL_REGS", "SCOPES"]

# From the narrowest group of threads to the widest (the verifier's levels).
SCOPES = ("thread", "warp", "warpgroup", "cta", "cluster", "grid")


@dataclass(frozen=True)
class SpecialReg:
    """One family of special registers; ``axes`` make ``%name.x`` ... registers."""

    name: str
    dtype: PtxType
    scope: str
    sm: int = 20
    axes: tuple[str, ...] = ()

    @property
    def registers(self) -> tuple[str, ...]:
        """The PTX names (without ``%``) of this family's registers."""
        return tuple(f"{self.name}.{a}" for a in self.axes) if self.axes else (self.name,)


_XYZ = ("x", "y", "z")

FAMILIES: tuple[SpecialReg, ...] = (
    SpecialReg("tid", u32, "thread", axes=_XYZ),
    SpecialReg("ntid", u32, "grid", axes=_XYZ),
    SpecialReg("ctaid", u32, "cta", axes=_XYZ),
    SpecialReg("nctaid", u32, "grid", axes=_XYZ),
    SpecialReg("laneid", u32, "thread"),
    SpecialReg("warpid", u32, "warp"),
    SpecialReg("nwarpid", u32, "grid"),
    SpecialReg("smid", u32, "cta"),
    SpecialReg("nsmid", u32, "grid"),
    SpecialReg("gridid", u64, "grid"),
    SpecialReg("clock", u32, "thread"),
    SpecialReg("clock64", u64, "thread"),
    SpecialReg("globaltimer", u64, "thread"),
    SpecialReg("globaltimer_lo", u32, "thread"),
    SpecialReg("globaltimer_hi", u32, "thread"),
    SpecialReg("dynamic_smem_size", u32, "grid"),
    SpecialReg("total_smem_size", u32, "grid"),
    SpecialReg("lanemask_eq", u32, "thread"),
    SpecialReg("lanemask_le", u32, "thread"),
    SpecialReg("lanemask_lt", u32, "thread"),
    SpecialReg("lanemask_ge", u32, "thread"),
    SpecialReg("lanemask_gt", u32, "thread"),
    # Clusters (sm_90): the cluster's index in the grid, this CTA's place in its cluster.
    SpecialReg("clusterid", u32, "cluster", 90, _XYZ),
    SpecialReg("nclusterid", u32, "grid", 90, _XYZ),
    SpecialReg("cluster_ctaid", u32, "cta", 90, _XYZ),
    SpecialReg("cluster_nctaid", u32, "grid", 90, _XYZ),
    SpecialReg("cluster_ctarank", u32, "cta", 90),
    SpecialReg("cluster_nctarank", u32, "grid", 90),
    SpecialReg("is_explicit_cluster", pred, "grid", 90),
)

# Every register by its PTX name without ``%`` ("tid.x", "laneid"): its family.
SPECIAL_REGS: dict[str, SpecialReg] = {r: f for f in FAMILIES for r in f.registers}
