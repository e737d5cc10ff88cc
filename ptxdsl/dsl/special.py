"""Special registers (``%tid.x``, ``%laneid``, ``%cluster_ctarank``, ...) as operands.

``ptx.special.<name>()`` and ``ptx.sreg("%name")`` return an :class:`~ptxdsl.core.ir.Special`
that instructions read (the table allows it as ``mov``'s source); nothing is recorded
until an instruction uses it.
"""
from __future__ import annotations

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import pred, u32, u64


class _Axes:
    def __init__(self, base: str):
        self._base = base

    def _get(self, axis):
        return ir.Special(f"{self._base}.{axis}", u32)

    def x(self) -> ir.Special:
        return self._get("x")

    def y(self) -> ir.Special:
        return self._get("y")

    def z(self) -> ir.Special:
        return self._get("z")


class _Special:
    """``ptx.special.tid.x()`` etc.: special-register operands (read with ``mov``)."""

    tid = _Axes("tid")
    ntid = _Axes("ntid")
    ctaid = _Axes("ctaid")
    nctaid = _Axes("nctaid")

    @staticmethod
    def laneid() -> ir.Special:
        return ir.Special("laneid", u32)

    @staticmethod
    def warpid() -> ir.Special:
        return ir.Special("warpid", u32)

    @staticmethod
    def nwarpid() -> ir.Special:
        return ir.Special("nwarpid", u32)

    @staticmethod
    def smid() -> ir.Special:
        return ir.Special("smid", u32)

    @staticmethod
    def nsmid() -> ir.Special:
        return ir.Special("nsmid", u32)

    @staticmethod
    def clock() -> ir.Special:
        return ir.Special("clock", u32)

    @staticmethod
    def clock64() -> ir.Special:
        return ir.Special("clock64", u64)

    @staticmethod
    def globaltimer() -> ir.Special:
        return ir.Special("globaltimer", u64)

    @staticmethod
    def lanemask_lt() -> ir.Special:
        return ir.Special("lanemask_lt", u32)

    # Clusters (sm_90): the cluster's index in the grid, this CTA's place in its cluster.
    clusterid = _Axes("clusterid")
    nclusterid = _Axes("nclusterid")
    cluster_ctaid = _Axes("cluster_ctaid")
    cluster_nctaid = _Axes("cluster_nctaid")

    @staticmethod
    def cluster_ctarank() -> ir.Special:
        return ir.Special("cluster_ctarank", u32)

    @staticmethod
    def cluster_nctarank() -> ir.Special:
        return ir.Special("cluster_nctarank", u32)

    @staticmethod
    def is_explicit_cluster() -> ir.Special:
        return ir.Special("is_explicit_cluster", pred)


special = _Special()

# Special registers ptx.sreg knows: name -> (type, the sm_ it needs).
_SREGS: dict[str, tuple[PtxType, int]] = {
    **{f"{b}.{a}": (u32, 20) for b in ("tid", "ntid", "ctaid", "nctaid") for a in "xyz"},
    **{f"{b}.{a}": (u32, 90) for b in ("clusterid", "nclusterid", "cluster_ctaid",
                                        "cluster_nctaid") for a in "xyz"},
    "cluster_ctarank": (u32, 90), "cluster_nctarank": (u32, 90),
    "is_explicit_cluster": (pred, 90),
    "laneid": (u32, 20), "warpid": (u32, 20), "nwarpid": (u32, 20), "smid": (u32, 20),
    "nsmid": (u32, 20), "gridid": (u64, 20), "clock": (u32, 20), "clock64": (u64, 20),
    "globaltimer": (u64, 20), "globaltimer_lo": (u32, 20), "globaltimer_hi": (u32, 20),
    "dynamic_smem_size": (u32, 20), "total_smem_size": (u32, 20),
    **{f"lanemask_{c}": (u32, 20) for c in ("eq", "le", "lt", "ge", "gt")},
}


def sreg(name: str) -> ir.Special:
    """A special register by its PTX name (``ptx.sreg("%clusterid.x")``), an operand
    read with ``mov`` like those of :data:`special`; the cluster ones need sm_90."""
    b = current("ptx.sreg")
    key = name[1:] if isinstance(name, str) and name.startswith("%") else name
    if key not in _SREGS:
        import difflib
        near = difflib.get_close_matches(str(key), _SREGS, n=2)
        hint = f" (did you mean {' or '.join('%' + n for n in near)}?)" if near else ""
        raise TraceError(f"ptx.sreg({name!r}): no such special register{hint}",
                         user_location())
    dtype, sm = _SREGS[key]
    if b.sm < sm:
        raise TraceError(f"%{key} needs sm_{sm} or newer; this kernel targets {b.arch}",
                         user_location())
    return ir.Special(key, dtype)
