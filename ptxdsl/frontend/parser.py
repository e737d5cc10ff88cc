"""Tokens -> a :class:`~.decls.Module`: directives, declarations and function bodies.

Module-level directives and declarations are read here; each body statement goes to
a :class:`~.resolve.Body`, which resolves instructions against the instruction table.
Debug information (``.file``, ``.loc``, ``.section`` blocks) is read and dropped from
the canonical text: ``.loc`` lines become the source locations of the instructions
that follow them, so errors name the user's file:line as traced code does.
"""
from __future__ import annotations

from ..core.errors import SourceLoc
from .decls import Function, Module, ParamDecl, RegDecl, VarDecl
from .lexer import PtxSyntaxError, Token, parse_int, tokenize
from .resolve import Body

LINKAGE = (".visible", ".extern", ".weak", ".common")
SPACES = (".shared", ".global", ".const", ".local", ".param")
# Performance-tuning directives between a signature and its body (no semicolon).
PERF = (".maxntid", ".reqntid", ".minnctapersm", ".maxctapersm", ".maxnreg",
        ".explicitcluster", ".reqnctapercluster", ".maxclusterrank", ".noreturn",
        ".blocksareclusters")


class Cursor:
    def __init__(self, tokens: list[Token], filename: str):
        self.toks = tokens
        self.i = 0
        self.filename = filename

    def peek(self, k: int = 0) -> Token | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def at(self, *texts: str) -> bool:
        t = self.peek()
        return t is not None and t.text in texts

    def next(self) -> Token:
        t = self.peek()
        if t is None:
            last = self.toks[-1].line if self.toks else 1
            raise PtxSyntaxError("unexpected end of the PTX text", self.loc(last))
        self.i += 1
        return t

    def expect(self, text: str) -> Token:
        t = self.next()
        if t.text != text:
            raise PtxSyntaxError(f"expected {text!r}, got {t.text!r}", self.loc(t.line))
        return t

    def expect_kind(self, kind: str, what: str) -> Token:
        t = self.next()
        if t.kind != kind:
            raise PtxSyntaxError(f"expected {what}, got {t.text!r}", self.loc(t.line))
        return t

    def number(self) -> int:
        return parse_int(self.expect_kind("num", "a number").text)

    def loc(self, line: int | None = None) -> SourceLoc:
        if line is None:
            t = self.peek() or (self.toks[-1] if self.toks else None)
            line = t.line if t else 1
        return SourceLoc(self.filename, line)

    def until(self, stop: str) -> list[Token]:
        """Tokens up to (not including) ``stop`` at bracket depth 0; consumes ``stop``."""
        out, depth = [], 0
        while True:
            t = self.next()
            if t.text == stop and depth == 0:
                return out
            if t.text in "([{":
                depth += 1
            elif t.text in ")]}":
                depth -= 1
            out.append(t)


def parse(text: str, filename: str = "<ptx>", *, keep_unknown: bool = False) -> Module:
    """Parse a whole PTX module (see :func:`ptxdsl.parse_ptx`)."""
    cur = Cursor(tokenize(text, filename), filename)
    version, target, addr = None, (), 64
    items: list = []
    files = _files(cur.toks)  # LLVM prints .file after the functions whose .loc name it
    module_shared: list[VarDecl] = []
    while cur.peek() is not None:
        t = cur.peek()
        if t.text == ".version":
            cur.next()
            v = cur.next().text
            major, _, minor = v.partition(".")
            version = (int(major), int(minor or 0))
        elif t.text == ".target":
            cur.next()
            names = [cur.next().text]
            while cur.at(","):
                cur.next()
                names.append(cur.next().text)
            target = tuple(names)
        elif t.text == ".address_size":
            cur.next()
            addr = cur.number()
        elif t.text == ".file":
            cur.next()
            cur.number()
            cur.expect_kind("str", "a file name")
            while cur.at(","):          # optional timestamp, size
                cur.next()
                cur.next()
        elif t.text == ".section":
            _skip_section(cur)
        elif t.text == ".pragma":
            cur.next()
            items.append(".pragma " + ", ".join(x.text for x in cur.until(";")
                                                if x.text != ",") + ";")
        elif t.text == ";":
            cur.next()
        else:
            linkage = []
            while cur.at(*LINKAGE):
                linkage.append(cur.next().text[1:])
            if cur.at(".entry", ".func"):
                if version is None or not target:
                    raise PtxSyntaxError("a PTX module starts with .version and .target "
                                         "before its first function", cur.loc())
                items.append(_function(cur, tuple(linkage), target[0], version, files,
                                       module_shared, items, keep_unknown))
            elif cur.at(*SPACES):
                d = var_decl(cur, tuple(linkage))
                module_shared.append(d)     # every module variable: bodies address them
                items.append(d)
            else:
                raise PtxSyntaxError(f"unexpected {t.text!r} at module level (expected a "
                                     f"directive, a variable or a function)", cur.loc(t.line))
    if version is None or not target:
        raise PtxSyntaxError("no .version / .target directive: is this PTX?", cur.loc(1))
    return Module(version, target, addr, items, filename)


def _files(toks: list[Token]) -> dict[int, str]:
    out = {}
    for i, t in enumerate(toks[:-2]):
        if t.text == ".file" and toks[i + 1].kind == "num" and toks[i + 2].kind == "str":
            out[parse_int(toks[i + 1].text)] = toks[i + 2].text[1:-1]
    return out


def _skip_section(cur: Cursor) -> None:
    cur.next()
    cur.next()  # the section's name
    if cur.at("{"):
        cur.next()
        cur.until("}")


def var_decl(cur: Cursor, linkage: tuple[str, ...] = ()) -> VarDecl:
    """``.shared .align 16 .b8 name[1024] = {...};`` (the cursor at the state space)."""
    space = cur.next().text[1:]
    align, vector, typ = None, None, None
    while True:
        t = cur.next()
        if t.text == ".align":
            align = cur.number()
        elif t.text in (".v2", ".v4", ".v8"):
            vector = t.text[1:]
        elif t.text in (".ptr",) or t.text.startswith(".attribute"):
            continue
        elif t.kind == "word" and t.text.startswith("."):
            typ = t.text[1:]
        else:
            name = t.text
            break
    if typ is None:
        raise PtxSyntaxError(f"variable {name} has no type", cur.loc(t.line))
    dims: list[int] = []
    while cur.at("["):
        cur.next()
        dims.append(0 if cur.at("]") else cur.number())
        cur.expect("]")
    init = None
    if cur.at("="):
        cur.next()
        init = _join(cur.until(";"))
    else:
        cur.expect(";")
    return VarDecl(space, name, typ, align, tuple(dims) if dims else None, init, linkage,
                   vector)


def _join(toks: list[Token]) -> str:
    out = ""
    for t in toks:
        if t.text == ",":
            out += ", "
        else:
            out += t.text
    return out


def _param(cur: Cursor) -> ParamDecl:
    space = cur.next()
    if space.text not in (".param", ".reg"):
        raise PtxSyntaxError(f"expected .param or .reg, got {space.text!r}", cur.loc(space.line))
    align, typ, ptr, name = None, None, None, None
    while True:
        t = cur.next()
        if t.text == ".align":
            if ptr is not None:
                ptr = (ptr[0], cur.number())
            else:
                align = cur.number()
        elif t.text == ".ptr":
            ptr = (None, None)
        elif ptr is not None and t.text in (".global", ".shared", ".const", ".local"):
            ptr = (t.text[1:], ptr[1])
        elif t.kind == "word" and t.text.startswith("."):
            typ = t.text[1:]
        else:
            name = t.text
            break
    count = None
    if cur.at("["):
        cur.next()
        count = 0 if cur.at("]") else cur.number()
        cur.expect("]")
    if typ is None:
        raise PtxSyntaxError(f"parameter {name} has no type", cur.loc(t.line))
    return ParamDecl(name, typ, align, count, ptr, space.text[1:])


def _param_list(cur: Cursor) -> list[ParamDecl]:
    cur.expect("(")
    out = []
    while not cur.at(")"):
        out.append(_param(cur))
        if cur.at(","):
            cur.next()
    cur.expect(")")
    return out


def _function(cur: Cursor, linkage, arch, version, files, module_shared, items,
              keep_unknown) -> Function:
    head = cur.next()
    kind = head.text[1:]
    returns = None
    if kind == "func" and cur.at("("):
        returns = _param_list(cur)
    name = cur.expect_kind("word", "a function name").text
    params = _param_list(cur) if cur.at("(") else []
    directives = []
    while cur.at(*PERF):
        d = cur.next()
        vals = []
        while cur.peek() is not None and cur.peek().kind == "num":
            vals.append(str(parse_int(cur.next().text)))
            if cur.at(","):
                cur.next()
        directives.append(d.text + (" " + ", ".join(vals) if vals else ""))
    fn = Function(kind, name, linkage, params, returns, directives, loc=cur.loc(head.line))
    if cur.at(";"):
        cur.next()
        return fn
    funcs = {f.name for f in items if isinstance(f, Function)} | {name}
    body = Body(fn, arch, version, module_shared, funcs, cur.filename, keep_unknown)
    _body(cur, body, files)
    fn.program = body.finish()
    return fn


def _body(cur: Cursor, body: Body, files: dict) -> None:
    open_tok = cur.expect("{")
    depth = 0
    del open_tok
    while True:
        t = cur.next()
        x = t.text
        if x == "}":
            if depth == 0:
                return
            depth -= 1
            body.close_scope()
        elif x == "{":
            depth += 1
            body.open_scope()
        elif x == ";":
            continue
        elif x == ".reg":
            _reg_decl(cur, body)
        elif x in SPACES:
            cur.i -= 1
            body.declare_var(var_decl(cur), t.line)
        elif x == ".loc":
            body.debug_loc(_loc_line(cur, t, files))
        elif x == ".pragma":
            body.pragma(".pragma " + ", ".join(y.text for y in cur.until(";")
                                               if y.text != ",") + ";")
        elif t.kind == "word" and cur.at(":") and not x.startswith("%"):
            cur.next()
            body.label(x, t.line)
        else:
            cur.i -= 1
            toks = cur.until(";")
            body.instruction(toks)


def _loc_line(cur: Cursor, t: Token, files: dict) -> SourceLoc | None:
    """``.loc file line col[, function_name ..., inlined_at file line col]`` -> the source
    line; an inlined call is followed out to the line that made the outermost call."""
    toks = []
    while cur.peek() is not None and cur.peek().line == t.line:
        toks.append(cur.next())
    try:
        here = tuple(parse_int(x.text) for x in toks[:3])
        k = next((i for i, x in enumerate(toks) if x.text == "inlined_at"), None)
        outer = tuple(parse_int(x.text) for x in toks[k + 1:k + 4]) if k else None
    except ValueError:
        raise PtxSyntaxError(".loc takes a file number, a line and a column",
                             cur.loc(t.line)) from None
    if len(here) < 2:
        raise PtxSyntaxError(".loc takes a file number, a line and a column", cur.loc(t.line))
    parents = files.setdefault("inlined", {})
    if outer is not None:
        parents[here] = outer
        here = outer
    seen = 0
    while here in parents and seen < 64:
        here, seen = parents[here], seen + 1
    name = files.get(here[0])
    return SourceLoc(name, here[1]) if name and here[1] else None


def _reg_decl(cur: Cursor, body: Body) -> None:
    types = []
    while cur.peek() is not None and cur.peek().text.startswith(".") and \
            not cur.peek().text.startswith("%"):
        types.append(cur.next().text[1:])
    if not types:
        raise PtxSyntaxError(".reg needs a type", cur.loc())
    typ = types[-1]
    width = 1
    if len(types) == 2 and types[0] in ("v2", "v4"):
        width = int(types[0][1:])
    elif len(types) > 1:
        raise PtxSyntaxError(f".reg .{'.'.join(types)}: a register declaration takes a type, "
                             f"optionally after .v2 or .v4", cur.loc())
    while True:
        t = cur.expect_kind("word", "a register name")
        count = None
        if cur.at("<"):
            cur.next()
            count = cur.number()
            cur.expect(">")
        if width > 1:
            if count is not None:
                raise PtxSyntaxError("vector registers are declared one by one (no <N>)",
                                     cur.loc(t.line))
            body.declare_vector(typ, t.text.lstrip("%"), width, t.line)
        else:
            body.declare_reg(RegDecl(typ, t.text.lstrip("%"), count), t.line)
        if cur.at(","):
            cur.next()
            continue
        cur.expect(";")
        return
