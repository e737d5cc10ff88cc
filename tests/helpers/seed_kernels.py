"""The RMSNorm kernel of seed 003, its snippets verbatim; only the imports changed.

The glue around the snippets (block choice, derived constants) is ours; the
kernel body is exactly the seed's text, so this file proves the API it uses.
"""
from ptxdsl import kernel, reg, ptx, smem, Tile
from ptxdsl.core.types import f32, u32

WARP_SIZE = 32


def _pick_block(n):
    best = None
    for block in (512, 256, 128, 64, 32):
        ipt = n // block
        if n % block == 0 and ipt >= 4 and ipt % 4 == 0 and block >= 128:
            if best is None or ipt > best[1]:
                best = (block, ipt)
    if best is not None:
        return best[0]
    for block in (512, 256, 128, 64, 32):
        if n % block == 0:
            return block
    raise ValueError(f"N={n} must be a multiple of 32")


def build_rms_norm(B, N, eps=1e-6, arch="sm_90a"):
    block = _pick_block(N)
    num_warps = block // WARP_SIZE
    items_per_thread = N // block
    use_v4 = items_per_thread >= 4 and items_per_thread % 4 == 0
    v4_iters = items_per_thread // 4 if use_v4 else 0

    @kernel(
        in_specs=(Tile(B, N, f32), Tile(N, f32)),
        out_specs=(Tile(B, N, f32),),
        grid=(B, 1, 1),
        block=(block, 1, 1),
        arch=arch,
    )
    def rms_norm(X, W, Y):
        partials = smem.alloc(f32, (num_warps, 1))
        stats = smem.alloc(f32, (1, 1))

        px, pw, py = ptx.global_ptrs(X, W, Y)

        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        row = reg.scalar(u32); ptx.inst.mov.u32(row, ptx.special.ctaid.x())
        row_byte_off = row * (N * 4)
        px += row_byte_off
        py += row_byte_off
        lane = tid & (WARP_SIZE - 1)
        warp_id = tid >> 5

        sum_sq = reg.scalar(f32, init=0.0)
        x_vals = reg.array(f32, items_per_thread)

        if use_v4:
            elem_base = tid << 2  # every thread's lane-0 element
            for j in range(v4_iters):
                idx = elem_base if j == 0 else elem_base + (j * block * 4)
                ptr = px + idx * 4
                ptx.inst.ld.global_.v4.f32(
                    [x_vals[j*4], x_vals[j*4+1], x_vals[j*4+2], x_vals[j*4+3]],
                    ptx.addr(ptr),
                )
                for sub in range(4):
                    ptx.inst.fma.rn.f32(sum_sq, x_vals[j*4+sub], x_vals[j*4+sub], sum_sq)
        else:
            for i in range(items_per_thread):
                idx = reg.scalar(u32)
                ptx.inst.add.u32(idx, tid, i * block)
                ptr = px + idx * 4
                ptx.inst.ld.global_.f32(x_vals[i], ptx.addr(ptr))
                ptx.inst.fma.rn.f32(sum_sq, x_vals[i], x_vals[i], sum_sq)

        ptx.warp.reduce_sum(sum_sq)

        with ptx.if_(lane == 0):
            partials[warp_id, 0] = sum_sq
        ptx.bar.sync(0)

        with ptx.if_(tid == 0):
            block_sum = reg.scalar(f32, init=0.0)
            for i in range(num_warps):
                ptx.inst.add.f32(block_sum, block_sum, partials[i, 0])
            stats[0, 0] = block_sum
        ptx.bar.sync(0)

        ptx.inst.mov.f32(sum_sq, stats[0, 0])

        mean_sq = reg.scalar(f32)
        inv_n = reg.scalar(f32, init=1.0 / N)
        ptx.inst.mul.f32(mean_sq, sum_sq, inv_n)
        eps_reg = reg.scalar(f32, init=eps)
        ptx.inst.add.f32(mean_sq, mean_sq, eps_reg)
        rstd = reg.scalar(f32)
        ptx.inst.rsqrt.approx.f32(rstd, mean_sq)

        if use_v4:
            for j in range(v4_iters):
                idx = elem_base if j == 0 else elem_base + (j * block * 4)
                off = idx * 4

                w_vals = [reg.scalar(f32) for _ in range(4)]
                ptx.inst.ld.global_.v4.f32(w_vals, ptx.addr(pw + off))

                y_vals = []
                for sub in range(4):
                    y_val = reg.scalar(f32)
                    ptx.inst.mul.f32(y_val, x_vals[j*4+sub], rstd)
                    ptx.inst.mul.f32(y_val, y_val, w_vals[sub])
                    y_vals.append(y_val)

                ptx.inst.st.global_.v4.f32(ptx.addr(py + off), y_vals)
        else:
            for i in range(items_per_thread):
                idx = reg.scalar(u32)
                ptx.inst.add.u32(idx, tid, i * block)
                off = idx * 4
                w_val = reg.scalar(f32)
                ptx.inst.ld.global_.f32(w_val, ptx.addr(pw + off))
                y_val = reg.scalar(f32)
                ptx.inst.mul.f32(y_val, x_vals[i], rstd)
                ptx.inst.mul.f32(y_val, y_val, w_val)
                ptx.inst.st.global_.f32(ptx.addr(py + off), y_val)

        ptx.ret()

    return rms_norm
