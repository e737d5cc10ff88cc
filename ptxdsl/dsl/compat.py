"""Loops written as PTX writes them: a label and a backward branch (``ptx.loop``), and a
counted loop unrolled with a peeled tail (``ptx.kloop``).

``ptx.range_`` is the structured loop to prefer; these two exist for persistent-tile
and K loops whose bodies branch out (``ptx.bra("exit", pred=...)``), as pyptx's Hopper
GEMM writes them.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from ..core import ir
from ..core.errors import TraceError, user_location
from ..core.trace import current
from ..core.types import pred as pred_t

__all__ = ["loop", "kloop"]


@contextlib.contextmanager
def loop(label: str, *, pred=None) -> Iterator[None]:
    """``label:`` before the body and, after it, ``@pred bra label`` (``bra.uni label``
    without ``pred``: leave such a loop with ``ptx.bra``). The body runs at least once;
    ``pred`` is read at the bottom, so update it in the body."""
    from .ptx import label as place_label
    b = current("ptx.loop")
    place_label(label)
    yield
    if pred is None:
        b.inst(["bra", "uni"], (label,))
    else:
        b.inst(["bra"], (label,), guard=pred)


def kloop(total, *, unroll: int, body: Callable[[], None], loop_label: str = "kloop") -> None:
    """Run ``body()`` (which records instructions) ``total`` times, ``unroll`` copies per
    iteration.

    A Python int ``total`` records ``total`` copies. A register ``total`` (32-bit
    integer) records::

        and r, total, unroll-1;  sub m, total, r          // whole iterations' count
        @!(total >= unroll) skip:                         // ptx.if_
            mov left, m;  setp.ne keep, left, 0
          loop_label:  body() x unroll;  sub left, left, unroll;  setp.ne keep, left, 0
            @keep bra loop_label
        tail: r copies of body() behind nested ptx.if_ (r != 0, r != 1, ...)

    ``unroll`` is a power of two.
    """
    if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1 or \
            unroll & (unroll - 1):
        raise TraceError(f"ptx.kloop unroll= is a positive power of two, got {unroll!r}",
                         user_location())
    if not callable(body):
        raise TraceError("ptx.kloop body= is a function of no arguments that records the "
                         "loop body", user_location())
    if isinstance(total, int) and not isinstance(total, bool):
        for _ in range(total):
            body()
        return
    from .ptx import if_
    from .reg import as_reg
    b = current("ptx.kloop")
    total = as_reg(total)
    if not isinstance(total, ir.Reg) or not total.dtype.is_int or total.dtype.bits != 32:
        raise TraceError(f"ptx.kloop total is an int or a 32-bit integer register, got "
                         f"{total!r}", user_location())
    t = total.dtype
    remainder = total & (unroll - 1)
    rounded = total - remainder
    with if_(total >= unroll):
        left = b.new_reg(t)
        b.inst(["mov", f"b{t.bits}"], (left, rounded))
        keep = b.new_reg(pred_t)
        b.inst(["setp", "ne", f"b{t.bits}"], (keep, left, 0))
        with loop(loop_label, pred=keep):
            for _ in range(unroll):
                body()
            b.inst(["sub", "s32" if t.kind == "s" else "u32"], (left, left, unroll))
            b.inst(["setp", "ne", f"b{t.bits}"], (keep, left, 0))

    def tail(index: int) -> None:
        if index >= unroll:
            return
        with if_(remainder != (index - 1)):
            body()
            tail(index + 1)

    with if_(remainder != 0):
        body()
        tail(2)
