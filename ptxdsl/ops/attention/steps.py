"""The wgmma steps the forward kernels share (:mod:`.fwd`, :mod:`.decode_split`): S = Q·Kᵀ
from shared memory, O += P·V with P from registers, and a consumer's release of a ring
stage. Each is the instructions of one step, after the caller's wait for the stage. Also
the key blocks a tile sees (:func:`key_blocks`: the forward's and the varlen order pass's
bounds), and a boundary block's mask."""
from __future__ import annotations

from ...core.types import s32, u32
from ...dsl import ptx, reg
from .softmax import mask_block
from .tiles import ROW, s32_of


def mma_qk(s_mma: str, s_acc, q_desc, k_at, head_dim: int, q_rows: int, block_n: int):
    """S = Q·Kᵀ over ``head_dim`` in k16 steps (``q_rows`` rows of Q from ``q_desc``,
    ``block_n`` keys at ``k_at``, both in 64-column swizzled panels), one commit group."""
    k_desc = ptx.wgmma.descriptor(k_at, leading=16, stride=1024, swizzle=128)
    ptx.inst("wgmma.fence.sync.aligned")
    for ks in range(head_dim // 16):
        pnl, kin = divmod(ks, 4)
        qo = (pnl * q_rows * ROW + kin * 32) >> 4
        ko = (pnl * block_n * ROW + kin * 32) >> 4
        ptx.inst(s_mma, list(s_acc), q_desc + qo if qo else q_desc,
                 k_desc + ko if ko else k_desc, 0 if ks == 0 else 1, 1, 1, 0, 0)
    ptx.inst("wgmma.commit_group.sync.aligned")


def mma_pv(o_mma: str, o_acc, p_regs, v_at, block_n: int):
    """O += P·V: ``block_n / 16`` wgmmas with A (P) from registers, V's ``block_n`` rows at
    ``v_at`` (MN-major), one commit group."""
    v_desc = ptx.wgmma.descriptor(v_at, leading=block_n * ROW, stride=1024, swizzle=128)
    ptx.inst("wgmma.fence.sync.aligned")
    for ks in range(block_n // 16):
        vo = (ks * 16 * ROW) >> 4
        ptx.inst(o_mma, list(o_acc), p_regs[ks], v_desc + vo if vo else v_desc, 1, 1, 1, 1)
    ptx.inst("wgmma.commit_group.sync.aligned")


def release(lane, bars, slot) -> None:
    """One arrival (lane 0 of the warp) on stage ``slot``'s empty barrier of the array of
    8-byte mbarriers at ``bars``."""
    with ptx.if_(lane == 0):
        ptx.inst("mbarrier.arrive.shared::cta.b64", ptx.sink, ptx.addr(bars + slot * 8))


def key_blocks(sched, mask, block_m: int, block_n: int, m0, sq, sk):
    """``(off, n_lo, n_hi)`` (``.s32``) of a tile of ``block_m`` (packed) rows from ``m0``
    of a sequence of ``sq`` query rows and ``sk`` keys: keys aligned bottom-right (``off =
    sk - sq``), the tile sees key blocks ``n_lo .. n_hi`` of ``block_n`` (``mask``'s
    window; ``sched.pos``: a packed row's sequence position)."""
    off = s32_of(sk) - s32_of(sq)
    nblk = s32_of((sk + (block_n - 1)) // block_n)
    n_hi = nblk
    if mask.right >= 0:
        last = ptx.min(sched.pos(s32_of(m0 + (block_m - 1))), s32_of(sq) - 1)
        top = ptx.max(last + off + (mask.right + block_n), reg.scalar(s32, init=0))
        n_hi = ptx.min(top // block_n, nblk)
    n_lo = reg.scalar(s32, init=0)
    if mask.left >= 0:
        first = ptx.max(sched.pos(s32_of(m0)) + off - mask.left, n_lo)
        ptx.inst.min.s32(n_lo, first // block_n, n_hi)
    return off, n_lo, n_hi


def mask_keys(s_acc, key0, fcol: int, rows, off, sk, mask) -> None:
    """Mask this thread's scores of a boundary block whose first key is ``key0``: keys
    past ``sk`` and, for query row ``rows[r] + off`` (bottom-right aligned), those outside
    ``mask``'s window (``mask.right`` / ``mask.left``, -1 unbounded)."""
    base = key0 + s32_of(fcol)                   # the key of this thread's column 0
    hi, lo = [], []
    for r in range(2):
        h = sk - base
        if mask.right >= 0:
            h = ptx.min(h, rows[r] + off + (mask.right + 1) - base)
        hi.append(h)
        lo.append(rows[r] + off - mask.left - base if mask.left >= 0 else None)
    mask_block(list(s_acc), hi, lo)


def mask_if_needed(s_acc, j, BN, rows, fcol, off, sk, mask, cons, m0, sched) -> None:
    """Mask block ``j`` where it crosses a boundary for some row of this consumer: past the
    last key (ragged SK), past ``row + off + right`` or before ``row + off - left``."""
    key0 = j * BN
    end = key0 + BN
    need = end > sk
    first_p = s32_of(m0 + cons * 64)               # this consumer's first (packed) row
    first = sched.pos(first_p)
    if mask.right >= 0:
        need = need | (end - 1 > first + off + mask.right)
    if mask.left >= 0:
        last = first + 63 if sched.group == 1 else sched.pos(first_p + 63)
        need = need | (key0 < last + off - mask.left)
    with ptx.if_(need):
        mask_keys(s_acc, key0, fcol, rows, off, sk, mask)


def snake(t, cta, ncta, tiles):
    """The tile a persistent CTA takes at loop index ``t = cta + r * ncta``: in odd rounds
    ``r`` the CTAs take their round's tiles in reverse order. Under the causal
    longest-first order, plain round-robin gives CTA 0 the longest tile of every round
    (the slowest CTA then does ~6% more than the mean at S = 4k-16k, head dim 128);
    alternating pairs long with short tiles."""
    r = t // ncta
    first = r * ncta
    back = first + (ptx.min(tiles - first, ncta) - 1) - cta   # reversed within the round
    out = reg.scalar(u32)
    ptx.inst.selp.u32(out, back, t, (r & 1) == 1)
    return out


__all__ = ["mask_if_needed", "mma_qk", "mma_pv", "release", "mask_keys", "key_blocks", "snake"]
