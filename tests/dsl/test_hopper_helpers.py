"""The Hopper helper modules record exactly what their docstrings list (mbarrier,
pipeline, cluster, tma, fence, loops, warpgroup, epilogue, smem.mbarrier, reg helpers),
refuse bad input with located errors, and a warp-specialised TMA kernel written with
them assembles."""
from __future__ import annotations

import re

import pytest

from ptxdsl import kernel, ptx, reg, smem, toolchain
from ptxdsl.core.errors import PtxdslError, TraceError
from ptxdsl.specs import Layout, Tile
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import b16, bf16, f32, s32, u32

needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas")


def body_of(fn, *, specs=(), block=(256, 1, 1), **kw) -> list[str]:
    """The instruction lines ``fn`` records (comments stripped)."""
    kw.setdefault("arch", "sm_90a")
    k = kernel(in_specs=specs, block=block, **kw)(fn)
    text = k.ptx()
    body = text[text.index("{", text.index(".entry")) + 1:text.rindex("}")]
    out = []
    for line in body.splitlines():
        line = line.split("//")[0].strip()
        if line and not line.startswith(".reg") and not line.startswith(".shared"):
            out.append(line)
    return out


def has(lines, *pattern) -> bool:
    """Whether ``pattern`` (regexes) occurs as consecutive lines."""
    pats = [re.compile(p) for p in pattern]
    for i in range(len(lines) - len(pats) + 1):
        if all(p.fullmatch(lines[i + j]) for j, p in enumerate(pats)):
            return True
    return False


R = r"%r\d+"


# ---------------------------------------------------------------- mbarrier
def test_mbarrier_array_static_and_dynamic_slots():
    def k():
        base = reg.scalar(u32)
        ptx.inst.mov.u32(base, ptx.special.tid.x())
        bars = ptx.mbarrier.array(base, 64, 3)
        bars.init_all(2)
        bars[1].arrive_expect_tx(4096)
        stage = reg.scalar(u32, init=1)
        bars.at(stage).wait(stage)
    lines = body_of(k)
    assert has(lines, rf"mbarrier.init.shared::cta.b64 \[{R}\+64\], 2;",
               rf"mbarrier.init.shared::cta.b64 \[{R}\+72\], 2;",
               rf"mbarrier.init.shared::cta.b64 \[{R}\+80\], 2;")
    assert has(lines, rf"mbarrier.arrive.expect_tx.shared::cta.b64 %rd\d+, \[{R}\+72\], 4096;")
    assert has(lines, rf"shl.b32 {R}, {R}, 3;", rf"add.u32 {R}, {R}, {R};",
               r"\$L__mbar_wait\d+:",
               rf"mbarrier.try_wait.parity.shared::cta.b64 %p\d+, \[{R}\+64\], {R};",
               r"@!%p\d+ bra \$L__mbar_wait\d+;")


def test_mbarrier_functions_take_smem_mbarrier_slots():
    def k():
        bar = smem.mbarrier(2)
        ptx.mbarrier.init(bar[0], 1)
        ptx.mbarrier.arrive(bar[1])
        ptx.mbarrier.expect_tx(bar[0], 128)
        ptx.mbarrier.wait(bar[0], 0)
    lines = body_of(k)
    assert "mbarrier.init.shared::cta.b64 [smem0], 1;" in lines
    assert any(re.fullmatch(r"mbarrier.arrive.shared::cta.b64 %rd\d+, \[smem0\+8\];", x)
               for x in lines)
    assert "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [smem0], 128;" in lines


def test_remote_arrive_maps_the_address_into_the_peer_cta():
    def k():
        base = reg.scalar(u32, init=0)
        lane = reg.scalar(u32)
        ptx.inst.mov.u32(lane, ptx.special.laneid())
        p = lane < 2
        ptx.mbarrier.array(base, 16, 2).arrive_remote_all(lane, 1, pred=p)
    lines = body_of(k)
    for off in (16, 24):
        assert has(lines, rf"add.u32 {R}, {R}, {off};",
                   rf"@%p\d+ mapa.shared::cluster.u32 {R}, {R}, {R};",
                   rf"@%p\d+ mbarrier.arrive.shared::cluster.b64 _, \[{R}\], 1;")


def test_guarded_wait_skips_the_loop_where_false():
    def k():
        bars = smem.mbarrier(1)
        t = reg.scalar(u32)
        ptx.inst.mov.u32(t, ptx.special.tid.x())
        bars[0].wait(0, pred=t == 0)
    lines = body_of(k)
    assert has(lines, r"@!%p0 bra \$L__endif\d+;", r"\$L__mbar_wait\d+:")


def test_mbarrier_errors():
    with pytest.raises(TraceError, match="8-byte aligned"):
        body_of(lambda: ptx.mbarrier.array(reg.scalar(u32, init=0), 4, 2))
    with pytest.raises(TraceError, match="out of range"):
        body_of(lambda: smem.mbarrier(2)[2])
    with pytest.raises(TraceError, match="shared-memory address"):
        body_of(lambda: ptx.mbarrier.array(1.5, 0, 2))


# ---------------------------------------------------------------- pipeline, loops
def test_pipeline_advance_records_the_ring_update():
    def k():
        c = reg.scalar(u32, init=0)
        ph = reg.scalar(u32, init=0)
        st, p = ptx.pipeline(3, cursor=c, phase=ph).advance()
        assert p is ph
    lines = body_of(k)
    assert has(lines, r"setp.eq.u32 %p0, %r0, 3;", r"selp.u32 %r2, 1, 0, %p0;",
               r"xor.b32 %r1, %r1, %r2;", r"selp.u32 %r3, 0, %r0, %p0;",
               r"add.s32 %r0, %r3, 1;")


def test_loop_and_kloop_structure():
    def k():
        n = reg.scalar(s32, init=7)
        i = reg.scalar(u32, init=0)
        with ptx.loop("top"):
            ptx.bra("out", pred=(i == 3))
            i += 1
        ptx.label("out")
        ptx.kloop(n, unroll=4, loop_label="kl", body=lambda: ptx.inst.add.u32(i, i, 1))
        ptx.kloop(3, unroll=2, body=lambda: ptx.inst.add.u32(i, i, 2))
    lines = body_of(k)
    assert has(lines, "top:", r"setp.eq.b32 %p\d+, %r\d+, 3;", r"@%p\d+ bra out;",
               r"add.u32 %r\d+, %r\d+, 1;", "bra.uni top;", "out:")
    assert has(lines, r"and.b32 %r\d+, %r0, 3;", r"sub.s32 %r\d+, %r0, %r\d+;",
               r"setp.ge.s32 %p\d+, %r0, 4;")
    assert has(lines, "kl:", *[rf"add.u32 {R}, {R}, 1;"] * 4, rf"sub.s32 {R}, {R}, 4;",
               r"setp.ne.s32 %p\d+, %r\d+, 0;", r"@%p\d+ bra kl;")
    assert sum(x.endswith(", 1;") and x.startswith("add.u32") for x in lines) == 1 + 4 + 3
    assert sum(x.endswith(", 2;") and x.startswith("add.u32") for x in lines) == 3
    with pytest.raises(TraceError, match="power of two"):
        body_of(lambda: ptx.kloop(reg.scalar(u32, init=1), unroll=3, body=lambda: None))


# ---------------------------------------------------------------- cluster, fence, warpgroup
def test_cluster_fence_and_warpgroup_helpers():
    def k():
        ptx.fence.mbarrier_init()
        ptx.fence.proxy_async_shared_cta()
        ptx.cluster.sync()
        ptx.cluster.arrive(relaxed=True, aligned=True)
        ptx.cluster.wait(aligned=True)
        p = ptx.cluster.is_rank(1)
        ptx.setmaxnreg(240, inc=True)
        ptx.setmaxnreg(24, inc=False, pred=p)
        wid = reg.scalar(u32, init=2)
        ptx.named_barrier(wid, count=128).sync()
        ptx.named_barrier(3, count=64).arrive()
        ptx.cluster.map_shared(wid, 1)
    lines = body_of(k, cluster=(2, 1, 1))
    assert lines[:5] == ["fence.mbarrier_init.release.cluster;", "fence.proxy.async.shared::cta;",
                         "barrier.cluster.arrive;", "barrier.cluster.wait;",
                         "barrier.cluster.arrive.relaxed.aligned;"]
    assert has(lines, r"mov.u32 %r0, %cluster_ctarank;", r"setp.eq.u32 %p0, %r0, 1;",
               r"setmaxnreg.inc.sync.aligned.u32 240;",
               r"@%p0 setmaxnreg.dec.sync.aligned.u32 24;")
    assert has(lines, r"mov.u32 %r1, 2;", r"bar.sync %r1, 128;", r"bar.arrive 3, 64;",
               rf"mapa.shared::cluster.u32 {R}, %r1, 1;")
    with pytest.raises(TraceError, match="needs the barrier's thread count"):
        body_of(lambda: ptx.named_barrier(1).arrive())


# ---------------------------------------------------------------- TMA
TILE = Tile("M", "K", bf16, tma=TMA(box=(64, 64), swizzle=128))


def test_tma_load_store_and_multicast():
    def k(A):
        d = A.tma_desc()
        bar = smem.mbarrier(1)
        buf = reg.scalar(u32, init=1024)
        x = reg.scalar(u32, init=0)
        ptx.tma.load(buf, d, (x, 64), bar[0])
        mask = reg.scalar(b16)
        ptx.inst.mov.b16(mask, 3)
        ptx.tma.load(buf, A, (0, x), bar[0], multicast=mask)
        ptx.tma.store(d, (x, 0), buf)
        ptx.tma.commit()
        ptx.tma.wait(0, read=True)
    lines = body_of(k, specs=(TILE,), cluster=(2, 1, 1))
    t = r"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    assert has(lines, rf"{t} \[%r0\], \[%rd1, \{{%r1, 64\}}\], \[smem0\];")
    assert has(lines, rf"{t}.multicast::cluster \[%r0\], \[%rd1, \{{0, %r1\}}\], \[smem0\], %rs0;")
    assert has(lines, r"cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group "
                      r"\[%rd1, \{%r1, 0\}\], \[%r0\];", "cp.async.bulk.commit_group;",
               "cp.async.bulk.wait_group.read 0;")


def test_collective_tma_load_into_shared_cta():
    """Blackwell's ``ptx.tma.load_cta`` (and pyptx's ``ptx.cp.async_.bulk.tensor_2d.
    shared_cta_global_tile``): ``.shared::cta`` destination, ``.cta_group::2``, the peer
    CTA's barrier through mapa; assembles for sm_100a; refused on sm_90a by the table."""
    from ptxdsl.core.errors import IsaError
    from ptxdsl.toolchain import find_ptxas

    def k(A):
        buf = reg.scalar(u32, init=1024)
        mine = reg.scalar(u32, init=2048)            # this CTA's barrier's address
        peer = ptx.cluster.map_shared_u32(mine, 0)
        ptx.tma.load_cta(buf, A.tma_desc(), (0, 64), peer, cta_group=2)
        ptx.cp.async_.bulk.tensor_2d.shared_cta_global_tile(dst=buf, src=A.tma_desc(),
                                                             coord=(64, 0), mbar=peer)
    lines = body_of(k, specs=(TILE,), cluster=(2, 1, 1), arch="sm_100a")
    t = r"cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes"
    assert has(lines, rf"{t}.cta_group::2 \[%r0\], \[%rd\d+, \{{0, 64\}}\], \[%r\d+\];")
    assert has(lines, rf"{t}.cta_group::1 \[%r0\], \[%rd\d+, \{{64, 0\}}\], \[%r\d+\];")
    if find_ptxas():
        kernel(in_specs=(TILE,), block=(256, 1, 1), cluster=(2, 1, 1), arch="sm_100a")(k).check()
    with pytest.raises((IsaError, TraceError)):
        body_of(k, specs=(TILE,), cluster=(2, 1, 1), arch="sm_90a")
    with pytest.raises(TraceError, match="cta_group is 1 or 2"):
        body_of(lambda A: ptx.tma.load_cta(0, A.tma_desc(), (0, 0), 0, cta_group=3),
                specs=(TILE,), arch="sm_100a")


def test_pyptx_tma_spellings():
    spec = Tile("M", "K", bf16, Layout.TMA_128B, tma_box=(128, 64), tma_rank=3)

    def k(A):
        bar = smem.mbarrier(1)
        dst = reg.scalar(u32, init=0)
        row = reg.scalar(u32, init=0)
        ptx.tma.load_3d(dst=dst, src=A.tma_desc(), coords=(0, row, 1), mbar=bar[0])
        mask = reg.scalar(b16)
        ptx.inst.mov.u16(mask, 3)
        ptx.tma.load_3d_multicast(dst=dst, src=A.tma_desc(), coords=(0, row, 2), mbar=bar[0],
                                  mask=mask, issuer=0)
        ptx.tma.store_3d(dst=A.tma_desc(), src=dst, row=row, col=row)
        ptx.cp.async_.bulk.tensor_3d(dst=dst, src=A.tma_desc(), coord=(0, row, 3), mbar=bar[0])
    lines = body_of(k, specs=(spec,), cluster=(2, 1, 1))
    assert sum("cp.async.bulk.tensor.3d.shared::cluster" in x for x in lines) == 3
    assert has(lines, r"mov.u32 %r\d+, %cluster_ctarank;", r"setp.eq.u32 %p0, %r\d+, 0;",
               r"@%p0 cp.async.bulk.tensor.3d.*multicast::cluster .*;")
    assert has(lines, rf"shr.u32 {R}, %r1, 6;",
               r"cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group \[%rd1, "
               r"\{0, %r1, %r\d+\}\], \[%r0\];")
    with pytest.raises(TraceError, match="coord= with 3 values"):
        body_of(lambda A: ptx.cp.async_.bulk.tensor_3d(dst=0, src=A, coord=(1,)), specs=(spec,))


# ---------------------------------------------------------------- registers, epilogue
def test_reg_max_min_and_hw_order():
    def k():
        n = reg.scalar(s32, init=5)
        n.max(2)
        n.min(n)
        acc = reg.array(f32, 4)
        rev = acc.hw_order(reverse=True)
        assert [r.name for r in rev] == [r.name for r in reversed(list(acc))]
        assert rev.__ptx_regs__() == list(reversed(list(acc)))
    lines = body_of(k)
    assert "max.s32 %r1, %r0, 2;" in lines and "min.s32 %r2, %r0, %r0;" in lines


def test_stmatrix_epilogue_records_cvt_pack_stmatrix():
    def k():
        acc = reg.array(f32, 16)
        for r in acc:
            ptx.inst.mov.f32(r, 1.0)
        lane = reg.scalar(u32)
        ptx.inst.mov.u32(lane, ptx.special.tid.x())
        base = reg.scalar(u32, init=0)
        tmp = [reg.scalar(b16) for _ in range(8)]
        ptx.stmatrix_x4_trans_f32_bf16(frag=acc.hw_order(reverse=True), smem_base=base,
                                       lane=lane, row_stride=72, tmp_bf16=tmp)
    lines = body_of(k, block=(128, 1, 1))
    st = [x for x in lines if x.startswith("stmatrix")]
    assert len(st) == 2 and st[0].startswith(
        "stmatrix.sync.aligned.m8n8.x4.trans.shared::cta.b16 [%r")
    assert st[1].split("]")[0].endswith(f"+{72 * 32}")
    assert sum(x.startswith("cvt.rn.bf16.f32") for x in lines) == 16
    assert has(lines, rf"mad.lo.s32 {R}, {R}, 16, 0;")
    with pytest.raises(TraceError, match="multiple of 8"):
        body_of(lambda: ptx.stmatrix_x4_trans_f32_bf16(
            frag=reg.array(f32, 4), smem_base=0, lane=reg.scalar(u32, init=0), row_stride=8))


# ---------------------------------------------------------------- a whole kernel
def test_warp_specialised_tma_kernel_traces_and_assembles():
    from hopper_kernels import build_tma_copy
    k = build_tma_copy()
    text = k.ptx()
    for needle in (".param .align 64 .b8 A_tmap[128]", ".param .align 64 .b8 C_tmap[128]",
                   ".extern .shared .align 128 .b8 smem[];", "barrier.cluster.arrive;",
                   "setmaxnreg.dec.sync.aligned.u32 40;", "produce_loop:", "consume_loop:",
                   "cp.async.bulk.wait_group.read 0;", "bar.sync 1, 128;"):
        assert needle in text, needle
    if toolchain.find_ptxas() is not None:
        k.check()


def test_pyptx_helper_errors_name_the_users_line():
    def k():
        ptx.tma.load_3d_multicast(dst=0, src=0, coords=(0, 0, 0), mbar=None)
    with pytest.raises(PtxdslError) as e:
        body_of(k)
    assert "test_hopper_helpers.py" in str(e.value)



def test_warp_specialised_kernel_launch_on_the_fake_gpu(monkeypatch, tmp_path):
    """The whole host side at once: two tensor maps filled and re-pointed, the cluster
    attribute and the dynamic shared memory on every launch, the fast path taken."""
    import sys

    import numpy as np
    from hopper_kernels import SMEM_BYTES, build_tma_copy
    from ptxdsl.runtime import cache as rcache
    from runtime_fakes import fake_driver, fake_torch_module
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PTXDSL_COMPILER", "jit")
    monkeypatch.setattr(rcache, "MODULES", rcache.ModuleCache())
    monkeypatch.setattr(rcache, "DISK", rcache.DiskCache())
    _, cu = fake_driver(monkeypatch)
    torch = fake_torch_module()
    monkeypatch.setitem(sys.modules, "torch", torch)
    k = build_tma_copy("tma_copy_fake")
    cu.register(k)
    kinds = [p.kind for p in k.program().params]
    for i in range(3):
        a = torch.tensor_on(np.zeros((200, 256), np.uint16))
        a.dtype = torch.bfloat16
        c = k(a)
        rec = cu.launches[-1]
        assert rec["cluster"] == (2, 1, 1) and rec["grid"] == (4, 1, 1)
        assert rec["smem"] == SMEM_BYTES
        maps = [cu.decode_tmap(v) for v, kind in zip(rec["params"], kinds) if kind == "tmap"]
        assert [m["address"] for m in maps] == [a.data_ptr(), c.data_ptr()]
        assert maps[0]["dims"] == [256, 200] and maps[0]["box"] == [64, 64]
        assert maps[0]["swizzle"] == "CU_TENSOR_MAP_SWIZZLE_128B"
    assert k.runtime_cache["launcher"].slow_calls == 1
    # A and C have the same shape, box and swizzle: one encoding serves both maps
    assert len(cu.tmap_encodes) == 1

