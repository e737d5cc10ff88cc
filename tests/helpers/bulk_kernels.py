"""1-D bulk copy and TMA reduction kernels (sm_90a), shared by the interpreter tests
(tests/interp/test_bulk.py) and the GPU differential tests
(tests/gpu/test_bulk_interp_gpu.py). The ``# bulk-load``, ``# bulk-store``, ``# reuse``
and ``# reduce`` markers are the lines test_bulk.py expects located errors to name."""
from __future__ import annotations

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import b64, pred, u32

N = 128                      # words per copy (512 bytes)


def _tid():
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    return t


def _wait(bar):
    done = reg.scalar(pred)
    top = ptx.new_label("w")
    ptx.place(top)
    ptx.inst.mbarrier.try_wait.parity.shared__cta.b64(done, ptx.addr(bar), 0)
    ptx.bra(top, pred=~done)


def bulk_load(size=N * 4):
    """Thread 0 copies X into shared memory with one 1-D bulk copy completing on an
    mbarrier; every thread waits and copies its word to Y."""
    @kernel(in_specs=(Tile(N, u32),), out_specs=(Tile(N, u32),), block=(N, 1, 1),
            arch="sm_90a")
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        buf = smem.alloc(u32, (N,), align=128)
        bar = smem.alloc(b64, (1,), align=8)
        tid = _tid()
        with ptx.if_(tid == 0):
            ptx.inst.mbarrier.init.shared__cta.b64(ptx.addr(bar.base), 1)
            n = reg.scalar(u32, init=size)
            ptx.inst.mbarrier.arrive.expect_tx.shared__cta.b64(ptx.sink, ptx.addr(bar.base),
                                                               N * 4)
            op = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
            ptx.inst(op, ptx.addr(buf.base), ptx.addr(px), n, ptx.addr(bar.base))  # bulk-load
        ptx.bar.sync(0)
        _wait(bar.base)
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), buf[tid])
    return k


def bulk_store(wait_read=True, fence=True):
    """Every thread writes its word to shared memory, thread 0 stores the buffer with a
    1-D bulk copy (bulk group), then the buffer is written again: after wait_group.read
    and a barrier, or (``wait_read=False``) after the barrier only."""
    @kernel(in_specs=(), out_specs=(Tile(N, u32), Tile(N, u32)), block=(N, 1, 1),
            arch="sm_90a")
    def k(Y, Z):
        py, pz = ptx.global_ptrs(Y, Z)
        buf = smem.alloc(u32, (N,), align=128)
        tid = _tid()
        buf[tid] = tid * 5
        if fence:
            ptx.inst.fence.proxy.async_.shared__cta()
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            op = "cp.async.bulk.global.shared::cta.bulk_group"
            ptx.inst(op, ptx.addr(py), ptx.addr(buf.base), N * 4)  # bulk-store
            ptx.inst.cp.async_.bulk.commit_group()
            if wait_read:
                ptx.inst.cp.async_.bulk.wait_group.read(0)
        ptx.bar.sync(0)
        buf[tid] = tid  # reuse
        ptx.inst.st.global_.u32(ptx.addr(pz + tid * 4), buf[tid])
        with ptx.if_(tid == 0):
            ptx.inst.cp.async_.bulk.wait_group(0)
    return k


# ---------------------------------------------------------------- TMA reductions
def tma_reduce(op: str, dtype, box=(8, 16), store_row=0):
    """C (through its tensor map) op= the 8x16 box of X, staged in shared memory by 128
    threads (one element each) and reduced by thread 0 at row ``store_row``."""
    t = TMA(box=box, swizzle=0)

    @kernel(in_specs=(Tile(box[0] * box[1], dtype),),
            out_specs=(Tile("M", "N", dtype, tma=t),), block=(128, 1, 1), arch="sm_90a")
    def k(X, C):
        c_desc = C.tma_desc()
        (px,) = ptx.global_ptrs(X)
        tile = smem.alloc(dtype, box, align=128)
        tid = _tid()
        e = dtype.bytes
        v = reg.scalar({1: u32, 2: u32, 4: u32, 8: b64}[e] if e != 2 else
                       __import__("ptxdsl.types", fromlist=["u16"]).u16)
        kind = {2: "b16", 4: "b32", 8: "b64"}[e]
        getattr(ptx.inst.ld.global_, kind)(v, ptx.addr(px + tid * e))
        getattr(ptx.inst.st.shared, kind)(ptx.addr(tile.base + tid * e), v)
        ptx.inst.fence.proxy.async_.shared__cta()
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            red = f"cp.reduce.async.bulk.tensor.2d.global.shared::cta.{op}.tile.bulk_group"
            ptx.inst(red, ptx.addr(c_desc, coords=[0, store_row]), ptx.addr(tile.base))  # reduce
            ptx.inst.cp.async_.bulk.commit_group()
            ptx.inst.cp.async_.bulk.wait_group(0)
    return k


# ---------------------------------------------------------------- 1-D bulk reductions
def bulk_reduce(op: str, type_: str, size=N * 4):
    """C op= X elementwise: 128 threads stage X's words in shared memory, thread 0 reduces
    the buffer into C with one 1-D ``cp.reduce.async.bulk`` (a bulk group)."""
    @kernel(in_specs=(Tile(N, u32),), out_specs=(Tile(N, u32),), block=(N, 1, 1),
            arch="sm_90a")
    def k(X, C):
        px, pc = ptx.global_ptrs(X, C)
        buf = smem.alloc(u32, (N,), align=128)
        tid = _tid()
        v = reg.scalar(u32)
        ptx.inst.ld.global_.u32(v, ptx.addr(px + tid * 4))
        buf[tid] = v
        ptx.inst.fence.proxy.async_.shared__cta()
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            red = f"cp.reduce.async.bulk.global.shared::cta.bulk_group.{op}.{type_}"
            ptx.inst(red, ptx.addr(pc), ptx.addr(buf.base), size)  # bulk-reduce
            ptx.inst.cp.async_.bulk.commit_group()
            ptx.inst.cp.async_.bulk.wait_group(0)
    return k
