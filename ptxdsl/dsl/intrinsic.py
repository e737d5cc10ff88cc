"""``@ptx.intrinsic``: a helper whose instructions are marked in the PTX as one named scope.

Called inside a kernel trace, the decorated function runs as usual and the first and
last instructions it recorded (in the region it recorded them in) are preceded by the
line ``// BEGIN name`` and followed by ``// END name``, as pyptx prints them
(``ptx.intrinsic`` records no instruction of its own, so a helper that records none leaves
no mark). Outside a trace it is a plain call. Nesting works (an inner scope's markers sit
inside the outer's); the return value is passed through.
"""
from __future__ import annotations

import functools

from ..core import ir
from ..core.trace import active_builder

__all__ = ["intrinsic"]


def _note(instr: ir.Instr, text: str, first: bool) -> None:
    # an outer scope's BEGIN goes before an inner one's, its END after
    if first:
        instr.notes_before = (text,) + instr.notes_before
    else:
        instr.notes_after = instr.notes_after + (text,)


def intrinsic(fn):
    """Mark ``fn`` as a named scope of PTX instructions (see the module docstring)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        b = active_builder()
        if b is None:
            return fn(*args, **kwargs)
        region = b._stack[-1]
        start = len(region)
        result = fn(*args, **kwargs)
        recorded = [n for n in region[start:] if isinstance(n, ir.Instr)]
        if recorded:
            _note(recorded[0], f"BEGIN {fn.__name__}", True)
            _note(recorded[-1], f"END {fn.__name__}", False)
        return result
    wrapper.__is_ptx_intrinsic__ = True
    return wrapper
