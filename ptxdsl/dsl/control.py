"""Control flow of kernel bodies: run-time branches (``ptx.if_`` / ``ptx.else_``), the
structured loop ``ptx.range_``, labels and unstructured branches, ``ret`` and ``exit``.

The loops written as PTX writes them (``ptx.loop``, ``ptx.kloop``) are pyptx's
spellings, in :mod:`ptxdsl.dsl.compat`.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import PtxType, pred, s32, u32
from .operands import as_pred
from .reg import as_reg, assign

__all__ = ["if_", "else_", "range_", "new_label", "place", "label", "bra", "ret", "exit"]


@contextlib.contextmanager
def if_(p) -> Iterator[None]:
    """A run-time branch: the body runs in the threads where ``p`` is true.

    Emits ``@!p bra ELSE/END`` around the body (and ``bra.uni END`` before an
    else branch opened with :func:`else_`).
    """
    b = current("ptx.if_")
    node = ir.If(as_pred(p, "ptx.if_"), loc=user_location(), label_id=b.new_region_id())
    b.append(node)
    with b.region(node.then_body):
        yield


@contextlib.contextmanager
def else_() -> Iterator[None]:
    """The else branch of the ``ptx.if_`` block that ends right before it."""
    b = current("ptx.else_")
    node = b.last_node
    if not isinstance(node, ir.If) or node.else_body is not None:
        raise TraceError("ptx.else_() must directly follow a `with ptx.if_(...)` block "
                         "that has no else branch yet", user_location())
    node.else_body = []
    with b.region(node.else_body):
        yield


def range_(start, stop=None, step=1, *, dtype: PtxType = u32):
    """A run-time loop: ``for i in ptx.range_(n)`` / ``ptx.range_(start, stop, step)``.

    The body is traced once. Emits ``mov i, start``; at the top
    ``setp.ge i, stop`` (``le`` for a negative step) and ``@p bra END``; at the
    bottom ``add i, i, step`` and ``bra.uni TOP``. ``start``, ``stop`` and
    ``step`` may be registers (a register step must be positive). The counter is
    ``.u32``, or ``.s32`` when the step is negative or a bound is a signed register.
    """
    b = current("ptx.range_")
    if stop is None:
        start, stop = 0, start
    if isinstance(step, int) and step == 0:
        raise TraceError("ptx.range_ step must not be 0", user_location())
    start, stop, step = (as_reg(x) for x in (start, stop, step))
    # Count down, or bounded by a signed register: the counter and its compare are
    # signed, so range_(n) with a negative .s32 n runs zero times, as in Python.
    signed = any(isinstance(x, ir.Reg) and x.dtype.kind == "s" for x in (start, stop, step))
    if dtype.kind == "u" and (signed or isinstance(step, int) and step < 0):
        dtype = s32
    loc = user_location()
    var = b.new_reg(dtype)
    for x in (start, stop, step):
        if isinstance(x, ir.Reg):
            b.own(x)
            if not x.dtype.is_int or x.dtype.bits != 32:
                raise TraceError(f"ptx.range_ bounds must be 32-bit integers, got %{x.name} "
                                 f"(.{x.dtype.name})", loc)
    assign(var, start)
    cond = b.new_reg(pred)
    node = ir.Loop(var, start, stop, step, cond, loc=loc, label_id=b.new_region_id())
    # Validate the loop's own instructions now so that errors point here.
    cmp = "le" if isinstance(step, int) and step < 0 else "ge"
    node.check = b.build(["setp", cmp, dtype.name], (cond, var, stop), loc=loc)
    node.incr = b.build(["add", dtype.name], (var, var, step), loc=loc)
    b.append(node)
    with b.region(node.body):
        yield var


def new_label(name: str) -> ir.Label:
    """A label to branch to, placed later with :func:`place`."""
    b = current("ptx.new_label")
    if not name.replace("_", "a").replace("$", "a").isalnum() or name[0].isdigit():
        raise TraceError(f"label name {name!r} must be letters, digits, _ or $ and not "
                         f"start with a digit", user_location())
    if name in b.labels:
        raise TraceError(f"label {name!r} already exists in this kernel", user_location())
    lbl = ir.Label(name, None)
    b.labels[name] = lbl
    return lbl


def place(lbl: ir.Label) -> ir.Label:
    """Put ``lbl`` at this point of the instruction stream."""
    b = current("ptx.place")
    if lbl.loc is not None:
        raise TraceError(f"label {lbl.name!r} was already placed at {lbl.loc}", user_location())
    lbl.loc = user_location()
    b.append(lbl)
    return lbl


def label(name: str) -> ir.Label:
    """Create and place a label here (``name:``)."""
    return place(new_label(name))


def bra(target, pred=None, *, uni: bool = False):
    """``[@p] bra[.uni] target``: an unstructured jump (prefer ``ptx.if_`` / ``ptx.range_``)."""
    b = current("ptx.bra")
    b.inst(["bra", "uni"] if uni else ["bra"], (target,), guard=pred)


def ret():
    """``ret;``: end the kernel for this thread (a body that falls off its end returns too)."""
    current("ptx.ret").inst(["ret"], ())


def exit():  # noqa: A001 - PTX's name
    """``exit;``."""
    current("ptx.exit").inst(["exit"], ())
