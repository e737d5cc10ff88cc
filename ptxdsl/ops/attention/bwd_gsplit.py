"""The column-split backward's ``sdp_split`` step (:class:`.bwd_config.BwdConfig`): the two
consumer warpgroups split Sᵀ and dPᵀ by GEMM, not by queries (``pds_smem``), so each is one
m64n64 chain over all 64 queries of the step rather than two m64n32 ones a warpgroup.

Warpgroup 0 holds Sᵀ = K·Qᵀ, warpgroup 1 dPᵀ = V·dOᵀ (the same accumulator layout, so
lane ``l`` of each holds the same (key, query) elements). Warpgroup 0 makes Pᵀ, stores it
as the Pᵀ tile and ``X = Pᵀ`` (times ``1 - tanh²`` with softcap) in f32 to an exchange
buffer; after a 256-thread barrier both issue dV += Pᵀ·dO and warpgroup 1 makes
dSᵀ = X ∘ (dPᵀ - D) from its own lane's X and stores the dSᵀ tile; after a second barrier
both issue dK += dSᵀ·Q (A from the tiles, as ``pds_smem`` reads them), then dQ."""
from __future__ import annotations

from ...core.types import f32
from ...dsl import ptx, reg
from .bwd_scores import cap_grad, dscores, probs
from .bwd_steps import kv_gemms
from .softmax import pack_p

ROW = 128            # bytes per swizzled panel row


def split_step(*, w, lane, acc, regs, store_tile, xg_at, dt, dv, dk, dq_tma, bar,
               score_args, d_at) -> None:
    """One step's elementwise part and its dV, dK issues, after the warpgroup's GEMM
    (``acc``: Sᵀ on warpgroup 0, dPᵀ on 1) has been waited on. ``regs``: the packed A
    registers; ``store_tile(regs)``: this warpgroup's tile (Pᵀ on 0, dSᵀ on 1); ``xg_at``:
    this thread's first 16 bytes in the exchange buffer (lanes interleaved by 16 bytes);
    ``dv``, ``dk``: ``(mma per piece, accumulators, A tile address, B addresses)``;
    ``bar``: the 256-thread named barrier; ``score_args``: :func:`.bwd_scores.probs`'
    arguments after the accumulator; ``d_at``: this warpgroup's D row."""
    s = list(acc)
    if dq_tma:                   # the last step's reduce has read dQ's stage
        with ptx.if_(lane == 0):
            ptx.inst("cp.async.bulk.wait_group.read", 0)
    # both warpgroups' last reads of the tiles and of X are done (their dQ wait_group 0)
    ptx.inst("bar.sync", *bar)
    with ptx.if_(w == 0):
        caps = probs(s, *score_args)
        pack_p(s, regs, dt)
        store_tile(regs)
        for i, t in enumerate(caps):          # X = Pᵀ·(1 - tanh²)
            cap_grad(s[i], t)
        for g in range(len(s) // 4):
            ptx.inst("st.shared.v4.f32", ptx.addr(xg_at, g * 128 * 16), s[4 * g:4 * g + 4])
    ptx.inst("fence.proxy.async.shared::cta")
    ptx.inst("bar.sync", *bar)
    ptx.inst("fence.proxy.async.shared::cta")
    kv_gemms(*dv, fence=True)                 # dV += Pᵀ·dO while dSᵀ is made
    with ptx.if_(w == 1):
        x = [reg.scalar(f32) for _ in range(len(s))]
        for g in range(len(s) // 4):
            ptx.inst("ld.shared.v4.f32", x[4 * g:4 * g + 4], ptx.addr(xg_at, g * 128 * 16))
        dscores(x, s, [], score_args[2], d_at)
        pack_p(s, regs, dt)
        store_tile(regs)
    ptx.inst("fence.proxy.async.shared::cta")
    ptx.inst("bar.sync", *bar)
    ptx.inst("fence.proxy.async.shared::cta")
    kv_gemms(*dk, fence=True)


__all__ = ["split_step"]
