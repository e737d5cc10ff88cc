"""The shape of an instruction-table entry, and how a modifier chain is matched to it.

An :class:`OpSpec` is data: the opcode, its modifier groups in PTX order, the
types it takes, its operand signature and the PTX ISA / ``sm_`` it needs.
:func:`match` turns a chain such as ``["ld", "global", "v4", "f32"]`` into a
:class:`Match` or raises an :class:`~ptxdsl.core.errors.IsaError` that says what
would be right. Validation, emission, the interpreter and the docs all read
these objects; nothing else knows the rules.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from ..core.errors import ArchError, IsaError
from ..core.types import ALL_TYPES, PtxType

Version = tuple[int, int]


@dataclass(frozen=True)
class Mod:
    """One modifier choice, with what it needs beyond its instruction."""

    name: str
    ptx: Version | None = None
    sm: int | None = None
    types: frozenset[str] | None = None  # restrict the instruction types it allows
    doc: str = ""
    # True when the modifier exists only on the arch-specific target (sm_90a, not sm_90)
    arch_specific: bool = False


@dataclass(frozen=True)
class Group:
    """An ordered slot of mutually exclusive modifiers (e.g. rounding: rn/rz/rm/rp)."""

    name: str
    mods: tuple[Mod, ...]
    required: bool = False

    def get(self, name: str) -> Mod | None:
        for m in self.mods:
            if m.name == name:
                return m
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.mods)


@dataclass(frozen=True)
class Operand:
    """One operand slot.

    ``role``: ``d`` destination register, ``s`` source register or immediate,
    ``r`` source register only, ``i`` immediate only, ``a`` address,
    ``t`` tensor-map address with a coordinate list (``[tmap, {x, y}]``),
    ``l`` label, ``p`` destination predicate, ``q`` source predicate,
    ``V`` destination register or register list (vector forms),
    ``X`` source register/immediate or list (vector forms),
    ``c`` a call's parenthesised list of registers and ``.param`` variables.
    ``ty``: ``T`` (the instruction type), ``T0``/``T1``/``T2`` (the types of
    several-type instructions such as cvt or wgmma), ``W`` (twice the width of ``T``),
    or a fixed type name such as ``u32``; ``{key}`` (with ``V``/``X``) is a
    register list whose element type and length depend on the form: the
    entry's ``lists`` function gives them per matched form (an mma's A operand
    is four ``.b32`` registers for ``m16n8k16.bf16``, one for ``m8n8k4.f64``).

    Written ``[%][+]role[=group]:ty[{v,...}][?][@modifier][!ptx/sm]``:

    - ``+``: read-write (an accumulator the instruction reads and writes);
    - ``{1,-1}`` after the type: the immediates the slot allows (a ``q`` slot
      with choices also takes one of them in place of a predicate register);
    - ``?``: optional (may be left off at the end);
    - ``@modifier``: present exactly when the chain has that modifier;
    - ``!7.8/90``: an optional slot that, when given, needs that PTX ISA / sm_.

    ``t`` (a tensor-map operand) takes its coordinate count from a ``{key}`` type
    (``t:{coords}``: ``lists`` gives ``("s32", dimensions)``).

    Three more markers: a leading ``%`` (``%s:T``) lets a special register such as
    ``%tid.x`` be the operand (ptxas allows them only as mov's source: "Special
    register argument not allowed"); a leading ``&`` (``&s:T``) lets a state-space
    variable's name stand for its address (``getctarank`` / ``mapa`` take a shared
    variable; elsewhere ptxas wants a register); ``a=dst`` names the modifier group that gives an
    address operand its state space (default ``space``; no choice in that group means
    a generic address).
    """

    role: str
    ty: str | None
    optional: bool = False
    rw: bool = False
    choices: tuple[int, ...] | None = None
    when: str | None = None
    need: tuple[Version, int] | None = None
    special: bool = False      # a special register (%tid.x, %clock, ...) may be the operand
    space_group: str = "space"  # address operands: the group that names the state space
    variable: bool = False     # a state-space variable's name may stand for its address

    @property
    def is_dest(self) -> bool:
        return self.role in ("d", "p", "V")

    @property
    def list_key(self) -> str | None:
        """The key of a form-dependent register list (``{a}`` -> ``"a"``), else None."""
        if self.ty and self.ty.startswith("{"):
            return self.ty[1:-1]
        return None

    @property
    def is_source(self) -> bool:
        """Read by the instruction: every non-destination slot, and read-write ones."""
        return self.rw or not self.is_dest

    @property
    def is_list(self) -> bool:
        """Takes a register list whose length the form fixes (``{key}`` slots)."""
        return self.list_key is not None and self.role in ("V", "X")


    @property
    def is_fixed(self) -> bool:
        """The slot names a concrete type (``r:b64``), not the instruction's (``T``)."""
        return (self.ty is not None and self.ty not in ("T", "T0", "T1", "W")
                and not self.ty.startswith("{"))


_SLOT = re.compile(r"^(?P<special>%)?(?P<var>&)?(?P<rw>\+)?(?P<role>[a-zA-Z])(?:=(?P<space>[\w:]+))?:?(?P<ty>\{\w+\}|\w+)?"
                   r"(?:\{(?P<choices>[-\d,]+)\})?(?P<opt>\?)?(?:@(?P<when>[\w:]+))?"
                   r"(?:!(?P<need>\d+\.\d+/\d+))?$")


def parse_operands(sig: str) -> tuple[Operand, ...]:
    """Parse ``"d:T s:T s:T q:pred?"`` into Operand slots (syntax: :class:`Operand`)."""
    out = []
    for item in sig.split():
        m = _SLOT.match(item)
        if m is None:
            raise ValueError(f"bad operand slot {item!r}")
        need = None
        if m["need"]:
            v, sm = m["need"].split("/")
            major, minor = v.split(".")
            need = ((int(major), int(minor)), int(sm))
        choices = tuple(int(x) for x in m["choices"].split(",")) if m["choices"] else None
        out.append(Operand(m["role"], m["ty"] or None, bool(m["opt"]), bool(m["rw"]),
                           choices, m["when"], need, bool(m["special"]),
                           m["space"] or "space", bool(m["var"])))
    return tuple(out)


def split_alternatives(sig: str) -> list[str]:
    """``"sigA || sigB"``: operand lists of one form told apart by the operands given."""
    return [part.strip() for part in sig.split("||")]


# State spaces an address register of each width may point into. Generic and .global
# addresses are 64-bit (ptxas 13 has no 32-bit ABI: "32-Bit ABI ... not supported",
# with no line number); the windows of .shared, .local, .const and .param are small
# enough for 32-bit offsets. Blackwell's tensor memory (``tmem``) is addressed by 32-bit
# lane/column values only.
SPACES_32BIT_OK = frozenset({"shared", "shared::cta", "shared::cluster", "local", "const",
                             "param", "tmem"})


SCOPES = ("thread", "warp", "warpgroup", "cta", "cluster")
FORMS = ("plain", "pipe_pred", "call")
ACCESS = (None, "read", "write", "read_write")
PROXIES = ("generic", "async")
# Effects an instruction can have beyond writing its destinations.
EFFECTS = frozenset({
    "barrier",        # waits for (or arrives at) a barrier of its scope
    "async_copy",     # starts an asynchronous copy (cp.async, bulk and tensor copies)
    "async_wait",     # waits for earlier asynchronous operations (wait_group and kin)
    "mbarrier",       # reads or changes an mbarrier object (arrive, expect_tx, wait)
    "accumulate",     # starts a tensor-core operation whose accumulators are in flight
    "exit",           # ends the thread (ret, exit)
    "branch",         # transfers control (bra)
    "fence",          # orders memory between proxies or scopes
    "grid_wait",      # waits for the grids it depends on (programmatic dependent launch)
})


@dataclass(frozen=True)
class OpSpec:
    """One opcode family of the instruction table."""

    opcode: str
    groups: tuple[Group, ...] = ()
    types: tuple[str, ...] = ()
    ntypes: int = 1
    operands: str = ""
    # operand signatures that replace ``operands`` when a modifier is present
    variants: Mapping[str, str] = field(default_factory=dict)
    ptx: Version = (1, 0)
    sm: int = 20
    interp: bool = True
    category: str = "misc"
    doc: str = ""
    example: str = ""
    # extra rule over the whole match; returns an error message or None
    rule: Callable[["Match"], str | None] | None = None
    side_effects: bool = False
    # per-type (PTX ISA, sm_) needs of this opcode where they differ from TYPE_NEEDS
    # (e.g. min.f16 arrived with sm_80, long after add.f16)
    type_needs: Mapping[str, tuple[Version, int]] = field(default_factory=dict)
    # limits on immediate operand values (bfe positions 0..255, barrier ids 0..15);
    # called with the Match and the coerced operands, returns an error message or None
    check_operands: Callable[["Match", tuple], str | None] | None = None
    # What is special about an instruction, as data: trace, verify, emit, the
    # interpreter and the runtime read these attributes, never the opcode name.
    # scope: who must execute it together (convergence): "thread", "warp",
    #   "warpgroup" (4 aligned warps), "cta" or "cluster".
    scope: str = "thread"
    # effects: a subset of EFFECTS (above).
    effects: frozenset[str] = frozenset()
    # varies: its result differs between threads even when every source is
    #   uniform (shfl, atom, vote.ballot, elect, ...): the verifier's uniformity
    #   analysis treats its destinations as per-thread.
    varies: bool = False
    # form: how the emitter prints the operand list: "plain" (comma separated) or
    #   "pipe_pred" (the first two destinations joined by '|', as in
    #   ``elect.sync %r0|%p0, mask`` or ``shfl.sync ... %r0|%p0, ...``) or "call"
    #   (``call (rets), name, (args)``, an empty list left out).
    form: str = "plain"
    # aligned: whether every thread of ``scope`` must execute it together (no thread
    #   may skip it in a branch): True, False, or the name of the modifier that makes
    #   it so (``barrier.sync`` is usable by divergent threads unless ``.aligned``).
    #   Read through :attr:`Match.aligned`.
    aligned: bool | str = False
    # access: how it touches the memory its address operand names, with the
    #   instruction type and vector width: "read", "write", "read_write" (atomics)
    #   or None. The launcher's alignment analysis reads it.
    access: str | None = None
    # extent: bytes it touches at its address operand whatever its type (discard: one
    #   128-byte line), for the launcher's alignment analysis (0: the type's width).
    extent: int = 0
    # packs: a register list in a scalar slot stands for one value split into
    #   equal parts (``mov.b32 d, {lo, hi}`` packs, ``mov.b32 {lo, hi}, s`` unpacks).
    packs: bool = False
    # subword: sub-word integer types (.u8/.s16 ...) move through wider integer
    #   registers (``ld.global.u8`` into a .u32 register, ``cvt.u32.u8``).
    subword: bool = False
    # moves_bits: its half-precision forms move or select bits rather than compute,
    #   so they are as old as the instruction itself (TYPE_NEEDS does not apply).
    moves_bits: bool = False
    # uniformity: how the result relates to the first source, for the verifier's
    #   uniformity lattice (``tid.x >> 7`` is the same in a whole warpgroup):
    #   "copy" (the same value), "shr" (first >> second), "div" (first / second),
    #   "compare" (a predicate from comparing the first two sources, ``cmp`` group),
    #   "broadcast" (``shfl.sync.idx`` from an immediate lane of the whole warp: every lane
    #   reads that lane's value, at least warp-uniform, the source's own value where that is
    #   uniform), or None.
    uniformity: str | None = None
    # lists: for entries with ``{key}`` operand slots, a function of the Match
    #   returning ``{key: (register type name, count)}`` for that exact form.
    lists: Callable[["Match"], Mapping[str, tuple[str, int]]] | None = None
    # proxy: the memory proxy its shared-memory accesses go through: "generic" (ld, st,
    #   atomics, cp.async) or "async" (TMA and bulk copies, wgmma's operand reads). A
    #   generic write read through the async proxy needs fence.proxy.async between them
    #   (the interpreter's detector, ptxdsl/interp/proxy.py, reads this).
    proxy: str = "generic"
    # True when the whole instruction exists only on the arch-specific target
    # (sm_90a, not sm_90: wgmma, setmaxnreg); Mod.arch_specific for one modifier.
    arch_specific: bool = False
    # polls: its predicate destination says whether what it waits for has happened
    #   (``mbarrier.try_wait`` gives up after a system-dependent time, ``test_wait``
    #   never waits). Hardware returns false early where the interpreter's scheduler
    #   may not, so the verifier requires the result to be read (looped on).
    polls: bool = False

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"{self.opcode}: scope {self.scope!r} is not one of {SCOPES}")
        unknown = set(self.effects) - EFFECTS
        if unknown:
            raise ValueError(f"{self.opcode}: unknown effects {sorted(unknown)}")
        if self.form not in FORMS:
            raise ValueError(f"{self.opcode}: form {self.form!r} is not one of {FORMS}")
        if self.proxy not in PROXIES:
            raise ValueError(f"{self.opcode}: proxy {self.proxy!r} is not one of {PROXIES}")
        if self.access not in ACCESS:
            raise ValueError(f"{self.opcode}: access {self.access!r} is not one of {ACCESS}")

    def signature_text(self, mods: frozenset[str]) -> str:
        # A variant key is a modifier or type, or several joined by '+' (all present).
        for key, sig in self.variants.items():
            if all(k in mods for k in key.split("+")):
                return sig
        return self.operands

    def signatures(self, mods: frozenset[str]) -> list[tuple[Operand, ...]]:
        """Every operand list of the form: the first, then its alternatives (``||``),
        each without the slots whose ``@modifier`` the chain lacks."""
        out = []
        for text in split_alternatives(self.signature_text(mods)):
            out.append(tuple(s for s in parse_operands(text)
                             if s.when is None or s.when in mods))
        return out

    def signature(self, mods: frozenset[str]) -> tuple[Operand, ...]:
        return self.signatures(mods)[0]

    def group_of(self, name: str) -> Group | None:
        for g in self.groups:
            if g.get(name) is not None:
                return g
        return None


@dataclass(frozen=True)
class Match:
    """A modifier chain matched to its table entry."""

    spec: OpSpec
    mods: tuple[str, ...]                # every modifier in the order written (types included)
    chosen: Mapping[str, str]            # group name -> modifier
    types: tuple[PtxType, ...]           # the trailing type suffixes
    operands: tuple[Operand, ...]
    ptx: Version                         # PTX ISA this exact form needs
    sm: int                              # sm_ this exact form needs
    # register lists of ``{key}`` slots: key -> (element type name, count)
    lists: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    arch_specific: bool = False          # needs the sm_XXa target (wgmma, setmaxnreg)

    @property
    def text(self) -> str:
        """The full PTX opcode, e.g. ``ld.global.v4.f32``."""
        return ".".join((self.spec.opcode, *self.mods))

    @property
    def type(self) -> PtxType | None:
        return self.types[0] if self.types else None

    def has(self, mod: str) -> bool:
        return mod in self.mods

    @property
    def aligned(self) -> bool:
        """Whether every thread of the entry's scope must execute this form together."""
        a = self.spec.aligned
        return a if isinstance(a, bool) else a in self.mods

    @property
    def alternatives(self) -> list[tuple[Operand, ...]]:
        """Every operand list this form accepts (the first is ``operands``)."""
        return self.spec.signatures(frozenset(self.mods))

    def with_operands(self, operands: tuple[Operand, ...]) -> "Match":
        return replace(self, operands=operands)

    def needing(self, ptx: Version, sm: int) -> "Match":
        """This match, needing at least ``ptx`` / ``sm``."""
        return replace(self, ptx=max(self.ptx, ptx), sm=max(self.sm, sm))

    @property
    def vector(self) -> int:
        """Vector width from a ``.v2``/``.v4``/``.v8`` modifier, else 1."""
        v = self.chosen.get("vec")
        return int(v[1:]) if v else 1

    def count(self, slot: Operand) -> int:
        """How many registers a list slot takes in this form (vector width otherwise)."""
        key = slot.list_key
        return self.lists[key][1] if key else self.vector

    def address_space(self, slot: Operand) -> str | None:
        """The state space of an address operand (``"global"``, ``"shared::cta"``...),
        or None for a generic address. ``a=dst`` reads the ``dst`` modifier group; a
        name that is no group of the entry is the space itself (``a=shared::cta``, an
        mbarrier operand)."""
        if any(g.name == slot.space_group for g in self.spec.groups):
            return self.chosen.get(slot.space_group)
        return None if slot.space_group == "space" else slot.space_group

    def resolve_type(self, ty: str | None) -> PtxType | None:
        """The concrete type of an operand slot's type expression."""
        if ty is None:
            return None
        if ty.startswith("{"):
            return ALL_TYPES[self.lists[ty[1:-1]][0]]
        if ty == "T":
            return self.types[0]
        if ty[0] == "T" and ty[1:].isdigit():
            return self.types[int(ty[1:])]
        if ty == "W":
            t = self.types[0]
            return ALL_TYPES[f"{t.kind}{t.bits * 2}"]
        return ALL_TYPES[ty]


def _closest(word: str, options) -> str:
    near = difflib.get_close_matches(word, list(options), n=3, cutoff=0.5)
    return f" (did you mean {' or '.join('.' + n for n in near)}?)" if near else ""


# match() is a pure function of the entry and the chain, and every traced instruction
# calls it (a third of tracing): accepted chains are remembered per entry object, which
# the value keeps alive so that its id stays unique. Refused chains are not cached.
_MATCHED: dict[tuple[int, tuple[str, ...]], tuple[OpSpec, Match]] = {}


def match(spec: OpSpec, mods: list[str]) -> Match:
    """Match the modifiers written after ``spec.opcode`` against the entry.

    Raises :class:`IsaError` for unknown modifiers, modifiers in the wrong
    order or group, missing required groups and wrong types.
    """
    key = (id(spec), tuple(mods))
    hit = _MATCHED.get(key)
    if hit is None:
        hit = _MATCHED[key] = (spec, _match(spec, list(mods)))
    return hit[1]


def _match(spec: OpSpec, mods: list[str]) -> Match:
    op = spec.opcode
    written = ".".join((op, *mods))
    if len(mods) < spec.ntypes:
        want = " and ".join(["a type"] * spec.ntypes)
        raise IsaError(
            f"{written} is missing its type suffix: {op} needs {want} at the end, "
            f"one of {_types_list(spec)}"
        )
    head = mods[: len(mods) - spec.ntypes] if spec.ntypes else list(mods)
    tail = mods[len(mods) - spec.ntypes:] if spec.ntypes else []

    chosen: dict[str, str] = {}
    need_ptx, need_sm = spec.ptx, spec.sm
    arch_specific = spec.arch_specific
    pos = 0
    for m in head:
        # A modifier may belong to two groups (createpolicy's primary and secondary
        # priorities): it fills the first one not yet passed in PTX order.
        gi = next((i for i, g in enumerate(spec.groups)
                   if i >= pos and g.get(m) is not None), None)
        if gi is None:
            gi = next((i for i, g in enumerate(spec.groups) if g.get(m) is not None), None)
        if gi is None:
            if m in ALL_TYPES:
                raise IsaError(
                    f"{written}: .{m} is a type, but {op} takes {spec.ntypes} type "
                    f"suffix(es) at the end of the chain"
                    if spec.ntypes else f"{written}: {op} takes no type suffix")
            allowed = [n for g in spec.groups for n in g.names]
            raise IsaError(
                f"{written}: unknown modifier .{m} for {op}{_closest(m, allowed)}; "
                f"{op} accepts {_groups_desc(spec)}"
            )
        g = spec.groups[gi]
        if g.name in chosen:
            raise IsaError(
                f"{written}: .{chosen[g.name]} and .{m} are both {g.name} modifiers; "
                f"{op} takes at most one of {', '.join('.' + n for n in g.names)}"
            )
        if gi < pos:
            later = spec.groups[pos - 1]
            raise IsaError(
                f"{written}: modifier .{m} ({g.name}) must come before "
                f".{chosen[later.name]} ({later.name}); PTX order for {op} is "
                f"{_groups_desc(spec)}"
            )
        pos = gi + 1
        chosen[g.name] = m
        mod = g.get(m)
        if mod.ptx and mod.ptx > need_ptx:
            need_ptx = mod.ptx
        if mod.sm and mod.sm > need_sm:
            need_sm = mod.sm
        arch_specific = arch_specific or mod.arch_specific
    for g in spec.groups:
        if g.required and g.name not in chosen:
            raise IsaError(
                f"{written}: {op} needs a {g.name} modifier, one of "
                f"{', '.join('.' + n for n in g.names)}"
            )

    types = []
    for t in tail:
        if t not in spec.types:
            where = "" if t in ALL_TYPES else " (not a PTX type)"
            raise IsaError(
                f"{written}: .{t}{where} is not a type {op} takes; "
                f"allowed: {_types_list(spec)}{_untyped_hint(spec, t, mods)}"
            )
        types.append(ALL_TYPES[t])
    for gname, m in chosen.items():
        mod = next(g for g in spec.groups if g.name == gname).get(m)
        if mod.types is not None and types and types[0].name not in mod.types:
            raise IsaError(
                f"{written}: .{m} is not allowed with .{types[0].name}; it applies to "
                f"{', '.join('.' + t for t in sorted(mod.types))}"
            )
    tuple_types = tuple(types)
    result = Match(spec, tuple(mods), chosen, tuple_types,
                   spec.signature(frozenset(mods)), need_ptx, need_sm, arch_specific=arch_specific)
    result = _type_requirements(result)
    if spec.rule is not None:
        verdict = spec.rule(result)
        if isinstance(verdict, str):
            raise IsaError(f"{written}: {verdict}")
        if verdict is not None:
            result = result.needing(verdict[0], verdict[1])
    if spec.lists is not None:
        result = replace(result, lists=dict(spec.lists(result)))
    return result


# Some types need a newer ISA than their instruction's base form (bf16 math is
# sm_90, f16 math sm_53): the table states them once here instead of per entry.
TYPE_NEEDS: dict[str, tuple[Version, int]] = {
    "f16": ((4, 2), 53), "f16x2": ((4, 2), 53),
    "bf16": ((7, 8), 90), "bf16x2": ((7, 8), 90),
}
# Entries with ``moves_bits`` (data movement, conversions, selects) are exempt:
# their bf16/f16 forms are as old as the instruction.


def _type_requirements(m: Match) -> Match:
    if m.spec.moves_bits or not m.types:
        return m
    ptx, sm = m.ptx, m.sm
    for t in m.types:
        need = m.spec.type_needs.get(t.name) or TYPE_NEEDS.get(t.name)
        if need:
            ptx, sm = max(ptx, need[0]), max(sm, need[1])
    if (ptx, sm) == (m.ptx, m.sm):
        return m
    return m.needing(ptx, sm)


def check_arch(m: Match, arch_sm: int, arch_name: str, max_ptx: Version | None = None) -> None:
    """Raise :class:`ArchError` when ``m`` needs a newer ``sm_`` or ISA than allowed."""
    if m.sm > arch_sm:
        raise ArchError(
            f"{m.text} needs sm_{m.sm} or newer, but the kernel targets {arch_name}; "
            f"pass arch='sm_{m.sm}' (or newer) to @kernel, or use another instruction"
        )
    if m.arch_specific and not arch_name.strip().lower().endswith(("a", "f")):
        raise ArchError(
            f"{m.text} exists only on the arch-specific target sm_{m.sm}a, but the kernel "
            f"targets {arch_name}; pass arch='sm_{m.sm}a' to @kernel"
        )
    if max_ptx is not None and m.ptx > max_ptx:
        raise ArchError(
            f"{m.text} needs PTX ISA {m.ptx[0]}.{m.ptx[1]}, newer than the "
            f"{max_ptx[0]}.{max_ptx[1]} the installed toolchain accepts"
        )


def _untyped_hint(spec: OpSpec, name: str, mods: list[str]) -> str:
    """Data movement has no half-precision forms: point at the .b type of that width."""
    t = ALL_TYPES.get(name)
    if t is None or not t.is_float:
        return ""
    bits = f"b{t.bits}"
    if bits not in spec.types:
        return ""
    fixed = ".".join((spec.opcode, *[bits if m == name else m for m in mods]))
    return f"; write {fixed} (a .{name} register fits the .{bits} form of its width)"


def _types_list(spec: OpSpec) -> str:
    return ", ".join("." + t for t in spec.types) or "(none)"


def _groups_desc(spec: OpSpec) -> str:
    parts = []
    for g in spec.groups:
        alts = "|".join("." + n for n in g.names)
        parts.append(alts if g.required else "{" + alts + "}")
    if spec.ntypes:
        parts.append(" ".join(["<type>"] * spec.ntypes))
    return " ".join(parts) if parts else "no modifiers"
