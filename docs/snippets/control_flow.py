"""Small kernels for the Control flow & shared memory page (traced when the docs build)."""
from ptxdsl import kernel, reg, ptx, smem, Tile
from ptxdsl.core.types import f32, u32


# --8<-- [start:relu]
@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: ((N + 255) // 256, 1, 1), block=(256, 1, 1))
def leaky_relu(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    n = ptx.dim("N")
    cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    i = cta * 256 + tid
    with ptx.if_(i < n):                         # threads past the end do nothing
        x = reg.scalar(f32)
        ptx.inst.ld.global_.f32(x, ptx.addr(px + i * 4))
        y = reg.scalar(f32)
        with ptx.if_(x > 0.0):
            ptx.inst.mov.f32(y, x)
        with ptx.else_():
            ptx.inst.mul.f32(y, x, 0.01)
        ptx.inst.st.global_.f32(ptx.addr(py + i * 4), y)
# --8<-- [end:relu]


# --8<-- [start:rowsum]
@kernel(in_specs=(Tile("B", "N", f32),), out_specs=(Tile("B", f32),),
        grid=lambda B, N: (B, 1, 1), block=(32, 1, 1))
def row_sum(X, S):
    px, ps = ptx.global_ptrs(X, S)
    n = ptx.dim("N")
    row = reg.scalar(u32); ptx.inst.mov.u32(row, ptx.special.ctaid.x())
    lane = reg.scalar(u32); ptx.inst.mov.u32(lane, ptx.special.tid.x())
    base = px + (row * n).wide * 4               # 64-bit: B * N may pass 2^32
    acc = reg.scalar(f32, init=0.0)
    for j in ptx.range_(lane, n, 32):            # a run-time loop: j = lane, lane+32, ...
        x = reg.scalar(f32)
        ptx.inst.ld.global_.f32(x, ptx.addr(base + j * 4))
        ptx.inst.add.f32(acc, acc, x)
    ptx.warp.reduce_sum(acc)                     # every lane gets the row's sum
    with ptx.if_(lane == 0):
        ptx.inst.st.global_.f32(ptx.addr(ps + row * 4), acc)
# --8<-- [end:rowsum]


# --8<-- [start:reverse]
@kernel(in_specs=(Tile(256, f32),), out_specs=(Tile(256, f32),), block=(256, 1, 1))
def reverse(X, Y):
    buf = smem.alloc(f32, (256,))                # .shared .align 16 .b8 smem0[1024]
    px, py = ptx.global_ptrs(X, Y)
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    x = reg.scalar(f32)
    ptx.inst.ld.global_.f32(x, ptx.addr(px + tid * 4))
    buf[tid] = x                                 # st.shared.f32
    ptx.bar.sync(0)                              # every thread's store is now visible
    y = buf[255 - tid]                           # ld.shared.f32 from another thread's slot
    ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), y)
# --8<-- [end:reverse]


# --8<-- [start:dynamic]
ROW = 16384                                      # 64 KiB of f32: over the 48 KiB static limit


@kernel(in_specs=(Tile("B", ROW, f32),), out_specs=(Tile("B", ROW, f32),),
        grid=lambda B: (B, 1, 1), block=(1024, 1, 1))
def reverse_rows(X, Y):
    buf = smem.alloc(f32, (ROW,), dynamic=True)  # .extern .shared .align 16 .b8 smem0[];
    px, py = ptx.global_ptrs(X, Y)
    row = reg.scalar(u32); ptx.inst.mov.u32(row, ptx.special.ctaid.x())
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    row_off = (row * (ROW * 4)).wide             # this row's first byte (64-bit)
    x_row, y_row = px + row_off, py + row_off
    for i in ptx.range_(tid, ROW, 1024):
        x = reg.scalar(f32)
        ptx.inst.ld.global_.f32(x, ptx.addr(x_row + i * 4))
        buf[i] = x                               # st.shared.f32, as for a static array
    ptx.bar.sync(0)
    for i in ptx.range_(tid, ROW, 1024):
        ptx.inst.st.global_.f32(ptx.addr(y_row + i * 4), buf[ROW - 1 - i])
# --8<-- [end:dynamic]
