"""Special registers (``%tid.x``, ``%laneid``, ``%cluster_ctarank``, ...) as operands.

``ptx.special.<name>()`` (``ptx.special.tid.x()`` for a register with axes) and
``ptx.sreg("%name")`` return an :class:`~ptxdsl.core.ir.Special` that instructions
read (the table allows it as ``mov``'s source); nothing is recorded until an
instruction uses it. The names, types and the ``sm_`` each needs come from
:mod:`ptxdsl.isa.special`.
"""
from __future__ import annotations

import difflib

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..isa.special import FAMILIES, SPECIAL_REGS

__all__ = ["special", "sreg", "ctaid_x", "ctaid_y"]

_BY_NAME = {f.name: f for f in FAMILIES}


class _Reader:
    """``ptx.special.tid.x`` itself: called, the operand; used in arithmetic without the
    call, a TraceError that says to call it (not Python's TypeError)."""

    __slots__ = ("ptx_name", "_make")

    def __init__(self, ptx_name: str, make):
        self.ptx_name, self._make = ptx_name, make

    def __call__(self) -> ir.Special:
        return self._make()

    def __repr__(self) -> str:
        return f"<{self.ptx_name} (call it: {self.ptx_name}())>"

    def _refuse(self, *_):
        raise TraceError(f"{self.ptx_name} used in arithmetic without its call: call it, "
                         f"{self.ptx_name}()", user_location())

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _refuse
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = _refuse
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __neg__ = __invert__ = _refuse


class _Axes:
    """``ptx.special.tid``: ``.x()``, ``.y()``, ``.z()``."""

    def __init__(self, base: str):
        self._base = base

    def _get(self, axis: str) -> _Reader:
        name = f"{self._base}.{axis}"
        return _Reader(f"ptx.special.{name}",
                       lambda: ir.Special(name, SPECIAL_REGS[name].dtype))

    @property
    def x(self) -> _Reader:
        return self._get("x")

    @property
    def y(self) -> _Reader:
        return self._get("y")

    @property
    def z(self) -> _Reader:
        return self._get("z")


class _Special:
    """``ptx.special.tid.x()``, ``ptx.special.laneid()``, ...: one attribute per family of
    :data:`ptxdsl.isa.special.FAMILIES`."""

    def __getattr__(self, name: str):
        fam = _BY_NAME.get(name)
        if fam is None:
            near = difflib.get_close_matches(name, _BY_NAME, n=2)
            hint = f" (did you mean {' or '.join(near)}?)" if near else ""
            raise AttributeError(f"ptx.special has no special register {name!r}{hint}")
        if fam.axes:
            return _Axes(name)
        return _Reader(f"ptx.special.{name}", lambda: ir.Special(name, fam.dtype))

    def __dir__(self):
        return sorted(_BY_NAME)


special = _Special()


def sreg(name: str) -> ir.Special:
    """A special register by its PTX name (``ptx.sreg("%clusterid.x")``), an operand
    read with ``mov`` like those of :data:`special`; the cluster ones need sm_90."""
    b = current("ptx.sreg")
    key = name[1:] if isinstance(name, str) and name.startswith("%") else name
    reg = SPECIAL_REGS.get(key)
    if reg is None:
        near = difflib.get_close_matches(str(key), SPECIAL_REGS, n=2)
        hint = f" (did you mean {' or '.join('%' + n for n in near)}?)" if near else ""
        raise TraceError(f"ptx.sreg({name!r}): no such special register{hint}",
                         user_location())
    if b.sm < reg.sm:
        raise TraceError(f"%{key} needs sm_{reg.sm} or newer; this kernel targets {b.arch}",
                         user_location())
    return ir.Special(key, reg.dtype)


def ctaid_x() -> ir.Special:
    """pyptx's shorthand for ``ptx.special.ctaid.x()``."""
    return special.ctaid.x()


def ctaid_y() -> ir.Special:
    """pyptx's shorthand for ``ptx.special.ctaid.y()``."""
    return special.ctaid.y()
