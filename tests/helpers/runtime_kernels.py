"""Small DSL kernels the runtime tests (CPU fakes and tests/gpu) and the launch benchmark share."""
from __future__ import annotations

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.types import b16, bf16, f32, u32, u64

BLOCK = 256


def build_vadd(name: str = "vadd", arch: str = "sm_90a", cooperative: bool = False,
               pdl: str | None = None, trigger: bool = True, resident: int | None = None):
    """C = A + B over a dynamic length N (one thread per element, guarded tail).

    ``pdl`` (not None): launched as a programmatic dependent (``pdl=True``), each thread
    executing ``griddepcontrol.wait`` where it says: "first" (before any global access,
    correct), "after_load" (after reading A: the interpreter's error), "none" (never: a
    trace error); ``trigger``: let the next kernel start once the loads are issued."""

    @kernel(in_specs=(Tile("N", f32), Tile("N", f32)), out_specs=(Tile("N", f32),),
            grid=lambda N: ((N + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch=arch,
            name=name, cooperative=cooperative, pdl=pdl is not None, resident=resident)
    def vadd(A, B, C):
        pa, pb, pc = ptx.global_ptrs(A, B, C)
        n = ptx.dim("N")
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        gid = cta * BLOCK + tid
        if pdl == "first":
            ptx.inst.griddepcontrol.wait()
        with ptx.if_(gid < n):
            off = gid * 4
            a = reg.scalar(f32); ptx.inst.ld.global_.f32(a, ptx.addr(pa + off))
            if pdl == "after_load":
                ptx.inst.griddepcontrol.wait()
            b = reg.scalar(f32); ptx.inst.ld.global_.f32(b, ptx.addr(pb + off))
            if pdl is not None and trigger:
                ptx.inst.griddepcontrol.launch_dependents()
            ptx.inst.st.global_.f32(ptx.addr(pc + off), a + b)

    return vadd


def build_pdl_vadd(name: str = "pdl_vadd", wait: str = "first", trigger: bool = True):
    """:func:`build_vadd` as a programmatic dependent, its wait at ``wait``."""
    return build_vadd(name, pdl=wait, trigger=trigger)


def build_vadd4(name: str = "vadd4", arch: str = "sm_90a"):
    """C = A + B with 16-byte ld/st.global.v4.f32; N counts float4 groups (Tile is (N, 4))."""

    @kernel(in_specs=(Tile("N", 4, f32), Tile("N", 4, f32)), out_specs=(Tile("N", 4, f32),),
            grid=lambda N: ((N + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch=arch,
            name=name)
    def vadd4(A, B, C):
        pa, pb, pc = ptx.global_ptrs(A, B, C)
        n = ptx.dim("N")
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        gid = cta * BLOCK + tid
        with ptx.if_(gid < n):
            off = gid * 16
            a = [reg.scalar(f32) for _ in range(4)]
            b = [reg.scalar(f32) for _ in range(4)]
            ptx.inst.ld.global_.v4.f32(a, ptx.addr(pa + off))
            ptx.inst.ld.global_.v4.f32(b, ptx.addr(pb + off))
            ptx.inst.st.global_.v4.f32(ptx.addr(pc + off), [x + y for x, y in zip(a, b)])

    return vadd4


def build_scale_rows(n: int = 64, name: str = "scale_rows", arch: str = "sm_90a"):
    """Y = 2 * X for X with M rows of n floats and a run-time row stride (rows may be a
    slice of a wider tensor); one CTA per row, one thread per element."""

    @kernel(in_specs=(Tile("M", n, f32, stride="sx"),), out_specs=(Tile("M", n, f32),),
            grid=lambda M: (M, 1, 1), block=(n, 1, 1), arch=arch, name=name)
    def scale_rows(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        sx = X.row_stride
        row = reg.scalar(u32); ptx.inst.mov.u32(row, ptx.special.ctaid.x())
        col = reg.scalar(u32); ptx.inst.mov.u32(col, ptx.special.tid.x())
        src = (row * sx + col) * 4
        dst = (row * n + col) * 4
        x = reg.scalar(f32); ptx.inst.ld.global_.f32(x, ptx.addr(px + src))
        ptx.inst.st.global_.f32(ptx.addr(py + dst), x + x)

    return scale_rows


def build_fault(name: str = "bad_store", arch: str = "sm_90a"):
    """Stores 2**47 bytes past its output: an illegal address on any GPU."""

    @kernel(in_specs=(Tile(1, f32),), out_specs=(Tile(1, f32),), grid=1, block=1, arch=arch,
            name=name)
    def bad_store(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        v = reg.scalar(f32); ptx.inst.ld.global_.f32(v, ptx.addr(px))
        far = reg.scalar(u64, init=1 << 47)
        ptx.inst.st.global_.f32(ptx.addr(py + far), v)

    return bad_store


def build_copy_bf16(name: str = "copy_bf16", arch: str = "sm_90a"):
    """Y = X for bf16 vectors (moved as 16-bit patterns): dtype plumbing for bf16."""

    @kernel(in_specs=(Tile("N", bf16),), out_specs=(Tile("N", bf16),),
            grid=lambda N: ((N + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch=arch,
            name=name)
    def copy_bf16(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        n = ptx.dim("N")
        cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        gid = cta * BLOCK + tid
        with ptx.if_(gid < n):
            off = gid * 2
            v = reg.scalar(b16); ptx.inst.ld.global_.b16(v, ptx.addr(px + off))
            ptx.inst.st.global_.b16(ptx.addr(py + off), v)

    return copy_bf16
