"""What a ``@kernel`` definition may be, checked where it is written: the specs are
tuples of Tiles, the body a plain function whose name PTX can spell, grid and block one to
three positive ints. Each refusal is a TraceError at the definition's line."""
from __future__ import annotations

import inspect
import operator
import re

from .errors import SourceLoc, TraceError
from .specs import Tile

__all__ = ["check_specs", "check_body", "code_loc", "dim3", "PTX_NAME"]


def check_specs(fn, in_specs, out_specs, version) -> None:
    """in_specs/out_specs are sequences of Tiles (one bare Tile is the usual slip) and
    ``version`` a (major, minor) pair, refused at the definition's line."""
    loc = code_loc(fn)
    for what, specs in (("in_specs", in_specs), ("out_specs", out_specs)):
        if isinstance(specs, Tile) or not isinstance(specs, (tuple, list)):
            raise TraceError(f"{what} takes a tuple of Tiles, e.g. {what}=(Tile(\"N\", f32),), "
                             f"got {specs!r}", loc)
    if version is not None and not (isinstance(version, (tuple, list)) and len(version) == 2
                                    and all(isinstance(v, int) for v in version)):
        raise TraceError(f"version is a (major, minor) pair of ints such as (8, 0), got "
                         f"{version!r}", loc)


PTX_NAME = re.compile(r"^(?:[A-Za-z][A-Za-z0-9_$]*|[_$%][A-Za-z0-9_$]+)$")


def check_body(fn, name: str, loc: SourceLoc) -> None:
    """A body that would trace to nothing (a generator or coroutine function returns
    without running a line) or whose name PTX cannot spell is refused where it is defined."""
    if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn) or \
            inspect.isasyncgenfunction(fn):
        what = "an async def" if inspect.iscoroutinefunction(fn) or \
            inspect.isasyncgenfunction(fn) else "a generator (it contains yield)"
        raise TraceError(f"the body of kernel {name} is {what}: calling it runs none of its "
                         f"lines, so it would trace to an empty kernel; write a plain def "
                         f"with no yield or await", loc)
    if not isinstance(name, str) or not PTX_NAME.match(name):
        raise TraceError(f"kernel name {name!r} is not a PTX identifier (a letter, then "
                         f"letters, digits, _ or $); pass a name such as name='my_kernel'", loc)


def code_loc(fn) -> SourceLoc | None:
    code = getattr(fn, "__code__", None)
    return SourceLoc(code.co_filename, code.co_firstlineno) if code is not None else None


def dim3(v, what: str, loc: SourceLoc | None = None) -> tuple[int, int, int]:
    """One to three positive ints (numpy integers too) as a 3-tuple. Strings, floats and
    bools are refused: ``"256"`` is not (2, 5, 6), ``N / 256`` is not ``N // 256``."""
    items = (v,) if not isinstance(v, (tuple, list)) else tuple(v)
    out = []
    for x in items:
        if isinstance(x, bool):
            x = None
        try:
            out.append(operator.index(x))
        except TypeError:
            hint = ""
            if isinstance(x, float):
                hint = " (a float: use integer division, e.g. (N + 255) // 256)"
            elif isinstance(x, str):
                hint = " (a string: pass the number itself)"
            raise TraceError(f"{what} must be an int or up to three ints, got {v!r}{hint}",
                             loc) from None
    if not 1 <= len(out) <= 3 or any(x < 1 for x in out):
        raise TraceError(f"{what} must be one to three positive ints, got {v!r}", loc)
    return tuple(out) + (1,) * (3 - len(out))
