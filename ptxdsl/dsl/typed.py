"""pyptx's typed instruction wrappers: one call, one checked instruction.

Each wrapper names the type and the destination first, as pyptx writes them, and
records exactly the instruction ``ptx.inst...`` would (so the instruction table checks
it, the verifier sees it, the interpreter runs it):

===============================================  ========================================
``ptx.mov(t, d, a)``                             ``mov.t d, a``
``ptx.add / sub (t, d, a, b)``                   ``add.t`` / ``sub.t d, a, b``
``ptx.mul(t, d, a, b, mode=None)``               ``mul[.mode].t d, a, b``
``ptx.mad(t, d, a, b, c, mode="lo")``            ``mad.mode.t d, a, b, c``
``ptx.mad(a, b, c)``                             a new register ``d``: ``mad.lo.T d, a, b, c``
``ptx.shl / shr (t, d, a, n)``                   ``shl.t`` / ``shr.t d, a, n``
``ptx.and_ / or_ / xor_ (t, d, a, b)``           ``and/or/xor.t d, a, b``
``ptx.not_(t, d, a)``                            ``not.t d, a``
``ptx.setp(cmp, t, p, a, b)``                    ``setp.cmp.t p, a, b``
``ptx.selp(t, d, a, b, p)``                      ``selp.t d, a, b, p``
``ptx.cvt(dt, st, d, a, rounding=, ftz=, sat=)``  ``cvt[.rnd][.ftz][.sat].dt.st d, a``
``ptx.ld(t, d, addr, space="global", cache=)``   ``ld.space[.cache].t d, [addr]``
``ptx.st(t, addr, a, space="global", cache=)``   ``st.space[.cache].t [addr], a``
``ptx.cvta.param(a) / .to_global(a)``            ``cvta.param.u64`` / ``cvta.to.global.u64``
``ptx.elect_sync(d, p, mask)``                   ``elect.sync d|p, mask``
``ptx.setmaxnreg_inc(n) / _dec(n)``              ``setmaxnreg.inc|dec.sync.aligned.u32 n``
===============================================  ========================================

Every wrapper takes ``pred=`` (a predicate register, or ``reg.NegPred(p)`` / ``~p``) as
a guard. ``ptx.cvt(t, x)`` (two arguments) stays ptxdsl's value form
(:func:`ptxdsl.dsl.values.cvt`). ``ptx.setp`` with an unknown comparison raises
``IsaError`` (a ``ValueError``), as pyptx's raises ``ValueError``.
"""
from __future__ import annotations

import dataclasses

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import PtxType, b64
from . import values
from .operands import addr as make_addr
from .reg import NegPred, as_reg, scalar
from .sync import setmaxnreg

__all__ = ["mov", "add", "sub", "mul", "mad", "shl", "shr", "and_", "or_", "xor_", "not_",
           "setp", "selp", "cvt", "ld", "st", "cvta", "elect_sync", "setmaxnreg_inc",
           "setmaxnreg_dec", "record"]

_SPACES = ("global", "shared", "local", "param", "const", "generic", "shared::cta",
           "shared::cluster")


def record(chain, operands, pred=None, what: str = "ptx"):
    """Record ``chain operands`` guarded by ``pred`` (a predicate register, or a
    :class:`~ptxdsl.dsl.reg.NegPred` for ``@!p``); returns the instruction."""
    b = current(what)
    negated = isinstance(pred, NegPred)
    guard = pred.reg if negated else pred
    instr = b.build(list(chain), tuple(operands), guard=guard, loc=user_location())
    if negated:
        instr = dataclasses.replace(instr, guard_negated=True)
    b.append(instr)
    for d in instr.dests():
        b.writes[d] = b.writes.get(d, 0) + 1
    return instr


def _t(dtype, what: str) -> str:
    if not isinstance(dtype, PtxType):
        raise TraceError(f"ptx.{what} takes a ptxdsl type first (f32, u32, b64, ...), got "
                         f"{dtype!r}", user_location())
    return dtype.name


def mov(dtype, dst, src, *, pred=None) -> None:
    record(["mov", _t(dtype, "mov")], (dst, src), pred, "ptx.mov")


def add(dtype, dst, a, b_, *, pred=None) -> None:
    record(["add", _t(dtype, "add")], (dst, a, b_), pred, "ptx.add")


def sub(dtype, dst, a, b_, *, pred=None) -> None:
    record(["sub", _t(dtype, "sub")], (dst, a, b_), pred, "ptx.sub")


def mul(dtype, dst, a, b_, *, mode: str | None = None, pred=None) -> None:
    chain = ["mul"] + ([mode] if mode else []) + [_t(dtype, "mul")]
    record(chain, (dst, a, b_), pred, "ptx.mul")


def mad(*args, mode: str = "lo", pred=None):
    """``ptx.mad(t, d, a, b, c)`` records into ``d``; ``ptx.mad(a, b, c)`` returns a new
    register of the first register operand's type."""
    if mode not in ("lo", "hi", "wide"):
        raise TraceError(f"ptx.mad mode= is 'lo', 'hi' or 'wide', got {mode!r}",
                         user_location())
    if args and isinstance(args[0], PtxType):
        if len(args) != 5:
            raise TraceError("ptx.mad(dtype, dst, a, b, c) takes five arguments",
                             user_location())
        dtype, dst, a, b_, c = args
        record(["mad", mode, _t(dtype, "mad")], (dst, a, b_, c), pred, "ptx.mad")
        return None
    if len(args) != 3:
        raise TraceError("ptx.mad takes (dtype, dst, a, b, c) or (a, b, c)", user_location())
    t = next((x.dtype for x in args if isinstance(x, ir.Reg)), None)
    if t is None:
        raise TraceError("ptx.mad(a, b, c) needs a register among a, b, c to take its type "
                         "from", user_location())
    out = scalar(t)
    name = t.name if t.kind in ("u", "s", "f") else f"u{t.bits}"
    record(["mad"] + ([] if t.is_float else [mode]) + [name], (out, *args), pred, "ptx.mad")
    return out


def shl(dtype, dst, a, n, *, pred=None) -> None:
    record(["shl", _t(dtype, "shl")], (dst, a, n), pred, "ptx.shl")


def shr(dtype, dst, a, n, *, pred=None) -> None:
    record(["shr", _t(dtype, "shr")], (dst, a, n), pred, "ptx.shr")


def and_(dtype, dst, a, b_, *, pred=None) -> None:
    record(["and", _t(dtype, "and_")], (dst, a, b_), pred, "ptx.and_")


def or_(dtype, dst, a, b_, *, pred=None) -> None:
    record(["or", _t(dtype, "or_")], (dst, a, b_), pred, "ptx.or_")


def xor_(dtype, dst, a, b_, *, pred=None) -> None:
    record(["xor", _t(dtype, "xor_")], (dst, a, b_), pred, "ptx.xor_")


def not_(dtype, dst, a, *, pred=None) -> None:
    record(["not", _t(dtype, "not_")], (dst, a), pred, "ptx.not_")


def setp(cmp_op: str, dtype, pred_out, a, b_, *, pred_negate=None, pred=None) -> None:
    """``setp.cmp_op.dtype pred_out, a, b`` (``pred_negate=`` is pyptx's name for the
    guard; ``pred=`` works too)."""
    record(["setp", cmp_op, _t(dtype, "setp")], (pred_out, a, b_),
           pred if pred is not None else pred_negate, "ptx.setp")


def selp(dtype, dst, true_val, false_val, pred_reg, *, pred=None) -> None:
    record(["selp", _t(dtype, "selp")], (dst, true_val, false_val, pred_reg), pred,
           "ptx.selp")


def cvt(*args, rounding: str | None = None, ftz: bool = False, sat: bool = False, pred=None):
    """``ptx.cvt(dst_type, src_type, dst, src, rounding=, ftz=, sat=)`` records
    ``cvt[.rounding][.ftz][.sat].dst_type.src_type dst, src``; ``ptx.cvt(dtype, x,
    rounding=None, sat=False)`` is ptxdsl's form that returns a new register
    (:func:`ptxdsl.dsl.values.cvt`)."""
    if len(args) == 4 and isinstance(args[1], PtxType):
        dt, st_, dst, src = args
        chain = ["cvt"] + ([rounding] if rounding else []) + (["ftz"] if ftz else []) + \
            (["sat"] if sat else []) + [_t(dt, "cvt"), _t(st_, "cvt")]
        record(chain, (dst, src), pred, "ptx.cvt")
        return None
    if ftz or pred is not None:
        raise TraceError("ptx.cvt(dtype, x) takes rounding= and sat= only; ftz= and pred= "
                         "belong to the four-argument form cvt(dst_type, src_type, dst, src)",
                         user_location())
    kw = {"rounding": rounding} if rounding is not None else {}
    return values.cvt(*args, **kw, **({"sat": sat} if sat else {}))


def _space(space: str, what: str) -> list[str]:
    if space not in _SPACES:
        raise TraceError(f"ptx.{what} space= is one of {', '.join(_SPACES)}, got {space!r}",
                         user_location())
    return [] if space == "generic" else [space]


def _address(a) -> ir.Addr:
    if isinstance(a, ir.Addr) or hasattr(a, "__ptx_addr__"):
        return a
    return make_addr(a)


def ld(dtype, dst, address, *, space: str = "global", cache: str | None = None,
       pred=None) -> None:
    chain = ["ld"] + _space(space, "ld") + ([cache] if cache else []) + [_t(dtype, "ld")]
    record(chain, (dst, _address(address)), pred, "ptx.ld")


def st(dtype, address, src, *, space: str = "global", cache: str | None = None,
       pred=None) -> None:
    chain = ["st"] + _space(space, "st") + ([cache] if cache else []) + [_t(dtype, "st")]
    record(chain, (_address(address), src), pred, "ptx.st")


class _Cvta:
    """``ptx.cvta.param(src)`` / ``ptx.cvta.to_global(src)``: the converted address in a
    new 64-bit register (or in ``dst=``)."""

    @staticmethod
    def param(src, dst=None):
        out = dst if dst is not None else scalar(b64)
        record(["cvta", "param", "u64"], (out, as_reg(src)), None, "ptx.cvta.param")
        return out

    @staticmethod
    def to_global(src, dst=None):
        out = dst if dst is not None else scalar(b64)
        record(["cvta", "to", "global", "u64"], (out, as_reg(src)), None,
               "ptx.cvta.to_global")
        return out


cvta = _Cvta()


def elect_sync(dst, pred_out, membermask=0xFFFFFFFF) -> None:
    """``elect.sync dst|pred_out, membermask``: one lane of the warp gets ``pred_out``
    true (and every lane its index in ``dst``)."""
    record(["elect", "sync"], (dst, pred_out, membermask), None, "ptx.elect_sync")


def setmaxnreg_inc(reg_count: int, *, pred=None) -> None:
    setmaxnreg(reg_count, inc=True, pred=pred)


def setmaxnreg_dec(reg_count: int, *, pred=None) -> None:
    setmaxnreg(reg_count, inc=False, pred=pred)



