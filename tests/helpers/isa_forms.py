"""Concrete forms of every instruction-table entry, built through the real tracer and emitter.

Used by the table sweep in ``isa/test_table.py`` (and handy when adding an entry:
``python tests/helpers/isa_forms.py ld`` prints what ptxas says about each form of ``ld``).

A *form* is one matched modifier chain plus fabricated operands: registers of the
types the table's operand signature names, addresses in the right state space, a
placed label for branches. Forms are turned into ``ir.Instr`` objects by
``Builder.build`` (the same validation user code goes through) and printed by
``emit`` (the same emitter, ``fmt_instr`` included), so the sweep tests the path
users take, not a parallel formatter.
"""
from __future__ import annotations

import dataclasses

import itertools
import re
import sys
from dataclasses import dataclass

from ptxdsl.core import ir
from ptxdsl.core.emit import emit
from ptxdsl.core.errors import IsaError, SourceLoc
from ptxdsl.isa import TABLE, Match, OpSpec, match
from ptxdsl.core.arch import arch_ptx_floor
from ptxdsl.core.trace import Builder
from ptxdsl.core.types import ALL_TYPES, u32, u64

# ptxas 13 assembles sm_75 and newer only; older claims are checked at sm_75.
OLDEST_SM = 75
SHARED_SPACES = ("shared", "shared::cta", "shared::cluster", "tmem")  # 32-bit addresses


def _try(spec: OpSpec, mods: list[str]) -> Match | None:
    try:
        return match(spec, mods)
    except IsaError:
        return None


def _type_tuples(spec: OpSpec) -> list[tuple[str, ...]]:
    return list(itertools.product(spec.types, repeat=spec.ntypes))


def _find(spec: OpSpec, fixed: dict[int, str], types: list[tuple[str, ...]],
          max_extra: int = 2) -> Match | None:
    """The valid form with the fewest optional modifiers that contains ``fixed``.

    Required groups always get a choice; up to ``max_extra`` optional groups are
    added (fewest first), so the result is the plainest spelling of the target.
    """
    groups = spec.groups
    free = [i for i in range(len(groups)) if i not in fixed]
    required = [i for i in free if groups[i].required]
    optional = [i for i in free if not groups[i].required]
    for k in range(max_extra + 1):
        for extra in itertools.combinations(optional, k):
            picked = sorted(required + list(extra))
            for names in itertools.product(*(groups[i].names for i in picked)):
                chosen = dict(fixed)
                chosen.update(zip(picked, names))
                head = [chosen[i] for i in sorted(chosen)]
                for t in types:
                    m = _try(spec, head + list(t))
                    if m is not None:
                        return m
    return None


def _near(spec: OpSpec, fixed: dict[int, str], types: list[tuple[str, ...]],
          seeds: list[Match]) -> Match | None:
    """A valid form that contains ``fixed`` and differs from one of ``seeds`` (valid forms
    already found) in at most one other modifier: a few hundred matches at most, where
    :func:`_find` walks the modifier product (~10^5 chains for mma.sync) to prove that no
    plainer form exists."""
    groups = spec.groups

    def attempt(chosen: dict[int, str], seed_types: tuple[str, ...]) -> Match | None:
        head = [chosen[i] for i in sorted(chosen)]
        for t in ([seed_types] if seed_types in types else []) + [
                t for t in types if t != seed_types]:
            m = _try(spec, head + list(t))
            if m is not None:
                return m
        return None

    bases = []
    for s in seeds:
        chosen = {i: s.chosen[g.name] for i, g in enumerate(groups) if g.name in s.chosen}
        chosen.update(fixed)
        bases.append((chosen, tuple(t.name for t in s.types)))
    for chosen, seed_types in bases:
        m = attempt(chosen, seed_types)
        if m is not None:
            return m
    for chosen, seed_types in bases:
        for gi, g in enumerate(groups):
            if gi in fixed:
                continue
            for name in (*g.names, *(() if g.required else (None,))):
                if chosen.get(gi) == name:
                    continue
                changed = {i: n for i, n in chosen.items() if i != gi}
                if name is not None:
                    changed[gi] = name
                m = attempt(changed, seed_types)
                if m is not None:
                    return m
    return None


_COVERING: dict[tuple[str, bool], tuple[list[Match], list[str]]] = {}


def covering_forms(spec: OpSpec, plainest: bool = False) -> tuple[list[Match], list[str]]:
    """Forms that use every type (tuple) and every modifier of ``spec`` at least once.

    Returns the forms and a list of targets for which no valid form exists
    (a modifier the table lists but that no chain can use is a table bug).

    Each target is first looked for next to the forms already found (:func:`_near`), then
    by the exhaustive :func:`_find`, so every target without a valid form is still proven
    so. ``plainest=True`` always uses :func:`_find` (each target in its plainest spelling;
    minutes for mma.sync, the long run's sweep). Results are kept per entry: the table is
    immutable and several tests sweep the same entries.
    """
    key = (spec.opcode, plainest)
    if key not in _COVERING:
        _COVERING[key] = _covering_forms(spec, plainest)
    forms, missing = _COVERING[key]
    return list(forms), list(missing)


def _covering_forms(spec: OpSpec, plainest: bool) -> tuple[list[Match], list[str]]:
    found: dict[tuple[str, ...], Match] = {}
    missing: list[str] = []
    tuples = _type_tuples(spec)
    if spec.ntypes == 0:
        targets = [({}, [()], "base form")]
    elif spec.ntypes == 1:
        targets = [({}, [t], f".{t[0]}") for t in tuples]
    else:
        # Every type at least once (not every pair: most are illegal; some types,
        # e.g. cvt's packed .f16x2, exist only as destination).
        targets = [({}, [t for t in tuples if name in t], f".{name}") for name in spec.types]
    for gi, grp in enumerate(spec.groups):
        for name in grp.names:
            targets.append(({gi: name}, tuples, f".{name} ({grp.name})"))
    for fixed, ts, what in targets:
        m = None if plainest else _near(spec, fixed, ts, list(found.values()))
        if m is None:
            m = _find(spec, fixed, ts)
        if m is None:
            missing.append(what)
        else:
            found.setdefault(m.mods, m)
    return list(found.values()), missing


def dense_forms(spec: OpSpec, max_extra: int = 2) -> list[Match]:
    """Every valid form with up to ``max_extra`` optional modifiers (for exploring)."""
    groups = spec.groups
    required = [i for i, g in enumerate(groups) if g.required]
    optional = [i for i, g in enumerate(groups) if not g.required]
    out = {}
    for k in range(max_extra + 1):
        for extra in itertools.combinations(optional, k):
            picked = sorted(required + list(extra))
            for names in itertools.product(*(groups[i].names for i in picked)):
                for t in _type_tuples(spec):
                    m = _try(spec, list(names) + list(t))
                    if m is not None:
                        out.setdefault(m.mods, m)
    return list(out.values())


# ------------------------------------------------------------------ operands
def _reg_type(t):
    """PTX has no 8-bit registers: 8-bit values live in 16-bit ones."""
    if t.bits == 8:
        return ALL_TYPES[f"{t.kind}16"]
    return t


def _space(m: Match, index: int) -> str | None:
    op = m.spec.opcode
    if op == "cp.async":
        return "shared" if index == 0 else "global"
    return m.address_space(m.operands[index])


def _immediate(m: Match, slot_index: int, t):
    op = m.spec.opcode
    if op == "cp.async":
        return 16 if slot_index == 2 else 8  # cp-size, then src-size (<= cp-size)
    last = len(m.operands) - 1
    if op == "shfl.sync" and slot_index == last or op in ("vote.sync", "match.sync",
                                                          "redux.sync", "elect.sync",
                                                          "bar.warp.sync"):
        return 0xFFFFFFFF  # membermask
    if op == "shfl.sync" and slot_index == last - 1:
        return 31
    if op == "prmt":
        return 0x3210
    if op in ("cp.async.bulk.prefetch.L2", "cp.async.bulk", "cp.reduce.async.bulk"):
        return 256  # bytes: a multiple of 16
    if op == "discard":
        return 128  # one L2 line
    if op == "setmaxnreg":
        return 240  # 24..256, a multiple of 8
    if op in ("wgmma.wait_group", "cp.async.bulk.wait_group"):
        return 1
    if op in ("cp.async.wait_group", "bar", "barrier") and slot_index == 0:
        return 0
    if op == "mbarrier.try_wait" and m.has("parity"):
        return 1
    if op in ("bar", "barrier") and slot_index == 1:
        return 32
    if op in ("tcgen05.alloc", "tcgen05.dealloc"):
        return 32  # columns: a power of two, 32..512
    if t is not None and t.is_float:
        return 1.5
    return 3


@dataclass
class Form:
    """One instruction to assemble, and how it was made."""

    match: Match
    imm_slot: int | None  # which source slot holds an immediate (None: all registers)
    instr: ir.Instr | None = None

    @property
    def text(self) -> str:
        from ptxdsl.core.emit import fmt_instr
        return fmt_instr(self.instr) if self.instr is not None else self.match.text


class Sweep:
    """A builder that turns matched forms into instructions of one module."""

    def __init__(self, arch: str = "sm_100"):
        self.b = Builder("sweep", arch)
        self.param = ir.Param("p_ptr", u64, "ptr", "p")
        self.b.params.append(self.param)
        self.label = ir.Label("$L__sweep_end")
        self.forms: list[Form] = []

    def _operand(self, m: Match, i: int, slot, imm: bool):
        b = self.b
        t = m.resolve_type(slot.ty)
        role = slot.role
        if slot.choices is not None and (imm or role == "i"):
            return slot.choices[-1]
        if role == "t":
            return ir.Addr(b.new_reg(u64), 0, tuple(b.new_reg(ALL_TYPES["s32"])
                                                     for _ in range(m.count(slot))))
        if role in ("V", "X") and (m.vector > 1 or slot.list_key):
            return [b.new_reg(_reg_type(t)) for _ in range(m.count(slot))]
        if role == "d" and m.chosen.get("space") == "shared::cluster" and m.spec.opcode \
                .startswith("mbarrier.arrive"):
            return ir.SINK  # a peer CTA's barrier returns no state
        if role in ("d", "p", "V"):
            return b.new_reg(_reg_type(t))
        if role in ("s", "X") and imm:
            return _immediate(m, i, t)
        if role in ("s", "r", "q", "X"):
            if m.spec.opcode in ("bar", "barrier") or (
                    m.spec.opcode == "cp.async" and i == 3):
                return _immediate(m, i, t)  # ptxas wants small, in-range values
            return b.new_reg(_reg_type(t))
        if role == "i":
            return _immediate(m, i, t)
        if role == "c":   # a call's lists: one register each (the callee below)
            return [b.new_reg(u32)]
        if role == "l" and m.spec.form == "call":
            b.functions.add("callee")
            return "callee"
        if role == "a":
            space = _space(m, i)
            if space == "param" and m.spec.access == "write":   # a call's argument
                return ir.Addr(ir.Symbol("p_arg", "param", True))
            if space == "param":
                return ir.Addr(ir.Symbol(self.param.name, "param"))
            return ir.Addr(b.new_reg(u32 if space in SHARED_SPACES else u64))
        if role == "l":
            return self.label
        raise AssertionError(role)

    def add(self, m: Match, imm_slot: int | None = None) -> Form | None:
        """Build ``m`` with fabricated operands; None if the tracer refuses the operands
        (e.g. an immediate where the table allows registers only). Optional slots are
        filled when they carry no needs of their own, or when ``m`` already has them
        (see :func:`with_optional_needs`)."""
        args = [self._operand(m, i, s, imm_slot == i) for i, s in enumerate(m.operands)
                if not s.optional or m.spec.opcode == "cp.async"
                or s.need is None and s.ty == "u32" and m.spec.opcode.startswith("mbarrier")
                or s.need is not None and m.ptx >= s.need[0] and m.sm >= s.need[1]]
        form = Form(m, imm_slot)
        try:
            m = form.match = self.b.fit(m, args)
            # The tracer's own operand checks (Builder.build minus the table lookup,
            # so that a match made from a relaxed spec can be built too).
            form.instr = ir.Instr(m, self.b.coerce_operands(m, args),
                                  SourceLoc("form", len(self.forms)))
        except IsaError:
            return None
        self.forms.append(form)
        return form

    def add_with_immediates(self, m: Match) -> list[Form]:
        """The all-register form plus one form per source slot that may take an immediate,
        for each operand list the form accepts (``||`` alternatives)."""
        out = []
        for sig in m.alternatives:
            out += self._with_immediates(m.with_operands(sig))
        return out

    def _with_immediates(self, m: Match) -> list[Form]:
        out = [self.add(m)]
        for i, s in enumerate(m.operands):
            if s.role == "t":
                continue
            if s.role in ("s", "X") and not s.optional and not s.list_key and not (
                    m.vector > 1 and s.role == "X"):
                t = m.resolve_type(s.ty)
                if t is None or t.is_float and t.name not in ("f32", "f64") or t.is_pred:
                    continue
                out.append(self.add(m, imm_slot=i))
        return [f for f in out if f is not None]

    def module(self, forms: list[Form], arch: str, version: tuple[int, int]):
        """The PTX text of a kernel holding ``forms`` (in order), and its line map."""
        b = self.b
        b.body = [f.instr for f in forms]
        if any(f.instr.match.spec.opcode == "bra" for f in forms):
            b.body.append(self.label)
        prog = b.finish()
        prog.arch = arch
        prog.ptx_version = version
        # Declare only the registers these forms use, so the module stays small.
        used = set()
        for f in forms:
            used.update(f.instr.dests())
            used.update(f.instr.sources())
        prog.regs = [r for r in b.regs if r in used]
        for f in forms:   # a call's list registers are neither dests nor sources
            if f.instr.match.spec.form == "call":
                used.update(x for op in f.instr.operands if isinstance(op, ir.Vec)
                            for x in op.items)
        prog.regs = [r for r in b.regs if r in used]
        out = emit(prog)
        text = out.text
        # call and st.param need a callee and a call variable; declared on lines that
        # exist already, so the line map still names each form
        if any(f.instr.match.spec.form == "call" for f in forms):
            text = text.replace(".address_size 64", ".address_size 64  .func (.reg .b32 %rv) "
                                "callee(.reg .b32 %x);", 1)
            text += "\n.func (.reg .b32 %rv) callee(.reg .b32 %x)\n{\n\tmov.b32 %rv, %x;\n" \
                    "\tret;\n}\n"
        if "p_arg" in text:
            head, sep, tail = text.partition("\n{\n")
            text = head + "\n{  .param .align 16 .b8 p_arg[16];\n" + tail
        return dataclasses.replace(out, text=text)


def with_optional_needs(m: Match) -> list[Match]:
    """``m``, plus ``m`` needing what its optional operands with needs ask for (the sweep
    then fills them: mbarrier.arrive's count is an sm_90 operand of an sm_80 form)."""
    out = [m]
    for s in m.operands:
        if s.optional and s.need is not None and not (m.ptx >= s.need[0] and m.sm >= s.need[1]):
            out.append(m.needing(*s.need))
    return out


def version_for(m: Match, arch: str) -> tuple[int, int]:
    return max(m.ptx, arch_ptx_floor(arch))


def arch_for(m: Match, suffix: str = "") -> str:
    sm = max(m.sm, OLDEST_SM)
    return f"sm_{sm}{suffix if sm >= 90 else ''}"


def assemble_forms(sweep: Sweep, forms: list[Form], arch: str, version: tuple[int, int],
                   ptxas: str | None = None) -> dict[int, str]:
    """Assemble ``forms`` in as few ptxas runs as possible.

    Returns ``{index in forms: ptxas error}`` for the forms ptxas rejects. ptxas
    reports every bad line of a file, so one run finds all rejects; a message
    without a line (rare) splits the batch in halves until it is attributed.
    """
    from ptxdsl import toolchain as tc
    if not forms:
        return {}
    emitted = sweep.module(forms, arch, version)
    try:
        tc.assemble(emitted.text, arch, verbose=False, ptxas=ptxas)
        return {}
    except tc.PtxasError as e:
        diags = [d for d in e.diagnostics if d.severity == "error"
                 and not d.message.startswith("Ptx assembly aborted")]
        text_lines = emitted.text.split("\n")
    bad: dict[int, str] = {}
    unplaced = []
    for d in diags:
        loc = emitted.source_of(d.line) if d.line is not None else None
        if loc is None:
            unplaced.append(d)
            continue
        bad.setdefault(loc.line, f"{d.message}  [{text_lines[d.line - 1].strip()}]")
    if unplaced and len(forms) == 1:
        return {0: "; ".join(d.message for d in unplaced)}
    if unplaced or not bad:
        half = len(forms) // 2
        out = {}
        for lo, part in ((0, forms[:half]), (half, forms[half:])):
            for k, v in assemble_forms(sweep, part, arch, version, ptxas).items():
                out[lo + k] = v
        return out
    # Rerun the rest: an error on one line can hide errors on later ones.
    by_loc = {f.instr.loc.line: i for i, f in enumerate(forms)}
    result = {by_loc[line]: msg for line, msg in bad.items()}
    rest = [f for i, f in enumerate(forms) if i not in result]
    idx = [i for i in range(len(forms)) if i not in result]
    for k, v in assemble_forms(sweep, rest, arch, version, ptxas).items():
        result[idx[k]] = v
    return result


# ------------------------------------------------------------------ examples
_REG_RE = re.compile(r"%(p|rs|rd|rq|r|hhb|hh|hb|h|tf|fd|f)(\d+)\b")
_EX_DECL = {"p": "pred", "rs": "b16", "r": "b32", "rd": "b64", "rq": "b128", "h": "b16",
            "hb": "b16", "hh": "b32", "hhb": "b32", "tf": "b32", "f": "f32", "fd": "f64"}


def example_module(examples: str | list[str], arch: str, version: tuple[int, int]) -> str:
    """A module with one kernel per table ``example`` line, its registers declared (one
    ptxas run assembles many examples)."""
    if isinstance(examples, str):
        examples = [examples]
    out = [f".version {version[0]}.{version[1]}", f".target {arch}", ".address_size 64", ""]
    if any(re.search(r"\bcallee\b", e) for e in examples):   # call's example calls it
        out += [".func (.reg .b32 %rv) callee(.reg .b32 %x)", "{", "\tmov.b32 %rv, %x;",
                "\tret;", "}", ""]
    for i, example in enumerate(examples):
        regs = sorted(set(_REG_RE.findall(example)), key=lambda x: (x[0], int(x[1])))
        decls = [f"\t.reg .{_EX_DECL[p]} %{p}{n};" for p, n in regs]
        labels = sorted(set(re.findall(r"\$\w+", example)))
        out += [f".visible .entry example{i}(.param .u64 p_ptr)", "{", *decls,
                f"\t{example};", *[f"{lbl}:" for lbl in labels], "\tret;", "}", ""]
    return "\n".join(out)


def example_chain(example: str) -> list[str]:
    head = example.split(None, 1)[0]
    return head.split(".")


def main(argv: list[str]) -> int:  # pragma: no cover - a debugging aid
    want = set(argv)
    sweep = Sweep()
    for spec in TABLE:
        if want and spec.opcode not in want:
            continue
        forms, missing = covering_forms(spec)
        for what in missing:
            print(f"{spec.opcode}: no valid form uses {what}")
        for m in forms:
            arch = arch_for(m, "a")
            f = sweep.add(m)
            if f is None:
                print(f"{m.text}: tracer refused the fabricated operands")
                continue
            err = assemble_forms(sweep, [f], arch, version_for(m, arch))
            print(f"{'ok ' if not err else 'BAD'} {arch} {f.text}  {err.get(0, '')}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
