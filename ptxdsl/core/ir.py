"""What a traced program is: registers, operands, instructions and structured regions.

The IR is plain data. The tracer appends to it, the verifier and the
interpreter walk it, the emitter prints it. Control flow stays structured
(:class:`If`, :class:`Loop`) so the interpreter can run divergent branches
with per-thread masks; :class:`Label` and ``bra`` remain as an escape hatch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from .errors import SourceLoc
from ..isa import Match
from .types import PtxType


class Reg:
    """A virtual PTX register of one type, owned by one kernel trace.

    Registers are mutable storage (PTX is not SSA): an in-place operator
    or an instruction naming a register as destination overwrites it.
    Operators on registers record instructions; see :mod:`ptxdsl.dsl.reg`.
    """

    __slots__ = ("name", "dtype", "owner", "__weakref__")

    def __init__(self, name: str, dtype: PtxType, owner: object):
        self.name = name
        self.dtype = dtype
        self.owner = owner  # the Builder that allocated it

    def __repr__(self) -> str:
        return f"Reg(%{self.name}: {self.dtype.name})"

    __hash__ = object.__hash__


@dataclass(frozen=True)
class Imm:
    """An immediate operand, already checked against the type it is used as."""

    value: int | float
    dtype: PtxType


@dataclass(frozen=True)
class Special:
    """A read-only special register such as ``%tid.x`` (always u32 unless stated)."""

    name: str
    dtype: PtxType


@dataclass(frozen=True)
class Symbol:
    """The address of a named state-space variable (a shared array, a kernel parameter)."""

    name: str
    space: str  # "shared" | "param"
    # a .param variable a function body declares for a call, or a .func's return value:
    # st.param may write it (a kernel's own parameters are read-only)
    writable: bool = False


@dataclass(frozen=True)
class Addr:
    """A memory operand ``[base+offset]``; base is a register or a symbol.

    With ``coords`` it is a tensor-map operand ``[tmap, {x, y}]`` (TMA copies):
    the base addresses a CUtensorMap, the coordinates are s32 registers or immediates.
    """

    base: Union[Reg, Symbol]
    offset: int = 0
    coords: tuple = ()


@dataclass(frozen=True)
class Sink:
    """The sink destination ``_``: a result the instruction must not return
    (``mbarrier.arrive`` on a peer CTA's barrier). ``ptxdsl.core.ir.SINK`` is the one value."""

    is_sink = True


SINK = Sink()


@dataclass(frozen=True)
class Vec:
    """A braced register list ``{a, b, c, d}`` for vector loads, stores and packing."""

    items: tuple


@dataclass(frozen=True)
class LabelRef:
    name: str


@dataclass(frozen=True)
class Not:
    """A negated predicate source ``!%p`` (PTX takes one wherever a predicate is read;
    imported PTX writes it, the DSL negates with ``not.pred``)."""

    reg: Reg


Operand = Union[Reg, Imm, Special, Symbol, Addr, Vec, LabelRef, Sink, Not]


@dataclass(eq=False)
class Instr:
    """One PTX instruction: a matched table form, its operands, an optional guard."""

    match: Match
    operands: tuple
    loc: SourceLoc | None = None
    guard: Reg | None = None
    guard_negated: bool = False
    comment: str | None = None
    # comment-only lines printed before / after the instruction (@ptx.intrinsic's markers)
    notes_before: tuple = ()
    notes_after: tuple = ()

    @property
    def opcode(self) -> str:
        return self.match.text

    def dests(self) -> list[Reg]:
        """Registers this instruction writes."""
        out = []
        for slot, op in zip(self.match.operands, self.operands):
            if slot.is_dest:
                if isinstance(op, Vec):
                    out.extend(x for x in op.items if isinstance(x, Reg))
                elif isinstance(op, Reg):
                    out.append(op)
        return out

    def sources(self) -> list[Reg]:
        """Registers this instruction reads (guard and address bases included)."""
        out = [self.guard] if self.guard is not None else []
        for slot, op in zip(self.match.operands, self.operands):
            if not slot.is_source:
                continue
            _collect_regs(op, out)
        return out


def _collect_regs(op, out: list) -> None:
    if isinstance(op, Reg):
        out.append(op)
    elif isinstance(op, Not):
        out.append(op.reg)
    elif isinstance(op, Addr):
        if isinstance(op.base, Reg):
            out.append(op.base)
        for x in op.coords:
            _collect_regs(x, out)
    elif isinstance(op, Vec):
        for x in op.items:
            _collect_regs(x, out)


@dataclass(eq=False)
class Raw:
    """An unchecked PTX line from ``ptx.raw``: printed verbatim (operands formatted into
    its ``{}`` placeholders), never validated, refused by the interpreter."""

    text: str
    operands: tuple = ()
    loc: SourceLoc | None = None

    def regs(self) -> list[Reg]:
        out: list = []
        for op in self.operands:
            _collect_regs(op, out)
        return out


@dataclass(eq=False)
class If:
    """``with ptx.if_(pred):`` (and an optional else) as a structured region."""

    pred: Reg
    then_body: list = field(default_factory=list)
    else_body: list | None = None
    negated: bool = False
    loc: SourceLoc | None = None
    label_id: int = 0


@dataclass(eq=False)
class Loop:
    """A runtime loop ``for var in ptx.range_(start, stop, step)``.

    ``var`` runs from ``start`` while ``var < stop`` (``> stop`` for a negative
    constant step); ``cond`` is the predicate register the emitter uses.
    """

    var: Reg
    start: object
    stop: object
    step: object
    cond: Reg
    body: list = field(default_factory=list)
    loc: SourceLoc | None = None
    label_id: int = 0
    check: "Instr | None" = None  # setp cond, var, stop (validated at trace time)
    incr: "Instr | None" = None   # add var, var, step


@dataclass(eq=False)
class Label:
    """A branch target placed in the instruction stream."""

    name: str
    loc: SourceLoc | None = None


@dataclass(eq=False)
class Deferred:
    """An instruction whose exact form is decided once the whole trace is known.

    ``resolve()`` returns the instructions to put in its place. Used for
    ``u32 * int`` (``mul.lo`` for 32-bit uses, ``mul.wide`` for pointer
    arithmetic, both if both) and shared-array base addresses (emitted only
    when some access needs a register address).
    """

    resolve: object  # Callable[[set[Reg]], list[Instr]]
    loc: SourceLoc | None = None
    reads: tuple = ()  # registers it reads whatever it resolves to


@dataclass(frozen=True)
class Param:
    """A kernel parameter: a tensor pointer (``.u64``), a scalar (dynamic dim), or a
    byte array (a tensor map: ``.param .align 64 .b8 name[128]``)."""

    name: str
    dtype: PtxType
    kind: str  # "ptr" | "dim" (a named dim's value) | "stride" (a named row stride, elements)
    #            | "tmap" (the tensor map of argument ``tensor``, a grid constant)
    #            | "raw" (a scalar the caller passes by keyword, kernel(raw_params=...))
    tensor: str | None = None  # ptr/tmap: the argument's name; dim/stride/raw: the name
    count: int = 1             # elements: > 1 declares an array (name[count])
    align: int = 0             # .align of an array parameter (0: natural)
    tma: object = None         # tmap: the Tile's ptxdsl.core.tensormap.TMA

    @property
    def nbytes(self) -> int:
        return self.dtype.bytes * self.count

    @property
    def alignment(self) -> int:
        return self.align or self.dtype.bytes


@dataclass(frozen=True)
class SharedDecl:
    name: str
    dtype: PtxType
    shape: tuple[int, ...]
    align: int
    loc: SourceLoc | None = None  # the smem.alloc call
    # Dynamic shared memory (``.extern .shared``, sized at launch): how a CTA gets more
    # than the 48 KiB a kernel may declare statically.
    dynamic: bool = False

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * self.dtype.bytes


@dataclass(eq=False)
class Program:
    """A finished kernel trace, ready to verify, emit or interpret."""

    name: str
    arch: str
    params: list[Param]
    body: list
    regs: list[Reg]
    shared: list[SharedDecl]
    ptx_version: tuple[int, int]
    sm: int
    max_threads: int | None = None
    # CTAs per cluster (x, y, z) when launched as clusters (``cluster=`` or
    # ``.reqnctapercluster``), else None: every CTA is a cluster of one.
    cluster: tuple[int, int, int] | None = None
    # The entry's performance directives as printed, ``(("maxntid", (384, 1, 1)),
    # ("minnctapersm", (1,)), ...)``: what ptxas sizes the registers a thread starts with by.
    directives: tuple = ()

    @property
    def dynamic_smem(self) -> int:
        """Bytes of dynamic shared memory a launch must provide (0: none)."""
        return sum(s.nbytes for s in self.shared if s.dynamic)

    def walk(self):
        """Every Instr, in program order, descending into regions."""
        yield from walk(self.body)


def unchecked(body) -> list[Raw]:
    """Every ``ptx.raw`` line of ``body``, in program order."""
    out = []
    for node in body:
        if isinstance(node, Raw):
            out.append(node)
        elif isinstance(node, If):
            out += unchecked(node.then_body)
            if node.else_body is not None:
                out += unchecked(node.else_body)
        elif isinstance(node, Loop):
            out += unchecked(node.body)
    return out


def walk(body):
    for node in body:
        if isinstance(node, Instr):
            yield node
        elif isinstance(node, If):
            yield from walk(node.then_body)
            if node.else_body is not None:
                yield from walk(node.else_body)
        elif isinstance(node, Loop):
            yield from walk(node.body)
