"""The staged RMSNorm forward: rows stream into shared memory with ``cp.async``.

An experiment the ops never choose (the register-resident kernels of
``ptxdsl/ops/rmsnorm`` were as fast or faster where measured); kept here because
``lab/rmsnorm_tune.py --mode async`` still times it.

A fixed grid of CTAs walks the rows (``cta, cta + G, ...``, as in
``ptxdsl.ops.rmsnorm.fwd_loop``), but a row arrives in shared memory through
``cp.async`` (16 bytes per thread per chunk, no registers held while it is in
flight) into a ring of ``stages`` row buffers. While a CTA reduces and writes
row ``i``, rows ``i+1 .. i+stages-1`` are already on their way, so DRAM always
has work queued from every SM: the tail of the grid (SMs that got one row
fewer) no longer leaves bandwidth idle, and no CTA stalls on a load between
rows. The register-resident kernels cannot keep as much in flight: there, x's
registers limit an SM to two or three rows.

Every thread copies, and later reads, only its own chunks of a stage, so the
ring needs no barrier of its own: ``cp.async.wait_group`` makes a thread's
copies visible to that thread, and a stage is refilled only after the same
thread has consumed it (its values fed the row sum, which the reduction's
``bar.sync`` waits for). The ring is dynamic shared memory (it is larger than
the 48 KiB a kernel can declare statically).
"""
from __future__ import annotations

from dataclasses import dataclass

from ptxdsl import kernel, ptx, reg, smem
from ptxdsl.core.types import PtxType, f32, u8, u32

from ptxdsl.ops._common.reduce import RowSum
from ptxdsl.ops._common.rowio import load_chunk, narrow, store_chunk
from ptxdsl.ops.rmsnorm.fwd import Plan, forward_specs
from ptxdsl.ops.rmsnorm.row import (
    add_residual, balanced_grid, both, persistent_rows, rstd_of, scale, store_rstd, unpack)

SMEM_PER_SM = 227 * 1024      # Hopper: shared memory one SM gives its CTAs (opt-in)
SMEM_PER_CTA_RESERVED = 1024  # what the system keeps per resident CTA


@dataclass(frozen=True)
class Staging:
    """How many row buffers each CTA keeps, and how many CTAs share an SM."""

    stages: int
    ctas_per_sm: int


def stage_bytes(p: Plan, dtype: PtxType, residual: bool) -> int:
    """Bytes of one ring stage: the CTA's rows of x (and of the residual)."""
    return (2 if residual else 1) * p.rows_per_cta * p.chunks * p.vec * dtype.bytes


def can_stage(p: Plan, dtype: PtxType) -> bool:
    """cp.async moves 4, 8 or 16 bytes, and a thread's part of the row (read once from
    shared memory) must fit in registers; the plan's own two-pass choice does not apply."""
    return p.per_thread * p.vec <= 32 and p.vec * dtype.bytes in (4, 8, 16)


def staging(p: Plan, dtype: PtxType, residual: bool, *, stages: int | None = None,
            ctas_per_sm: int | None = None) -> Staging | None:
    """The ring for plan ``p``: by default as many stages as keep about 96 KiB per SM
    in flight (2 to 4), at the CTAs per SM that threads and shared memory allow;
    None when the plan cannot be staged or one stage does not fit."""
    if not can_stage(p, dtype):
        return None
    sb = stage_bytes(p, dtype, residual)
    cps = ctas_per_sm or max(1, min(2048 // p.block, 2))
    if stages is None:
        stages = max(2, min(4, -(-96 * 1024 // (cps * sb)) + 1))
    while cps > 1 and cps * (stages * sb + 1024 + SMEM_PER_CTA_RESERVED) > SMEM_PER_SM:
        cps -= 1
    while stages > 1 and cps * (stages * sb + 1024 + SMEM_PER_CTA_RESERVED) > SMEM_PER_SM:
        stages -= 1
    if cps * (stages * sb + 1024 + SMEM_PER_CTA_RESERVED) > SMEM_PER_SM:
        return None
    return Staging(stages, cps)


def build_forward_async(p: Plan, st: Staging, dtype: PtxType, wdtype: PtxType, grid: int, *,
                        eps: float = 1e-6, residual: bool = False, with_rstd: bool = False,
                        arch: str = "sm_90a"):
    """Staged persistent forward kernel over at most ``grid`` CTAs (same arguments as
    :func:`~.rms_norm_fwd.build_forward`)."""
    if not can_stage(p, dtype):
        raise ValueError(f"plan {p} cannot be staged with cp.async: it needs chunks of 4, 8 "
                         f"or 16 bytes (these are {p.vec * dtype.bytes}) and at most 32 "
                         f"values per thread (these are {p.per_thread * p.vec}); use more "
                         f"threads or build_forward")
    N, T, R, V, K, S = p.n, p.threads, p.rows_per_cta, p.vec, p.per_thread, st.stages
    es, wes = dtype.bytes, wdtype.bytes
    cb = V * es                       # bytes per chunk (one cp.async)
    rowb = p.chunks * cb              # one row in shared memory
    srcb = R * rowb                   # one source (x or residual) of a stage
    sb = stage_bytes(p, dtype, residual)
    ins, outs, names = forward_specs(N, dtype, wdtype, residual, with_rstd)
    cache = "cg" if cb == 16 else "ca"  # .cg (L2 only) takes 16-byte copies alone

    @kernel(in_specs=ins, out_specs=outs,
            grid=lambda M: (balanced_grid(-(-M // R), grid), 1, 1), block=(p.block, 1, 1),
            arch=arch, name=f"rms_norm_fwd_async_{dtype.name}_{N}", arg_names=names)
    def rms_norm_fwd_async(*args):
        X, Rs, W, Y, H, RSTD = unpack(args, residual, with_rstd)

        ring = smem.alloc(u8, (S * sb,), dynamic=True)
        at = persistent_rows(p, X, W, Y, Rs, H, es, wes)
        tid, cta, ncta, m, lane, group = at.tid, at.cta, at.ncta, at.m, at.lane, at.group
        nblocks, sx, x0, y0, w0, chunk_ok = at.nblocks, at.sx, at.x0, at.y0, at.w0, at.chunk_ok
        if residual:
            sr, r0, h0 = at.sr, at.r0, at.h0
        # This thread's first chunk in stage 0 (x; the residual's follows at +srcb).
        mine = ring.base + at.lane_b
        if R > 1:
            mine = mine + group * rowb
        step, wstep, sstep = T * cb, T * V * wes, T * cb
        ws = [load_chunk(w0, k * wstep, wdtype, V, pred=chunk_ok[k]) for k in range(K)]
        reduce = RowSum(T, tid, looped=True)

        def row_of(rb):
            return rb if R == 1 else (rb << at.shift) + group

        def issue(rb, off):
            """cp.async this thread's chunks of row block rb into the stage at ``off``,
            then close the group (an empty group past the last row keeps the count)."""
            row = row_of(rb)
            ok = row < m
            dst = mine + off
            srcs = [(x0 + row * (sx * es), 0)]
            if residual:
                srcs.append((r0 + row * (sr * es), srcb))
            for base, at in srcs:
                for k in range(K):
                    ptx.inst(f"cp.async.{cache}.shared.global", ptx.addr(dst, at + k * sstep),
                             ptx.addr(base, k * step), cb, pred=both(chunk_ok[k], ok))
            ptx.inst("cp.async.commit_group")

        take = reg.scalar(u32, init=0)            # stage read this iteration
        fill = reg.scalar(u32, init=(S - 1) * sb)  # stage refilled this iteration
        for s in range(S - 1):
            issue(cta + s * ncta if s else cta, s * sb)
        for rb in ptx.range_(cta, nblocks, ncta):
            issue(rb + (S - 1) * ncta if S > 1 else rb, fill)
            ptx.inst("cp.async.wait_group", S - 1)
            row = row_of(rb)
            ok = row < m
            src = mine + take
            acc = reg.scalar(f32, init=0.0)
            xs = []
            for k in range(K):
                g = both(chunk_ok[k], ok)
                x = load_chunk(src, k * sstep, dtype, V, pred=g, space="shared")
                if residual:
                    r = load_chunk(src, srcb + k * sstep, dtype, V, pred=g, space="shared")
                    x = add_residual(x, r, dtype)
                    store_chunk(h0 + row * (sr * es), k * step, dtype, narrow(x, dtype), pred=g)
                for v in x:
                    ptx.inst.fma.rn.f32(acc, v, v, acc)
                xs.append(x)
            total = reduce(acc)
            rstd = rstd_of(total, N, eps)
            if RSTD is not None:
                store_rstd(RSTD, row, rstd, lane, ok)
            yrow = y0 + row * (N * es)
            for k in range(K):
                store_chunk(yrow, k * step, dtype, narrow(scale(xs[k], ws[k], rstd), dtype),
                            pred=both(chunk_ok[k], ok), hints=p.y_hints)
            # The stage just read is the next one to refill; the read pointer moves on.
            ptx.inst.mov.u32(fill, take)
            ptx.inst.add.u32(take, take, sb)
            wrap = take == S * sb
            ptx.inst.selp.u32(take, 0, take, wrap)

    return rms_norm_fwd_async
