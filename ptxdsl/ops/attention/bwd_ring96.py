"""The shared memory of the 96-key backward kernel (:mod:`.bwd_wg3`):
K and V resident, a ring of Q stages with one dO stage, the P and dS tiles, a dQ stage a
consumer warpgroup, the LSE and dPsum rows, and the mbarriers that pace them."""
from __future__ import annotations

from ...core.types import u8
from ...dsl import ptx, smem
from .bwd_config import BLOCK_M as BM, BwdConfig

FULL, EMPTY = 5, 8      # dq_warp: + w, a consumer warpgroup's stage handed over, given back
WTHREADS = 128 + 32     # a consumer warpgroup and the writer warp


def place(L, c: BwdConfig, pt_bytes: int, wg_stage: int, wgs: int) -> None:
    """Set ``L``'s byte offsets after its ``kv_bytes`` and ``q_bytes``: P and dS tiles of
    ``pt_bytes``, ``wgs`` dQ stages of ``wg_stage``, then the barriers (8 bytes each) and with
    ``det_poll`` the writer's word (``L.poll``)."""
    L.pt_bytes, L.wg_stage = pt_bytes, wg_stage
    L.k = 0
    L.v = L.kv_bytes
    L.q = 2 * L.kv_bytes
    L.do = L.q + c.stages * L.q_bytes
    L.p = L.do + L.q_bytes
    L.ds = L.p + pt_bytes
    L.dqs = L.ds + pt_bytes
    L.lse = L.dqs + wgs * wg_stage
    L.dpsum = L.lse + c.stages * BM * 4
    L.kvfull = L.dpsum + BM * 4
    L.qfull = L.kvfull + 8
    L.qempty = L.qfull + 8 * c.stages
    L.dofull = L.qempty + 8 * c.stages
    L.doempty = L.dofull + 8
    L.total = L.doempty + 8
    if c.det_poll:      # the writer's early read of its next turn (bwd_detpipe)
        L.poll, L.total = L.total, L.total + 8


def barriers(L, tid, stages: int, wgs: int):
    """Allocate the layout and initialise its mbarriers (thread 0, then the whole CTA
    meets): ``(base, kvfull, qfull, qempty, dofull, doempty)``; a Q or dO slot is given
    back by each of the ``wgs`` consumer warpgroups."""
    base = smem.alloc(u8, (L.total,), align=1024, dynamic=True).base
    kvfull, qfull, qempty = base + L.kvfull, base + L.qfull, base + L.qempty
    dofull, doempty = base + L.dofull, base + L.doempty
    with ptx.if_(tid == 0):
        ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(kvfull), 1)
        for s in range(stages):
            ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(qfull, 8 * s), 1)
            ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(qempty, 8 * s), wgs)
        ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(dofull), 1)
        ptx.inst("mbarrier.init.shared::cta.b64", ptx.addr(doempty), wgs)
        ptx.inst("fence.mbarrier_init.release.cluster")
    ptx.inst("bar.sync", 0)
    return base, kvfull, qfull, qempty, dofull, doempty


def finish_step(c: BwdConfig, w: int, lane, doempty, q_slot, stage, reduce, *,
                behind: int = 0, after_stage=None, dk_left: int = 0) -> None:
    """The end of consumer warpgroup ``w``'s step once dV, dQ and dK are issued (in that
    order of groups): dO's slot given back when dV is done; when dQ is, its f32 stage
    written (``stage()``) and handed to the writer warp (``dq_warp``) or reduced by TMA
    (``reduce()``, lane 0); Q's slot (``q_slot()``, its empty barrier) given back when dK
    is. ``behind``: groups already queued behind dK; ``after_stage()``: issued once dQ is
    handed on; ``dk_left``: groups that may still run when dK is done (the next step's S,
    :mod:`.bwd_wg3ahead`)."""
    ptx.inst("wgmma.wait_group.sync.aligned", 2 + behind)   # dV done: dO is read
    with ptx.if_(lane == 0):
        ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink, ptx.addr(doempty))
    ptx.inst("wgmma.wait_group.sync.aligned", 1 + behind)   # dQ done
    if not c.dq_warp:
        with ptx.if_(lane == 0):                   # the last reduce has read
            ptx.inst("cp.async.bulk.wait_group.read", 0)
    # (dq_warp: until the writer warp has read the last stage)
    ptx.inst("bar.sync", *((EMPTY + w, WTHREADS) if c.dq_warp else (2 + w, 128)))
    stage()
    ptx.inst("fence.proxy.async.shared::cta")
    if c.dq_warp:                            # the stage is the writer's
        ptx.inst("bar.arrive", FULL + w, WTHREADS)
    else:
        ptx.inst("bar.sync", 2 + w, 128)
        with ptx.if_(lane == 0):
            reduce()
    if after_stage is not None:
        after_stage()
    ptx.inst("wgmma.wait_group.sync.aligned", dk_left)   # dK done: Q is read
    with ptx.if_(lane == 0):
        ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink, ptx.addr(q_slot()))


__all__ = ["place", "barriers", "finish_step", "FULL", "EMPTY", "WTHREADS"]
