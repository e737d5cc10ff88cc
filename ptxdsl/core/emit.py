"""IR -> PTX text. Deterministic: the same program prints the same bytes.

The module skeleton is a jinja2 template; instruction lines come from one
short walk over the IR, formatted from the table's matched opcode text.
``lines`` adds the Python source line of each instruction, as a trailing
comment (``"comment"``) or as ``.loc`` debug lines (``"loc"``) that profilers
and ptxas diagnostics can map back to Python.
"""
from __future__ import annotations

import importlib.resources
import os
from dataclasses import dataclass, field

import jinja2

from . import ir
from .errors import SourceLoc
from .types import GENERATED_NAME
from .version import __version__

def _load_template(name: str) -> str | None:
    """``ptxdsl/core/templates/<name>`` through importlib.resources: found wherever the package
    is (a checkout, a wheel, a zip), whatever else is on ``sys.path``."""
    res = importlib.resources.files(__package__ or "ptxdsl").joinpath("templates").joinpath(name)
    try:
        return res.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None


_ENV = jinja2.Environment(
    loader=jinja2.FunctionLoader(_load_template),
    keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)



def decl_type(t) -> str:
    """The ``.reg`` type a register of PTX type ``t`` is declared with."""
    if t.is_pred:
        return "pred"
    if t.name in ("f32", "f64"):
        return t.name
    return f"b{t.bits}"


@dataclass
class Emitted:
    """PTX text and, per PTX line (1-based), the Python line that recorded it."""

    text: str
    line_map: dict[int, SourceLoc] = field(default_factory=dict)

    def source_of(self, ptx_line: int) -> SourceLoc | None:
        return self.line_map.get(ptx_line)


def fmt_operand(op) -> str:
    if isinstance(op, ir.Reg):
        return "%" + op.name
    if isinstance(op, ir.Imm):
        t = op.dtype
        if isinstance(op.value, int) and (t.kind == "b" and op.value > 9 or op.value > 0xFFFF):
            return hex(op.value & ((1 << t.bits) - 1))
        return t.literal(op.value)
    if isinstance(op, ir.Special):
        return "%" + op.name
    if isinstance(op, ir.Symbol):
        return op.name
    if isinstance(op, ir.Addr):
        base = fmt_operand(op.base)
        if op.offset:
            base = f"{base}+{op.offset}"
        if op.coords:
            return f"[{base}, {{{', '.join(fmt_operand(x) for x in op.coords)}}}]"
        return f"[{base}]"
    if isinstance(op, ir.Sink):
        return "_"
    if isinstance(op, ir.Vec):
        return "{" + ", ".join(fmt_operand(x) for x in op.items) + "}"
    if isinstance(op, ir.LabelRef):
        return op.name
    if isinstance(op, ir.Not):
        return "!%" + op.reg.name
    raise TypeError(f"cannot format operand {op!r}")  # pragma: no cover


def fmt_instr(instr: ir.Instr) -> str:
    guard = ""
    if instr.guard is not None:
        guard = f"@{'!' if instr.guard_negated else ''}%{instr.guard.name} "
    ops = instr.operands
    slots = instr.match.operands
    if (instr.match.spec.form == "pipe_pred" and len(ops) >= 2 and len(slots) >= 2
            and slots[1].role == "p"):
        # d|p: the predicate output rides on the first destination (elect.sync, shfl.sync)
        parts = [f"{fmt_operand(ops[0])}|{fmt_operand(ops[1])}"] + [fmt_operand(o)
                                                                     for o in ops[2:]]
        text = ", ".join(parts)
    elif instr.match.spec.form == "call":
        # call (rets), fname, (args): empty lists are left out
        rets, fname, args = ops
        parts = ([f"({', '.join(fmt_operand(x) for x in rets.items)})"] if rets.items else []) \
            + [fmt_operand(fname)] \
            + ([f"({', '.join(fmt_operand(x) for x in args.items)})"] if args.items else [])
        text = ", ".join(parts)
    else:
        text = ", ".join(fmt_operand(o) for o in ops)
    return f"{guard}{instr.match.text}{' ' + text if text else ''};"


class _Lines:
    def __init__(self, mode: str | None, files: dict[str, int]):
        self.out: list[tuple[str, SourceLoc | None]] = []
        self.mode = mode
        self.files = files
        self._last_loc = None

    def instr(self, text: str, loc: SourceLoc | None, comment: str | None = None):
        if self.mode == "loc" and loc is not None and loc != self._last_loc:
            fid = self.files.setdefault(loc.file, len(self.files) + 1)
            self.out.append((f"\t.loc {fid} {loc.line} 0", loc))
            self._last_loc = loc
        notes = []
        if self.mode == "comment" and loc is not None:
            notes.append(f"{os.path.basename(loc.file)}:{loc.line}")
        if comment:
            notes.append(comment)
        tail = f"  // {'; '.join(notes)}" if notes else ""
        self.out.append((f"\t{text}{tail}", loc))

    def label(self, name: str, loc=None):
        self.out.append((f"{name}:", loc))


def _emit_body(body, lines: _Lines) -> None:
    for node in body:
        if isinstance(node, ir.Instr):
            lines.out.extend((f"\t// {t}", None) for t in node.notes_before)
            lines.instr(fmt_instr(node), node.loc, node.comment)
            lines.out.extend((f"\t// {t}", None) for t in node.notes_after)
        elif isinstance(node, ir.Label):
            lines.label(node.name, node.loc)
        elif isinstance(node, ir.Raw):
            text = node.text.format(*(o if isinstance(o, str) else fmt_operand(o)
                                      for o in node.operands))
            lines.instr(text if text.endswith(";") else text + ";", node.loc,
                        "unchecked (ptx.raw)")
        elif isinstance(node, ir.If):
            n = node.label_id
            p = f"%{node.pred.name}"
            neg = "" if node.negated else "!"
            end = f"$L__endif{n}"
            if node.else_body is None:
                lines.instr(f"@{neg}{p} bra {end};", node.loc)
                _emit_body(node.then_body, lines)
            else:
                els = f"$L__else{n}"
                lines.instr(f"@{neg}{p} bra {els};", node.loc)
                _emit_body(node.then_body, lines)
                lines.instr(f"bra.uni {end};", node.loc)
                lines.label(els, node.loc)
                _emit_body(node.else_body, lines)
            lines.label(end, node.loc)
        elif isinstance(node, ir.Loop):
            n = node.label_id
            top, end = f"$L__loop{n}", f"$L__endloop{n}"
            lines.label(top, node.loc)
            lines.instr(fmt_instr(node.check), node.loc)
            lines.instr(f"@%{node.cond.name} bra {end};", node.loc)
            _emit_body(node.body, lines)
            lines.instr(fmt_instr(node.incr), node.loc)
            lines.instr(f"bra.uni {top};", node.loc)
            lines.label(end, node.loc)
        else:  # pragma: no cover
            raise TypeError(f"cannot emit {node!r}")


def reg_decls(regs) -> list[str]:
    """``.reg`` lines grouped by prefix (``.reg .f32 %f<12>;``), then named registers."""
    groups: dict[str, tuple[str, int]] = {}
    named = []
    for r in regs:
        m = GENERATED_NAME.match(r.name)
        if m:
            prefix, idx = m.group(1), int(m.group(2))
            t, n = groups.get(prefix, (decl_type(r.dtype), 0))
            groups[prefix] = (t, max(n, idx + 1))
        else:
            named.append(f".reg .{decl_type(r.dtype)} %{r.name};")
    order = ["p", "rs", "h", "hb", "r", "hh", "hhb", "tf", "rd", "rq", "f", "fd"]
    out = [f".reg .{groups[p][0]} %{p}<{groups[p][1]}>;" for p in order if p in groups]
    return out + named


def emit(prog: ir.Program, lines: str | None = None, *, source: str = "",
         maxntid: tuple[int, int, int] | None = None,
         minnctapersm: int | None = None, directives=()) -> Emitted:
    """Render a verified program as a PTX module with one ``.entry``."""
    if lines not in (None, "comment", "loc"):
        raise ValueError(f"lines must be None, 'comment' or 'loc', got {lines!r}")
    files: dict[str, int] = {}
    body = _Lines(lines, files)
    _emit_body(prog.body, body)
    params = [{"name": p.name, "dtype": p.dtype.name,
               "decl": (f".align {p.alignment} .{p.dtype.name} {p.name}[{p.count}]"
                        if p.count > 1 else f".{p.dtype.name} {p.name}")}
              for p in prog.params]
    head = _ENV.get_template("module.ptx.j2").render(
        ptxdsl_version=__version__, source=source or "?", name=prog.name, arch=prog.arch,
        version=f"{prog.ptx_version[0]}.{prog.ptx_version[1]}", files=list(files),
        params=params, maxntid=", ".join(map(str, maxntid)) if maxntid else None,
        minnctapersm=minnctapersm, directives=list(directives),
        reg_decls=reg_decls(prog.regs), shared=[
            {"name": s.name, "align": s.align, "nbytes": s.nbytes} for s in prog.shared
            if not s.dynamic],
        # PTX declares dynamic shared memory at module scope, with no size.
        extern_shared=[{"name": s.name, "align": s.align, "nbytes": s.nbytes}
                       for s in prog.shared if s.dynamic],
        body=["\x00"])
    # The template marks where the body goes; splice it in so the line map is exact.
    before, after = head.split("\x00\n")
    start = before.count("\n") + 1
    line_map = {start + i: loc for i, (_, loc) in enumerate(body.out) if loc is not None}
    text = before + "".join(t + "\n" for t, _ in body.out) + after
    return Emitted(text, line_map)
