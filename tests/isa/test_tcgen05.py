"""Blackwell's tcgen05 family (ptxdsl/isa/blackwell.py, ptx.tcgen05): its descriptors'
bit fields, a kernel that uses every ``ptx.tcgen05`` call assembling for sm_100a, the
DSL's refusals at the caller's line, and a fuzz of random tcgen05 lines in which the
table (through the PTX front end) and ptxas 13 must agree: every line the table accepts
assembles, every line it refuses ptxas refuses too (the table is stricter in one place,
scale-input-d with kind::i8, which the generator leaves out)."""
from __future__ import annotations

import random
import re

import numpy as np
import pytest

import ptxdsl
from ptxdsl import Tile, kernel, ptx, reg, smem, toolchain
from ptxdsl.core.errors import ArchError, PtxdslError, TraceError
from ptxdsl.dsl import tcgen05 as tc
from ptxdsl.isa.blackwell import LD_SHAPES
from ptxdsl.isa.tcgen05_descriptors import InstrDescriptor, SmemDescriptor100
from ptxdsl.types import b16, b32, f32, pred, u32

PTXAS = toolchain.find_ptxas()
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="no ptxas found")


# ---------------------------------------------------------------- descriptors
def test_smem_descriptor_fields():
    # pyptx's fixed constant: LBO 16, SBO 1024, version 1, 128-byte swizzle
    assert tc.BLACKWELL_MASKED_DESC_B128 == 0x4000404000010000
    rng = random.Random(5)
    for _ in range(50):
        d = SmemDescriptor100(rng.randrange(0, 1 << 14) << 4, rng.randrange(0, 1 << 14) << 4,
                              rng.randrange(0, 1 << 14) << 4, rng.randrange(8),
                              rng.choice(["none", "128B_base32B", "128B", "64B", "32B"]),
                              rng.random() < 0.5, rng.randrange(4))
        assert SmemDescriptor100.decode(d.encode()) == d
        assert d.constant_bits() | d.start >> 4 == d.encode()
    with pytest.raises(ValueError, match="multiple of 16"):
        SmemDescriptor100(stride=1000)


def test_instruction_descriptor_fields():
    # bf16 x bf16 -> f32, 128 x 256, K-major: D fmt 1 @4, A/B fmt 1 @7/@10, N>>3 @17, M>>4 @24
    assert tc.make_instr_desc_f16bf16_f32() == 0x08400490 == InstrDescriptor().encode()
    assert tc.instr_desc(kind="i8", a="s8", d="s32", m=64, n=8, saturate=True) == \
        (1 << 3 | 2 << 4 | 1 << 7 | 1 << 10 | 1 << 17 | 4 << 24)
    negated_mn = tc.make_instr_desc_f16bf16_f32(scale_a=-1, a_major="MN")
    assert negated_mn == 0x08400490 | 1 << 13 | 1 << 15
    with pytest.raises(TraceError, match="kind::f8f6f4 accumulates in f16, f32"):
        tc.instr_desc(kind="f8f6f4", a="e4m3", d="s32")
    with pytest.raises(TraceError, match="N=100: a multiple of 16"):
        tc.instr_desc(n=100)


# ---------------------------------------------------------------- the DSL
def _every_call(X, O):
    base = smem.base()
    slot, bar = base + 0, base + 16
    tid = reg.scalar(u32, init=ptx.special.tid.x())
    warp0 = reg.scalar(pred)
    ptx.inst.setp.lt.u32(warp0, tid, 32)
    with ptx.if_(warp0):
        tc.alloc(slot, 256)
    ptx.bar.sync(0)
    tc.fence_after_thread_sync()
    tmem = reg.scalar(b32)
    ptx.inst.ld.shared.b32(tmem, ptx.addr(slot))
    da = tc.descriptor(base, byte_offset=1024, stride_bytes=1024, swizzle="128B")
    db = tc.masked_descriptor(base, byte_offset=2048)
    idesc = reg.scalar(b32, init=tc.instr_desc(n=128))
    acc = reg.scalar(pred)
    ptx.inst.setp.ne.u32(acc, tid, 0)
    mask = reg.scalar(b16)
    ptx.inst.mov.b16(mask, 1)
    with ptx.if_(tid == 0):
        tc.mma(tmem, da, db, idesc, kind="f16", pred_operand=False)
        tc.mma(tmem, da, db, idesc, kind="f16", scale_d=acc, scale_c=3)
        tc.mma(tmem, ptx.addr(tmem, 64), db, idesc, kind="tf32", disable_output_lane=0,
               collector_a="lastuse")
        tc.mma(tmem, tmem, db, tc.instr_desc(kind="i8", a="s8", d="s32", n=128), kind="i8",
               a_is_tmem=True, ashift=True, enable_input_d=True)
        tc.mma(tmem, da, db, idesc, kind="f8f6f4", sparse=True,
               sparse_metadata=ptx.addr(tmem, 128))
        tc.mma(tmem, da, db, idesc, kind="mxf8f6f4", scale_vec="1X",
               scale_a_tmem=ptx.addr(tmem, 256), scale_b_tmem=ptx.addr(tmem, 260))
        tc.cp(ptx.addr(tmem, 32), da, size="128x256b")
        tc.cp(tmem, da, size="64x128b", multicast="warpx2::02_13", decompress="b4x16_p64")
        tc.shift(tmem)
        tc.commit(bar)
        tc.commit(bar, multicast_mask=mask)
    r = reg.array(b32, 4)
    tc.ld(r, tmem, shape="16x256b", count=1)
    tc.ld([r[0], r[1]], tmem, shape="16x32bx2", count=2, offset=8, pack=True)
    tc.wait_ld()
    tc.st(tmem, r, shape="32x32b", count=4, unpack=True)
    tc.wait_st()
    tc.fence_before_thread_sync()
    ptx.bar.sync(0)
    with ptx.if_(warp0):
        tc.dealloc(tmem, 256)
        tc.relinquish_alloc_permit()


def _kernel(body, arch="sm_100a", name="tc_all"):
    @kernel(in_specs=(Tile(1, f32),), out_specs=(Tile(1, f32),), block=(128, 1, 1),
            arch=arch, smem=4096, extern_smem=True, name=name)
    def k(X, O):
        body(X, O)
    return k


def test_every_call_records_its_instruction():
    text = _kernel(_every_call).ptx()
    for line in ("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32",
                 "tcgen05.mma.cta_group::1.kind::f16 [", "tcgen05.mma.cta_group::1.kind::tf32."
                 "collector::a::lastuse [%r", "tcgen05.mma.cta_group::1.kind::i8.ashift [",
                 "tcgen05.mma.sp.cta_group::1.kind::f8f6f4",
                 "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X [",
                 "tcgen05.cp.cta_group::1.64x128b."
                 "warpx2::02_13.b8x16.b4x16_p64", "tcgen05.shift.cta_group::1.down",
                 "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster."
                 "multicast::cluster.b64", "tcgen05.ld.sync.aligned.16x32bx2.x2.pack::16b.b32",
                 "tcgen05.st.sync.aligned.32x32b.x4.unpack::16b.b32", "tcgen05.wait::st",
                 "tcgen05.relinquish_alloc_permit"):
        assert line in text, line
    assert re.search(r"tcgen05\.mma\.cta_group::1\.kind::f16 \[%r\d+\], %rd\d+, %rd\d+, "
                     r"%r\d+, %p\d+, 3;", text)          # scale-input-d
    assert re.search(r"kind::tf32\.collector::a::lastuse \[%r\d+\], \[%r\d+\+64\], %rd\d+, "
                     r"%r\d+, \{(%r\d+, ){3}%r\d+\}, %p\d+;", text)   # TMEM A, lane mask


@needs_ptxas
def test_every_call_assembles_for_sm_100a():
    toolchain.assemble(_kernel(_every_call, name="tc_all_sass").ptx(), "sm_100a",
                       verbose=False, ptxas=PTXAS)


def _bad(call):
    def body(X, O):
        base = smem.base()
        t = reg.scalar(b32, init=0)
        call(base, t)
    return body


REFUSED = {
    "ld_too_many": (lambda s, t: tc.ld(reg.array(b32, 128), t, shape="16x256b", count=64),
                    r"\.16x256b repeats at most \.x32"),
    "ld_wrong_count": (lambda s, t: tc.ld(reg.array(b32, 3), t, shape="32x32b", count=4),
                       r"takes 4 \.b32 registers here but the register list has 3"),
    "alloc_columns": (lambda s, t: tc.alloc(s, 48), r"power of two from 32 to 512"),
    "scale_f8f6f4": (lambda s, t: tc.mma(t, reg.scalar(ptxdsl.types.b64, init=0),
                                         reg.scalar(ptxdsl.types.b64, init=0), 0,
                                         kind="f8f6f4", scale_c=2),
                     r"scale-input-d applies to \.kind::f16 and \.kind::tf32"),
    "scale_range": (lambda s, t: tc.mma(t, reg.scalar(ptxdsl.types.b64, init=0),
                                        reg.scalar(ptxdsl.types.b64, init=0), 0, scale_c=16),
                    r"must be one of 0, 1"),
    "mask_length": (lambda s, t: tc.mma(t, reg.scalar(ptxdsl.types.b64, init=0),
                                        reg.scalar(ptxdsl.types.b64, init=0), 0, cta_group=2,
                                        disable_output_lane=[t] * 4), r"8"),
    "ashift_fill": (lambda s, t: tc.mma(t, t, reg.scalar(ptxdsl.types.b64, init=0), 0,
                                        ashift=True, collector_a="fill"),
                    r"\.ashift cannot be combined with \.collector::a::fill"),
    "cp_multicast": (lambda s, t: tc.cp(t, reg.scalar(ptxdsl.types.b64, init=0),
                                        size="64x128b"), r"\.64x128b copies with"),
    "commit_cta": (lambda s, t: tc.commit(s, space="cta"), r"State space incorrect"),
    "block_scaled": (lambda s, t: tc.mma(t, t, t, 0, kind="mxf8f6f4"),
                     r"take scale_a_tmem= and scale_b_tmem="),
    "block_size": (lambda s, t: tc.mma(t, reg.scalar(ptxdsl.types.b64, init=0),
                                       reg.scalar(ptxdsl.types.b64, init=0), 0,
                                       kind="mxf4nvf4", scale_a_tmem=t, scale_b_tmem=t),
                   r"\.kind::mxf4nvf4 names its scale-vector size"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_at_the_callers_line(case):
    call, pattern = REFUSED[case]
    with pytest.raises(PtxdslError, match=pattern) as info:
        _kernel(_bad(call), name=f"bad_{case}").ptx()
    assert "test_tcgen05.py:" in str(info.value)


def test_needs_the_arch_specific_blackwell_target():
    with pytest.raises(ArchError, match=r"needs sm_100"):
        _kernel(_every_call, arch="sm_90a", name="tc_hopper").ptx()
    with pytest.raises(ArchError, match=r"sm_100a"):
        _kernel(_every_call, arch="sm_100", name="tc_plain").ptx()


# ---------------------------------------------------------------- fuzz against ptxas
_HEAD = (".version 8.8\n.target sm_100a\n.address_size 64\n.visible .entry k()\n{\n"
         " .reg .b32 %r<200>;\n .reg .b64 %rd<8>;\n .reg .pred %p<4>;\n .reg .b16 %rs<4>;\n")


def _regs(n):
    return "{" + ", ".join(f"%r{i}" for i in range(n)) + "}"


def _random_line(rng: random.Random) -> str:
    op = rng.choice(["mma", "mma", "ld", "st", "cp", "shift"])
    cg = rng.choice([1, 2])
    if op == "mma":
        sp = rng.random() < 0.2
        kind = rng.choice(["f16", "tf32", "f8f6f4", "i8", "mxf8f6f4", "mxf4", "mxf4nvf4"])
        block = rng.random() < (0.85 if kind.startswith("mx") else 0.1)
        size = rng.choice([None, "scale_vec::1X", "scale_vec::2X", "scale_vec::4X",
                           "block16", "block32"]) if block or rng.random() < 0.1 else None
        ashift = rng.random() < 0.2
        coll = rng.choice([None, None, "discard", "lastuse", "fill", "use"])
        mods = ["mma"] + (["sp"] if sp else []) + [f"cta_group::{cg}", f"kind::{kind}"] + \
            (["block_scale"] if block else []) + ([size] if size else []) + \
            (["ashift"] if ashift else []) + ([f"collector::a::{coll}"] if coll else [])
        a = rng.choice(["%rd1", "[%r150]"])
        ops = ["[%r151]", a, "%rd2"] + (["[%r152]"] if sp else []) + ["%r153"]
        if block and rng.random() < 0.9:
            ops += ["[%r154]", "[%r155]"]            # the scale factors in TMEM
        lanes = rng.choice([None, 4, 8]) if not block or rng.random() < 0.1 else None
        if lanes:
            ops.append("{" + ", ".join(f"%r{160 + i}" for i in range(lanes)) + "}")
        ops.append("%p1")
        if kind != "i8" and rng.random() < 0.3:    # the table refuses i8's (see docstring)
            ops.append(str(rng.choice([0, 7, 15, 16])))
    elif op in ("ld", "st"):
        shape = rng.choice(list(LD_SHAPES))
        num = 1 << rng.randrange(8)
        per = LD_SHAPES[shape][1]
        count = num * per if rng.random() < 0.85 else max(1, num * per // 2)
        half = [("pack::16b" if op == "ld" else "unpack::16b")] if rng.random() < 0.3 else []
        mods = [op, "sync", "aligned", shape, f"x{num}", *half, "b32"]
        regs = _regs(min(count, 128)) if count <= 128 else _regs(count)
        if count > 190:
            regs = _regs(190)
        imm = [str(rng.choice([0, 4]))] if shape == "16x32bx2" else []
        ops = [regs, "[%r195]", *imm] if op == "ld" else ["[%r195]", *imm, regs]
    elif op == "cp":
        shape = rng.choice(["128x256b", "4x256b", "128x128b", "64x128b", "32x128b"])
        mc = rng.choice([None, None, "warpx2::02_13", "warpx2::01_23", "warpx4"])
        fmt = rng.choice([[], [], ["b8x16", "b6x16_p32"], ["b8x16", "b4x16_p64"],
                          ["b6x16_p32"]])
        mods = ["cp", f"cta_group::{cg}", shape] + ([mc] if mc else []) + fmt
        ops = ["[%r195]", "%rd3"]
    else:
        mods = ["shift", f"cta_group::{cg}", rng.choice(["down", "down", "up"])]
        ops = ["[%r195]"]
    return "tcgen05." + ".".join(mods) + " " + ", ".join(ops) + ";"


def _table_accepts(line: str) -> bool:
    try:
        ptxdsl.parse_ptx(_HEAD + " " + line + "\n ret;\n}\n").kernels["k"].program()
        return True
    except PtxdslError:
        return False


def _ptxas_error_lines(lines: list[str]) -> set[int]:
    """1-based indexes of ``lines`` ptxas complains about (one module, one call)."""
    text = _HEAD + "".join(f" {x}\n" for x in lines) + " ret;\n}\n"
    first = _HEAD.count("\n") + 1
    try:
        toolchain.assemble(text, "sm_100a", verbose=False, ptxas=PTXAS)
        return set()
    except toolchain.PtxasError as e:
        return {d.line - first + 1 for d in e.diagnostics
                if d.severity == "error" and d.line is not None}


@needs_ptxas
def test_random_tcgen05_lines_table_and_ptxas_agree():
    rng = random.Random(46)
    lines = sorted({_random_line(rng) for _ in range(220)})
    accepted = [x for x in lines if _table_accepts(x)]
    refused = [x for x in lines if x not in accepted]
    assert len(accepted) > 30 and len(refused) > 30, (len(accepted), len(refused))
    bad = _ptxas_error_lines(accepted)
    assert not bad, "the table accepts lines ptxas rejects:\n" + "\n".join(
        accepted[i - 1] for i in sorted(bad))
    flagged = _ptxas_error_lines(refused)
    missed = [x for i, x in enumerate(refused, 1) if i not in flagged]
    assert not missed, "the table refuses lines ptxas accepts:\n" + "\n".join(missed)


# ---------------------------------------------------------------- collective TMA
def _collective_copy(arch="sm_100a", chain="cp.async.bulk.tensor.2d.shared::cta.global.tile."
                     "mbarrier::complete_tx::bytes.cta_group::2"):
    from ptxdsl.core.tensormap import TMA
    from ptxdsl.types import b64

    @kernel(in_specs=(Tile(64, 64, f32, tma=TMA(box=(32, 32))),), out_specs=(),
            block=(32, 1, 1), arch=arch, name=f"collective_{arch}")
    def k(A):
        tile = smem.alloc(f32, (32, 32), align=128)
        bar = smem.alloc(b64, (1,), align=8)
        x = reg.scalar(u32, init=0)
        ptx.inst(chain, ptx.addr(tile.base), ptx.addr(A.tma_desc(), coords=[x, x]),
                 ptx.addr(bar.base))
    return k


@needs_ptxas
def test_collective_tma_loads_assemble_and_the_interpreter_refuses_them():
    k = _collective_copy()
    text = k.ptx()
    assert "shared::cta.global.tile.mbarrier::complete_tx::bytes.cta_group::2 [" in text
    toolchain.assemble(text, "sm_100a", verbose=False, ptxas=PTXAS)
    with pytest.raises(PtxdslError, match="collective tensor copies"):
        k.interpret(np.zeros((64, 64), np.float32))


@pytest.mark.parametrize("arch,chain,pattern", [
    ("sm_90a", "cp.async.bulk.tensor.2d.shared::cluster.global.tile."
               "mbarrier::complete_tx::bytes.cta_group::1", r"needs sm_100"),
    ("sm_100a", "cp.async.bulk.tensor.2d.shared::cta.global.tile."
                "mbarrier::complete_tx::bytes.multicast::cluster", r"not shared::cta"),
])
def test_collective_tma_refusals(arch, chain, pattern):
    with pytest.raises(PtxdslError, match=pattern):
        _collective_copy(arch, chain).ptx()
