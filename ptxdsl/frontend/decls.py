"""What a PTX module declares besides instructions: registers, variables, parameters,
functions, and the module that holds them. Plain data, printed by :mod:`.emit`."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core import ir
from ..core.errors import SourceLoc


@dataclass(frozen=True)
class RegDecl:
    """``.reg .b32 %r<12>;`` (``count`` 12) or ``.reg .f32 %acc;`` (``count`` None)."""

    type: str
    name: str
    count: int | None = None

    def text(self) -> str:
        n = f"<{self.count}>" if self.count is not None else ""
        return f".reg .{self.type} %{self.name}{n};"


@dataclass(frozen=True)
class VarDecl:
    """A state-space variable: ``[.extern] .shared .align 16 .b8 smem[1024];``,
    ``.global .u32 counter = 0;`` (``dims`` None: a scalar; a 0 entry: ``[]``)."""

    space: str
    name: str
    type: str
    align: int | None = None
    dims: tuple[int, ...] | None = None
    init: str | None = None
    linkage: tuple[str, ...] = ()   # .visible / .extern / .weak / .common
    vector: str | None = None       # .v2 / .v4

    def text(self) -> str:
        parts = [f".{x}" for x in self.linkage] + [f".{self.space}"]
        if self.align:
            parts.append(f".align {self.align}")
        if self.vector:
            parts.append(f".{self.vector}")
        parts.append(f".{self.type}")
        name = self.name + "".join(f"[{d or ''}]" for d in (self.dims or ()))
        parts.append(name)
        init = f" = {self.init}" if self.init is not None else ""
        return " ".join(parts) + init + ";"


@dataclass(frozen=True)
class ParamDecl:
    """A ``.param`` of an entry or function signature.

    ``ptr`` holds the ``.ptr`` attribute's state space and alignment
    (``.param .u64 .ptr .global .align 16 x``); ``count`` an array's length
    (``.param .align 64 .b8 tmap[128]``)."""

    name: str
    type: str
    align: int | None = None
    count: int | None = None
    ptr: tuple[str | None, int | None] | None = None
    space: str = "param"            # a .func may take .reg parameters

    def text(self) -> str:
        parts = [f".{self.space}"]
        if self.align and self.ptr is None:
            parts.append(f".align {self.align}")
        parts.append(f".{self.type}")
        if self.ptr is not None:
            space, align = self.ptr
            parts.append(".ptr")
            if space:
                parts.append(f".{space}")
            if align:
                parts.append(f".align {align}")
        name = self.name + (f"[{self.count}]" if self.count is not None else "")
        if self.space == "reg":   # registers print with their sigil, as in the body
            name = "%" + name.lstrip("%")
        return " ".join(parts + [name])


@dataclass(frozen=True)
class Unchecked:
    """A line kept as raw text (``keep_unknown=True``): where it was, and why the table
    could not check it."""

    loc: SourceLoc
    text: str
    reason: str

    def __str__(self) -> str:
        return f"{self.loc}: {self.text}  ({self.reason})"


@dataclass(eq=False)
class Function:
    """One ``.entry`` or ``.func``: its signature, declarations and resolved body.

    ``program`` is None for a prototype (a declaration with no body)."""

    kind: str                       # "entry" | "func"
    name: str
    linkage: tuple[str, ...]
    params: list[ParamDecl]
    returns: list[ParamDecl] | None = None   # .func (.param .b32 r) name(...)
    directives: list[str] = field(default_factory=list)   # .maxntid 128, 1, 1 ...
    regs: list[RegDecl] = field(default_factory=list)
    vars: list[VarDecl] = field(default_factory=list)
    program: ir.Program | None = None
    pragmas: dict[int, list[str]] = field(default_factory=dict)  # body index -> lines
    unchecked: list[Unchecked] = field(default_factory=list)
    loc: SourceLoc | None = None
    builder: object = None          # owns its registers (the inliner builds with it)


@dataclass(eq=False)
class Module:
    """A parsed PTX module (``ptxdsl.parse_ptx``)."""

    version: tuple[int, int]
    target: tuple[str, ...]
    address_size: int
    items: list                     # VarDecl | Function | str (a module-level .pragma line)
    filename: str = "<ptx>"

    @property
    def arch(self) -> str:
        return self.target[0]

    @property
    def functions(self) -> list[Function]:
        return [x for x in self.items if isinstance(x, Function)]

    @property
    def globals(self) -> list[VarDecl]:
        return [x for x in self.items if isinstance(x, VarDecl)]
