"""Hopper's table entries beyond the generic sweep of test_table.py.

- every wgmma.mma_async shape and type combination, descriptor and register A, assembles;
- sm_90 vs sm_90a: arch-specific forms are refused for sm_90 by the table *and* by ptxas,
  every other sm_90 form assembles for plain sm_90;
- the operand machinery wgmma and TMA need (derived list lengths, enumerated immediates,
  read-write accumulators, alternatives, tensor-map operands, the sink) through ptx.inst;
- refused forms raise IsaError naming the user's line and the rule.
"""
from __future__ import annotations

import collections
import os
import re

import pytest

from isa_forms import (Sweep, arch_for, assemble_forms, covering_forms, version_for,
                       with_optional_needs)
import located
from ptxdsl import kernel, ptx, reg, toolchain
from ptxdsl.core.errors import ArchError, IsaError
from ptxdsl.isa import INSTRUCTIONS, check_arch, hopper, resolve
from ptxdsl.core.types import b32, b64, f32, pred, s32, u32, u64

PTXAS = toolchain.find_ptxas()
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="no ptxas found")
HERE = os.path.abspath(__file__)
HOPPER_OPS = [s.opcode for s in hopper.TABLE] + [
    "mbarrier.arrive", "mbarrier.arrive.expect_tx", "mbarrier.expect_tx",
    "mbarrier.complete_tx", "mbarrier.try_wait", "fence"]


def _wgmma_combos():
    for a, (k, ns, accs) in hopper.WGMMA_KINDS.items():
        bs = [a]
        if a in ("e4m3", "e5m2"):
            bs = ["e4m3", "e5m2"]
        if a in ("s8", "u8"):
            bs = ["s8", "u8"]
        for b in bs:
            for d in accs:
                for n in ns:
                    sat = [[], ["satfinite"]] if a in ("s8", "u8") else [[]]
                    for extra in sat:
                        yield ["sync", "aligned", f"m64n{n}k{k}", *extra, d, a, b]


def test_wgmma_shapes_and_counts():
    m = resolve("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16".split("."))
    assert hopper.wgmma_shape(m) == (64, 256, 16)
    acc = m.operands[0]
    assert acc.rw and acc.is_dest and acc.is_source and m.count(acc) == 128
    m16 = resolve("wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16".split("."))
    assert m16.count(m16.operands[0]) == 16 and m16.resolve_type("{acc}").name == "f16x2"
    assert [len(sig) for sig in m.alternatives] == [8, 7]   # descriptor A / register A
    tf = resolve("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32".split("."))
    assert [len(sig) for sig in tf.alternatives] == [6, 6]
    i8 = resolve("wgmma.mma_async.sync.aligned.m64n48k32.s32.s8.u8".split("."))
    assert i8.ptx == (8, 4) and [len(sig) for sig in i8.alternatives] == [4, 4]
    assert m.arch_specific and m.sm == 90
    n_combos = sum(1 for _ in _wgmma_combos())
    assert n_combos > 500


@needs_ptxas
@pytest.mark.long
def test_every_wgmma_shape_and_type_assembles():
    """Each (shape, accumulator, A, B) PTX allows, with both operand lists, in one module
    per PTX version."""
    sweep = Sweep("sm_90a")
    by_version = collections.defaultdict(list)
    for chain in _wgmma_combos():
        m = resolve(["wgmma", "mma_async", *chain])
        for sig in m.alternatives:
            f = sweep.add(m.with_operands(sig))
            assert f is not None, m.text
            by_version[m.ptx].append(f)
    failures = []
    for version, forms in sorted(by_version.items()):
        bad = assemble_forms(sweep, forms, "sm_90a", version, PTXAS)
        failures += [f"{forms[i].text} -> {msg}" for i, msg in sorted(bad.items())]
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("chain,why", [
    ("m64n8k16.f32.bf16.f16", "same type"),
    ("m64n8k32.f32.bf16.bf16", "K = 16"),
    ("m64n8k16.f16.bf16.bf16", "accumulates in .f32"),
    ("m64n40k32.s32.s8.s8", "N = 40 is not a wgmma shape"),
    ("m64n8k16.satfinite.f32.f16.f16", "satfinite applies to the integer"),
    ("m64n8k8.f16.tf32.tf32", "accumulates in .f32"),
    ("m64n8k32.s32.e4m3.s8", "same type"),
])
def test_wgmma_rule_refuses(chain, why):
    with pytest.raises(IsaError, match=why):
        resolve(["wgmma", "mma_async", "sync", "aligned", *chain.split(".")])


# ---------------------------------------------------------------- sm_90 vs sm_90a
def _hopper_forms():
    for op in HOPPER_OPS:
        for base in covering_forms(INSTRUCTIONS[op])[0]:
            for m in with_optional_needs(base):
                if m.sm == 90:
                    yield m


@pytest.mark.long
def test_arch_specific_forms_are_refused_for_sm_90():
    specific = [m for m in _hopper_forms() if m.arch_specific]
    assert {m.spec.opcode for m in specific} >= {
        "wgmma.mma_async", "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group",
        "setmaxnreg"}
    for m in specific:
        with pytest.raises(ArchError, match=r"sm_90a"):
            check_arch(m, 90, "sm_90")
        check_arch(m, 90, "sm_90a")


@pytest.mark.long
@needs_ptxas
def test_sm_90_forms_assemble_for_plain_sm_90_and_arch_specific_ones_do_not():
    sweep = Sweep("sm_90")
    plain, specific = collections.defaultdict(list), []
    for m in _hopper_forms():
        if m.arch_specific:
            f = sweep.add(m)
            if f is not None:
                specific.append((m, f))
        else:
            plain[version_for(m, "sm_90")].extend(sweep.add_with_immediates(m))
    failures = []
    for version, forms in sorted(plain.items()):
        bad = assemble_forms(sweep, forms, "sm_90", version, PTXAS)
        failures += [f"{forms[i].text} -> {msg}" for i, msg in sorted(bad.items())]
    assert not failures, "\n".join(failures)
    # each arch-specific form on its own: ptxas must reject it for sm_90
    accepted = [f.text for m, f in specific[:12]
                if not assemble_forms(sweep, [f], "sm_90", max(m.ptx, (8, 0)), PTXAS)]
    assert not accepted, f"ptxas accepts these for sm_90: {accepted}"


def test_multicast_is_not_arch_specific_but_sm_90():
    m = resolve("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::"
                "bytes.multicast::cluster".split("."))
    assert (m.sm, m.ptx, m.arch_specific) == (90, (8, 0), False)


# ---------------------------------------------------------------- through ptx.inst
line_of = located.marked_lines(HERE, "# <- ")


def raises_at(fn, marker, *must_say, arch="sm_90a", exc=IsaError):
    with pytest.raises(exc) as info:
        kernel(arch=arch)(fn).ptx()
    text = str(info.value)
    assert f"{HERE}:{line_of(marker)}:" in text, text
    for phrase in must_say:
        assert re.search(phrase, text), f"{phrase!r} not in: {text}"


def test_wgmma_records_both_operand_lists():
    def body():
        acc = reg.array(f32, 4)
        da, db = reg.scalar(u64, init=0), reg.scalar(u64, init=0)
        a = [reg.scalar(b32, init=0) for _ in range(4)]
        p = reg.scalar(u32, init=1) == 1
        ptx.inst.wgmma.fence.sync.aligned()
        ptx.inst.wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16(
            list(acc), da, db, 0, 1, -1, 0, 1)
        ptx.inst.wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16(
            list(acc), list(a), db, p, 1, 1, 1)
        ptx.inst.wgmma.commit_group.sync.aligned()
        ptx.inst.wgmma.wait_group.sync.aligned(0)
    text = kernel(arch="sm_90a")(body).ptx()
    assert re.search(r"m64n8k16\.f32\.bf16\.bf16 \{%f\d+, %f\d+, %f\d+, %f\d+\}, %rd\d+, "
                     r"%rd\d+, 0, 1, -1, 0, 1;", text)
    assert re.search(r"\{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, %p\d+, 1, 1, 1;", text)
    assert ".version 8." in text and ".target sm_90a" in text
    if PTXAS:
        toolchain.assemble(text, "sm_90a", verbose=False, ptxas=PTXAS)


def test_wgmma_wrong_accumulator_count():
    def body():
        acc = reg.array(f32, 8)
        d = reg.scalar(u64, init=0)
        ptx.inst.wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16(list(acc), d, d, 1, 1, 1, 0, 0)  # <- acc-count
    raises_at(body, "acc-count", r"takes 4 .f32 registers here", r"has 8; pass exactly 4")


def test_wgmma_scale_must_be_one_or_minus_one():
    def body():
        acc = reg.array(f32, 4)
        d = reg.scalar(u64, init=0)
        ptx.inst.wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16(list(acc), d, d, 1, 2, 1, 0, 0)  # <- scale
    raises_at(body, "scale", r"must be one of 1, -1", r"got 2")


def test_wgmma_needs_sm_90a():
    def body():
        ptx.inst.wgmma.fence.sync.aligned()  # <- not-90a
    raises_at(body, "not-90a", r"arch-specific target sm_90a", r"arch='sm_90a'",
              arch="sm_90", exc=ArchError)


def test_setmaxnreg_range():
    def body():
        ptx.inst.setmaxnreg.inc.sync.aligned.u32(244)  # <- maxnreg
    raises_at(body, "maxnreg", r"24 to 256, a multiple of 8; got 244")


def test_tensor_copy_coordinates_and_sink():
    def body():
        dst, bar = reg.scalar(u32, init=0), reg.scalar(u32, init=64)
        tmap = reg.scalar(u64, init=0)
        x, y = reg.scalar(s32, init=0), reg.scalar(s32, init=0)
        mask = reg.scalar(ptx_b16(), init=3)
        ptx.inst.cp.async_.bulk.tensor._2d.shared__cluster.global_.tile \
            .mbarrier__complete_tx__bytes.multicast__cluster(
                ptx.addr(dst), ptx.addr(tmap, coords=[x, y]), ptx.addr(bar), mask)
        ptx.inst.cp.async_.bulk.tensor._2d.global_.shared__cta.bulk_group(
            ptx.addr(tmap, coords=[x, 16]), ptx.addr(dst))
        ptx.inst.mbarrier.arrive.release.cluster.shared__cluster.b64(ptx.sink, ptx.addr(bar))
        done = reg.scalar(pred)
        ptx.inst.mbarrier.try_wait.parity.shared__cta.b64(done, ptx.addr(bar), 0, 1000)
        ptx.inst.selp.u32(reg.scalar(u32), 1, 0, done)   # a poll's result must be read
        ptx.inst.fence.mbarrier_init.release.cluster()
        ptx.inst.mov.u32(reg.scalar(u32), ptx.special.cluster_ctarank())
    text = kernel(arch="sm_90a")(body).ptx()
    assert re.search(r"\[%rd\d+, \{%r\d+, %r\d+\}\], \[%r\d+\], %rs\d+;", text)
    assert re.search(r"\[%rd\d+, \{%r\d+, 16\}\], \[%r\d+\];", text)
    assert re.search(r"mbarrier\.arrive\.release\.cluster\.shared::cluster\.b64 _, \[%r\d+\];",
                     text)
    assert "%cluster_ctarank" in text
    if PTXAS:
        toolchain.assemble(text, "sm_90a", verbose=False, ptxas=PTXAS)


def ptx_b16():
    from ptxdsl.core.types import b16
    return b16


def test_tensor_copy_wrong_coordinate_count():
    def body():
        dst, tmap = reg.scalar(u32, init=0), reg.scalar(u64, init=0)
        ptx.inst.cp.async_.bulk.tensor._3d.shared__cluster.global_.mbarrier__complete_tx__bytes(ptx.addr(dst), ptx.addr(tmap, coords=[1, 2]), ptx.addr(dst))  # <- coords
    raises_at(body, "coords", r"a tensor map and 3 coordinates", r"got 2")


def test_remote_arrive_needs_the_sink():
    def body():
        bar = reg.scalar(u32, init=0)
        ptx.inst.mbarrier.arrive.shared__cluster.b64(reg.scalar(b64), ptx.addr(bar))  # <- sink
    raises_at(body, "sink", r"pass ptx\.sink as the destination")


def test_arrive_count_needs_sm_90():
    def body():
        bar = reg.scalar(u32, init=0)
        ptx.inst.mbarrier.arrive.shared.b64(reg.scalar(b64), ptx.addr(bar), 2)  # <- count
    raises_at(body, "count", r"needs sm_90", arch="sm_80", exc=ArchError)


def test_fence_mbarrier_init_spelling():
    with pytest.raises(IsaError, match="fence.mbarrier_init.release.cluster"):
        resolve("fence.mbarrier_init.release.cta".split("."))
    assert resolve("fence.mbarrier_init.release.cluster".split(".")).ptx == (8, 0)


def test_bulk_copy_size_multiple_of_16():
    def body():
        s, bar = reg.scalar(u32, init=0), reg.scalar(u32, init=0)
        g = reg.scalar(u64, init=0)
        ptx.inst.cp.async_.bulk.shared__cluster.global_.mbarrier__complete_tx__bytes(ptx.addr(s), ptx.addr(g), 100, ptx.addr(bar))  # <- size
    raises_at(body, "size", r"positive multiple of 16 bytes, got 100")
