"""pyptx's public DSL API on ptxdsl: the cases of pyptx 0.1.1's DSL-API tests (typed
wrappers, registers, shared memory, templates, intrinsics, GMMA layouts), written here
under ptxdsl's rules (registers are written before they are read). How many of pyptx's
own tests pass with imports renamed is measured by lab/pyptx_api_tests.py.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import ptxdsl
from ptxdsl import Layout, Tile, intrinsic, kernel, ptx, reg, smem
from ptxdsl.core.errors import IsaError, TraceError
from ptxdsl.dsl import wgmma_layout as wl
from ptxdsl.kernel import TensorSpec
from ptxdsl.types import b16, b32, b64, bf16, f16, f32, pred, s32, u32, u64


def body(k) -> list[str]:
    """The instruction lines of ``k``'s PTX."""
    text = k.ptx()
    inner = text[text.index("{", text.index(".entry")) + 1:text.rindex("}")]
    return [ln.strip() for ln in inner.splitlines()
            if ln.strip() and not ln.strip().startswith(".")]


def trace(fn, **kw) -> list[str]:
    return body(kernel(arch=kw.pop("arch", "sm_90a"), **kw)(fn))


# ----------------------------------------------------------------- typed wrappers
def test_typed_arithmetic_wrappers_record_the_checked_instruction():
    def k():
        r = reg.array(s32, 4)
        ptx.mov(s32, r[1], 7)
        ptx.mov(s32, r[2], 3)
        ptx.sub(s32, r[0], r[1], r[2])
        ptx.add(s32, r[3], r[0], 1)
        ptx.mul(s32, r[0], r[1], r[2], mode="lo")
        ptx.mad(s32, r[0], r[1], r[2], r[3])
        ptx.shl(b32, r[0], r[1], 4)
        ptx.shr(s32, r[0], r[1], 4)
        ptx.and_(b32, r[0], r[1], r[2])
        ptx.or_(b32, r[0], r[1], r[2])
        ptx.xor_(b32, r[0], r[1], r[2])
        ptx.not_(b32, r[0], r[1])
        f = reg.array(f32, 3)
        ptx.mov(f32, f[1], 2.0)
        ptx.mul(f32, f[0], f[1], f[1])
    # registers are numbered in order of first use: r[1] -> %r0, r[2] -> %r1, r[0] -> %r2
    lines = trace(k)
    assert lines[:14] == [
        "mov.s32 %r0, 7;", "mov.s32 %r1, 3;", "sub.s32 %r2, %r0, %r1;",
        "add.s32 %r3, %r2, 1;", "mul.lo.s32 %r2, %r0, %r1;", "mad.lo.s32 %r2, %r0, %r1, %r3;",
        "shl.b32 %r2, %r0, 4;", "shr.s32 %r2, %r0, 4;", "and.b32 %r2, %r0, %r1;",
        "or.b32 %r2, %r0, %r1;", "xor.b32 %r2, %r0, %r1;", "not.b32 %r2, %r0;",
        "mov.f32 %f0, 0f40000000;", "mul.f32 %f1, %f0, %f0;"]


def test_setp_selp_cvt_and_the_negated_guard():
    def k():
        a = reg.scalar(s32, init=1)
        b_ = reg.scalar(s32, init=2)
        p = reg.scalar(pred)
        ptx.setp("lt", s32, p, a, b_)
        d = reg.scalar(s32)
        ptx.selp(s32, d, a, b_, p)
        ptx.selp(s32, d, b_, a, p, pred=reg.NegPred(p))
        f = reg.scalar(f32, init=1.5)
        h = reg.scalar(b16)
        ptx.cvt(f16, f32, h, f, rounding="rn")
        g = ptx.cvt(f32, a)          # ptxdsl's two-argument form stays
        assert isinstance(g, reg.Reg) and g.dtype == f32
    lines = trace(k)
    assert "setp.lt.s32 %p0, %r0, %r1;" in lines
    assert "selp.s32 %r2, %r0, %r1, %p0;" in lines
    assert "@!%p0 selp.s32 %r2, %r1, %r0, %p0;" in lines
    assert "cvt.rn.f16.f32 %rs0, %f0;" in lines
    assert "cvt.rn.f32.s32 %f1, %r0;" in lines


def test_setp_with_an_unknown_comparison_is_a_value_error():
    def k():
        a = reg.scalar(s32, init=1)
        ptx.setp("zz", s32, reg.scalar(pred), a, a)
    with pytest.raises(ValueError, match="setp"):
        kernel(arch="sm_90a")(k).ptx()


def test_mad_expression_form_returns_a_new_register():
    def k():
        a = reg.scalar(u32, init=3)
        d = ptx.mad(a, 4, a)
        assert isinstance(d, reg.Reg) and d.dtype == u32
    assert "mad.lo.u32 %r1, %r0, 4, %r0;" in trace(k)


def test_ld_st_spaces_cvta_elect_and_setmaxnreg():
    def k():
        p = reg.scalar(u64, init=0)
        g = ptx.cvta.to_global(p)
        v = reg.scalar(b32)
        ptx.ld(b32, v, ptx.addr(g))
        ptx.st(b32, ptx.addr(g, 4), v)
        s = smem.alloc(b32, (4,))
        ptx.st(b32, s, v, space="shared")
        e = reg.scalar(b32)
        q = reg.scalar(pred)
        ptx.elect_sync(e, q, 0xFFFFFFFF)
        ptx.setmaxnreg_inc(232)
        ptx.setmaxnreg_dec(40)
    lines = trace(k)
    assert "cvta.to.global.u64 %rd1, %rd0;" in lines
    assert "ld.global.b32 %r0, [%rd1];" in lines
    assert "st.global.b32 [%rd1+4], %r0;" in lines
    assert "st.shared.b32 [smem0], %r0;" in lines
    assert "elect.sync %r1|%p0, 0xffffffff;" in lines
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in lines
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in lines


def test_ld_space_is_checked():
    def k():
        ptx.ld(b32, reg.scalar(b32), ptx.addr(reg.scalar(u64, init=0)), space="texture")
    with pytest.raises(TraceError, match="space= is one of"):
        kernel(arch="sm_90a")(k).ptx()


def test_reading_an_unwritten_register_stays_an_error():
    def k():
        r = reg.array(s32, 3)
        ptx.sub(s32, r[0], r[1], r[2])
    with pytest.raises(ptxdsl.PtxdslError, match="read here before any instruction writes it"):
        kernel(arch="sm_90a")(k).ptx()


# ----------------------------------------------------------------- registers
def test_reg_constructors():
    def k():
        a = reg.alloc(f32)
        arr = reg.alloc_array(b32, 3)
        named = reg.array(f32, 2, name="%acc")
        same = reg.array(b32, 2, name="%r")
        frag = reg.wgmma_frag(m=64, n=32, dtype=f32)
        assert isinstance(a, reg.Reg) and len(arr) == 3 and arr.count == 3
        assert [x.name for x in named] == ["acc0", "acc1"] and named.regs() == list(named)
        assert same[0].name.startswith("r") and len(frag) == 16
        t = reg.from_(ptx.special.tid.x(), u32)
        s = smem.alloc(f32, (8,))
        base = reg.from_(s.name, u32)
        ptx.mov(f32, named[0], 0.0)
        assert t.dtype == u32 and base.dtype == u32
    lines = trace(k, block=(32, 1, 1))
    assert "mov.u32 %r0, %tid.x;" in lines and "mov.u32 %r1, smem0;" in lines
    assert "mov.f32 %acc0, 0f00000000;" in lines


def test_register_arrays_are_declared_whole():
    def k():
        reg.array(f32, 32)                  # never used: declared all the same
        part = reg.alloc_array(u32, 3)      # one used: numbered first, the others after
        ptx.mov(u32, part[2], 1)
        reg.scalar(u32)                     # an unused scalar is not declared
        part[2] * 3                         # a product no one reads: its register is dropped
        reg.scalar(b64, name="spare")
    kern = kernel(arch="sm_90a")(k)
    text = kern.ptx()
    assert ".reg .f32 %f<32>;" in text and ".reg .b32 %r<3>;" in text
    assert "%spare" not in text and "mov.u32 %r0, 1;" in text
    assert "mul" not in text
    kern.interpret()                        # the interpreter runs it as before


def test_wgmma_frag_and_from_refuse_what_cannot_be():
    with pytest.raises(TraceError, match="multiple of 128"):
        kernel(arch="sm_90a")(lambda: reg.wgmma_frag(m=3, n=5, dtype=f32)).ptx()
    with pytest.raises(TraceError, match="no shared array named 'smem'"):
        kernel(arch="sm_90a")(lambda: reg.from_("smem", u32)).ptx()


def test_negpred_is_a_guard_of_a_predicate():
    with pytest.raises(TraceError, match="predicate register"):
        kernel(arch="sm_90a")(lambda: reg.NegPred(reg.scalar(u32, init=0))).ptx()


# ----------------------------------------------------------------- shared memory
def test_smem_names_swizzle_strings_slices_and_mbarrier_index():
    seen = {}

    def k():
        s = smem.alloc(bf16, (2, 64, 64), swizzle="128B")
        assert isinstance(s, smem.SharedAlloc) and s.swizzle == 128 and s.name == "smem0"
        stage = s[1]
        assert isinstance(stage, smem.SharedSlice) and stage.name == "smem0"
        assert stage.shape == (64, 64)
        seen["addr"] = stage.__ptx_addr__()
        bars = smem.mbarrier(3)
        assert isinstance(bars, smem.MbarrierArray)
        assert bars[2].idx == 2 and bars[2].name == bars.name == "smem1"
        x = smem.alloc(f32, (2, 4))
        x[1][2] = reg.scalar(f32, init=1.0)
    lines = trace(k)
    assert seen["addr"].offset == 64 * 64 * 2
    assert "st.shared.f32 [smem2+24], %f0;" in lines


def test_smem_swizzle_names_are_checked():
    with pytest.raises(TraceError, match="'NONE', '32B', '64B', '128B'"):
        kernel(arch="sm_90a")(lambda: smem.alloc(bf16, (8, 64), swizzle="96B")).ptx()


def test_apply_swizzle_matches_the_128_byte_pattern():
    @kernel(out_specs=(Tile(64, u32),), block=(64, 1, 1), arch="sm_90a")
    def k(out):
        (po,) = ptx.global_ptrs(out)
        t = reg.from_(ptx.special.tid.x(), u32)
        ptx.st(u32, ptx.addr(po + t * 4), smem.apply_swizzle(t << 4, "128B"))
    off = np.arange(64, dtype=np.uint32) << 4
    assert np.array_equal(np.asarray(k.interpret()).ravel(), off ^ ((off & 0x380) >> 3))


def test_stmatrix_takes_pyptx_keywords():
    def k():
        s = smem.alloc(b16, (32, 8))
        regs = [reg.scalar(b32, init=i) for i in range(4)]
        ptx.stmatrix(smem=ptx.addr(s), regs=regs, layout="x4.trans")
        ptx.stmatrix(ptx.addr(s, 16), regs[:2])
    lines = trace(k, block=(32, 1, 1))
    assert "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [smem0], {%r0, %r1, %r2, %r3};" \
        in lines
    assert "stmatrix.sync.aligned.m8n8.x2.shared.b16 [smem0+16], {%r0, %r1};" in lines

    def twice():
        s = smem.alloc(b16, (32, 8))
        r = reg.array(b32, 4)
        ptx.stmatrix(ptx.addr(s), r, smem=ptx.addr(s))
    with pytest.raises(TraceError, match=r"dst \(or pyptx's smem=\) exactly once"):
        kernel(arch="sm_90a")(twice).ptx()


def test_pyptx_helpers_spell_setp_and_add_as_pyptx_does():
    def k():
        p = ptx.cluster.rank(0)
        ptx.pipeline(2).advance()
        base = reg.scalar(u32, init=1024)
        ptx.wgmma.masked_descriptor(base, byte_offset=-8192)
        ptx.inst.mov.u32(base, 1, pred=p)
    lines = trace(k, cluster=(2, 1, 1))
    for want in (r"mov.u32 %r\d+, %cluster_ctarank;", r"setp.eq.u32 %p0, %r\d+, 0;",
                 r"setp.eq.u32 %p1, %r\d+, 2;",
                 # -8192 added as its 32-bit two's complement: the bits of pyptx's add
                 r"add.u32 %r\d+, %r\d+, 0xffffe000;"):
        assert any(re.fullmatch(want, x) for x in lines), want


# ----------------------------------------------------------------- TMA, Tile, descriptors
def test_bulk_tensor_wrappers_are_tma_loads_and_stores():
    @kernel(in_specs=(Tile("M", "K", bf16, Layout.TMA_128B, tma_box=(64, 64)),),
            out_specs=(Tile("M", "K", bf16, Layout.TMA_128B, tma_box=(64, 64)),),
            arch="sm_90a")
    def k(A, B):
        s = smem.alloc(bf16, (2, 64, 64), swizzle=128)
        bar = smem.mbarrier(1)
        c = reg.scalar(u32, init=0)
        ptx.cp.async_.bulk.tensor.tile_2d(s[1], A.tma_desc(), (c, c), mbar=bar[0])
        ptx.cp.async_.bulk.tensor.store_2d(B.tma_desc(), s[0], (0, c))
    lines = body(k)
    assert any(ln.startswith("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::"
                             "complete_tx::bytes [smem0+8192], [%rd") for ln in lines)
    assert any(ln.startswith("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd")
               and ln.endswith("], [smem0];") for ln in lines)


def test_tile_metadata_and_col_layout():
    t = Tile("M", "K", bf16, Layout.TMA_128B, tma_box=(128, 64), tma_rank=3)
    assert (t.rank, t.symbolic_dims, t.tma_box) == (2, ("M", "K"), (128, 64))
    assert Tile(128, 64, f32).symbolic_dims == () and Tile(128, 64, f32).tma_box is None
    with pytest.raises(TraceError, match="ptxdsl Tiles are row-major"):
        Tile(128, 64, f32, Layout.COL)


def test_auto_descriptor_is_the_canonical_layouts_descriptor():
    def k():
        a = smem.alloc(bf16, (64, 64), swizzle=128)
        ptx.wgmma.auto_descriptor(a, dtype=bf16, shape=(64, 64), major="K")
        ptx.wgmma.descriptor(a, leading=16, stride=1024, swizzle=128)
        ptx.wgmma.make_descriptor(a, leading_byte_offset=16, stride_byte_offset=1024,
                                  swizzle=1)
    lines = trace(k)
    ors = [ln.split(", ")[-1] for ln in lines if ln.startswith("or.b64")]
    assert len(ors) == 3 and len(set(ors)) == 1


@pytest.mark.parametrize("eb,mn,k,major,want", [
    (2, 64, 8, wl.Major.K, (wl.LayoutType.INTERLEAVE, 16, 128, "NONE", None)),
    (2, 64, 16, wl.Major.K, (wl.LayoutType.B32, 16, 256, "32B", "32B")),
    (2, 64, 32, wl.Major.K, (wl.LayoutType.B64, 16, 512, "64B", "64B")),
    (2, 64, 64, wl.Major.K, (wl.LayoutType.B128, 16, 1024, "128B", "128B")),
    (2, 64, 128, wl.Major.K, (wl.LayoutType.B128, 64 * 128, 1024, "128B", "128B")),
    (2, 8, 16, wl.Major.MN, (wl.LayoutType.INTERLEAVE, 128, 16, "NONE", None)),
    (2, 16, 16, wl.Major.MN, (wl.LayoutType.B32, 16, 256, "32B", "32B")),
])
def test_gmma_layouts(eb, mn, k, major, want):
    la = wl.pick_gmma_layout(elem_bytes=eb, m_or_n=mn, k=k, major=major)
    assert (la.layout_type, la.leading_byte_offset, la.stride_byte_offset, la.tma_swizzle,
            la.smem_swizzle) == want
    assert la.swizzle_code == int(want[0])


def test_gmma_layout_helpers_and_errors():
    assert wl.layout_for_a(dtype=f32, m=64, k=8).layout_type == wl.LayoutType.B32
    assert wl.layout_for_b(dtype=bf16, k=16, n=8).leading_byte_offset == 128
    with pytest.raises(ValueError, match="not one of the canonical"):
        wl.pick_gmma_layout(elem_bytes=2, m_or_n=64, k=12, major=wl.Major.K)
    with pytest.raises(ValueError, match="M divisible by 8"):
        wl.pick_gmma_layout(elem_bytes=2, m_or_n=63, k=16, major=wl.Major.K)
    with pytest.raises(ValueError, match="K divisible by 8"):
        wl.pick_gmma_layout(elem_bytes=2, m_or_n=8, k=15, major=wl.Major.MN)


# ----------------------------------------------------------------- intrinsics
def test_intrinsic_marks_its_first_and_last_instruction():
    @intrinsic
    def two(r):
        ptx.mov(b32, r[0], 1)
        ptx.mov(b32, r[1], 2)
        return "done"

    assert two.__is_ptx_intrinsic__ and ptx.intrinsic is intrinsic

    @intrinsic
    def outer(r):
        return two(r)

    def k():
        assert two(reg.array(b32, 2)) == "done"
        assert outer(reg.array(b32, 2)) == "done"
    assert trace(k)[:10] == [
        "// BEGIN two", "mov.b32 %r0, 1;", "mov.b32 %r1, 2;", "// END two",
        "// BEGIN outer", "// BEGIN two", "mov.b32 %r2, 1;", "mov.b32 %r3, 2;",
        "// END two", "// END outer"]
    calls = []
    assert intrinsic(lambda: calls.append(1) or 42)() == 42 and calls == [1]


# ----------------------------------------------------------------- kernels
def test_template_kwargs_specialise_and_cache():
    @kernel(arch="sm_90a")
    def k(*, N=2, BM=64):
        r = reg.array(b32, N)
        for i in range(N):
            ptx.mov(b32, r[i], BM + i)

    assert k.template_params == {"N": 2, "BM": 64}
    params = k.template_params
    params["N"] = 9
    assert k.template_params["N"] == 2
    assert k.ptx().count("mov.b32") == 2 and k.ptx(N=4).count("mov.b32") == 4
    assert "mov.b32 %r0, 0x80;" in k.ptx(BM=128)
    assert k.module() is k.module(N=2) and k.module(N=3) is not k.module()
    with pytest.raises(TypeError, match="no template parameter or dim named 'NOPE'.*BM, N"):
        k.ptx(NOPE=1)


def test_named_dims_are_accepted_keywords_and_positionals_without_specs_are_placeholders():
    @kernel(in_specs=(Tile("M", f32),), out_specs=(Tile("M", f32),), arch="sm_90a")
    def k(x, y, *, U=1):
        pass
    assert k.ptx(M=128) == k.ptx()
    with pytest.raises(TraceError, match="dim M of kernel k is a positive int"):
        k.ptx(M=0)
    seen = {}

    @kernel(arch="sm_90a")
    def p(A, B, *, BM=128):
        seen["A"] = A
    p.ptx()
    assert isinstance(seen["A"], TensorSpec) and seen["A"].name == "A"
    assert "A" not in p.template_params


def test_template_parameters_need_defaults():
    def k(*, BM):
        pass
    with pytest.raises(TraceError, match="needs a default"):
        kernel(arch="sm_90a")(k)


def test_bare_kernel_decorator_and_arch_auto():
    @kernel
    def k():
        ptx.ret()
    assert isinstance(k, ptxdsl.Kernel) and ".target sm_90a" in k.ptx()
    if not ptxdsl.gpu_available():
        with pytest.raises(TraceError, match="arch='auto' reads the arch of GPU 0"):
            kernel(arch="auto")


# ----------------------------------------------------------------- more of pyptx's names
def test_pipe_expr_scope_record_what_pyptx_records():
    def k():
        r = reg.scalar(u32, init=5000)
        a, b_, c = reg.scalar(u32), reg.scalar(u32), reg.scalar(u32)
        with ptx.expr():
            end = ptx.pipe(r).add.s32(a, -8192).and_.b32(b_, 0x3FF80).shr.u32(c, 4)
        assert end.reg is c
        for v in (1, 2):
            with ptx.scope():
                ptx.mov(b32, reg.scalar(b32, name="tmp"), v)
    lines = trace(k)
    assert lines[:6] == ["mov.u32 %r0, 5000;", "add.s32 %r1, %r0, -8192;",
                         "and.b32 %r2, %r1, 0x3ff80;", "shr.u32 %r3, %r2, 4;",
                         "mov.b32 %tmp, 1;", "mov.b32 %tmp_1, 2;"]
    with pytest.raises(IsaError):   # each step is checked as ptx.inst checks it
        trace(lambda: ptx.pipe(reg.scalar(u32, init=1)).add.q32(reg.scalar(u32), 1))


def test_smem_load_store_and_barrier_and_layout_attributes():
    def k():
        s = smem.alloc(u32, (4,))
        v = reg.scalar(u32, init=7)
        smem.store(u32, ptx.addr(s, 4), v)
        w = smem.load(u32, ptx.addr(s, 4))
        ptx.mov(u32, v, w)
        bars = smem.mbarrier(2)
        assert bars[1].array is bars and bars[1].idx == 1 and bars.byte_offset == 0
        assert isinstance(bars[1], smem.MbarrierRef) and bars[1].byte_offset == 8
        t = smem.wgmma_tile(bf16, (64, 64), major="K")
        assert t.gmma_major == "K" and t.gmma_layout == wl.layout_for_a(dtype=bf16, m=64, k=64)
        assert s.gmma_layout is None and s.gmma_major is None and s.byte_offset == 0
        nb = ptx.named_barrier(1, count=64)
        assert isinstance(nb, ptx.NamedBarrier) and nb.barrier_id == 1
        assert ptx.PipelineState(3).n_stages == 3
        assert (ptx.ctaid_x().name, ptx.ctaid_y().name) == ("ctaid.x", "ctaid.y")
        assert ptx.cp.async_bulk is ptx.cp.async_.bulk
        assert ptx.cluster.map_shared_u32 is ptx.cluster.map_shared
    lines = trace(k)
    assert "st.shared.u32 [smem0+4], %r0;" in lines and "ld.shared.u32 %r1, [smem0+4];" in lines


def test_make_descriptor_offsets_and_swizzle_codes():
    def k():
        s = smem.alloc(bf16, (64, 64), swizzle=128)
        ptx.wgmma.make_descriptor(s, leading_byte_offset=16, stride_byte_offset=1024,
                                  swizzle=ptx.wgmma.SWIZZLE_128B, base_offset=0,
                                  addr_byte_offset=2048)
    assert (ptx.wgmma.SWIZZLE_NONE, ptx.wgmma.SWIZZLE_128B, ptx.wgmma.SWIZZLE_64B,
            ptx.wgmma.SWIZZLE_32B) == (0, 1, 2, 3)
    assert any(re.fullmatch(r"add.u32 %r1, %r0, 2048;", x) for x in trace(k))


def test_small_pyptx_names_of_types_kernels_and_placeholders():
    from ptxdsl.types import from_name
    assert from_name("f32") is f32 and from_name(".bf16") is bf16
    assert ptxdsl.detect_arch is ptxdsl.dsl.template.auto_arch
    spec = TensorSpec("A")
    assert (spec.name, spec.shape, spec.dtype, spec.layout) == ("A", None, None, None)
    assert kernel(arch="sm_90a", extern_smem="s", smem=256)(lambda: None).smem == 256
    assert kernel(arch="sm_90a")(lambda: None).smem is None


def test_bar_sync_and_arrive_take_a_guard_predicate():
    """``ptx.bar.sync(1, 128, pred=p)`` (pyptx's spelling for one role's named barrier) is
    ``@p bar.sync 1, 128``, and ``bar.arrive`` likewise; the text assembles for sm_90a."""
    from ptxdsl.toolchain import find_ptxas

    def k():
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        store_wg = reg.scalar(pred)
        ptx.inst.setp.ge.u32(store_wg, tid, 128)
        ptx.bar.sync(1, 128, pred=store_wg)
        ptx.bar.arrive(2, 128, pred=~store_wg)

    lines = trace(k)
    assert any(re.fullmatch(r"@%p\d+ bar\.sync 1, 128;", ln) for ln in lines), lines
    assert any(re.fullmatch(r"@%p\d+ bar\.arrive 2, 128;", ln) for ln in lines), lines
    if find_ptxas():
        kernel(arch="sm_90a")(k).check()
