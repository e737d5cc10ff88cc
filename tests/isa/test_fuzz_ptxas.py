"""Random programs from the instruction table, judged by ptxas.

A seeded generator reads the table generically (every entry of ``ptxdsl.isa.TABLE``,
tensor-core and Hopper entries included): it picks an opcode, a modifier set (sometimes
out of order, with a stray or a missing modifier), types (sometimes foreign ones), and
operands of every kind (registers of the slot's type or of another, immediates at the
edges of their type, special registers, register lists of any length and width,
addresses of every width and state space, symbols, labels, junk). Each program must be

* refused with a :class:`~ptxdsl.PtxdslError` that names a line of this file (the
  user's line), or
* accepted by ptxas (programs are assembled in batches, one module per target and
  PTX ISA version, many ``.entry`` points per module).

Anything else fails the test: a foreign exception (a crash), an error that does not
name the user's line, or a program ptxas rejects although ptxdsl accepted it.

``PTXDSL_FUZZ_N`` sets the number of programs (default 2400, about a minute on two
cores), ``PTXDSL_FUZZ_SEED`` the seed; ``python tests/isa/test_fuzz_ptxas.py [N]``
prints the counts (accepted / refused / ptxas-rejected / crashed) and every gap.
"""
from __future__ import annotations

import collections
import os
import random
import re
import sys
import traceback

import pytest

from ptxdsl import PtxdslError, Tile, kernel, ptx, reg, smem, toolchain
from ptxdsl.core import ir
from ptxdsl.isa import TABLE, resolve
from ptxdsl.core.types import ALL_TYPES, f32, int_range, pred, u32, u64

HERE = os.path.abspath(__file__)
PTXAS = toolchain.find_ptxas()
ARCHS = ("sm_80", "sm_90", "sm_90a")
N_DEFAULT = 2400

MODIFIER_POOL = sorted({name for spec in TABLE for g in spec.groups for name in g.names})
TYPE_POOL = sorted(ALL_TYPES)
REG_TYPES = ("pred", "b16", "u16", "s16", "b32", "u32", "s32", "b64", "u64", "s64",
             "f16", "bf16", "f16x2", "bf16x2", "tf32", "f32", "f64")
FLOAT_EDGES = (0.0, -0.0, 1.0, 1.5, -2.5, 0.5, float("inf"), float("-inf"), float("nan"),
               1e39, -1e39, 3.4028234663852886e38, 1e-45, 5e-324, 1e308, 10 ** 400)
INT_EDGES = (0, 1, -1, 2, 3, 4, 8, 16, 31, 32, 255, 256, 0x3210, 1 << 31, 1 << 32,
             -(1 << 63), (1 << 64) - 1, 1 << 64)


class Gen:
    """Draws one random program into the kernel being traced."""

    def __init__(self, rng: random.Random, out: object):
        self.rng = rng
        self.out = out
        self.sources: dict[str, list] = {}
        self.shared = None
        self.label = None

    # ------------------------------------------------------------ registers
    def reg_type(self, t):
        if t is None:
            return u32
        if t.bits == 8:
            return ALL_TYPES[f"{t.kind}16"]
        return t

    def src(self, t):
        t = self.reg_type(t)
        have = self.sources.get(t.name)
        if have and self.rng.random() < 0.7:
            return self.rng.choice(have)
        if t.is_pred:
            r = self.src(u32) < self.rng.choice((1, 7, 100))
        elif t.name == "tf32":
            r = reg.scalar(t)
            ptx.inst.cvt.rna.tf32.f32(r, self.src(f32))
        elif t.name == "b128":
            r = reg.scalar(t)
            lo, hi = self.src(u64), self.src(u64)
            ptx.inst.mov.b128(r, [lo, hi])
        elif t.is_float:
            r = reg.scalar(t, init=self.rng.choice((0.0, 1.5, -2.0)))
        else:
            r = reg.scalar(t, init=self.rng.choice((0, 1, 3, 100)))
        self.sources.setdefault(t.name, []).append(r)
        return r

    def dest(self, t):
        t = self.reg_type(t)
        if self.rng.random() < 0.3 and self.sources.get(t.name):
            return self.rng.choice(self.sources[t.name])
        r = reg.scalar(t)
        return r

    def imm(self, t):
        if t is not None and t.is_float or t is None and self.rng.random() < 0.3:
            return self.rng.choice(FLOAT_EDGES)
        if t is not None and not t.is_pred and self.rng.random() < 0.5:
            lo, hi = int_range(t)
            return self.rng.choice((lo, hi, lo - 1, hi + 1, 0, 1))
        return self.rng.choice(INT_EDGES)

    def special(self):
        return self.rng.choice((ptx.special.tid.x, ptx.special.laneid, ptx.special.clock64,
                                ptx.special.ctaid.y))()

    def shared_array(self):
        if self.shared is None:
            self.shared = smem.alloc(u64, 8)
        return self.shared

    # ------------------------------------------------------------ operands
    def address(self, space):
        rng = self.rng
        r = rng.random()
        off = rng.choice((0, 0, 0, 8, 16, -8, 4))
        if space == "param" and r < 0.8:
            return ir.Addr(ir.Symbol(self.out.param.name, "param"), off)
        if space in ("shared", "shared::cta", "shared::cluster") and r < 0.5:
            return ptx.addr(self.shared_array(), abs(off))
        if r < 0.75:
            want = u64 if space in (None, "global") or rng.random() < 0.3 else u32
            return ptx.addr(self.src(want), off)
        return self.wild(None)

    def wild(self, t):
        """An operand of any kind at all."""
        rng = self.rng
        k = rng.randrange(12)
        if k < 3:
            return self.src(ALL_TYPES[rng.choice(REG_TYPES)])
        if k == 3:
            return self.special()
        if k in (4, 5):
            return self.imm(t if rng.random() < 0.5 else None)
        if k == 6:
            n = rng.choice((1, 2, 3, 4, 5, 8))
            types = [rng.choice(("u32", "f32", "u16", "u64", "pred"))] * n
            if rng.random() < 0.3:
                types[-1] = rng.choice(("u16", "u64", "f64"))
            return [self.src(ALL_TYPES[x]) for x in types]
        if k == 7:
            return self.shared_array()
        if k == 8:
            return ir.Addr(ir.Symbol(self.out.param.name, "param"))
        if k == 9:
            return ptx.addr(self.src(rng.choice((u32, u64))), rng.choice((0, 4, -4)))
        if k == 10:
            return self.get_label()
        return rng.choice((True, "x", None, 1 + 2j, (1, 2)))

    def get_label(self):
        if self.label is None:
            self.label = ptx.new_label("L_fuzz")
        return self.label

    def operand(self, m, slot):
        rng = self.rng
        t = m.resolve_type(slot.ty) if m is not None else None
        if rng.random() < 0.06:
            return self.wild(t)
        role = slot.role
        count = m.count(slot) if m is not None and hasattr(m, "count") else (
            m.vector if m is not None else 1)
        if role in ("V", "X") and m is not None and (count > 1 or getattr(slot, "list_key",
                                                                         None)):
            if rng.random() < 0.05:
                count += rng.choice((-1, 1))  # a list of the wrong length
            if role == "V":
                return [self.dest(t) for _ in range(count)]
            return [self.src(t) if rng.random() < 0.8 else self.imm(t) for _ in range(count)]
        if role in ("d", "p", "V"):
            return self.dest(t)
        if role in ("s", "X"):
            return self.imm(t) if rng.random() < 0.3 else self.src(t)
        if role == "r":
            return self.src(t)
        if role == "q":
            return self.src(pred)
        if role == "i":
            return self.imm(t)
        if role == "a":
            return self.address(m.address_space(slot) if m is not None else None)
        if role == "l":
            return self.get_label()
        return self.wild(t)

    # ------------------------------------------------------------ instructions
    def chain(self, spec):
        rng = self.rng
        mods = [rng.choice(g.names) for g in spec.groups
                if g.required or rng.random() < 0.35]
        types = [rng.choice(spec.types) for _ in range(spec.ntypes)] if spec.types else []
        return mods, types

    def mutate(self, mods, types):
        rng = self.rng
        r = rng.random()
        if r < 0.25 and len(mods) > 1:
            i, j = rng.sample(range(len(mods)), 2)
            mods[i], mods[j] = mods[j], mods[i]
        elif r < 0.5:
            mods.insert(rng.randrange(len(mods) + 1), rng.choice(MODIFIER_POOL))
        elif r < 0.65 and mods:
            mods.pop(rng.randrange(len(mods)))
        elif r < 0.9 and types:
            types[rng.randrange(len(types))] = rng.choice(TYPE_POOL)
        else:
            types.append(rng.choice(TYPE_POOL))
        return mods, types

    def instruction(self):
        rng = self.rng
        spec = rng.choice(TABLE)
        text, m = None, None
        for _ in range(12 if rng.random() < 0.85 else 1):
            mods, types = self.chain(spec)
            parts = [*spec.opcode.split("."), *mods, *types]
            try:
                m = resolve(parts)
                text = ".".join(parts)
                break
            except PtxdslError:
                continue
        if text is None or rng.random() < 0.1:
            mods, types = self.mutate(*self.chain(spec))
            text = ".".join([spec.opcode, *mods, *types])
            try:
                m = resolve(text.split("."))
            except PtxdslError:
                m = None
        slots = list(m.operands if m is not None else spec.signature(frozenset()))
        slots = [s for s in slots if not s.optional or rng.random() < 0.5]
        args = [self.operand(m, s) for s in slots]
        r = rng.random()
        if r < 0.03 and args:
            args.pop(rng.randrange(len(args)))
        elif r < 0.06:
            args.append(self.wild(None))
        guard = self.src(pred) if rng.random() < 0.1 else None
        ptx.inst(text, *args, pred=guard)

    def run(self):
        for _ in range(self.rng.choice((1, 1, 2, 3))):
            self.instruction()
        if self.label is not None:
            ptx.place(self.label)


# ---------------------------------------------------------------- one program
def build(seed: int, i: int):
    """('refused' | 'accepted' | 'crashed' | 'unlocated', arch, payload) for program ``i``."""
    rng = random.Random(seed * 1_000_003 + i)
    arch = rng.choice(ARCHS)

    def fuzz(Y):
        Gen(rng, Y).run()

    k = kernel(out_specs=(Tile(16, u32),), arch=arch, name=f"fz{i}")(fuzz)
    try:
        text = k.ptx()
    except PtxdslError as e:
        if e.loc is None or os.path.abspath(e.loc.file) != HERE:
            return "unlocated", arch, f"{type(e).__name__}: {e}"
        return "refused", arch, None
    except Exception:  # noqa: BLE001 - the point: no foreign exceptions
        return "crashed", arch, traceback.format_exc(limit=-4)
    return "accepted", arch, (text, k.program().ptx_version)


_ENTRY = re.compile(r"^\.visible \.entry ", re.M)


def _module(arch, version, texts):
    head = f".version {version[0]}.{version[1]}\n.target {arch}\n.address_size 64\n\n"
    parts, starts = [head], []
    line = head.count("\n") + 1
    for t in texts:
        body = t[_ENTRY.search(t).start():]
        starts.append(line)
        parts.append(body + "\n")
        line += body.count("\n") + 1
    return "".join(parts), starts


def assemble_batch(arch, version, programs):
    """``{index: ptxas message}`` for the programs (``[(index, text)]``) ptxas rejects."""
    if not programs:
        return {}
    text, starts = _module(arch, version, [t for _, t in programs])
    try:
        toolchain.assemble(text, arch, verbose=False, ptxas=PTXAS)
        return {}
    except toolchain.PtxasError as e:
        diags = [d for d in e.diagnostics if d.severity == "error"
                 and "aborted" not in d.message]
    lines = text.split("\n")
    bad = {}
    for d in diags:
        if d.line is None:
            continue
        k = max(j for j, s in enumerate(starts) if s <= d.line)
        idx = programs[k][0]
        bad.setdefault(idx, f"{d.message}  [{lines[d.line - 1].strip()}]")
    if not bad:
        if len(programs) == 1:
            return {programs[0][0]: "; ".join(d.message for d in diags) or "ptxas failed"}
        half = len(programs) // 2
        return {**assemble_batch(arch, version, programs[:half]),
                **assemble_batch(arch, version, programs[half:])}
    rest = [p for p in programs if p[0] not in bad]
    return {**bad, **assemble_batch(arch, version, rest)}


def fuzz(n: int, seed: int):
    counts = collections.Counter()
    gaps: list[str] = []
    batches = collections.defaultdict(list)
    for i in range(n):
        kind, arch, payload = build(seed, i)
        counts[kind] += 1
        if kind == "accepted":
            text, version = payload
            batches[(arch, version)].append((i, text))
        elif kind != "refused":
            gaps.append(f"program {i} (seed {seed}, {arch}) {kind}:\n{payload}")
    rejected = {}
    for (arch, version), progs in sorted(batches.items()):
        for j in range(0, len(progs), 400):
            rejected.update(assemble_batch(arch, version, progs[j:j + 400]))
    texts = {i: t for progs in batches.values() for i, t in progs}
    for i, msg in sorted(rejected.items()):
        body = texts[i][_ENTRY.search(texts[i]).start():]
        gaps.append(f"program {i} (seed {seed}) accepted by ptxdsl, rejected by ptxas: "
                    f"{msg}\n{body}")
    counts["accepted"] -= len(rejected)
    counts["ptxas-rejected"] = len(rejected)
    return counts, gaps


@pytest.mark.skipif(PTXAS is None, reason="no ptxas found")
def test_random_programs_are_refused_at_the_users_line_or_assemble():
    n = int(os.environ.get("PTXDSL_FUZZ_N", N_DEFAULT))
    seed = int(os.environ.get("PTXDSL_FUZZ_SEED", "15"))
    counts, gaps = fuzz(n, seed)
    summary = ", ".join(f"{k} {counts[k]}" for k in ("accepted", "refused", "ptxas-rejected",
                                                     "crashed", "unlocated"))
    print(f"\nfuzz: {n} programs, seed {seed}: {summary}")
    # the generator must reach both outcomes, or it tests nothing
    assert counts["accepted"] > n // 10 and counts["refused"] > n // 10, summary
    assert not gaps, f"{summary}\n\n" + "\n\n".join(gaps[:20])


if __name__ == "__main__":  # pragma: no cover
    n = int(sys.argv[1]) if len(sys.argv) > 1 else N_DEFAULT
    seed = int(os.environ.get("PTXDSL_FUZZ_SEED", "15"))
    counts, gaps = fuzz(n, seed)
    for g in gaps:
        print(g, end="\n\n")
    print(dict(counts))
