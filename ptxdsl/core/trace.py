"""The active builder: one per kernel trace, never process-global.

A :class:`Builder` owns the registers, labels and shared arrays of one trace
and appends instructions to the innermost open region. The builder in use is
held in a :class:`contextvars.ContextVar` for the duration of a trace, so two
traces (in two threads, or one nested in another) never share counters, and
tracing a kernel twice prints the same PTX.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
from typing import Iterator, Sequence

from . import ir
from .walks import collect_mentioned, collect_used, resolve_deferred
from .arch import arch_ptx_floor, parse_arch
from .errors import IsaError, OperandTypeError, SourceLoc, TraceError, tracing, user_location
from .operand_text import describe, float_immediate, slot_name as _slot_name
from ..isa import Match, check_arch, resolve
from ..isa.spec import SPACES_32BIT_OK
from .types import (
    ALL_TYPES, GENERATED_NAME, REG_PREFIX, PtxType, compatible, int_range, s32)

_ACTIVE: contextvars.ContextVar["Builder | None"] = contextvars.ContextVar(
    "ptxdsl_builder", default=None)

_IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9_$]*$")

def active_builder() -> "Builder | None":
    """The builder of the trace in progress in this context, or None."""
    return _ACTIVE.get()


class NoActiveTrace(TraceError, RuntimeError):
    """A DSL call outside any kernel trace (a ``RuntimeError`` too, as pyptx raises)."""


def current(what: str = "this call") -> "Builder":
    """The builder of the kernel being traced; a clear error outside any kernel."""
    b = _ACTIVE.get()
    if b is None:
        raise NoActiveTrace(
            f"No active kernel trace: {what} records a PTX instruction, so it must run "
            f"inside a @kernel body while the kernel is traced (e.g. by kernel.ptx() or a "
            f"call)", user_location())
    return b


class Builder:
    """Everything one trace accumulates."""

    def __init__(self, name: str, arch: str):
        self.name = name
        self.arch = arch
        self.sm, _ = parse_arch(arch)
        self.body: list = []
        self.prologue: list = []  # emitted before the body (shared-array base addresses)
        self._stack: list[list] = [self.body]
        self.writes: dict = {}  # register -> number of instructions that wrote it
        self._counters: dict[str, int] = {}
        self.regs: list[ir.Reg] = []
        self.named: set = set()  # registers the user named (kept as written)
        # registers of the body's reg.array calls: declared even if never used, as pyptx
        # declares an array (a .reg line names no instruction: the program is the same)
        self.declared: dict = {}
        self.params: list[ir.Param] = []
        self.shared: list[ir.SharedDecl] = []
        self.labels: dict[str, ir.Label] = {}
        self._region_ids = 0
        self.cache: dict = {}  # per-trace memo (param pointers, dims) keyed by the surface
        self.functions: set[str] = set()  # .func names a call may name (imported PTX only)

    # ----------------------------------------------------------------- activation
    @contextlib.contextmanager
    def active(self) -> Iterator["Builder"]:
        token = _ACTIVE.set(self)
        try:
            with tracing():
                yield self
        finally:
            _ACTIVE.reset(token)

    # ----------------------------------------------------------------- registers
    def new_reg(self, dtype: PtxType, name: str | None = None) -> ir.Reg:
        if dtype.bits == 8:
            raise TraceError(
                f"PTX has no 8-bit registers: use a 16- or 32-bit register (ld.global."
                f"{dtype.name} can load into a .{dtype.kind}16/.{dtype.kind}32 register)",
                user_location())
        if dtype.name not in REG_PREFIX:
            raise TraceError(f"no register type for {dtype.name}", user_location())
        if name is not None and (not isinstance(name, str) or not _IDENT.match(name)
                                 or GENERATED_NAME.match(name)):
            raise TraceError(
                f"register name {name!r} must be a PTX identifier (a letter, then letters, "
                f"digits, _ or $) that does not look like a generated name such as "
                f"'r3' or 'f0'", user_location())
        prefix = REG_PREFIX[dtype.name] if name is None else name
        n = self._counters.get(prefix, 0)
        self._counters[prefix] = n + 1
        if name is None:
            reg = ir.Reg(f"{prefix}{n}", dtype, self)
        else:
            # a second "acc" becomes "acc_1": never a generated-looking name
            reg = ir.Reg(f"{name}_{n}" if n else name, dtype, self)
            self.named.add(reg)
        self.regs.append(reg)
        return reg

    def new_region_id(self) -> int:
        self._region_ids += 1
        return self._region_ids

    # ----------------------------------------------------------------- regions
    def append(self, node) -> None:
        self._stack[-1].append(node)

    @contextlib.contextmanager
    def region(self, body: list) -> Iterator[list]:
        self._stack.append(body)
        try:
            yield body
        finally:
            self._stack.pop()

    @property
    def last_node(self):
        top = self._stack[-1]
        return top[-1] if top else None

    # ----------------------------------------------------------------- instructions
    def inst(self, chain: Sequence[str], args: Sequence, *, guard=None,
             loc: SourceLoc | None = None, comment: str | None = None) -> ir.Instr:
        """Validate ``chain`` and ``args`` against the table and append the instruction."""
        instr = self.build(chain, args, guard=guard, loc=loc or user_location(), comment=comment)
        self.append(instr)
        for d in instr.dests():
            self.writes[d] = self.writes.get(d, 0) + 1
        return instr

    def build(self, chain: Sequence[str], args: Sequence, *, guard=None,
              loc: SourceLoc | None = None, comment: str | None = None) -> ir.Instr:
        """Validate an instruction without recording it."""
        loc = loc or user_location()
        try:
            m = resolve(list(chain))
            check_arch(m, self.sm, self.arch)
            m = _pick_signature(m, args)
            m = self.fit(m, args)
            operands = self.coerce_operands(m, args)
            m = _optional_needs(m, operands)
            check_arch(m, self.sm, self.arch)
            if m.spec.form == "call" and operands[1].name not in self.functions:
                raise IsaError(f"{m.text}: {operands[1].name} is no .func of this module "
                               f"(traced kernels call no functions)")
            if m.spec.check_operands is not None:
                verdict = m.spec.check_operands(m, operands)
                if verdict:
                    raise IsaError(f"{m.text}: {verdict}")
            g, neg = self._guard(guard)
        except IsaError as e:
            if e.loc is None:
                raise type(e)(e.message, loc) from None
            raise
        return ir.Instr(m, operands, loc, g, neg, comment)

    def _guard(self, guard):
        if guard is None:
            return None, False
        if isinstance(guard, ir.Reg) and guard.dtype.is_pred:
            self.own(guard)
            return guard, False
        raise OperandTypeError(f"pred= must be a predicate register, got {describe(guard)}")

    def own(self, reg: ir.Reg) -> ir.Reg:
        if reg.owner is not self:
            other = getattr(reg.owner, "name", "?")
            raise TraceError(
                f"register %{reg.name} belongs to kernel '{other}', not to '{self.name}': "
                f"registers cannot cross kernels; create it inside this kernel's body",
                user_location())
        return reg

    def fit(self, m: Match, args: Sequence) -> Match:
        """``m`` with the optional operand slots that ``args`` leaves out dropped.

        Optional slots are dropped from the last one backwards, so a trailing
        optional operand (``bar.sync a{, b}``) and one in the middle
        (``shfl.sync d{|p}, a, b, c, mask``) are told apart by the count alone;
        the instruction keeps the slots it was given, in order.
        """
        slots = m.operands
        self._check_count(m, args)
        extra = len(slots) - len(args)
        if extra <= 0:
            return m
        drop = set()
        for i in range(len(slots) - 1, -1, -1):
            if len(drop) == extra:
                break
            if slots[i].optional:
                drop.add(i)
        kept = tuple(s for i, s in enumerate(slots) if i not in drop)
        return dataclasses.replace(m, operands=kept)

    def _check_count(self, m: Match, args: Sequence) -> None:
        slots = m.operands
        need = sum(1 for s in slots if not s.optional)
        if not need <= len(args) <= len(slots):
            names = ", ".join(_slot_name(s, m) for s in slots)
            count = f"{need}" if need == len(slots) else f"{need} to {len(slots)}"
            raise IsaError(f"{m.text} takes {count} operands ({names}), got {len(args)}")

    def coerce_operands(self, m: Match, args: Sequence) -> tuple:
        self._check_count(m, args)
        out = []
        for i, (slot, arg) in enumerate(zip(m.operands, args)):
            out.append(self._coerce(m, slot, arg, i))
        return tuple(out)

    def _coerce(self, m: Match, slot, arg, index: int):
        want = m.resolve_type(slot.ty)
        where = f"operand {index} of {m.text}"
        role = slot.role
        if hasattr(arg, "__ptx_symbol__") and role not in "ac":   # a shared array: its name
            arg = self.symbol(arg.__ptx_symbol__)
        items = arg if isinstance(arg, (list, tuple)) else (arg,)
        if not slot.special and any(isinstance(x, ir.Special) for x in items):
            sp = next(x for x in items if isinstance(x, ir.Special))
            raise OperandTypeError(
                f"{where}: the special register %{sp.name} can only be read by mov "
                f"(ptxas: 'Special register argument not allowed'); copy it into a register "
                f"first: r = reg.scalar({sp.dtype.name}, init=ptx.special.{sp.name}()) "
                f"(register operators such as tid + 1 do this for you)")
        if role not in "ac" and not (slot.special or slot.variable) and any(
                isinstance(x, ir.Symbol) for x in items):
            sym = next(x for x in items if isinstance(x, ir.Symbol))
            raise OperandTypeError(
                f"{where}: the address of {sym.name} can only be taken by mov (ptxas: 'must "
                f"be register'); mov it into a register first")
        if slot.choices is not None and not isinstance(arg, (ir.Reg, ir.Special, ir.Not)):
            return self._choice(m, slot, arg, where, want)
        if role == "t":
            return self._tensor_addr(m, slot, arg, where)
        if role == "c":
            return self._call_list(arg, where)
        if arg is ir.SINK:
            if slot.is_dest:
                return arg
            raise OperandTypeError(f"{where}: the sink _ is only a destination")
        if role in ("V", "X") and (m.vector > 1 or slot.list_key) or (
                m.spec.packs and isinstance(arg, (list, tuple))):
            return self._coerce_vec(m, slot, arg, where, want)
        if role in ("V", "X"):
            if isinstance(arg, (list, tuple)):
                if len(arg) != 1:
                    raise IsaError(f"{where}: a list of {len(arg)} registers needs a vector "
                                   f"form such as .v{len(arg)}; this form moves one value")
                arg = arg[0]
            role = "d" if role == "V" else "s"
        fixed = slot.is_fixed
        if role == "d":
            return self._reg(arg, want, where, m, dest=True, fixed=fixed)
        if role == "p":
            return self._reg(arg, want, where, m, dest=True)
        if role == "q":
            return self._reg(arg, want, where, m)
        if role == "r":
            return self._reg(arg, want, where, m, fixed=fixed)
        if role == "s":
            if isinstance(arg, (ir.Reg, ir.Not)):
                return self._reg(arg, want, where, m, fixed=fixed)
            return self._imm_or_other(arg, want, where, m)
        if role == "i":
            if isinstance(arg, bool) or not isinstance(arg, int):
                raise OperandTypeError(f"{where} must be a Python int constant, got "
                                       f"{describe(arg)}")
            return self._imm_or_other(arg, want, where, m)
        if role == "a":
            return self._addr(arg, where, m.address_space(slot), m)
        if role == "l":
            if isinstance(arg, ir.Label):
                return ir.LabelRef(arg.name)
            if isinstance(arg, str):
                return ir.LabelRef(arg)
            raise OperandTypeError(f"{where} must be a label (ptx.label(...)), "
                                   f"got {describe(arg)}")
        raise IsaError(f"{where}: unsupported operand role {role!r}")  # pragma: no cover

    def _choice(self, m, slot, arg, where, want):
        """An enumerated immediate (wgmma's scale and transpose flags, scale-d)."""
        value = arg.value if isinstance(arg, ir.Imm) else arg
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, int) or value not in slot.choices:
            allowed = ", ".join(str(c) for c in slot.choices)
            raise IsaError(f"{where} must be one of {allowed} (a Python int), got {value!r}")
        return ir.Imm(value, want)

    def _tensor_addr(self, m, slot, arg, where):
        """``[tmap, {c0, c1, ...}]``: a tensor map's address and its s32 coordinates."""
        n = m.count(slot)
        if hasattr(arg, "__ptx_addr__"):
            arg = arg.__ptx_addr__()
        if not isinstance(arg, ir.Addr) or len(arg.coords) != n:
            got = len(arg.coords) if isinstance(arg, ir.Addr) else describe(arg)
            raise IsaError(f"{where}: {m.text} takes a tensor map and {n} coordinates, "
                           f"written ptx.addr(tmap, coords=[...{n} values]); got {got}")
        base = arg.base
        if isinstance(base, ir.Reg):
            self.own(base)
            if base.dtype.bits != 64 or not base.dtype.is_int:
                raise OperandTypeError(f"{where}: a tensor map address is a .u64/.b64 "
                                       f"register, got %{base.name} (.{base.dtype.name})")
        coords = tuple(self._reg(c, s32, where, m) if isinstance(c, (ir.Reg, ir.Special))
                       else self._imm_or_other(c, s32, where, m) for c in arg.coords)
        return ir.Addr(base, arg.offset, coords)

    def _call_list(self, arg, where):
        """A call's return or argument list: registers and .param variables."""
        items = list(arg) if isinstance(arg, (list, tuple)) else [arg]
        for x in items:
            if isinstance(x, ir.Reg):
                self.own(x)
            elif not (isinstance(x, ir.Symbol) and x.space == "param"):
                raise OperandTypeError(f"{where}: a call's lists hold registers and .param "
                                       f"variables, got {describe(x)}")
        return ir.Vec(tuple(items))

    def _coerce_vec(self, m, slot, arg, where, want):
        if hasattr(arg, "__ptx_regs__"):  # a Fragment or a reg.array
            arg = list(arg.__ptx_regs__())
        if slot.list_key and isinstance(arg, (ir.Reg, ir.Imm, int, float)) \
                and m.count(slot) == 1:
            arg = [arg]
        if not isinstance(arg, (list, tuple)):
            raise IsaError(f"{where}: {m.text} needs a list of {m.count(slot)} registers, "
                           f"got {describe(arg)}")
        n = m.count(slot) if m.vector > 1 or slot.list_key else len(arg)
        if len(arg) != n:
            what = (f"takes {n} .{want.name} registers here" if slot.list_key
                    else f"moves {n} values")
            raise IsaError(f"{where}: {m.text} {what} but the register list "
                           f"has {len(arg)}; pass exactly {n}")
        item_t = want
        if m.spec.packs:
            if want.kind != "b" or n not in (2, 4) or want.bits % n:
                raise IsaError(f"{where}: mov packs/unpacks halves only with .b32/.b64 "
                               f"(e.g. mov.b32 d, [lo, hi])")
            item_t = _bits_type(want.bits // n)
        items = []
        for x in arg:
            # a form-dependent register list (a tensor-core fragment) holds registers only
            if x is ir.SINK and slot.is_dest:   # {_, %rs1}: a part nobody keeps
                items.append(x)
            elif slot.is_dest or isinstance(x, ir.Reg) or slot.list_key:
                items.append(self._reg(x, item_t, where, m, dest=slot.is_dest, relaxed=True))
            else:
                items.append(self._imm_or_other(x, item_t, where, m))
        widths = {x.dtype.bits for x in items if isinstance(x, ir.Reg)}
        if len(widths) > 1:
            listed = ", ".join(f"%{x.name} (.{x.dtype.name})" for x in items
                               if isinstance(x, ir.Reg))
            raise OperandTypeError(
                f"{where}: the registers of one vector operand must all have one width, "
                f"got {listed}; use registers of one type")
        return ir.Vec(tuple(items))

    def _reg(self, arg, want: PtxType | None, where: str, m: Match, dest: bool = False,
             relaxed: bool = False, fixed: bool = False):
        if isinstance(arg, ir.Not):   # !%p: a predicate source, negated
            if dest or not arg.reg.dtype.is_pred or (want is not None and not want.is_pred):
                raise OperandTypeError(f"{where}: !%{arg.reg.name} negates a predicate "
                                       f"source; this operand is not one")
            return ir.Not(self.own(arg.reg))
        if isinstance(arg, ir.Special) and not dest:
            if want is not None and not compatible(arg.dtype, want):
                raise OperandTypeError(f"{where}: %{arg.name} is .{arg.dtype.name}, but the "
                                       f"instruction needs .{want.name}")
            return arg
        if not isinstance(arg, ir.Reg):
            kind = "a destination register" if dest else "a register"
            raise OperandTypeError(f"{where} must be {kind}, got {describe(arg)}")
        self.own(arg)
        if want is None:
            return arg
        if fixed and want.kind == "b" and arg.dtype.is_float:
            raise OperandTypeError(
                f"{where}: register %{arg.name} is .{arg.dtype.name}, but this operand is a "
                f"raw .{want.name} value (a cache policy, an mbarrier state...) that ptxas "
                f"takes only in an integer register; use a .b{want.bits}/.u{want.bits} "
                f"register")
        if compatible(arg.dtype, want):
            return arg
        # ld/st/cvt move sub-word integers through wider registers (ld.u8 into .u32).
        if (m.spec.subword and want.bits < arg.dtype.bits
                and want.kind in ("u", "s", "b") and arg.dtype.kind in ("u", "s", "b")):
            return arg
        if want.is_pred or arg.dtype.is_pred:
            hint = " (a predicate)" if want.is_pred else ""
            raise OperandTypeError(f"{where}: %{arg.name} is .{arg.dtype.name}, but "
                                   f"the instruction needs .{want.name}{hint}")
        hint = ""
        if want.bits == 64 and arg.dtype.bits == 32 and arg.dtype.is_int:
            hint = "; widen it first (cvt.u64.u32, or (x * k).wide for byte offsets)"
        elif want.is_float != arg.dtype.is_float:
            hint = f"; convert it with cvt (ptx.cvt({want.name}, x))"
        raise OperandTypeError(
            f"{where}: register %{arg.name} is .{arg.dtype.name} but {m.text} needs "
            f".{want.name}{hint}")

    def symbol(self, name: str) -> ir.Symbol:
        """The state-space variable (shared array, kernel parameter) called ``name``."""
        for d in self.shared:
            if d.name == name:
                return ir.Symbol(name, "shared")
        for p in self.params:
            if p.name == name:
                return ir.Symbol(name, "param")
        known = [d.name for d in self.shared] + [p.name for p in self.params]
        raise OperandTypeError(f"{name!r} names no shared array or parameter of this kernel "
                               f"(known: {', '.join(known) or 'none'})")

    def _imm_or_other(self, arg, want, where, m):
        if isinstance(arg, str):
            arg = self.symbol(arg)
        if isinstance(arg, ir.Special):
            return self._reg(arg, want, where, m)
        if isinstance(arg, ir.Symbol):
            if want is None or (want.bits in (32, 64) and want.kind in ("u", "s", "b")):
                return arg
            raise OperandTypeError(f"{where}: a symbol address needs a .u32/.u64 form")
        if isinstance(arg, ir.Imm):
            arg = arg.value
        if isinstance(arg, bool):
            raise OperandTypeError(f"{where}: got a Python bool; PTX has no boolean immediates "
                                   f"(use 0/1, or a predicate register)")
        if isinstance(arg, (int, float)) or hasattr(arg, "dtype") and hasattr(arg, "item"):
            if hasattr(arg, "item"):
                arg = arg.item()
            if want is None:
                raise OperandTypeError(f"{where} cannot be an immediate")
            if want.is_pred:
                raise OperandTypeError(f"{where} must be a predicate register, got {arg!r}")
            if want.is_float:
                if want.name not in ("f32", "f64"):
                    raise OperandTypeError(
                        f"{where}: PTX has no .{want.name} immediates; load the constant "
                        f"into a register with reg.scalar({want.name}, init={arg!r})")
                return ir.Imm(float_immediate(arg, want, where), want)
            if isinstance(arg, float):
                if not arg.is_integer():
                    raise OperandTypeError(f"{where}: {arg!r} is not an integer, but "
                                           f"{m.text} takes .{want.name}")
                arg = int(arg)
            lo, hi = int_range(want)
            if want.kind == "u" and -(1 << (want.bits - 1)) <= arg < 0:
                # two's-complement spelling of an unsigned value (nvcc's shfl mask -1)
                arg += 1 << want.bits
            if not lo <= arg <= hi:
                raise OperandTypeError(f"{where}: {arg} does not fit in .{want.name} "
                                       f"({lo}..{hi})")
            return ir.Imm(int(arg), want)
        raise OperandTypeError(f"{where} must be a register or a number, got {describe(arg)}")

    def _addr(self, arg, where, space: str | None = None, m: Match | None = None):
        """An address operand of an instruction whose state space is ``space``
        (None: generic). Generic and .global addresses are 64-bit registers; a
        symbol may be addressed only from its own space (or generically, for
        .shared)."""
        if isinstance(arg, ir.Addr):
            base = arg.base
        elif isinstance(arg, ir.Reg):
            base, arg = arg, ir.Addr(arg)
        elif hasattr(arg, "__ptx_addr__"):
            return self._addr(arg.__ptx_addr__(), where, space, m)
        else:
            raise OperandTypeError(f"{where} must be an address (ptx.addr(ptr[, offset])), "
                                   f"got {describe(arg)}")
        if isinstance(base, ir.Reg):
            self.own(base)
            if not (base.dtype.is_int and base.dtype.bits in (32, 64)):
                raise OperandTypeError(f"{where}: address register %{base.name} is "
                                       f".{base.dtype.name}; addresses are .u32/.u64 integers")
            if base.dtype.bits == 32 and space not in SPACES_32BIT_OK:
                what = f".{space}" if space else "generic"
                raise OperandTypeError(
                    f"{where}: %{base.name} is a 32-bit register, but {what} addresses are "
                    f"64-bit (ptxas has no 32-bit addressing); use a .u64 address (a "
                    f"shared-memory offset becomes a generic address with "
                    f"cvta.shared.u64, or name the state space: .shared takes 32-bit "
                    f"addresses)")
        elif isinstance(base, ir.Symbol):
            home = base.space
            ok = space == home or (space is not None and space.startswith(home)) or (
                space is None and home != "param")
            if not ok:
                what = f".{space}" if space else "a generic address"
                raise OperandTypeError(
                    f"{where}: {base.name} is a .{home} symbol, which {what} cannot name "
                    f"(ptxas: 'State space mismatch'); "
                    + ("read the parameter with ld.param first" if home == "param" else
                       f"use the .{home} form of the instruction"))
        return arg

    # ----------------------------------------------------------------- finishing
    def finish(self, max_threads: int | None = None) -> ir.Program:
        used: set = set()
        full = self.prologue + self.body
        collect_used(full, used)
        body = resolve_deferred(full, used)
        version = arch_ptx_floor(self.arch)
        for instr in ir.walk(body):
            version = max(version, instr.match.ptx)
        regs = self._renumber(body)
        return ir.Program(self.name, self.arch, list(self.params), body, regs,
                          list(self.shared), version, self.sm, max_threads)

    def _renumber(self, body) -> list[ir.Reg]:
        """Drop registers the final program never mentions (except those of the body's
        register arrays, ``declared``: numbered after the rest) and number the rest densely.

        Registers die before emission when a deferred instruction resolves to
        nothing (the ``mul.lo`` half of an unused product, an unused shared base);
        without this pass ``%r<15>`` would declare gaps. Numbers follow the order
        in which registers first appear in the printed program, so the PTX reads
        top to bottom (``%r0`` first) and names stay stable from trace to trace.
        """
        order: dict = {}
        collect_mentioned(body, order)
        kept = list(order) + [r for r in self.declared if r not in order]
        counters: dict[str, int] = {}
        for r in kept:
            if r in self.named:
                continue
            m = GENERATED_NAME.match(r.name)
            prefix = m.group(1) if m else REG_PREFIX[r.dtype.name]
            n = counters.get(prefix, 0)
            counters[prefix] = n + 1
            r.name = f"{prefix}{n}"
        return kept


def _pick_signature(m: Match, args: Sequence) -> Match:
    """Of a form's operand lists (``||`` alternatives), the first that fits ``args``:
    a register list where a list slot is, a single value where a scalar slot is, and a
    ``ptx.addr`` only where an address is (tcgen05.mma's A: a descriptor or [a_tmem])."""
    alts = m.alternatives
    if len(alts) == 1:
        return m
    for sig in alts:
        need = sum(1 for s in sig if not s.optional)
        if not need <= len(args) <= len(sig):
            continue
        if all((s.is_list == isinstance(a, (list, tuple)) or hasattr(a, "__ptx_regs__")
                and s.is_list) and (s.role in "at" or not isinstance(a, ir.Addr))
               for s, a in zip(sig, args)):
            return m.with_operands(sig)
    return m


def _optional_needs(m: Match, operands) -> Match:
    """Optional operands that arrived later than their instruction raise its needs."""
    for slot, _ in zip(m.operands, operands):
        if slot.optional and slot.need is not None:
            m = m.needing(*slot.need)
    return m


def _bits_type(bits: int) -> PtxType:
    return ALL_TYPES[f"b{bits}"]
