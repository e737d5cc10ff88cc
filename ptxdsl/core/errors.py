"""The one exception family of ptxdsl, and how errors find the user's line.

Every error a user can see derives from :class:`PtxdslError`. Errors raised
while tracing a kernel name the first stack frame outside the ``ptxdsl``
package, so the message points at the user's own ``file:line`` rather than at
our internals.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from dataclasses import dataclass

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# While a kernel is traced, the ready-made kernels in ptxdsl/ops are DSL *user* code:
# their lines are the ones worth naming in trace errors and in the PTX line map. Outside
# a trace the ops are ptxdsl's API, and an argument error names the line that called it.
_OPS_DIR = _PKG_DIR + "ops" + os.sep
_TRACING: contextvars.ContextVar[int] = contextvars.ContextVar("ptxdsl_tracing", default=0)
# Frames of these files are machinery between the user's line and ours
# (``with ptx.if_(...)`` enters through contextlib).
_SKIP_FILES = frozenset({contextlib.__file__, os.path.abspath(contextlib.__file__)})
# Code ptxdsl generates at run time (the launcher's fast path) compiles under file names
# starting with this; such frames are machinery too, never the user's line.
GENERATED_PREFIX = "<ptxdsl"


@dataclass(frozen=True)
class SourceLoc:
    """A position in the user's Python source."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def user_location(skip: int = 1) -> SourceLoc | None:
    """Return the first stack frame that is not inside the ptxdsl package.

    Walking frames is cheap (``sys._getframe``) and this is how every
    instruction remembers the Python line that recorded it.
    """
    frame = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            return SourceLoc(filename, frame.f_lineno)
        frame = frame.f_back
    return None


def caller_location(skip: int = 1) -> SourceLoc | None:
    """The first stack frame outside the whole ptxdsl package (its ready-made kernels
    included): the line that called one of ptxdsl's functions, which an op's argument
    errors name."""
    frame = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(GENERATED_PREFIX) and \
                not os.path.abspath(filename).startswith(_PKG_DIR):
            return SourceLoc(filename, frame.f_lineno)
        frame = frame.f_back
    return None


@contextlib.contextmanager
def tracing():
    """Mark the current context as tracing a kernel body (see :func:`is_user_file`)."""
    token = _TRACING.set(_TRACING.get() + 1)
    try:
        yield
    finally:
        _TRACING.reset(token)


def is_user_file(filename: str) -> bool:
    """Whether a code object's file is user code: not ptxdsl's own machinery and not
    contextlib. The ready-made kernels of ``ptxdsl/ops`` count as user code only while
    a kernel is being traced (their kernel bodies); outside a trace they are the API."""
    if filename in _SKIP_FILES or filename.startswith(GENERATED_PREFIX):
        return False
    path = filename if filename.startswith(_PKG_DIR) else os.path.abspath(filename)
    return not path.startswith(_PKG_DIR) or (path.startswith(_OPS_DIR) and _TRACING.get() > 0)


def location_from_traceback(tb) -> SourceLoc | None:
    """The innermost user frame of a traceback: the user's line an exception came from."""
    loc = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if is_user_file(filename):
            loc = SourceLoc(filename, tb.tb_lineno)
        tb = tb.tb_next
    return loc


def raised_inside_ptxdsl(tb) -> bool:
    """Whether the innermost frame of a traceback is ptxdsl's own code."""
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    return last is not None and not is_user_file(last.tb_frame.f_code.co_filename)


class PtxdslError(Exception):
    """Root of every error ptxdsl raises on purpose.

    ``loc`` is the user's source position when one is known; it is prefixed
    to the message so that ``str(err)`` always says *where*.
    """

    def __init__(self, message: str, loc: SourceLoc | None = None):
        self.loc = loc
        self.message = message
        super().__init__(f"{loc}: {message}" if loc is not None else message)

    def at(self, loc: SourceLoc | None) -> "PtxdslError":
        """Give an error raised without a location the user's one (in place); returns it."""
        if self.loc is None and loc is not None:
            self.loc = loc
            self.args = (f"{loc}: {self.message}",)
        return self


class TraceError(PtxdslError, ValueError):
    """A kernel body did something the DSL refuses while tracing."""


class TraceTypeError(TraceError, TypeError):
    """A register was used as a Python value (``if reg:``, ``bool(p)``, ``range(reg)``).

    A TypeError, as Python expects from ``__bool__``/``__index__``, and a
    PtxdslError so that it names the user's line like every other error.
    """


class TraceIndexError(TraceError, IndexError):
    """An index out of range at trace time (a register array, a shared array)."""


class IsaError(TraceError):
    """An instruction does not match the instruction table (opcode, modifiers, operands)."""


class OperandTypeError(IsaError, TypeError):
    """An operand's type does not agree with what the instruction needs."""


class ArchError(IsaError):
    """A target name is not a known ``sm_<NN>[a|f]``, or an instruction or modifier needs a
    newer ``sm_`` or PTX ISA than the kernel targets."""


class VerifyError(PtxdslError):
    """The traced program failed a whole-program check (def-before-use, labels, types)."""


class ToolchainError(PtxdslError):
    """ptxas / cuobjdump / nvdisasm missing or failing."""


class LaunchError(PtxdslError):
    """Arguments or launch configuration do not fit the kernel."""


class NoSpecsError(LaunchError, NotImplementedError):
    """A kernel without ``in_specs``/``out_specs`` was called: it has no arguments to launch
    with (a NotImplementedError, as pyptx raises for the same call)."""


class InterpreterError(PtxdslError):
    """The CPU interpreter stopped: a race, an out-of-bounds access, a divergent barrier..."""
