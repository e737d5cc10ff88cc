"""Random programs over the ALU part of the instruction table.

* Good programs: random straight-line sequences of table forms (arith, bits,
  compare, convert, math: add/sub/mul/mad/fma/min/max/and/or/xor/shl/shr/setp/
  selp/cvt/abs/neg/... on random types and modifiers), plus register operators,
  with operands drawn from registers already written. They must trace, verify,
  and assemble with ptxas. One example is one kernel of up to ~40 instructions,
  so each ptxas run checks many forms at once.
* Bad programs: a good prefix and then one mistake (a register of the wrong type,
  a wrong operand count, an unknown modifier, modifiers out of order, a vector
  register list of the wrong length, an instruction too new for the target).
  They must be refused with a PtxdslError that names this file, before ptxas is
  ever run.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa_forms import dense_forms
from ptxdsl import PtxdslError, Tile, kernel, ptx, reg
from ptxdsl import toolchain
from ptxdsl.core.errors import ArchError, IsaError, OperandTypeError
from ptxdsl.isa import TABLE, resolve
from ptxdsl.core.arch import parse_arch
from ptxdsl.core.types import ALL_TYPES, compatible, f32, int_range, pred, u64

PTXAS = toolchain.find_ptxas()
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="no ptxas found")

ALU = {"arith", "bits", "compare", "convert", "math"}


def _alu_forms():
    seen = {}
    for spec in TABLE:
        if spec.category in ALU:
            for m in dense_forms(spec, 1):
                seen.setdefault(m.text, m)
    return sorted(seen.values(), key=lambda m: m.text)


FORMS = _alu_forms()
BY_TEXT = {m.text: m for m in FORMS}
ARCHS = ["sm_80", "sm_90a"]
# A modest default keeps CI fast; PTXDSL_HYPOTHESIS_EXAMPLES=500 for a deeper search.
SETTINGS = settings(max_examples=int(os.environ.get("PTXDSL_HYPOTHESIS_EXAMPLES", "10")),
                    deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _reg_type(t):
    return ALL_TYPES[f"{t.kind}16"] if t.bits == 8 else t


class Program:
    """Draws a straight-line program into the kernel being traced."""

    def __init__(self, data, arch_sm: int):
        self.data = data
        self.sm = arch_sm
        self.written: dict = {}  # type name -> registers holding a value
        self.pending: list = []  # destinations of the instruction being drawn

    def draw(self, strategy, label):
        return self.data.draw(strategy, label=label)

    # -- registers -------------------------------------------------------------
    def source(self, t, allow_imm=True):
        """A written register of type ``t`` (sometimes a fresh initialised one) or an immediate."""
        rt = _reg_type(t)
        if allow_imm and t.kind != "pred" and (t.name in ("f32", "f64") or not t.is_float) \
                and self.draw(st.integers(0, 3), "imm?") == 0:
            return self.immediate(t)
        have = self.written.get(rt.name, [])
        if have and self.draw(st.integers(0, 4), "reuse?"):
            return self.draw(st.sampled_from(have), f"src {rt.name}")
        return self.fresh(rt)

    def fresh(self, t):
        if t.is_pred:
            a = self.source(ALL_TYPES["u32"], allow_imm=False)
            r = a < self.draw(st.integers(0, 100), "bound")
        elif t.is_float:
            r = reg.scalar(t, init=self.draw(st.floats(-8, 8, width=16), "init"))
        else:
            lo, hi = int_range(t)
            r = reg.scalar(t, init=self.draw(st.integers(max(lo, -1000), min(hi, 1000)), "init"))
        self.written.setdefault(t.name, []).append(r)
        return r

    def immediate(self, t):
        if t.is_float:
            return self.draw(st.floats(allow_nan=False, allow_infinity=False, width=32), "fimm")
        lo, hi = int_range(t)
        return self.draw(st.integers(lo, hi), f"imm {t.name}")

    def dest(self, t):
        rt = _reg_type(t)
        have = self.written.get(rt.name, [])
        if have and self.draw(st.booleans(), "overwrite?"):
            return self.draw(st.sampled_from(have), f"dst {rt.name}")
        r = reg.scalar(rt)
        self.pending.append(r)  # readable once the instruction that writes it is recorded
        return r

    def commit(self):
        for r in self.pending:
            self.written.setdefault(r.dtype.name, []).append(r)
        self.pending = []

    # -- instructions ----------------------------------------------------------
    def operands(self, m):
        args = []
        for i, slot in enumerate(m.operands):
            if slot.optional:
                continue
            t = m.resolve_type(slot.ty)
            if slot.role in ("d", "p"):
                args.append(self.dest(t))
            elif slot.role in ("s", "X") and slot.ty == "u32" and m.spec.opcode != "cvt":
                # shift amounts, bit positions and lengths: ptxas wants 0..255 as immediates
                args.append(self.draw(st.integers(0, 255), "small imm")
                            if self.draw(st.booleans(), "imm?") else self.source(t, False))
            elif slot.role in ("s", "X"):
                args.append(self.source(t))
            elif slot.role in ("r", "q"):
                args.append(self.source(t, allow_imm=False))
            elif slot.role == "i":
                args.append(self.immediate(t))
            else:  # pragma: no cover - ALU forms have no addresses or labels
                raise AssertionError(slot)
        return args

    def usable_forms(self):
        """Texts (not Match objects: hypothesis prints what it draws) of forms for the target."""
        return [m.text for m in FORMS if m.sm <= self.sm]

    def form(self, texts):
        return BY_TEXT[self.draw(st.sampled_from(texts), "form")]

    def instruction(self):
        m = self.form(self.usable_forms())
        args = self.operands(m)
        ptx.inst(m.text, *args)
        self.commit()

    def operator(self):
        t = ALL_TYPES[self.draw(st.sampled_from(["u32", "s32", "u64", "s64", "f32", "f64"]), "t")]
        a, b = self.source(t, allow_imm=False), self.source(t)
        op = self.draw(st.sampled_from(["+", "-", "*", "<", "==", "!=", "&", ">>", "neg"]), "op")
        if t.is_float and op in ("&", ">>"):
            op = "+"
        out = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
               "<": lambda: a < b, "==": lambda: a == b, "!=": lambda: a != b,
               "&": lambda: a & b, ">>": lambda: a >> 5, "neg": lambda: -a}[op]()
        self.written.setdefault(out.dtype.name, []).append(out)

    def run(self, n):
        for _ in range(n):
            if self.draw(st.integers(0, 5), "operator?") == 0:
                self.operator()
            else:
                self.instruction()


def _sink(prog: Program, Y):
    """Store one value so the program has an observable effect."""
    (py,) = ptx.global_ptrs(Y)
    r = prog.source(f32, allow_imm=False)
    ptx.inst.st.global_.f32(ptx.addr(py), r)


@needs_ptxas
@SETTINGS
@given(data=st.data())
def test_random_programs_assemble(data):
    arch = data.draw(st.sampled_from(ARCHS), label="arch")
    n = data.draw(st.integers(1, 40), label="length")

    @kernel(out_specs=(Tile(1, f32),), arch=arch)
    def random_program(Y):
        prog = Program(data, parse_arch(arch)[0])
        prog.run(n)
        _sink(prog, Y)

    text = random_program.ptx()
    try:
        toolchain.assemble(text, arch, verbose=False, ptxas=PTXAS)
    except toolchain.PtxasError as e:  # pragma: no cover - shows the program on failure
        raise AssertionError(f"ptxas rejected a program ptxdsl accepted:\n{e}\n{text}") from e


# ---------------------------------------------------------------- bad programs
MISTAKES = ["wrong_type", "operand_count", "unknown_modifier", "modifier_order",
            "vector_length", "too_new"]
JUNK = ["foo", "rnd", "fast", "global2", "v3", "sat2", "L1::evict_soon"]


def _wrong_register(prog: Program, want):
    """A written register whose type does not fit ``want`` (as the tracer judges it)."""
    pool = [ALL_TYPES[n] for n in ("pred", "u16", "u32", "u64", "s32", "f32", "f64", "f16")]
    bad = [t for t in pool if not compatible(t, want)
           and not (want.is_int and t.is_int and want.bits < t.bits)]
    return prog.fresh(prog.draw(st.sampled_from(bad), "wrong type"))


def _make_mistake(prog: Program, kind: str, kernel_sm: int):
    draw = prog.draw
    if kind == "too_new":
        m = prog.form([m.text for m in FORMS if m.sm > kernel_sm])
        return m.text, prog.operands(m), ArchError
    if kind == "vector_length":
        vec = draw(st.sampled_from(["ld.global.v2.f32", "ld.global.v4.f32",
                                    "st.global.v2.u32", "st.global.v4.f32"]), "vec form")
        width = int(vec.split(".")[2][1:])
        n = draw(st.sampled_from([k for k in (1, 2, 3, 4, 5, 8) if k != width]), "list length")
        t = ALL_TYPES[vec.rsplit(".", 1)[1]]
        regs = [prog.fresh(t) for _ in range(n)]
        addr = ptx.addr(prog.fresh(u64))
        return vec, ([regs, addr] if vec.startswith("ld") else [addr, regs]), IsaError
    m = prog.form(prog.usable_forms())
    args = prog.operands(m)
    parts = m.text.split(".")
    op_len = len(m.spec.opcode.split("."))
    mods = parts[op_len:]
    head, types = mods[:len(mods) - m.spec.ntypes], mods[len(mods) - m.spec.ntypes:]
    if kind == "wrong_type":
        regs = [i for i, s in enumerate(m.operands) if not s.optional and s.role in "dpsrqX"]
        i = draw(st.sampled_from(regs), "slot")
        args[i] = _wrong_register(prog, m.resolve_type(m.operands[i].ty))
        return m.text, args, OperandTypeError
    if kind == "operand_count":
        if draw(st.booleans(), "drop?") and args:
            args = args[:-1]
        else:
            args = args + [prog.source(ALL_TYPES["u32"], allow_imm=False)]
        return m.text, args, IsaError
    if kind == "unknown_modifier":
        pos = draw(st.integers(0, len(head)), "where")
        junk = draw(st.sampled_from(JUNK), "junk")
        text = ".".join(parts[:op_len] + head[:pos] + [junk] + head[pos:] + types)
        return text, args, IsaError
    if kind == "modifier_order":
        spec = m.spec
        groups = [spec.groups.index(spec.group_of(h)) for h in head]
        pairs = [(i, j) for i in range(len(head)) for j in range(i + 1, len(head))
                 if groups[i] != groups[j]]
        if not pairs:  # this form has fewer than two modifiers: use one that has
            m = resolve("cvt.rzi.sat.s32.f32".split("."))
            return "cvt.sat.rzi.s32.f32", prog.operands(m), IsaError
        i, j = draw(st.sampled_from(pairs), "swap")
        head = list(head)
        head[i], head[j] = head[j], head[i]
        return ".".join(parts[:op_len] + head + types), args, IsaError
    raise AssertionError(kind)  # pragma: no cover


@SETTINGS
@given(data=st.data())
def test_bad_programs_are_refused_before_ptxas(data, monkeypatch_module):
    kind = data.draw(st.sampled_from(MISTAKES), label="mistake")
    arch = data.draw(st.sampled_from(["sm_75", "sm_80"] if kind == "too_new" else ARCHS),
                     label="arch")
    expected = []

    @kernel(out_specs=(Tile(1, f32),), arch=arch)
    def bad_program(Y):
        prog = Program(data, parse_arch(arch)[0])
        prog.run(data.draw(st.integers(0, 5), label="prefix"))
        text, args, exc = _make_mistake(prog, kind, parse_arch(arch)[0])
        expected.append((text, exc))
        ptx.inst(text, *args)
        _sink(prog, Y)

    with pytest.raises(PtxdslError) as info:
        bad_program.check()  # toolchain.assemble is patched to fail if reached
    text, exc = expected[-1]
    assert isinstance(info.value, exc), f"{kind}: {text}: got {type(info.value).__name__}: {info.value}"
    assert info.value.loc is not None and info.value.loc.file == __file__, str(info.value)


@pytest.fixture(scope="module")
def monkeypatch_module():
    """ptxas must never see a bad program: make reaching it an error."""
    mp = pytest.MonkeyPatch()

    def never(*a, **k):  # pragma: no cover - the point is that it is not called
        raise AssertionError("a bad program reached ptxas")
    mp.setattr(toolchain, "assemble", never)
    yield mp
    mp.undo()
