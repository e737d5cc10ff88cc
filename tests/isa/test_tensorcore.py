"""Tensor-core table entries: every mma.sync form ptxas takes, and nothing else.

``isa/test_table.py`` sweeps one covering form per modifier; here every row of
``MMA_FORMS`` is expanded into all its concrete forms (shape x types x
layouts x .satfinite) and each is assembled by ptxas at exactly the PTX ISA
and ``sm_`` the table claims. Near misses (one type slot changed) must be
refused by the table and by ptxas alike, and refused forms name the user's line.
"""
from __future__ import annotations

import itertools
import os
import re

import pytest

from isa_forms import Sweep, arch_for, assemble_forms, version_for
import located
from ptxdsl import kernel, ptx, reg, toolchain
from ptxdsl.core.errors import ArchError, IsaError
from ptxdsl.isa import INSTRUCTIONS, resolve
from ptxdsl.isa.tensorcore import MMA_FORMS, mma_registers
from ptxdsl.core.types import b32, e5m2x2, f32, u32

PTXAS = toolchain.find_ptxas()
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="no ptxas found")
HERE = os.path.abspath(__file__)
TYPES = ("f16", "bf16", "tf32", "f64", "s8", "u8", "s4", "u4", "e4m3", "e5m2", "f32", "s32")
# (.b1 forms need .xor/.and .popc after the types: the exhaustive check below skips them)


def all_mma_chains() -> list[str]:
    out = []
    for fam in MMA_FORMS:
        layouts = list(itertools.product(("row", "col"), repeat=2)) if fam.any_layout \
            else [("row", "col")]
        sats = ((), ("satfinite",)) if fam.satfinite else ((),)
        ops = (("xor", "popc"), ("and", "popc")) if fam.bitop else ((),)
        for shape, (a, b), (d, c), lay, sat, op in itertools.product(
                fam.shapes, fam.ab, fam.dc, layouts, sats, ops):
            out.append(".".join(("mma.sync.aligned", shape, *lay, *sat, d, a, b, c, *op)))
    return out


def test_every_family_form_matches_with_its_needs():
    chains = all_mma_chains()
    assert len(chains) == len(set(chains)) > 80
    for chain in chains:
        m = resolve(chain.split("."))
        fam = next(f for f in MMA_FORMS if m.chosen["shape"] in f.shapes
                   and (m.chosen["atype"], m.chosen["btype"]) in f.ab
                   and (m.chosen["dtype"], m.chosen["ctype"]) in f.dc)
        want = (max(fam.ptx, (6, 4)), max(fam.sm, 70))
        if ".and.popc" in chain:
            want = (max(want[0], (7, 1)), max(want[1], 80))
        assert (m.ptx, m.sm) == want, chain


def test_the_table_accepts_exactly_the_family_forms():
    """Every (shape, d, a, b, c) with .row.col: the table agrees with MMA_FORMS."""
    legal = {c for c in all_mma_chains() if ".row.col." in c and "satfinite" not in c
             and "popc" not in c}
    spec = INSTRUCTIONS["mma.sync"]
    shapes = spec.groups[1].names
    accepted = set()
    for shape, d, a, b, c in itertools.product(shapes, ("f16", "f32", "f64", "s32"),
                                               TYPES[:10], TYPES[:10],
                                               ("f16", "f32", "f64", "s32")):
        chain = f"mma.sync.aligned.{shape}.row.col.{d}.{a}.{b}.{c}"
        try:
            resolve(chain.split("."))
        except IsaError:
            continue
        accepted.add(chain)
    assert accepted == legal


def _line(chain: str) -> str:
    """A PTX line for ``chain`` with fabricated registers of the right counts."""
    parts = chain.split(".")
    shape = parts[3]
    d, a, b, c = [p for p in parts if p not in ("xor", "and", "popc")][-4:]
    regs = mma_registers(shape, a, b, c, d)
    n = itertools.count()

    def lst(key):
        t, k = regs[key]
        p = {"f32": "%f", "f64": "%fd"}.get(t, "%r")
        return "{" + ", ".join(f"{p}{next(n)}" for _ in range(k)) + "}"
    return f"{chain} {lst('d')}, {lst('a')}, {lst('b')}, {lst('c')};"


@needs_ptxas
def test_every_mma_form_assembles_at_its_claimed_minimum():
    sweep = Sweep()
    groups: dict = {}
    for chain in all_mma_chains():
        m = resolve(chain.split("."))
        arch = arch_for(m, "a")
        form = sweep.add(m)
        assert form is not None, chain
        groups.setdefault((arch, version_for(m, arch)), []).append(form)
    failures = []
    for (arch, version), forms in sorted(groups.items()):
        bad = assemble_forms(sweep, forms, arch, version, PTXAS)
        failures += [f"{arch} {version}: {forms[i].text} -> {msg}" for i, msg in bad.items()]
    assert not failures, "\n".join(failures)


NEAR_MISSES = [
    "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f32",     # mixed accumulators
    "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f16",
    "mma.sync.aligned.m8n8k4.row.col.f16.f16.f16.f32",
    "mma.sync.aligned.m16n8k16.row.col.f16.bf16.bf16.f16",   # bf16 accumulates in f32
    "mma.sync.aligned.m16n8k16.row.row.f32.bf16.bf16.f32",   # .row.col only
    "mma.sync.aligned.m8n8k4.col.row.f64.f64.f64.f64",
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.f16.f32",    # A and B differ
    "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f16",   # fp8: d == c
    "mma.sync.aligned.m16n8k8.row.col.s32.s8.s8.s32",        # no such int8 shape
    "mma.sync.aligned.m16n8k16.row.col.s32.s4.s4.s32",
    "mma.sync.aligned.m16n8k16.row.col.satfinite.f32.f16.f16.f32",
    "mma.sync.aligned.m8n8k16.row.col.s32.s8.s4.s32",
    "mma.sync.aligned.m16n8k128.row.col.s32.b1.b1.s32",          # needs .xor/.and .popc
    "mma.sync.aligned.m16n8k128.row.col.satfinite.s32.b1.b1.s32.xor.popc",
]


@pytest.mark.parametrize("chain", NEAR_MISSES)
def test_near_misses_are_refused(chain):
    with pytest.raises(IsaError):
        resolve(chain.split("."))


@needs_ptxas
def test_near_misses_are_bad_ptx_too():
    """Keeps NEAR_MISSES honest: ptxas rejects each line at sm_90a / PTX 8.7."""
    for chain in NEAR_MISSES:
        text = "\n".join([".version 8.7", ".target sm_90a", ".address_size 64",
                          ".visible .entry k()", "{", ".reg .b32 %r<64>;",
                          ".reg .f32 %f<64>;", ".reg .f64 %fd<64>;", _line(chain), "ret;",
                          "}", ""])
        with pytest.raises(toolchain.PtxasError):
            toolchain.assemble(text, "sm_90a", verbose=False, ptxas=PTXAS)


@pytest.mark.parametrize("chain,sm,ptx_version", [
    ("mma.sync.aligned.m8n8k4.row.row.f32.f16.f16.f16", 70, (6, 4)),
    ("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16", 75, (6, 5)),
    ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 80, (7, 0)),
    ("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64", 90, (7, 8)),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32", 89, (8, 4)),
    ("mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16", 89, (8, 7)),
    ("mma.sync.aligned.m16n8k64.row.col.satfinite.s32.u4.s4.s32", 80, (7, 0)),
    ("mma.sync.aligned.m8n8k128.row.col.s32.b1.b1.s32.xor.popc", 75, (7, 0)),
    ("mma.sync.aligned.m8n8k128.row.col.s32.b1.b1.s32.and.popc", 80, (7, 1)),
    ("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", 75, (6, 5)),
    ("ldmatrix.sync.aligned.m8n8.x1.shared::cta.b16", 75, (7, 8)),
    ("stmatrix.sync.aligned.m8n8.x2.shared.b16", 90, (7, 8)),
    ("movmatrix.sync.aligned.m8n8.trans.b16", 75, (7, 8)),
    ("cvt.rn.satfinite.e4m3x2.f32", 89, (8, 1)),
    ("cvt.rn.relu.f16x2.e5m2x2", 89, (8, 1)),
])
def test_claimed_minimums(chain, sm, ptx_version):
    m = resolve(chain.split("."))
    assert (m.sm, m.ptx) == (sm, ptx_version)
    assert m.spec.scope == ("thread" if chain.startswith("cvt") else "warp")


@pytest.mark.parametrize("shape,a,c,want", [
    ("m16n8k16", "bf16", "f32", {"a": ("bf16x2", 4), "b": ("bf16x2", 2), "c": ("f32", 4)}),
    ("m16n8k8", "f16", "f16", {"a": ("f16x2", 2), "b": ("f16x2", 1), "c": ("f16x2", 2)}),
    ("m16n8k8", "tf32", "f32", {"a": ("tf32", 4), "b": ("tf32", 2), "c": ("f32", 4)}),
    ("m8n8k4", "f64", "f64", {"a": ("f64", 1), "b": ("f64", 1), "c": ("f64", 2)}),
    ("m16n8k16", "f64", "f64", {"a": ("f64", 8), "b": ("f64", 4), "c": ("f64", 4)}),
    ("m8n8k4", "f16", "f32", {"a": ("f16x2", 2), "b": ("f16x2", 2), "c": ("f32", 8)}),
    ("m16n8k64", "s4", "s32", {"a": ("b32", 4), "b": ("b32", 2), "c": ("s32", 4)}),
    ("m16n8k32", "e4m3", "f16", {"a": ("b32", 4), "b": ("b32", 2), "c": ("f16x2", 2)}),
])
def test_register_counts(shape, a, c, want):
    got = mma_registers(shape, a, a, c, c)
    assert {k: got[k] for k in want} == want


# ---------------------------------------------------------------- errors at the user's line
line_of = located.marked_lines(HERE, "# <- ")


def raises_at(body, exc, marker, *phrases, arch="sm_90a"):
    with pytest.raises(exc) as info:
        kernel(arch=arch)(body).ptx()
    text = str(info.value)
    assert f"{HERE}:{line_of(marker)}:" in text, text
    for p in phrases:
        assert re.search(p, text), (p, text)


def _frag(t, n):
    return [reg.scalar(t, init=0) for _ in range(n)]


def test_mma_wrong_types_name_the_line():
    def body():
        a, b, c = _frag(b32, 4), _frag(b32, 2), _frag(f32, 4)
        ptx.inst.mma.sync.aligned.m16n8k16.row.col.f16.bf16.bf16.f16(c, a, b, c)  # <- acc
    raises_at(body, IsaError, "acc", r"accumulates as \(dtype, ctype\) \.f32\.bf16\.bf16\.f32")


def test_mma_layout_rule_names_the_line():
    def body():
        a, b, c = _frag(b32, 4), _frag(b32, 2), _frag(f32, 4)
        ptx.inst.mma.sync.aligned.m16n8k16.col.col.f32.bf16.bf16.f32(c, a, b, c)  # <- lay
    raises_at(body, IsaError, "lay", r"\.row\.col only")


def test_mma_register_count_is_checked():
    def body():
        a, b, c = _frag(b32, 2), _frag(b32, 2), _frag(f32, 4)
        ptx.inst.mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32(c, a, b, c)  # <- count
    raises_at(body, IsaError, "count", r"takes 4 \.bf16x2 registers here but the register "
                                       r"list has 2")


def test_mma_register_type_is_checked():
    def body():
        a, b, c = _frag(f32, 4), _frag(b32, 2), _frag(f32, 4)
        ptx.inst.mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32(c, a, b, c)  # <- type
    raises_at(body, Exception, "type", r"is \.f32 but .* needs \.bf16x2")


def test_mma_needs_its_arch():
    def body():
        a, b, c = _frag(b32, 4), _frag(b32, 2), _frag(f32, 4)
        ptx.inst.mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32(c, a, b, c)  # <- arch
    raises_at(body, ArchError, "arch", r"needs sm_89 or newer", arch="sm_80")


def test_ldmatrix_count_follows_num():
    def body():
        r = _frag(b32, 2)
        addr = reg.scalar(u32, init=0)
        ptx.inst.ldmatrix.sync.aligned.m8n8.x4.shared.b16(r, ptx.addr(addr))  # <- ldm
    raises_at(body, IsaError, "ldm", r"takes 4 \.b32 registers")


def test_stmatrix_is_sm90():
    def body():
        r = _frag(b32, 1)
        addr = reg.scalar(u32, init=0)
        ptx.inst.stmatrix.sync.aligned.m8n8.x1.shared.b16(ptx.addr(addr), r)  # <- stm
    raises_at(body, ArchError, "stm", r"needs sm_90", arch="sm_80")


def test_cvt_fp8_rules():
    with pytest.raises(IsaError, match=r"rounds to nearest and saturates"):
        resolve("cvt.rn.e4m3x2.f32".split("."))
    with pytest.raises(IsaError, match=r"widens to \.f16x2 only"):
        resolve("cvt.rn.f32.e5m2x2".split("."))
    m = resolve("cvt.rn.satfinite.e4m3x2.f32".split("."))
    assert len(m.operands) == 3
    assert len(resolve("cvt.rn.f16x2.e4m3x2".split(".")).operands) == 2
    assert len(resolve("cvt.rn.satfinite.e5m2x2.f16x2".split(".")).operands) == 2


def test_single_register_lists_print_braced():
    from ptxdsl.core.types import f64

    def body():
        a, b, c = _frag(f64, 1), _frag(f64, 1), _frag(f64, 2)
        ptx.inst.mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64(c, a[0], b, c)
    text = kernel(arch="sm_80")(body).ptx()
    assert re.search(r"\{%fd\d+\}, \{%fd\d+\}", text), text


@pytest.mark.parametrize("order", ["satfinite.relu", "relu.satfinite"])
def test_fp8_cvt_relu_either_side_of_satfinite(order):
    # The PTX ISA spells the fp8 form .satfinite{.relu}, the f16 one {.relu}{.satfinite};
    # ptxas 13 takes both orders, and so does the table.
    m = resolve(["cvt", "rn", *order.split("."), "e5m2x2", "f32"])
    assert m.has("relu") and m.has("satfinite")
    if toolchain.find_ptxas() is None:
        pytest.skip("no ptxas")

    @kernel(in_specs=(), out_specs=(), grid=(1, 1, 1), block=(32, 1, 1), arch="sm_90a")
    def k():
        hi = reg.scalar(f32, init=1.0)
        lo = reg.scalar(f32, init=-2.0)
        p = reg.scalar(e5m2x2)
        ptx.inst("cvt.rn." + order + ".e5m2x2.f32", p, hi, lo)
    k.check()


def test_fp8_cvt_relu_twice_is_refused():
    with pytest.raises(IsaError, match="written twice"):
        resolve(["cvt", "rn", "relu", "satfinite", "relu", "e5m2x2", "f32"])
