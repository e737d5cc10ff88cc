"""The instruction table: its shape, a ptxas sweep over every entry, and forms it must refuse.

The sweep (``test_entry_assembles``) builds, for every table entry, a form that
uses each of its types and each of its modifiers at least once (plus variants
with an immediate in each source slot that takes one), prints them through the
real tracer and emitter and assembles them with ptxas for the oldest target the
form claims (``sm_75`` at least: ptxas 13 assembles nothing older; ``sm_90a``
for sm_90 forms) at exactly the PTX ISA version the table says it needs. A
claim that is too low, a type ptxas does not know, a modifier combination it
rejects or a wrong operand signature all fail here. The forms are found next to ones
already found where possible (seconds); the long run (``-m long``) repeats the search
exhaustively, each modifier in its plainest spelling, and assembles what that adds (every
entry but mma.sync, whose walk alone takes minutes).
"""
from __future__ import annotations

import collections

import pytest

from isa_forms import (Sweep, arch_for, assemble_forms, covering_forms, example_chain,
                       example_module, version_for, with_optional_needs)
from paths import ROOT
from ptxdsl import toolchain
from ptxdsl.core.errors import ArchError, IsaError, PtxdslError
from ptxdsl.isa import INSTRUCTIONS, TABLE, check_arch, lookup, match, resolve
from ptxdsl.isa.spec import parse_operands, split_alternatives
from ptxdsl.core.types import ALL_TYPES

PTXAS = toolchain.find_ptxas()
needs_ptxas = pytest.mark.skipif(
    PTXAS is None, reason="no ptxas found (PTXDSL_PTXAS, the nvidia-cuda-nvcc wheel, PATH, "
                          "CUDA_HOME); `pip install nvidia-cuda-nvcc~=13.0.0` provides one")

OPCODES = [spec.opcode for spec in TABLE]
# mma.sync's covering forms take ~9 CPU-s to search (its shapes x types x layouts): its
# per-entry checks run in -m long; the tensor-core tests cover its forms by default.
SWEPT = [pytest.param(op, marks=pytest.mark.long) if op == "mma.sync" else op
         for op in OPCODES]


# ---------------------------------------------------------------- shape of the table
def test_opcodes_are_unique_and_indexed():
    assert len(OPCODES) == len(set(OPCODES))
    assert list(INSTRUCTIONS) == OPCODES


@pytest.mark.parametrize("opcode", OPCODES)
def test_entry_is_well_formed(opcode):
    spec = INSTRUCTIONS[opcode]
    assert all(t in ALL_TYPES for t in spec.types), spec.types
    # A modifier name in two groups is matched by position (the first group not yet
    # passed), which is unambiguous when the first of them is required (one written
    # name fills it) or the second is optional (mma's four type slots are all required).
    seen: dict[str, int] = {}
    for gi, grp in enumerate(spec.groups):
        for m in grp.names:
            if m in seen:
                assert not grp.required or spec.groups[seen[m]].required, (m, grp.name)
            seen.setdefault(m, gi)
    assert len({grp.name for grp in spec.groups}) == len(spec.groups)
    for sig in (spec.operands, *spec.variants.values()):
        for slot in (x for alt in split_alternatives(sig) for x in parse_operands(alt)):
            assert slot.role in "dsrialpqtVXc"
            assert slot.ty in (None, "T", "T0", "T1", "T2", "W") or slot.ty in ALL_TYPES or (
                slot.list_key and slot.role in "VXt" and spec.lists is not None)
    for key in spec.variants:  # a variant is selected by modifiers or type suffixes
        for part in key.split("+"):
            assert spec.group_of(part) is not None or part in spec.types, f"variant .{key}"
    assert spec.doc and spec.example and spec.category


@pytest.mark.parametrize("opcode", SWEPT)
def test_every_type_and_modifier_has_a_valid_form(opcode):
    """A modifier or type that no chain can use is dead weight in the table (or a rule bug)."""
    forms, missing = covering_forms(INSTRUCTIONS[opcode])
    assert forms
    assert missing == []


@pytest.mark.parametrize("opcode", OPCODES)
def test_example_matches_its_entry(opcode):
    spec = INSTRUCTIONS[opcode]
    m = resolve(example_chain(spec.example))
    assert m.spec is spec
    operands = spec.example.split(None, 1)[1:] or [""]
    given = [o for o in _split_operands(operands[0]) if o]
    need = sum(1 for s in m.operands if not s.optional)
    assert need <= len(given) <= len(m.operands), (spec.example, m.operands)


def _split_operands(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text.replace("|", ","):
        depth += (ch in "{[") - (ch in "}]")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()]


# ---------------------------------------------------------------- the ptxas sweep
def _assemble(matches) -> list[str]:
    """Each match with fabricated operands (and an immediate in each slot that takes one),
    assembled at the sm_/PTX ISA it claims; ptxas's complaints, one line per form."""
    sweep = Sweep()
    by_target = collections.defaultdict(list)
    for m in (x for base in matches for x in with_optional_needs(base)):
        arch = arch_for(m, "a")
        forms = sweep.add_with_immediates(m)
        assert forms, f"the tracer refused every operand set for {m.text}"
        by_target[(arch, version_for(m, arch))].extend(forms)
    failures = []
    for (arch, version), forms in sorted(by_target.items()):
        bad = assemble_forms(sweep, forms, arch, version, PTXAS)
        failures += [f"{arch} PTX {version[0]}.{version[1]}: {forms[i].text}  -> {msg}"
                     for i, msg in sorted(bad.items())]
    return failures


@needs_ptxas
@pytest.mark.parametrize("opcode", SWEPT)
def test_entry_assembles(opcode):
    """Every type and modifier of the entry, assembled at the sm_/PTX ISA it claims."""
    failures = _assemble(covering_forms(INSTRUCTIONS[opcode])[0])
    assert not failures, "ptxas rejects forms the table accepts:\n" + "\n".join(failures)


# mma.sync's plainest search walks every chain of its shapes, types and modifiers: ~120
# CPU-s on a CI core, three times what one case may take. Its types and modifiers are
# assembled by test_entry_assembles[mma.sync] (each found next to the others or by the same
# exhaustive walk) and proven usable by test_every_type_and_modifier_has_a_valid_form.
# The other entries take 0.01-1 CPU-s (wgmma.mma_async ~18).
PLAINEST_TOO_COSTLY = {"mma.sync"}


@pytest.mark.long
@needs_ptxas
@pytest.mark.parametrize("opcode", [op for op in OPCODES if op not in PLAINEST_TOO_COSTLY])
def test_plainest_forms_exist_and_assemble(opcode):
    """The exhaustive search: each type and modifier in its plainest spelling (fewest
    optional modifiers, found by walking every chain); the forms the default sweep did not
    already assemble go to ptxas. (Every entry but :data:`PLAINEST_TOO_COSTLY`.)"""
    spec = INSTRUCTIONS[opcode]
    forms, missing = covering_forms(spec, plainest=True)
    assert missing == []
    assembled = {m.mods for m in covering_forms(spec)[0]}
    failures = _assemble([m for m in forms if m.mods not in assembled])
    assert not failures, "ptxas rejects forms the table accepts:\n" + "\n".join(failures)


@needs_ptxas
def test_examples_assemble():
    """The docs print each entry's example; every one must be real PTX. One module per
    (target, PTX ISA); an example of a module ptxas rejects is assembled alone, to name it."""
    by_target = collections.defaultdict(list)
    for spec in TABLE:
        m = resolve(example_chain(spec.example))
        arch = arch_for(m, "a")
        by_target[(arch, version_for(m, arch))].append(spec)
    failures = []
    for (arch, version), specs in sorted(by_target.items()):
        try:
            toolchain.assemble(example_module([s.example for s in specs], arch, version), arch,
                               verbose=False, ptxas=PTXAS)
            continue
        except toolchain.PtxasError:
            pass
        for spec in specs:
            try:
                toolchain.assemble(example_module(spec.example, arch, version), arch,
                                   verbose=False, ptxas=PTXAS)
            except toolchain.PtxasError as e:
                failures.append(f"{spec.opcode}: {spec.example!r}: {e}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------- forms the table refuses
# Each of these is PTX that ptxas rejects (checked below, so the list stays honest);
# most were accepted by the table until the sweep found them.
REFUSED = [
    ("mov.f16 %h1, %h0", "sm_90a"),                      # data movement has no half types
    ("ld.global.f16 %h0, [%rd0]", "sm_90a"),
    ("st.global.bf16x2 [%rd0], %hhb0", "sm_90a"),
    ("add.rz.f16 %h2, %h0, %h1", "sm_90a"),              # half math rounds .rn only
    ("fma.rm.f16x2 %hh3, %hh0, %hh1, %hh2", "sm_90a"),   # (fma.rm.bf16x2 is fine)
    ("setp.lo.s32 %p0, %r0, %r1", "sm_90a"),             # lo/ls/hi/hs are unsigned-only
    ("setp.lt.b32 %p0, %r0, %r1", "sm_90a"),             # .b values have no order
    ("set.eq.and.u32.u32 %r2, %r0, %r1", "sm_90a"),      # .and needs a predicate operand
    ("set.eq.ftz.f32.u32 %f0, %r0, %r1", "sm_90a"),      # .ftz is about .f32 sources
    ("cvt.sat.u32.u16 %r0, %rs0", "sm_90a"),             # nothing to saturate
    ("cvt.rni.rn.f32.f64 %f0, %fd0", "sm_90a"),          # two rounding modifiers
    ("cvt.relu.f16.f16 %h1, %h0", "sm_90a"),
    ("cvt.rn.ftz.relu.f16.f32 %h0, %f0", "sm_90a"),
    ("cvt.rni.u8.bf16 %rs0, %hb0", "sm_90a"),
    ("cvt.rn.ftz.f16x2.f32 %hh0, %f0, %f1", "sm_90a"),
    ("cvta.shared.u32 %r1, %r0", "sm_90a"),              # 32-bit addressing is gone
    ("cvta.u64 %rd1, %rd0", "sm_90a"),                   # needs a state space
    ("min.NaN.u32 %r2, %r0, %r1", "sm_90a"),             # .NaN is for floats
    ("min.NaN.f64 %fd2, %fd0, %fd1", "sm_90a"),
    ("ex2.approx.ftz.f16 %h1, %h0", "sm_90a"),
    ("ex2.approx.bf16 %hb1, %hb0", "sm_90a"),            # bf16 ex2 exists only with .ftz
    ("rcp.approx.f64 %fd1, %fd0", "sm_90a"),
    ("bar.sync.aligned 0", "sm_90a"),                    # .aligned belongs to barrier
    ("bar.arrive 0", "sm_90a"),                          # arrive needs a thread count
    ("add.sat.cc.s32 %r2, %r0, %r1", "sm_90a"),
    ("fma.rn.sat.relu.f16 %h3, %h0, %h1, %h2", "sm_90a"),
    ("ld.volatile.local.u32 %r0, [%rd0]", "sm_90a"),
    ("ld.volatile.global.nc.u32 %r0, [%rd0]", "sm_90a"),
    ("ld.global.cg.L1::evict_last.u32 %r0, [%rd0]", "sm_90a"),
    ("st.release.gpu.local.u32 [%rd0], %r0", "sm_90a"),
    ("mbarrier.arrive.release.shared.b64 %rd0, [%r0]", "sm_90a"),  # order needs a scope
    ("fence.proxy.async.gpu", "sm_90a"),
    ("fence.proxy.async::generic", "sm_90a"),
    ("min.f16 %h2, %h0, %h1", "sm_75"),                  # arrived with sm_80
    ("fma.rn.bf16 %hb3, %hb0, %hb1, %hb2", "sm_75"),
    ("add.bf16 %hb2, %hb0, %hb1", "sm_80"),              # bf16 add arrived with sm_90
    ("elect.sync %r0|%p0, 0xffffffff", "sm_80"),
    ("cp.async.cg.shared.global [%r0], [%rd0], 16", "sm_75"),
    # Hopper
    ("wgmma.fence.sync.aligned", "sm_90"),                # wgmma is sm_90a only
    ("setmaxnreg.inc.sync.aligned.u32 240", "sm_90"),
    ("wgmma.mma_async.sync.aligned.m64n40k32.s32.s8.s8 {%r0, %r1, %r2, %r3, %r4, %r5, %r6, "
     "%r7, %r8, %r9, %r10, %r11, %r12, %r13, %r14, %r15, %r16, %r17, %r18, %r19}, %rd0, %rd1, "
     "%p0", "sm_90a"),                                    # integer N: 8, 16, 24, 32, 48, ...
    ("wgmma.mma_async.sync.aligned.m64n8k16.f16.bf16.bf16 {%r0, %r1}, %rd0, %rd1, %p0, 1, 1, "
     "0, 0", "sm_90a"),                                   # bf16 accumulates in f32 only
    ("barrier.cluster.wait.relaxed", "sm_90a"),
    ("barrier.cluster.arrive.acquire", "sm_90a"),
    ("barrier.cluster.wait.release.aligned", "sm_90a"),
    ("mbarrier.expect_tx.cluster.shared::cluster.b64 [%r0], %r1", "sm_90a"),
    ("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.and.b64 "
     "[%r0], %rd1, [%r2]", "sm_90a"),
    ("cp.async.bulk.tensor.2d.global.shared::cta.mbarrier::complete_tx::bytes "
     "[%rd0, {%r1, %r2}], [%r0], [%r3]", "sm_90a"),      # stores complete in bulk groups
    ("fence.mbarrier_init.release.cta", "sm_90a"),
]


def _refused_by_table(line: str, arch: str) -> str:
    from ptxdsl.core.arch import parse_arch
    try:
        m = resolve(example_chain(line))
        check_arch(m, parse_arch(arch)[0], arch)
    except IsaError as e:
        return str(e)
    given = [o for o in _split_operands((line.split(None, 1)[1:] or [""])[0]) if o]
    if not sum(1 for s in m.operands if not s.optional) <= len(given) <= len(m.operands):
        return f"{m.text} takes {len(m.operands)} operands, not {len(given)}"
    return ""


@pytest.mark.parametrize("line,arch", REFUSED, ids=[r[0].split()[0] for r in REFUSED])
def test_table_refuses(line, arch):
    assert _refused_by_table(line, arch), f"the table accepts {line!r} for {arch}"


@needs_ptxas
def test_refused_forms_are_rejected_by_ptxas_too():
    """Keeps REFUSED honest: each line really is bad PTX for its target."""
    accepted = []
    for line, arch in REFUSED:
        text = example_module(line, arch, (9, 0) if arch.startswith("sm_90") else (8, 0))
        try:
            toolchain.assemble(text, arch, verbose=False, ptxas=PTXAS)
            accepted.append(line)
        except toolchain.PtxasError:
            pass
    assert not accepted, f"ptxas accepts these, so the table should too: {accepted}"


# ---------------------------------------------------------------- matching and messages
def test_lookup_suggests_close_names():
    with pytest.raises(IsaError, match=r"did you mean shfl\.sync"):
        lookup("shfl.snyc")


def test_resolve_picks_the_longest_opcode():
    assert resolve(["cp", "async", "commit_group"]).spec.opcode == "cp.async.commit_group"
    assert resolve(["cp", "async", "cg", "shared", "global"]).spec.opcode == "cp.async"


def test_match_reports_vector_and_text():
    m = resolve(["ld", "global", "v4", "f32"])
    assert m.text == "ld.global.v4.f32"
    assert m.vector == 4 and m.type.name == "f32"
    assert [s.role for s in m.operands] == ["V", "a"]


def test_match_messages_say_what_is_right():
    with pytest.raises(IsaError, match=r"must come before .*PTX order for ld"):
        resolve(["ld", "v4", "global", "f32"])
    with pytest.raises(IsaError, match=r"both rounding modifiers"):
        resolve(["add", "rn", "rz", "f32"])
    with pytest.raises(IsaError, match=r"needs a rounding modifier, one of \.rn, \.rz"):
        resolve(["fma", "f32"])
    with pytest.raises(IsaError, match=r"unknown modifier \.glbal .*did you mean \.global"):
        resolve(["ld", "glbal", "f32"])
    with pytest.raises(IsaError, match=r"write ld\.global\.b16"):
        resolve(["ld", "global", "f16"])
    with pytest.raises(IsaError, match=r"\.f32 compares with \.lt|\.s32 compares with \.lt"):
        resolve(["setp", "lo", "s32"])
    with pytest.raises(IsaError, match=r"integer mul needs \.lo, \.hi or \.wide"):
        resolve(["mul", "u32"])


@pytest.mark.parametrize("chain,sm,ptx", [
    ("add.f32", 20, (1, 0)),
    ("fma.rn.bf16", 80, (7, 0)),          # bf16 fma: sm_80, not sm_90 like bf16 add
    ("add.bf16", 90, (7, 8)),
    ("min.f16", 80, (7, 0)),
    ("abs.f16", 53, (6, 5)),
    ("cvt.rn.bf16.f32", 80, (7, 0)),
    ("cvt.f32.bf16", 80, (7, 1)),
    ("cvt.rn.satfinite.f16.f32", 20, (8, 1)),
    ("ld.shared::cta.u32", 20, (7, 8)),
    ("cvta.to.param.u64", 70, (7, 7)),
    ("tanh.approx.f32", 75, (7, 0)),
    ("elect.sync", 90, (8, 0)),
    ("cvt.rna.tf32.f32", 80, (7, 0)),
    ("cvt.rn.tf32.f32", 90, (7, 8)),
    ("cvt.rn.f16.bf16", 90, (7, 8)),
    ("ex2.approx.f16", 75, (7, 0)),
    ("ex2.approx.ftz.bf16", 90, (7, 8)),
])
def test_claimed_minimums(chain, sm, ptx):
    m = resolve(chain.split("."))
    assert (m.sm, m.ptx) == (sm, ptx)


def test_check_arch_names_the_fix():
    m = resolve(["elect", "sync"])
    with pytest.raises(ArchError, match=r"needs sm_90 or newer, but the kernel targets sm_80; "
                                        r"pass arch='sm_90'"):
        check_arch(m, 80, "sm_80")
    with pytest.raises(ArchError, match=r"PTX ISA 8\.0, newer than the 7\.8"):
        check_arch(m, 90, "sm_90", max_ptx=(7, 8))
    assert issubclass(ArchError, PtxdslError)


def test_modifier_in_two_groups_fills_them_in_order():
    spec = INSTRUCTIONS["createpolicy"]
    m = match(spec, ["fractional", "L2::evict_first", "L2::evict_unchanged",
                     "b64"])
    assert m.chosen == {"kind": "fractional", "primary": "L2::evict_first",
                        "secondary": "L2::evict_unchanged"}
    m = match(spec, ["fractional", "L2::evict_first", "b64"])
    assert m.chosen == {"kind": "fractional", "primary": "L2::evict_first"}
    with pytest.raises(IsaError, match="at most one"):
        match(spec, ["fractional", "L2::evict_first", "L2::evict_first",
                     "L2::evict_first", "b64"])


# ---------------------------------------------------------------- attributes, not opcode names
def test_attributes_say_what_is_special():
    assert resolve(["bar", "sync"]).aligned
    assert resolve(["barrier", "sync", "aligned"]).aligned
    assert not resolve(["barrier", "sync"]).aligned
    assert "barrier" in lookup("bar").effects and lookup("bar").scope == "cta"
    assert lookup("elect.sync").form == "pipe_pred" and lookup("elect.sync").varies
    assert {s.opcode for s in TABLE if "exit" in s.effects} == {"ret", "exit"}
    assert {s.opcode for s in TABLE if "branch" in s.effects} == {"bra"}
    assert not lookup("add").varies and lookup("add").form == "plain"
    # half-precision math needs sm_53 / sm_90; moving the bits does not
    assert resolve(["add", "bf16"]).sm == 90
    assert resolve(["selp", "b16"]).sm == resolve(["selp", "b32"]).sm


def test_attribute_values_are_checked():
    from ptxdsl.isa.spec import OpSpec
    for bad in ({"scope": "grid"}, {"effects": frozenset({"teleport"})},
                {"form": "fancy"}, {"access": "peek"}):
        with pytest.raises(ValueError):
            OpSpec("x", **bad)


def test_no_module_outside_isa_decides_by_opcode_name():
    """What is special about an instruction is a table attribute (scope, effects,
    varies, form, aligned, access, packs, subword, moves_bits), never a comparison
    of its opcode with a string literal."""
    import pathlib
    import re
    root = pathlib.Path(ROOT) / "ptxdsl"
    pattern = re.compile(r"""\bopcode\s*(==|!=|(not\s+)?in)\s*[(\[{]?\s*["']""")
    offenders = [f"{path.relative_to(root)}:{n}: {line.strip()}"
                 for path in root.rglob("*.py") if "isa" not in path.relative_to(root).parts
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if pattern.search(line)]
    assert offenders == []


def test_st_param_writes_call_variables_only():
    """Kernel parameters are read-only (ptxas: 'Illegal to write to function input
    parameter'): the table takes st.param only to a variable declared for a call."""
    from ptxdsl.core import ir
    from ptxdsl.core.trace import Builder
    from ptxdsl.core.types import u32
    b = Builder("k", "sm_90a")
    r = ir.Reg("r0", u32, b)
    with pytest.raises(IsaError, match="read-only"):
        b.build(["st", "param", "u32"], [ir.Addr(ir.Symbol("p_ptr", "param")), r])
    ok = b.build(["st", "param", "u32"], [ir.Addr(ir.Symbol("param0", "param", True)), r])
    assert ok.match.text == "st.param.u32"
