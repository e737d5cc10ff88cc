"""Generate the *PTX namespace* reference page from the instruction table.

The docs build calls :func:`render_ptx_namespace` (``docs/hooks.py`` adds its
output to the site as ``reference/ptx-namespace.md``), so the page can never
drift from :data:`ptxdsl.isa.TABLE`: every opcode, its modifier groups in PTX
order, types, minimum PTX ISA / ``sm_``, whether the CPU interpreter runs it
and one example, in PTX and in the Python that records it.

``python docs/docgen.py [OUT.md]`` writes the page (to stdout by default).
"""
from __future__ import annotations

import keyword
import re
import sys
from dataclasses import dataclass

from ptxdsl.isa import TABLE, OpSpec
from ptxdsl.isa.spec import parse_operands, split_alternatives
from ptxdsl.core.types import PREFIX_TYPE

__all__ = ["render_ptx_namespace", "render_operator_table", "trace_operator", "python_chain",
           "python_example", "interp_support", "anchor", "CATEGORY_TITLES", "REG_TYPES",
           "OPERATOR_ROWS"]

# Section order and titles of the page; categories missing here go last, by name.
CATEGORY_TITLES: dict[str, str] = {
    "data": "Data movement", "convert": "Conversion", "arith": "Integer and float arithmetic",
    "bits": "Bit manipulation", "compare": "Comparison and selection",
    "math": "Transcendentals and approximations", "warp": "Warp-level", "sync": "Synchronisation",
    "atomic": "Atomics", "control": "Control flow", "async": "Asynchronous copies",
    "mbarrier": "mbarrier", "tensor": "Tensor cores", "misc": "Other",
}

# Register-name prefix (as the emitter prints them) -> the type an example
# register is declared with. ``.b`` types fit every instruction type of their
# width, so examples need no per-opcode typing.
REG_TYPES: dict[str, str] = PREFIX_TYPE

_ROLE_TEXT = {
    "d": "destination register", "s": "source register or immediate",
    "r": "source register", "i": "immediate (Python int)", "a": "address `ptx.addr(...)`",
    "l": "label", "p": "destination predicate", "q": "source predicate",
    "V": "destination register (a list of registers for `.v2`/`.v4`)",
    "X": "source register or immediate (a list for `.v2`/`.v4`)",
    "t": "tensor map and coordinates `ptx.addr(tmap, coords=[...])`",
}


def anchor(opcode: str) -> str:
    """The HTML id of an opcode's section (``shfl.sync`` -> ``shfl-sync``)."""
    return "op-" + re.sub(r"[^a-z0-9]+", "-", opcode.lower()).strip("-")


def _py_part(part: str) -> str:
    """A PTX name part as a Python attribute: ``global`` -> ``global_``, ``::`` -> ``__``."""
    out = part.replace("::", "__")
    if keyword.iskeyword(out) or out in ("async",):
        out += "_"
    if out[:1].isdigit():  # .2d (TMA dimensions): _2d
        out = "_" + out
    return out


def python_chain(ptx_chain: str) -> str:
    """``ld.global.v4.f32`` -> ``ptx.inst.ld.global_.v4.f32``."""
    return "ptx.inst." + ".".join(_py_part(p) for p in ptx_chain.split("."))


# ------------------------------------------------------------------ examples
_REG = re.compile(r"^%([a-z]+)(\d+)$")


@dataclass(frozen=True)
class PyExample:
    """An example instruction as Python: the registers it needs and the call."""

    ptx: str                      # the table's example, e.g. "add.f32 %f2, %f0, %f1"
    call: str                     # "ptx.inst.add.f32(f2, f0, f1)"
    registers: tuple[tuple[str, str], ...]  # (python name, type name), in declaration order
    labels: tuple[str, ...]       # label names the call branches to


def _split_operands(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def python_example(example: str) -> PyExample | None:
    """Translate a table example (PTX) into the Python call that records it.

    Returns None for operands it cannot spell (the page then shows only the PTX).
    """
    text = example.strip().rstrip(";")
    if not text:
        return None
    chain, _, rest = text.partition(" ")
    regs: dict[str, str] = {}
    labels: list[str] = []

    def reg(tok: str) -> str | None:
        m = _REG.match(tok)
        if not m or m.group(1) not in REG_TYPES:
            return None
        name = m.group(1) + m.group(2)
        regs[name] = REG_TYPES[m.group(1)]
        return name

    def operand(tok: str) -> str | None:
        tok = tok.strip()
        if tok.startswith("{") and tok.endswith("}"):
            items = [operand(t) for t in _split_operands(tok[1:-1])]
            return None if None in items else "[" + ", ".join(items) + "]"
        if tok.startswith("[") and tok.endswith("]"):
            inner = tok[1:-1].strip()
            tm = re.fullmatch(r"(%[a-z]+\d+)\s*,\s*(\{.*\})", inner)  # [tmap, {x, y}]
            if tm:
                base, coords = reg(tm.group(1)), operand(tm.group(2))
                if base is None or coords is None:
                    return None
                return f"ptx.addr({base}, coords={coords})"
            m = re.fullmatch(r"(%[a-z]+\d+)\s*(?:\+\s*(\d+))?", inner)
            if not m:
                return None
            base = reg(m.group(1))
            if base is None:
                return None
            return f"ptx.addr({base}, {m.group(2)})" if m.group(2) else f"ptx.addr({base})"
        special = re.fullmatch(r"%(tid|ntid|ctaid|nctaid)\.([xyz])", tok)
        if special:
            return f"ptx.special.{special.group(1)}.{special.group(2)}()"
        if re.fullmatch(r"%(laneid|warpid|nwarpid|smid|nsmid|clock|clock64|globaltimer|lanemask_lt)",
                        tok):
            return f"ptx.special.{tok[1:]}()"
        if tok.startswith("%"):
            return reg(tok)
        if tok.startswith("$") or re.fullmatch(r"[A-Za-z_]\w*", tok):
            labels.append(tok)
            return repr(tok)
        if re.fullmatch(r"-?(0[xX][0-9a-fA-F]+|\d+)", tok):
            return tok
        if re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", tok):
            return tok
        return None

    args: list[str] = []
    for tok in _split_operands(rest) if rest.strip() else []:
        for piece in tok.split("|"):  # elect.sync %r0|%p0: two destination operands
            py = operand(piece)
            if py is None:
                return None
            args.append(py)
    order = sorted(regs, key=lambda n: (re.match(r"[a-z]+", n).group(0), int(re.search(r"\d+", n).group(0))))
    return PyExample(text, f"{python_chain(chain)}({', '.join(args)})",
                     tuple((n, regs[n]) for n in order), tuple(labels))


# ------------------------------------------------------------------ interpreter support
def interp_support() -> tuple[set[str] | None, str]:
    """The opcodes the CPU interpreter runs, and a sentence saying where that came from.

    Reads ``ptxdsl.interp.supported()`` (or a ``SUPPORTED`` set); returns
    ``(None, reason)`` when the interpreter is missing or says nothing.
    """
    try:
        from ptxdsl import interp
    except ImportError as e:
        return None, f"the CPU interpreter (ptxdsl.interp) is not installed here ({e})"
    for attr in ("supported", "supported_opcodes", "SUPPORTED", "SUPPORTED_OPCODES"):
        value = getattr(interp, attr, None)
        if callable(value):
            value = value()
        if value is not None:
            call = "()" if callable(getattr(interp, attr)) else ""
            return {str(v) for v in value}, f"read from `ptxdsl.interp.{attr}{call}`"
    return None, "ptxdsl.interp does not publish the set of opcodes it runs"


# ------------------------------------------------------------------ rendering
def _ver(v) -> str:
    return f"{v[0]}.{v[1]}"


def _mod_note(m, spec: OpSpec) -> str:
    notes = []
    if m.ptx and tuple(m.ptx) > tuple(spec.ptx):
        notes.append(f"PTX {_ver(m.ptx)}")
    if m.sm and m.sm > spec.sm:
        notes.append(f"sm_{m.sm}")
    if m.types is not None:
        notes.append("only " + " ".join("." + t for t in sorted(m.types)))
    return f" ({', '.join(notes)})" if notes else ""


def _operands_text(sig: str) -> str:
    return " *or* ".join(_one_operand_list(alt) for alt in split_alternatives(sig))


def _one_operand_list(sig: str) -> str:
    parts = []
    for op in parse_operands(sig):
        ty = ""
        if op.ty:
            ty = {"T": " of the instruction type", "T0": " of the first type",
                  "T1": " of the second type", "T2": " of the third type",
                  "W": " of twice the type's width"}.get(op.ty, f" `.{op.ty}`")
        text = f"{_ROLE_TEXT.get(op.role, op.role)}{ty}"
        if op.choices is not None:
            text += " in {" + ", ".join(str(c) for c in op.choices) + "}"
        if op.rw:
            text += " (read and written)"
        if op.when is not None:
            text += f" (with .{op.when})"
        parts.append(text + (" (optional)" if op.optional else ""))
    return "; ".join(parts) if parts else "none"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _interp_cell(spec: OpSpec, supported: set[str] | None) -> str:
    if supported is None:
        return "?"
    return "yes" if spec.opcode in supported else "no"


def _category_order(specs) -> list[str]:
    cats = list(dict.fromkeys(s.category for s in specs))
    known = [c for c in CATEGORY_TITLES if c in cats]
    return known + sorted(c for c in cats if c not in CATEGORY_TITLES)


def render_ptx_namespace(table=None) -> str:
    """The Markdown of the PTX namespace reference page, from the instruction table."""
    specs = tuple(TABLE if table is None else table)
    supported, where = interp_support()
    out: list[str] = []
    w = out.append
    w("# PTX namespace")
    w("")
    w("<!-- Generated by ptxdsl/docgen.py from ptxdsl/isa/table.py at docs build time. "
      "Do not edit: change the table. -->")
    w("")
    w(f"Every instruction ptxdsl knows: **{len(specs)} opcode families**, generated from the "
      "instruction table (`ptxdsl/isa/table.py`) each time the docs are built. "
      "`ptx.inst.<opcode>.<modifiers>.<type>(operands...)` records exactly one of these, "
      "after checking the modifiers, their order, the types and the operands against this "
      "table; helpers such as `ptx.warp.reduce_sum`, `ptx.if_` or `smem` indexing record "
      "the instructions their docstrings name (see the [API reference](api/index.md)).")
    w("")
    w("How Python spells PTX:")
    w("")
    w("- a trailing `_` dodges a Python keyword: `.global` is `global_`, `and` is `and_`, "
      "`.async` is `async_`;")
    w("- `__` stands for `::`: `.L1::evict_last` is `L1__evict_last`;")
    w("- the whole chain can also be one string: `ptx.inst(\"ld.global.nc.v4.f32\", regs, addr)`.")
    w("")
    w("Modifier groups are listed in the order PTX requires; a `{braced}` group is optional, a "
      "group marked *required* must be present, and at most one modifier of each group may be "
      "written. The minimum PTX ISA and `sm_` of an opcode rise with some modifiers "
      "(noted beside them) and with half-precision types (`.f16`: PTX 4.2 / sm_53, `.bf16`: "
      "PTX 7.8 / sm_90 for arithmetic). A kernel's `.version` is the highest any of its "
      "instructions needs, and a form newer than the kernel's `arch` is refused at the line "
      "that wrote it.")
    w("")
    if supported is None:
        w(f"**Interpreter column:** unknown — {where}. Try a kernel with `kernel.interpret(...)`; "
          "an unsupported instruction is reported by name.")
    else:
        w(f"**Interpreter column:** whether `kernel.interpret(...)` runs the opcode on the CPU "
          f"({where}).")
    w("")
    w("## Summary")
    w("")
    w("| opcode | category | types | min PTX | min sm | interpreter |")
    w("| --- | --- | --- | --- | --- | --- |")
    for spec in specs:
        types = " ".join("." + t for t in spec.types) or "—"
        if spec.ntypes == 2:
            types = "two of: " + types
        w(f"| [`{spec.opcode}`](#{anchor(spec.opcode)}) | {spec.category} | {types} | "
          f"{_ver(spec.ptx)} | sm_{spec.sm} | {_interp_cell(spec, supported)} |")
    w("")
    for cat in _category_order(specs):
        w(f"## {CATEGORY_TITLES.get(cat, cat.title())}")
        w("")
        for spec in (s for s in specs if s.category == cat):
            out.extend(_render_spec(spec, supported))
    return "\n".join(out).rstrip() + "\n"


def _render_spec(spec: OpSpec, supported: set[str] | None) -> list[str]:
    out: list[str] = []
    w = out.append
    w(f"### `{spec.opcode}` {{#{anchor(spec.opcode)}}}")
    w("")
    if spec.doc:
        w(spec.doc)
        w("")
    w("| | |")
    w("| --- | --- |")
    w(f"| Python | `{python_chain(spec.opcode)}` |")
    form = [spec.opcode]
    for g in spec.groups:
        # A | inside a code span does not split a Markdown table cell: no escaping.
        alts = "|".join("." + m.name for m in g.mods)
        form.append(alts if g.required else "{" + alts + "}")
    form += ["<type>"] * spec.ntypes
    # One code span per slot: a long form wraps between slots, never inside one.
    w("| form | " + " ".join(f"`{part}`" for part in form) + " |")
    renamed = [(m.name, _py_part(m.name)) for g in spec.groups for m in g.mods
               if _py_part(m.name) != m.name]
    if renamed:
        w("| Python names | " + ", ".join(f"`.{a}` → `{b}`" for a, b in renamed) + " |")
    if spec.ntypes:
        kind = "types" if spec.ntypes == 1 else "types (two: destination then source)"
        w(f"| {kind} | {' '.join('`.' + t + '`' for t in spec.types)} |")
    w(f"| operands | {_md_escape(_operands_text(spec.operands))} |")
    for key, sig in spec.variants.items():
        if sig != spec.operands:
            w(f"| operands with `.{key}` | {_md_escape(_operands_text(sig))} |")
    w(f"| minimum | PTX ISA {_ver(spec.ptx)}, sm_{spec.sm} |")
    cell = _interp_cell(spec, supported)
    w(f"| interpreter | {'unknown' if cell == '?' else cell} |")
    effects = "yes (never removed, ordered)" if spec.side_effects else "no"
    w(f"| side effects | {effects} |")
    w("")
    if spec.groups:
        w("| modifier group | choices |")
        w("| --- | --- |")
        for g in spec.groups:
            choices = ", ".join(f"`.{m.name}`{_mod_note(m, spec)}" for m in g.mods)
            req = " *(required)*" if g.required else ""
            w(f"| {g.name}{req} | {_md_escape(choices)} |")
        w("")
    if spec.example:
        ex = python_example(spec.example)
        w("Example:")
        w("")
        if ex is not None:
            w("```python")
            w(ex.call)
            w("```")
            w("")
        w("```ptx")
        w(spec.example.rstrip(";") + ";")
        w("```")
        w("")
    return out


# ------------------------------------------------------------------ operator table
# (Python expression, what it shows). Names: a, b, c are registers of the column's
# type, p is a .u64 pointer register, n a Python int. The expression's value is
# used afterwards (so products resolve as they would in a kernel).
OPERATOR_ROWS: tuple[tuple[str, str], ...] = (
    ("a + b", "add"), ("a - b", "subtract"), ("a + 3", "register and Python number"),
    ("3 - a", "reflected: number on the left"),
    ("a * b + c", "product used as a 32-bit value"),
    ("p + a * 4", "product meeting a 64-bit pointer"),
    ("(a * 4).wide", "the double-width product, asked for"),
    ("p + a", "32-bit meeting 64-bit"),
    ("a / b", "true division"), ("a // b", "floor division"), ("a % b", "remainder"),
    ("a & b", "bitwise and"), ("a | b", "bitwise or"), ("a ^ b", "bitwise xor"),
    ("a << 2", "shift left"), ("a >> 2", "shift right"),
    ("-a", "negate"), ("~a", "bitwise not"), ("abs(a)", "absolute value"),
    ("a < b", "comparison (a new predicate)"), ("a <= b", ""), ("a > b", ""), ("a >= b", ""),
    ("a == b", ""), ("a != b", ""),
    ("a += b", "in place: the result goes back into a"),
)
OPERATOR_TYPES: tuple[str, ...] = ("u32", "s32", "u64", "f32", "pred")


def trace_operator(expr: str, type_name: str) -> str:
    """The PTX instructions ``expr`` records for registers of ``type_name``.

    Returns the opcodes joined by ``; `` (e.g. ``"mul.wide.u32; add.u64"``),
    or ``"refused: <reason>"`` when ptxdsl rejects the expression.
    """
    from ptxdsl.core import ir
    from ptxdsl import reg as reg_mod
    from ptxdsl.core.errors import PtxdslError
    from ptxdsl.core.trace import Builder
    from ptxdsl.core.walks import collect_used, resolve_deferred
    from ptxdsl.core.types import ALL_TYPES

    t = ALL_TYPES[type_name]
    b = Builder("op_table", "sm_90a")
    with b.active():
        if t.is_pred:
            x = reg_mod.scalar(ALL_TYPES["u32"])
            a, bb, c = (x < 1), (x < 2), (x < 3)
        else:
            a, bb, c = (reg_mod.scalar(t) for _ in range(3))
        ns = {"a": a, "b": bb, "c": c, "p": reg_mod.scalar(ALL_TYPES["u64"])}
        start = len(b.body)
        try:
            if "=" in expr.replace("==", "").replace("<=", "").replace(">=", "").replace(
                    "!=", ""):
                exec(expr, {}, ns)
                value = ns["a"]
            else:
                value = eval(expr, {"abs": abs}, ns)
        except AttributeError:
            return "refused: only integer products have .wide"
        except (PtxdslError, TypeError, ValueError) as e:
            msg = getattr(e, "message", None) or str(e)
            return "refused: " + msg.split("; ")[0]
    # Resolve products as a finished kernel would, with the value counted as used.
    used: set = {value}
    collect_used(b.body, used)
    body = resolve_deferred(b.body[start:], used)
    texts = [n.match.text for n in body if isinstance(n, ir.Instr)]
    return "; ".join(texts) if texts else "(no instruction)"


def render_operator_table(types: tuple[str, ...] = OPERATOR_TYPES) -> str:
    """A Markdown table of what each register operator records, found by tracing it."""
    out = ["| Python | " + " | ".join(f"`.{t}`" for t in types) + " |",
           "| --- |" + " --- |" * len(types)]
    for expr, what in OPERATOR_ROWS:
        cells = []
        for t in types:
            r = trace_operator(expr, t)
            if r.startswith("refused: "):
                reason = r[len("refused: "):].replace("|", "\\|")
                cells.append(f"<span title=\"{_html_attr(reason)}\">refused</span>")
            else:
                cells.append("<br>".join(f"`{x}`" for x in r.split("; ")))
        label = f"`{expr}`" + (f"<br><small>{what}</small>" if what else "")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _html_attr(text: str) -> str:
    return (text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
            .replace(">", "&gt;"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render_ptx_namespace()
    if argv:
        with open(argv[0], "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
