"""One function body: PTX statements -> the IR the tracer builds.

Each instruction goes through :meth:`ptxdsl.core.trace.Builder.build`, the call traced
code makes (``ptx.inst.<opcode>(...)``), so it meets the same table lookup, arch checks,
operand typing and per-form rules. The operands are the values traced code would pass:
registers, ints and floats, ``ir.Addr``, lists for braced vectors, labels as names.
``{ }`` scopes are flattened; a register a scope declares under a name already taken is
renamed (``%p`` in a scope becomes ``%pS1_``...), so the flat body means the same.
"""
from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass

from ..core import ir
from ..core.errors import ArchError, IsaError, SourceLoc, TraceError
from ..core.trace import Builder
from ..core.types import ALL_TYPES
from ..isa import INSTRUCTIONS
from ..isa.special import SPECIAL_REGS
from .decls import Function, RegDecl, Unchecked, VarDecl
from .lexer import PtxSyntaxError, Token, parse_int


@dataclass(frozen=True)
class PtxLoc(SourceLoc):
    """Where an imported instruction came from: its PTX file:line and, when the PTX has
    ``.loc`` debug lines, the source line that produced it (printed first)."""

    source: SourceLoc | None = None

    def __str__(self) -> str:
        ptx = f"{self.file}:{self.line}"
        return f"{self.source} ({ptx})" if self.source is not None else ptx


def ptx_type(name: str, loc: SourceLoc):
    t = ALL_TYPES.get(name)
    if t is None:
        raise PtxSyntaxError(f"unknown PTX type .{name}", loc)
    return t


class Body:
    """Accumulates one function's declarations and instructions."""

    def __init__(self, fn: Function, arch: str, version, module_shared, funcs, filename,
                 keep_unknown: bool):
        self.fn = fn
        self.filename = filename
        self.keep_unknown = keep_unknown
        self.version = version
        try:
            self.b = Builder(fn.name, arch)
        except ArchError:
            # A target older than the bundled ptxas takes: the table checks the oldest
            # target it knows (a superset of the old one's instructions).
            self.b = Builder(fn.name, OLDEST_ARCH)
            self.b.arch = arch
        self.regs: dict[str, ir.Reg] = {}
        self.scopes: list[dict[str, str]] = []   # per open scope: source name -> new name
        self.path: tuple[int, ...] = ()          # the open scopes, by number
        self.nscopes = 0
        self.label_defs: list = []               # (Label, scope path)
        self.label_refs: list = []               # (Instr, operand index, scope path)
        self.symbols: dict[str, str] = {}        # variable or parameter -> its state space
        self.writable: set[str] = set()          # .param variables st.param may write
        self.vectors: dict[str, list[str]] = {}  # vector register -> its element registers
        self.funcs = set(funcs)
        self.b.functions = self.funcs
        self.body: list = []
        self.src: SourceLoc | None = None
        for d in module_shared:
            if d.space == "shared":
                self._shared(d, None)
            else:
                self.symbols[d.name] = d.space
        for p in (fn.returns or []) + fn.params:
            loc = fn.loc
            t = ptx_type(p.type, loc)
            if p.space == "reg":
                self._new_regs(RegDecl(p.type, p.name.lstrip("%")), loc)
                continue
            self.b.params.append(ir.Param(p.name, t, "dim", p.name, p.count or 1,
                                          p.align or 0))
            self.symbols[p.name] = "param"
        self.writable.update(p.name for p in fn.returns or [] if p.space == "param")

    # ---------------------------------------------------------------- declarations
    def loc(self, line: int) -> PtxLoc:
        return PtxLoc(self.filename, line, self.src)

    def open_scope(self) -> None:
        self.scopes.append({})
        self.nscopes += 1
        self.path += (self.nscopes,)

    def close_scope(self) -> None:
        self.scopes.pop()
        self.path = self.path[:-1]

    def _taken(self, decl: RegDecl) -> bool:
        if decl.count is None:
            return decl.name in self.regs
        return any(f"{decl.name}{i}" in self.regs for i in range(decl.count))

    def declare_reg(self, decl: RegDecl, line: int) -> None:
        loc = self.loc(line)
        dtype = ptx_type(decl.type, loc)
        if dtype.bits == 8 or dtype.name not in _REG_TYPES:
            raise PtxSyntaxError(f"no register type .{decl.type}", loc)
        if self._taken(decl):
            if not self.scopes:
                raise PtxSyntaxError(f"register %{decl.name} declared twice", loc)
            k = 1
            while self._taken(RegDecl(decl.type, f"{decl.name}S{k}_", decl.count)):
                k += 1
            new = f"{decl.name}S{k}_"
            if decl.count is None:
                self.scopes[-1][decl.name] = new
            else:
                for i in range(decl.count):
                    self.scopes[-1][f"{decl.name}{i}"] = f"{new}{i}"
            decl = RegDecl(decl.type, new, decl.count)
        self.fn.regs.append(decl)
        self._new_regs(decl, loc)

    def declare_vector(self, typ: str, name: str, width: int, line: int) -> None:
        """``.reg .v4 .f32 %v;``: one scalar register per element (``%v_x`` ...), which
        ``%v.x`` names and ``%v`` lists; the canonical text declares the scalars."""
        parts = []
        for c in "xyzw"[:width]:
            self.declare_reg(RegDecl(typ, f"{name}_{c}"), line)
            parts.append(self._name(f"{name}_{c}"))
        self.vectors[name] = parts

    def _new_regs(self, decl: RegDecl, loc) -> None:
        dtype = ptx_type(decl.type, loc)
        names = [decl.name] if decl.count is None else [f"{decl.name}{i}"
                                                         for i in range(decl.count)]
        for n in names:
            r = ir.Reg(n, dtype, self.b)
            self.regs[n] = r
            self.b.regs.append(r)

    def _shared(self, d: VarDecl, loc) -> None:
        t = ptx_type(d.type, loc)
        shape = tuple(d.dims or (1,))
        self.b.shared.append(ir.SharedDecl(d.name, t, shape, d.align or t.bytes, loc,
                                           dynamic=0 in shape))
        self.symbols[d.name] = "shared"

    def declare_var(self, d: VarDecl, line: int) -> None:
        if d.name in self.symbols and self.scopes:
            # a call's .param variables reuse names scope after scope (param0, retval0)
            k = 1
            while f"{d.name}S{k}_" in self.symbols:
                k += 1
            self.scopes[-1][d.name] = f"{d.name}S{k}_"
            d = dataclasses.replace(d, name=f"{d.name}S{k}_")
        if d.space == "shared":
            self._shared(d, self.loc(line))
        else:
            self.symbols[d.name] = d.space
            if d.space == "param":
                self.writable.add(d.name)
        self.fn.vars.append(d)

    def debug_loc(self, loc: SourceLoc | None) -> None:
        self.src = loc

    def pragma(self, text: str) -> None:
        self.fn.pragmas.setdefault(len(self.body), []).append(text)

    def label(self, name: str, line: int) -> None:
        node = ir.Label(name, self.loc(line))
        self.label_defs.append((node, self.path))
        self.body.append(node)

    # ---------------------------------------------------------------- instructions
    def instruction(self, toks: list[Token]) -> None:
        loc = self.loc(toks[0].line)
        try:
            instr = self._instr(toks, loc)
            self.body.append(instr)
            for k, op in enumerate(instr.operands):
                if isinstance(op, ir.LabelRef):
                    self.label_refs.append((instr, k, self.path))
        except (IsaError, TraceError) as e:
            text = self._text(toks)
            if not self.keep_unknown:
                raise PtxSyntaxError(
                    f"{text}: {e.message} (parse_ptx(..., keep_unknown=True) keeps lines the "
                    f"instruction table cannot check as unchecked raw PTX)", loc) from None
            self.fn.unchecked.append(Unchecked(loc, text, e.message))
            self.body.append(ir.Raw(text.replace("{", "{{").replace("}", "}}"), (), loc))

    def _instr(self, toks: list[Token], loc) -> ir.Instr:
        i = 0
        guard, neg = None, False
        if toks[0].text == "@":
            i = 1
            if toks[i].text == "!":
                neg, i = True, i + 1
            guard = self._reg_or_special(toks[i].text)
            i += 1
        op = toks[i]
        if op.kind != "word":
            raise PtxSyntaxError(f"expected an instruction, got {op.text!r}", loc)
        chain = op.text.split(".")
        args = []
        for part in _split(toks[i + 1:]):
            args.extend(self._operand(part))
        if chain[0] == "call":
            args = self._call_args(args)
        if chain == ["mov", "pred"] and len(args) == 2 and isinstance(args[1], int) \
                and isinstance(args[0], ir.Reg):
            # mov.pred %p, -1 (Triton's constant predicates): ptxas takes an immediate here
            instr = self.b.build(chain, [args[0], args[0]], guard=guard, loc=loc)
            instr.operands = (args[0], ir.Imm(int(args[1] != 0), args[0].dtype))
        else:
            try:
                try:
                    instr = self.b.build(chain, args, guard=guard, loc=loc)
                except IsaError as e:
                    # ptxas takes modifiers in other orders than the ISA's (LLVM prints
                    # red.global.gpu.relaxed): read them in the table's order
                    ordered = table_order(chain)
                    if "must come before" not in e.message or ordered == chain:
                        raise
                    instr = self.b.build(ordered, args, guard=guard, loc=loc)
            except IsaError:
                # 0fXXXXXXXX given to an integer or bit-size form means those bits
                if not any(isinstance(a, HexFloat) for a in _flat(args)):
                    raise
                instr = self.b.build(chain, _bits(args), guard=guard, loc=loc)
        instr.guard_negated = neg
        return instr

    def _call_args(self, args: list) -> list:
        """``call [(rets),] name[, (args)]`` -> [rets, name, args] (lists may be empty)."""
        rets = args.pop(0) if args and isinstance(args[0], tuple) else ()
        if not args or not isinstance(args[0], str):
            raise IsaError("indirect calls (through a register, with a .callprototype) are "
                           "not supported; call a .func by name")
        name = args.pop(0)
        if name not in self.funcs:
            raise IsaError(f"call names {name!r}, which is no .func declared before it")
        params = args.pop(0) if args and isinstance(args[0], tuple) else ()
        if args:
            raise IsaError("a call takes (return values), a function name and (arguments); "
                           "prototypes of indirect calls are not supported")
        return [rets, name, params]

    def _text(self, toks: list[Token]) -> str:
        """The canonical spelling of a statement (registers renamed as in the body)."""
        i = 0
        head = ""
        if toks and toks[0].text == "@":
            i = 1
            if toks[i].text == "!":
                head, i = "!", 2
            head = "@" + head + self._renamed(toks[i]) + " "
            i += 1
        op = toks[i].text if i < len(toks) else ""
        ops = [_join([self._renamed(t) for t in part]) for part in _split(toks[i + 1:])]
        return head + op + (" " + ", ".join(ops) if ops else "")

    def _renamed(self, t: Token) -> str:
        if t.kind != "word":
            return t.text
        if not t.text.startswith("%") and self._name(t.text) in self.symbols:
            return self._name(t.text)
        name = self._name(t.text)
        return "%" + name if name in self.regs else t.text

    def _name(self, text: str) -> str:
        """A register's name in the flat body: scope renames applied, no % sigil."""
        name = text[1:] if text.startswith("%") else text
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return name

    def _reg_or_special(self, text: str):
        name = self._name(text)
        r = self.regs.get(name)
        if r is not None:
            return r
        base, _, comp = name.rpartition(".")
        if base in self.vectors and comp in "xyzwrgba" and len(comp) == 1:
            k = "xyzw".find(comp) if comp in "xyzw" else "rgba".find(comp)
            if k < len(self.vectors[base]):
                return self.regs[self.vectors[base][k]]
        sp = SPECIAL_REGS.get(name) if text.startswith("%") else None
        if sp is not None:
            return ir.Special(name, sp.dtype)
        raise IsaError(f"{text} is neither a declared register nor a special register "
                       f"the table knows")

    def _scalar(self, t: Token):
        if t.kind == "num":
            return _number(t.text)
        if t.text.startswith("%") and t.text[1:] in self.vectors:
            return [self.regs[n] for n in self.vectors[t.text[1:]]]
        if t.text.startswith("%"):
            return self._reg_or_special(t.text)
        if t.text == "_":
            return ir.SINK
        name = self._name(t.text)
        space = self.symbols.get(name)
        if space is not None:
            return ir.Symbol(name, space, name in self.writable)
        if self._name(t.text) in self.regs:      # PTX lets a register drop the % sigil
            return self._reg_or_special(t.text)
        return t.text  # a label (or a name the instruction will refuse)

    def _operand(self, toks: list[Token]) -> list:
        if not toks:
            raise IsaError("empty operand")
        first = toks[0].text
        if first == "[":
            return [self._address(toks)]
        if first == "{":
            if toks[-1].text != "}":
                raise IsaError("unbalanced { } in a vector operand")
            return [[self._vec_item(p) for p in _split(toks[1:-1])]]
        value = const_expr(toks)
        if value is not None:
            return [value]
        if any(t.text == "|" for t in toks):
            k = next(j for j, t in enumerate(toks) if t.text == "|")
            return self._operand(toks[:k]) + self._operand(toks[k + 1:])
        if first == "!" and len(toks) == 2:
            r = self._reg_or_special(toks[1].text)
            if not isinstance(r, ir.Reg) or not r.dtype.is_pred:
                raise IsaError(f"!{toks[1].text} negates a predicate register only")
            return [ir.Not(r)]
        if first == "-" and len(toks) == 2 and toks[1].kind == "num":
            return [-_number(toks[1].text)]
        if first == "(":
            if toks[-1].text != ")":
                raise IsaError("unbalanced ( ) in a call's list")
            return [tuple(self._vec_item(p) for p in _split(toks[1:-1]))]
        if len(toks) != 1:
            raise IsaError(f"cannot read the operand {_join([t.text for t in toks])!r}")
        return [self._scalar(toks[0])]

    def _vec_item(self, toks: list[Token]):
        vals = self._operand(toks)
        if len(vals) != 1 or isinstance(vals[0], (list, ir.Addr)):
            raise IsaError("a vector operand holds registers, immediates or _")
        return vals[0]

    def _address(self, toks: list[Token]) -> ir.Addr:
        if toks[-1].text != "]":
            raise IsaError("unbalanced [ ] in an address")
        inner = toks[1:-1]
        parts = _split(inner)
        coords = ()
        if len(parts) == 2 and parts[1] and parts[1][0].text == "{":
            coords = tuple(self._vec_item(p) for p in _split(parts[1][1:-1]))
            inner = parts[0]
        elif len(parts) != 1:
            raise IsaError("an address is [base], [base+offset] or [tensormap, {coords}]")
        if not inner:
            raise IsaError("empty address")
        base = self._scalar(inner[0])
        if isinstance(base, int):
            raise IsaError("absolute addresses ([1024]) are not supported; use a register")
        if isinstance(base, str):
            raise IsaError(f"{base!r} names no register, variable or parameter")
        offset = 0
        rest = inner[1:]
        if rest:
            offset = const_expr(rest) if rest[0].text in "+-" else None
            if offset is None:
                raise IsaError(f"cannot read the address offset "
                               f"{_join([t.text for t in rest])!r} (a constant expression)")
        return ir.Addr(base, offset, coords)

    # ---------------------------------------------------------------- finishing
    def _scoped_labels(self) -> None:
        """Labels are local to their ``{ }`` scope (inline-asm blocks reuse names such as
        ``waitLoop``): in the flat body, a name defined more than once is renamed in the
        inner scopes, and each branch goes to the definition its scope sees."""
        count: dict[str, int] = {}
        for node, _ in self.label_defs:
            count[node.name] = count.get(node.name, 0) + 1
        if all(n == 1 for n in count.values()):
            return
        taken = set(count)
        new: dict = {}
        for node, path in self.label_defs:
            if count[node.name] > 1 and path:
                k = 1
                while f"{node.name}S{k}_" in taken:
                    k += 1
                new[(path, node.name)] = f"{node.name}S{k}_"
                taken.add(new[(path, node.name)])
                node.name = new[(path, node.name)]
        for instr, k, path in self.label_refs:
            name = instr.operands[k].name
            for i in range(len(path), 0, -1):
                if (path[:i], name) in new:
                    ops = list(instr.operands)
                    ops[k] = ir.LabelRef(new[(path[:i], name)])
                    instr.operands = tuple(ops)
                    break

    def finish(self) -> ir.Program:
        fn = self.fn
        self._scoped_labels()
        max_threads, cluster, directives = None, None, []
        for d in fn.directives:
            name, _, vals = d.partition(" ")
            nums = [int(v) for v in vals.split(",") if v.strip()]
            directives.append((name.lstrip("."), tuple(nums)))
            if name in (".maxntid", ".reqntid") and nums:
                max_threads = 1
                for n in nums:
                    max_threads *= n
            elif name == ".reqnctapercluster" and nums:
                cluster = tuple(nums) + (1,) * (3 - len(nums))
        fn.builder = self.b
        prog = ir.Program(fn.name, self.b.arch, list(self.b.params), self.body,
                          list(self.b.regs), list(self.b.shared), self.version, self.b.sm,
                          max_threads, cluster, tuple(directives))
        return prog


_BINARY = {"*": (3, lambda a, b: a * b), "/": (3, lambda a, b: int(a / b)),
           "%": (3, lambda a, b: a - b * int(a / b)),
           "+": (2, lambda a, b: a + b), "-": (2, lambda a, b: a - b),
           "<<": (1, lambda a, b: a << b), ">>": (1, lambda a, b: a >> b),
           "&": (0, lambda a, b: a & b), "^": (-1, lambda a, b: a ^ b),
           "|": (-2, lambda a, b: a | b)}


def const_expr(toks: list[Token]) -> int | None:
    """An integer constant expression (``288*2``, ``((128>>4)<<16)``, ``+8``) as PTX
    writes them in operands and address offsets, C's precedence; None when ``toks`` is
    not one (a register, a label, a single literal)."""
    if len(toks) < 2 or any(t.kind not in ("num",) and t.text not in "()+-*/%<>&^|~!"
                            for t in toks):
        return None
    items: list = []
    for t in toks:
        if t.kind == "num":
            if "." in t.text or t.text[:2] in ("0f", "0F", "0d", "0D"):
                return None
            items.append(parse_int(t.text))
        elif items and items[-1] in ("<", ">") and t.text == items[-1]:
            items[-1] = t.text * 2
        else:
            items.append(t.text)
    pos = 0

    def unary():
        nonlocal pos
        if pos >= len(items):
            raise ValueError
        x = items[pos]
        pos += 1
        if x == "(":
            v = binary(-3)
            if pos >= len(items) or items[pos] != ")":
                raise ValueError
            pos += 1
            return v
        if x in ("-", "+", "~", "!"):
            v = unary()
            return {"-": -v, "+": v, "~": ~v, "!": int(not v)}[x]
        if isinstance(x, int):
            return x
        raise ValueError

    def binary(level):
        nonlocal pos
        left = unary()
        while pos < len(items) and items[pos] in _BINARY and _BINARY[items[pos]][0] >= level:
            prec, fn = _BINARY[items[pos]]
            pos += 1
            left = fn(left, binary(prec + 1))
        return left
    try:
        value = binary(-3)
    except (ValueError, ZeroDivisionError):
        return None
    return value if pos == len(items) else None


OLDEST_ARCH = "sm_75"
_REG_TYPES = {"pred", "b16", "b32", "b64", "b128", "u16", "u32", "u64", "s16", "s32", "s64",
              "f16", "f16x2", "bf16", "bf16x2", "f32", "f64"}


def table_order(chain: list[str]) -> list[str]:
    """``chain`` with its modifiers sorted into the order of the table entry's groups
    (types last, in the order written)."""
    for k in range(len(chain), 0, -1):
        spec = INSTRUCTIONS.get(".".join(chain[:k]))
        if spec is not None:
            break
    else:
        return chain
    rest = chain[k:]
    used: set[int] = set()
    ranks = []
    for i, mod in enumerate(rest):   # a name several groups hold fills the first free one
        g = next((g for g, group in enumerate(spec.groups)
                  if mod in group.names and g not in used), len(spec.groups))
        used.add(g)
        ranks.append((g, i))
    return chain[:k] + [rest[i] for _, i in sorted(ranks)]


class HexFloat(float):
    """A ``0f``/``0d`` literal: a float that also remembers its bits."""

    bits: int

    def __neg__(self):
        return float(self).__neg__()


def _hexfloat(text: str, fmt: str) -> HexFloat:
    x = HexFloat(struct.unpack(fmt, bytes.fromhex(text[2:]))[0])
    x.bits = int(text[2:], 16)
    return x


def _flat(args):
    for a in args:
        yield from (a if isinstance(a, list) else (a,))


def _bits(args):
    return [_bits(a) if isinstance(a, list) else a.bits if isinstance(a, HexFloat) else a
            for a in args]


def _number(text: str):
    t = text
    if t[:2] in ("0f", "0F") and len(t) == 10:
        return _hexfloat(t, ">f")
    if t[:2] in ("0d", "0D") and len(t) == 18:
        return _hexfloat(t, ">d")
    if "." in t or ("e" in t.lower() and t[:2].lower() not in ("0x",)):
        return float(t)
    return parse_int(t)


def _split(toks: list[Token]) -> list[list[Token]]:
    """Operands: ``toks`` cut at the commas outside brackets."""
    out, cur, depth = [], [], 0
    for t in toks:
        if t.text in "([{":
            depth += 1
        elif t.text in ")]}":
            depth -= 1
        if t.text == "," and depth == 0:
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur or out:
        out.append(cur)
    return out


def _join(parts: list[str]) -> str:
    out = ""
    for p in parts:
        out += ", " if p == "," else p
    return out
