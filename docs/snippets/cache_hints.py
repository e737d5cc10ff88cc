"""Cache hints on global loads and stores (traced when the docs build)."""
from ptxdsl import kernel, reg, ptx, Tile
from ptxdsl.core.types import b64, f32, u32


# --8<-- [start:hints]
@kernel(in_specs=(Tile(4096, f32),), out_specs=(Tile(4096, f32),),
        grid=(4, 1, 1), block=(256, 1, 1))
def scale(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    keep, drop = reg.scalar(b64), reg.scalar(b64)   # L2 eviction policies, made once
    ptx.inst("createpolicy.fractional.L2::evict_last.b64", keep)
    ptx.inst("createpolicy.fractional.L2::evict_first.b64", drop)
    cta = reg.scalar(u32); ptx.inst.mov.u32(cta, ptx.special.ctaid.x())
    tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
    off = (cta * 256 + tid) * 16                     # 16 bytes per thread
    x = reg.array(f32, 4)
    # X should stay cached: evict_last in L1, and in L2 through the policy `keep`.
    ptx.inst("ld.global.L1::evict_last.L2::cache_hint.v4.f32", list(x), ptx.addr(px + off), keep)
    y = [v * 2.0 for v in x]
    # Y is not read again soon: the policy `drop` (the policy is the last operand).
    ptx.inst("st.global.L2::cache_hint.v4.f32", ptx.addr(py + off), y, drop)
# --8<-- [end:hints]
