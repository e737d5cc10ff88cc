"""``@ptx.intrinsic``: a helper whose instructions are marked in the PTX as one named scope.

Called inside a kernel trace, the decorated function runs as usual and the first and
last instructions it recorded (in the region it recorded them in) carry the comments
``BEGIN name`` and ``END name`` (``ptx.intrinsic`` records no instruction of its own, so
a helper that records none leaves no mark). Outside a trace it is a plain call. Nesting
works; the return value is passed through.

pyptx wraps such a body in a scope node of its IR and prints ``// BEGIN`` / ``// END``
on lines of their own; ptxdsl's PTX has no comment-only lines, so the markers are the
trailing comments of the scope's first and last instruction lines.
"""
from __future__ import annotations

import functools

from ..core import ir
from ..core.trace import active_builder

__all__ = ["intrinsic"]


def _note(instr: ir.Instr, text: str, first: bool) -> None:
    # " // " between notes: each marker reads "// BEGIN name" / "// END name" in the line
    if instr.comment:
        text = f"{text} // {instr.comment}" if first else f"{instr.comment} // {text}"
    instr.comment = text


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
