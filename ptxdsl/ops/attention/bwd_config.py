"""What the backward plan chooses, and the plan table that chooses it (``bwd_plans.json``,
each row citing the measurement it came from)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .config import Mask, padded, register_pool

BWD_HEAD_DIMS = (64, 96, 128, 192, 256)  # 192, 256: col_split (dK, dV halves per warpgroup)
BLOCK_M = 64                # query rows per step of the ring (a wgmma N of Sᵀ and dPᵀ)
BLOCK_N = 128               # keys per CTA: two consumer warpgroups of 64 (wgmma M)
BLOCK_M_SWAP = 80           # query rows per step with dq_swap (FlashAttention-3's hdim 128)
BLOCK_N_SPLIT = 64          # keys per CTA with col_split: both warpgroups on the same 64
BLOCK_N_WG3 = 96            # keys per CTA with wg3: three warpgroups of 32 (S, dP)
SMEM_PER_CTA = 232448


@dataclass(frozen=True)
class BwdConfig:
    """``stages`` Q/dO/LSE/D steps in the shared-memory ring; ``dq_tma``: dQ added by TMA
    reduce-add from a shared stage (``cp.reduce.async.bulk.tensor``, one thread per
    warpgroup) instead of ``red.global.add.f32`` by every thread; the register budgets the
    producer and the two consumer warpgroups ask ``setmaxnreg`` for. ``overlap``: 0, Sᵀ and
    dPᵀ in one wgmma group, waited on whole; 1, a group each, Pᵀ computed while dPᵀ runs;
    2, also dV += Pᵀ·dO issued before dSᵀ is computed (Pᵀ's f32 and packed registers live
    at once). ``dq_swizzle``: dQ staged in 128-byte swizzled
    32-column f32 panels (a TMA box of 32 columns; conflict-free ``st.shared.v2.f32``) instead
    of unswizzled 64-column rows. ``dq_split`` (head dim 128, dq_tma): each
    warpgroup computes 64 of dQ's columns over all 128 keys (both dSᵀ tiles; a 256-thread
    barrier around their stores), so a CTA adds each dQ element once, not twice.
    ``col_split`` (head dims 192, 256, where dK and dV of 64 keys x D do not fit one
    warpgroup's registers beside Sᵀ and dPᵀ): a CTA owns 64 keys, both consumer warpgroups
    compute the same Sᵀ, dPᵀ (twice: the price of the split) and each keeps, and computes,
    half of dK's, dV's and dQ's columns. ``pds_smem`` (with col_split, overlap 0): each
    warpgroup computes Sᵀ and dPᵀ for 32 of the step's 64 queries only, and Pᵀ, dSᵀ go
    through shared memory (two 64 x 64 tiles both write and both read), so no GEMM is
    done twice (FlashAttention-3's way at head dim 256), for two 256-thread barriers.
    ``ds_double`` (with dq_split or block_m 128, 2 stages): two pairs of dSᵀ tiles, the
    ring slot's, so the barrier before dSᵀ's stores waits for the warpgroup's own dQ stage
    only, not for the other warpgroup's last dQ wgmmas (FlashAttention-3 keeps two dS
    stages too).
    ``panel_split`` (col_split at head dim 192): warpgroup ``w`` owns 64-column panel ``w``
    and half ``w`` of panel 2, so its dK, dV and dQ are an n64 and an n32 wgmma piece,
    not three n32 ones (:mod:`.bwd_cols`).
    ``block_m`` (head dim 64, dq_tma and dq_swizzle): query rows per step, 64 or 128. At 128
    (FlashAttention-3's hdim-64 tile) Sᵀ and dPᵀ are m64n128 per warpgroup, dV and dK take
    eight k-steps, the dSᵀ tiles are 128 keys x 128 queries in two 64-query panels, and
    warpgroup ``w`` computes dQ of query rows 64w .. 64w + 63 over all 128 keys (one
    256-thread barrier around dSᵀ's stores, as ``dq_split``), so a step does twice the
    work for the same barriers, waits and dQ adds, and each dQ element is added once per
    CTA.
    ``dq_warp`` (dq_tma): warp 1 of the producer warpgroup issues dQ's TMA reduce-adds
    (:mod:`.bwd_dqwarp`; with block_m 128, each warpgroup's 64 query rows); a consumer
    warpgroup hands its stage over by ``bar.arrive`` rather than a 128-thread ``bar.sync``
    and its own reduce and bulk wait (FlashAttention-3's and -4's dQ store warp); with
    ds_double, the 128-thread barrier before the dSᵀ stores goes too. ``dk_last`` (overlap 1,
    dq_tma): dV is issued before the dSᵀ exchange, dK only behind dQ, so dQ is staged
    while dK runs (FlashAttention-4's sm90 order: dV, barrier, dQ, dK).
    ``wg3`` (head dim 192, dq_tma and dq_swizzle, none of the other layouts): FlashAttention-3's
    hdim-192 tile in its own kernel (:mod:`.bwd_wg3`): 96 keys a CTA, three consumer
    warpgroups (``consumer_regs`` at most 160), S and dP by queries on M (32 keys a
    warpgroup), P and dS through shared memory, dKᵀ, dVᵀ and dQ 64 head-dim columns a
    warpgroup (with ``dq_warp``, a producer warp adds each warpgroup's staged dQ; with
    ``overlap`` 2, FA3's order: dV issued between P's and dS's stores); softcap,
    varlen, and the deterministic mode with dq_warp.
    ``det_pipe`` (dq_warp): in the deterministic mode, where the warpgroups add disjoint dQ
    columns (dq_split, col_split, block_m 128, wg3), the writer warp polls a row block's
    turn before taking the stages, issues every warpgroup's add, frees the stages once read
    and passes the block's turns together once the adds have landed, one word a block
    (block_m 128: the first half's, for both; :mod:`.bwd_detpipe`;
    elsewhere, as with varlen's 64-row steps of a block_m 128 row, the plain writer's order);
    the default mode's kernel is unchanged. ``det_units`` (deterministic mode, dense
    layout): the (batch, K/V head) units a section of CTAs interleaves (:func:`.bwd_det.
    det_cta`), instead of as many (1 to 8) as keep their whole rows within 24 MB of L2: more
    units, fewer co-resident key blocks of each, so a shorter chain of turns on each row
    block (each of a unit's co-resident key blocks runs one add's landing behind the one
    before); 0, the L2 rule. ``det_desc`` (deterministic mode, dense layout): the turns on
    a row block in descending key-block order, each CTA walking its row blocks up from its
    diagonal and a section launching its last key block first, so that under a causal (or
    window) mask the key blocks reach a row block one step apart in their turns' order
    rather than all at once (:mod:`.bwd_det`); dQ's adds in another fixed order (other
    bits, as bitwise repeatable); varlen keeps the ascending order. ``det_poll`` (det_pipe):
    the writer reads the next row block's semaphore while this block's adds land
    (:mod:`.bwd_detpipe`), so a writer behind its turns skips that step's first poll (wg3:
    in a shared word after its barriers).

    ``s_ahead`` (dk_last, with dq_split or block_m 128; dq_swap: 2): the next step's Sᵀ
    issued before this step ends, behind dK (1: run while dQ is staged) or behind dQ's
    stage (2: queued behind dK), so the tensor pipe does not wait for the step's end and
    the next slot's wait (:mod:`.bwd_ahead`). ``ahead_k`` (s_ahead): a CTA's first Sᵀ
    issued before the loop without a branch, reading K's tile in place of Q's where the CTA
    has no step (discarded), so ptxas injects no ``warpgroup.arrive`` there (C7519).

    ``dq_swap`` (head dim 128, ``block_m`` 80, dense, no softcap; deterministic with
    ``det_pipe``, the writer warp's turns on each 80-row block):
    FlashAttention-3's hdim-128 full-mask tile in its own kernel (:mod:`.bwd_m80`): 80
    queries a step, Sᵀ and dPᵀ m64n80, dQ computed transposed (dQᵀ = Kᵀ·dSᵀ, m64n80, 64
    head-dim columns a warpgroup), on FlashAttention-4's step (stages 2, dq_tma,
    dq_swizzle, overlap 1, ds_double, dq_warp, dk_last, which it needs).

    ``prep_wide`` (head dims 64, 128, 192, 256, dense): the preprocess and postprocess of
    :mod:`.bwd_prepw` (D / 8 threads a row, 16-byte accesses, two rows a thread in
    flight) instead of :mod:`.bwd_prep`'s warp a row; the main kernel is unchanged.
    ``dkv_tma`` (the 128-key kernels, :mod:`.bwd` without col_split and :mod:`.bwd_m80`,
    and wg3; dense: varlen keeps ``st.global``): dK and dV leave through K's and V's shared
    tiles by TMA stores (:mod:`.bwd_epi`, FlashAttention-4's sm90 epilogue; wg3: each
    warpgroup's transposed panel, :func:`.bwd_wg3._store_kv_tma`). ``lpt_units``
    (:mod:`.bwd`'s, wg3's and dq_swap's default mode, dense; 0: off): CTAs in sections
    of that many (batch, K/V head) units,
    each section key block-major (:func:`.bwd_det.det_cta`'s order), so under a causal
    mask every unit's longest key blocks start before any unit's shorter ones and the
    kernel's last CTAs are short, where the plain order (key block fastest) starts the
    last unit's longest block among the last; the deterministic mode has its own
    sections (``det_units``). ``dq_exit_read`` (dq_warp, or wg3 whose consumers add their
    own dQ without it): the dQ writer warp's last wait
    is for its reduce-adds' reads of the stage (``cp.async.bulk.wait_group.read``, as
    FlashAttention-4's sm90 writer and CUTLASS's TMA epilogues end), not for their
    landing in global memory, so the CTA need not outlive the last add's round trip: the
    grid's completion makes the adds visible to the postprocess (the deterministic mode's
    turns still wait for each add to land).

    ``wg3_ahead`` (wg3, 2 stages): the next step's S issued before this step ends, into an
    accumulator carried across the back edge (:mod:`.bwd_wg3ahead`): ``1`` right behind
    dK, ``2`` behind dQ's stage; the step starts with dP and computes P under it.
    ``wg3_pfree`` (wg3, overlap 2): before P's stores each warpgroup waits for dO's
    ``empty`` mbarrier phase of the step before (all three warpgroups' dV, P's readers,
    done) instead of a 384-thread barrier that waits for every warpgroup's P (dS's
    stores stay behind the P exchange's barrier, which every warpgroup passes only after
    its last dQ and dK). ``wg3_fence1`` (wg3): one proxy fence a thread for each of the
    P and dS exchanges, the readers' after the barrier (the stores happen before it
    through the barrier), not also the writers' before it.

    ``uniform_cons``: a consumer's warpgroup index comes from lane 0 through
    ``shfl.sync.idx`` (:mod:`.._common.warpgroup`), so ptxas keeps the wgmma descriptors and
    shared addresses derived from it (K's and V's panels, dSᵀ's and dQ's buffers) in
    uniform registers: no ``R2UR`` before each wgmma of the step.

    ``kv_pair`` (:mod:`.bwd`'s default mode, dense, with dq_warp): a CTA walks
    key blocks ``p`` and ``nblk - 1 - p`` of one unit in turn (:mod:`.bwd_pair`), so under
    a causal mask every CTA has the same length (``nblk + 1`` steps) and the fixed cost of a
    CTA is paid once per two key blocks; the next block's first Q, dO slot streams in while
    the last block's dK, dV leave (without dkv_tma, the next K, V too). ``dkv_stage``
    (kv_pair with dkv_tma): each consumer warpgroup's dK, dV leave through its own dQ
    stage (64-row TMA boxes) instead of K's and V's tiles, so the next block's K, V load
    as soon as the last wgmmas have read them, under that epilogue. ``pair_max`` (kv_pair;
    0: every unit): pair only units of at most that many key blocks (longer units keep a
    key block a CTA: their fixed cost is small, and equal-length pairs make a coarser last
    wave).

    ``lse_early`` (overlap 1 or 2; 0: off): the first that many of the step's -LSE·log2e
    column pairs loaded into registers before the wait for Sᵀ, not after it, so Pᵀ's
    first FMAs do not wait for shared memory (the profile of head dim 64's step: its
    FMAs' short-scoreboard stalls); the rest as before.
    ``dq_frag`` (dq_warp with block_m 128, so head dim 64, with dq_split (128) or with
    wg3; dense): each warpgroup stages its 64 x 64 dQ in its accumulator's fragment order
    (``st.shared.v4.f32``, registers ``4k .. 4k + 3`` at 16-byte piece ``128 k + lane``:
    half the stores, no swizzle) and the writer adds it by one 1-D
    ``cp.reduce.async.bulk`` into dq_acc's 64-row block (dq_split, wg3: its 64-column
    half or third), which holds that order; the postprocess reads it back
    (:func:`.bwd_prepw.build_postprocess_frag`). FlashAttention-4's sm90 dQ path (8
    STS.128, UBLKRED)."""

    stages: int = 2
    dq_tma: bool = False
    overlap: int = 0
    dq_swizzle: bool = False
    dq_split: bool = False
    col_split: bool = False
    pds_smem: bool = False
    ds_double: bool = False
    panel_split: bool = False
    producer_regs: int = 24
    consumer_regs: int = 240
    block_m: int = BLOCK_M
    dq_warp: bool = False
    dk_last: bool = False
    wg3: bool = False
    det_pipe: bool = False
    det_units: int = 0
    det_desc: bool = False
    det_poll: bool = False
    s_ahead: int = 0
    dq_swap: bool = False
    prep_wide: bool = False
    dkv_tma: bool = False
    lpt_units: int = 0
    dq_exit_read: bool = False
    ahead_k: bool = False
    wg3_ahead: int = 0
    wg3_pfree: bool = False
    wg3_fence1: bool = False
    uniform_cons: bool = False
    kv_pair: bool = False
    dkv_stage: bool = False
    pair_max: int = 0
    lse_early: int = 0
    dq_frag: bool = False

    @property
    def tag(self) -> str:
        """The kernel name's part that spells this config (deterministic: the same name for
        the same config)."""
        c = self
        return (f"{'_tmadq' if c.dq_tma else ''}{f'_ov{c.overlap}' if c.overlap else ''}"
                f"{'_swdq' if c.dq_swizzle else ''}"
                f"{'_split' if c.dq_split else ''}{'_dsx2' if c.ds_double else ''}"
                f"{'_cols' if c.col_split else ''}{'_pnl' if c.panel_split else ''}"
                f"{'_pds' if c.pds_smem else ''}"
                f"{f'_m{c.block_m}' if c.block_m > BLOCK_M else ''}"
                f"{'_dqw' if c.dq_warp else ''}{'_dkl' if c.dk_last else ''}"
                f"{'_wg3' if c.wg3 else ''}{'_dtp' if c.det_pipe else ''}"
                f"{f'_u{c.det_units}' if c.det_units else ''}{'_dsc' if c.det_desc else ''}"
                f"{'_dpl' if c.det_poll else ''}{f'_sa{c.s_ahead}' if c.s_ahead else ''}"
                f"{'_dqs' if c.dq_swap else ''}{'_kvt' if c.dkv_tma else ''}"
                f"{f'_lpt{c.lpt_units}' if c.lpt_units else ''}{'_xr' if c.dq_exit_read else ''}"
                f"{'_sak' if c.ahead_k else ''}{f'_w3a{c.wg3_ahead}' if c.wg3_ahead else ''}"
                f"{'_pfr' if c.wg3_pfree else ''}{'_f1' if c.wg3_fence1 else ''}"
                f"{'_uc' if c.uniform_cons else ''}{'_kvp' if c.kv_pair else ''}"
                f"{'_kvs' if c.dkv_stage else ''}{f'_pm{c.pair_max}' if c.pair_max else ''}"
                f"{f'_lse{c.lse_early}' if c.lse_early else ''}{'_dqf' if c.dq_frag else ''}")

    def __post_init__(self):
        if self.stages < 1:
            raise ValueError(f"stages >= 1, got {self.stages}")
        if self.overlap not in (0, 1, 2):
            raise ValueError(f"overlap is 0, 1 or 2, got {self.overlap}")
        if self.dq_split and not self.dq_tma:
            raise ValueError("dq_split stages dQ for the TMA reduce-add: it needs dq_tma")
        if self.dq_swizzle and not self.dq_tma:
            raise ValueError("dq_swizzle stages dQ for the TMA reduce-add: it needs dq_tma")
        if self.col_split and not (self.dq_tma and self.dq_swizzle) or \
                self.col_split and self.dq_split:
            raise ValueError("col_split stages dQ's column halves in swizzled panels: it "
                             "needs dq_tma and dq_swizzle, not dq_split")
        if self.pds_smem and not (self.col_split and self.overlap == 0):
            raise ValueError("pds_smem splits col_split's Sᵀ and dPᵀ by queries: it needs "
                             "col_split and overlap 0")
        if self.ds_double and not ((self.dq_split or self.block_m != BLOCK_M) and
                                   self.stages == 2):
            raise ValueError("ds_double keeps a dSᵀ pair per ring slot for dq_split's "
                             "(or block_m 128's) exchange: it needs dq_split or "
                             "block_m=128, and stages=2")
        if self.panel_split and not self.col_split:
            raise ValueError("panel_split gives col_split's warpgroups whole panels: it "
                             "needs col_split")
        if self.block_m not in (BLOCK_M, 2 * BLOCK_M, BLOCK_M_SWAP) or \
                (self.block_m == BLOCK_M_SWAP) != self.dq_swap:
            raise ValueError(f"block_m is {BLOCK_M} or {2 * BLOCK_M}, or {BLOCK_M_SWAP} with "
                             f"dq_swap (and dq_swap needs it), got {self.block_m}, "
                             f"dq_swap={self.dq_swap}")
        if self.dq_swap and (self.stages != 2 or not all((
                self.dq_tma, self.dq_swizzle, self.overlap == 1, self.ds_double,
                self.dq_warp, self.dk_last)) or any((
                self.dq_split, self.col_split, self.pds_smem, self.panel_split, self.wg3,
                self.s_ahead == 1))):
            raise ValueError("dq_swap is its own kernel on FA4's step: it needs stages=2, "
                             "dq_tma, dq_swizzle, overlap=1, ds_double, dq_warp, dk_last "
                             "and none of the other options but s_ahead=2")
        if self.dkv_tma and self.col_split:
            raise ValueError("dkv_tma stores a warpgroup's 64 keys of every column (wg3: "
                             "its 64 columns of every key) from K's and V's tiles: not with "
                             "col_split")
        if self.lpt_units < 0:
            raise ValueError(f"lpt_units >= 0 orders bwd.py's, wg3's and dq_swap's CTAs, got "
                             f"{self.lpt_units}")
        if self.kv_pair and (not self.dq_warp or self.lpt_units or any((
                self.wg3, self.dq_swap, self.col_split))):
            raise ValueError("kv_pair walks two key blocks a CTA in bwd.py's 128-key kernel: "
                             "it needs dq_warp, and none of lpt_units, wg3, dq_swap, "
                             "col_split")
        if self.pair_max < 0 or self.pair_max and not self.kv_pair:
            raise ValueError(f"pair_max (>= 0) bounds kv_pair's units by key blocks: it needs "
                             f"kv_pair, got {self.pair_max}")
        if self.dkv_stage and not (self.kv_pair and self.dkv_tma):
            raise ValueError("dkv_stage moves kv_pair's dkv_tma epilogue into the dQ stage: it "
                             "needs kv_pair and dkv_tma")
        if self.lse_early < 0 or self.lse_early and (not self.overlap or self.wg3):
            raise ValueError(f"lse_early (>= 0) loads -LSE·log2e before the wait for Sᵀ that "
                             f"overlap 1 or 2 splits from dPᵀ's: it needs overlap, not wg3, "
                             f"got {self.lse_early}")
        if self.dq_frag and not (self.dq_warp and (self.block_m == 2 * BLOCK_M or self.wg3
                                                   or self.dq_split)):
            raise ValueError("dq_frag stages a warpgroup's 64 x 64 dQ (head dim 64's 128-query "
                             "step, dq_split's column half or wg3's third) for the writer "
                             "warp's bulk reduction: it needs dq_warp, and block_m=128, "
                             "dq_split or wg3")
        if self.dq_exit_read and not (self.dq_warp or self.wg3):
            raise ValueError("dq_exit_read is the dQ writer warp's last wait (or wg3's "
                             "consumers'): it needs dq_warp or wg3")
        if self.block_m != BLOCK_M and not (self.dq_tma and self.dq_swizzle) or \
                self.block_m != BLOCK_M and (self.dq_split or self.col_split):
            raise ValueError("block_m 128 splits dQ by query rows, staged swizzled for the "
                             "TMA reduce-add: it needs dq_tma and dq_swizzle, and neither "
                             "dq_split nor col_split")
        if self.dq_warp and not self.dq_tma:
            raise ValueError("dq_warp hands the TMA reduce-add's stage to a producer warp: it "
                             "needs dq_tma")
        if self.dk_last and not (self.overlap == 1 and self.dq_tma):
            raise ValueError("dk_last issues dK behind dQ, staging dQ under it: it needs "
                             "overlap 1 and dq_tma")
        if self.wg3 and (not (self.dq_tma and self.dq_swizzle) or self.overlap == 1 or any((
                self.dq_split, self.col_split, self.pds_smem, self.ds_double,
                self.panel_split, self.dk_last, self.block_m != BLOCK_M))):
            raise ValueError("wg3 is its own kernel (96 keys, three consumer warpgroups): it "
                             "needs dq_tma and dq_swizzle, takes dq_warp and overlap 2 "
                             "and none of the other options")
        if self.wg3_ahead not in (0, 1, 2) or self.wg3_ahead and not (
                self.wg3 and self.stages >= 2):
            raise ValueError(f"wg3_ahead is 0, 1 or 2 and needs wg3 and 2 stages (the next "
                             f"S reads the next Q slot before this one is given back), got "
                             f"{self.wg3_ahead}, wg3={self.wg3}, stages={self.stages}")
        if self.wg3_pfree and not (self.wg3 and self.overlap == 2):
            raise ValueError("wg3_pfree guards wg3's P tile by dO's empty barrier, dS by "
                             "overlap 2's P exchange: it needs wg3 and overlap 2")
        if self.wg3_fence1 and not self.wg3:
            raise ValueError("wg3_fence1 drops the writers' proxy fence of wg3's P and dS "
                             "exchanges: it needs wg3")
        if self.det_units < 0:
            raise ValueError(f"det_units >= 0 (0: by L2 capacity), got {self.det_units}")
        if self.det_pipe and not self.dq_warp:
            raise ValueError("det_pipe reorders the dQ writer warp's turns: it needs dq_warp")
        if self.det_poll and not self.det_pipe:
            raise ValueError("det_poll reads the pipelined writer's next turn early: it needs "
                             "det_pipe")
        if self.s_ahead not in (0, 1, 2):
            raise ValueError(f"s_ahead is 0, 1 or 2, got {self.s_ahead}")
        if self.s_ahead and not (self.dk_last and (self.dq_split or self.block_m != BLOCK_M)):
            raise ValueError("s_ahead issues the next step's Sᵀ behind dk_last's dK, under "
                             "a one-chain dQ: it needs dk_last, and dq_split or block_m=128")
        if self.ahead_k and not self.s_ahead:
            raise ValueError("ahead_k issues s_ahead's first Sᵀ without a branch: it needs "
                             "s_ahead")
        if self.wg3 and self.producer_regs + 3 * self.consumer_regs > register_pool(3):
            raise ValueError(f"wg3: producer_regs + 3 x consumer_regs = {self.producer_regs} "
                             f"+ 3 x {self.consumer_regs} exceeds the {register_pool(3)} of "
                             f"four warpgroups (consumer_regs=160 fits)")
        if self.producer_regs + 2 * self.consumer_regs > register_pool(2):
            raise ValueError(f"producer_regs + 2 x consumer_regs = {self.producer_regs} + 2 x "
                             f"{self.consumer_regs} exceeds the {register_pool(2)} a thread "
                             f"slot of the 3 warpgroups holds at launch: setmaxnreg.inc "
                             f"would wait forever")

    @property
    def block_n(self) -> int:
        """Keys per CTA."""
        return BLOCK_N_WG3 if self.wg3 else \
            BLOCK_N_SPLIT if self.col_split else BLOCK_N

    def wg_cols(self, head_dim: int) -> int:
        """dQ columns a consumer warpgroup computes (and stages) per step."""
        return 64 if self.dq_split else head_dim // 2 if self.col_split else head_dim

    def smem_bytes(self, head_dim: int, elem_bytes: int = 2) -> int:
        """K and V (``block_n`` rows each), ``stages`` x (Q + dO + 2 x (LSE + D)) of
        ``block_m`` rows, two dSᵀ tiles (64 x ``block_m``), the dQ stages (``dq_tma``),
        the mbarriers; 16-bit tiles in whole 64-column panels (head dim 96 takes 128's),
        dQ's f32 stages only its columns."""
        kv = 2 * self.block_n * padded(head_dim) * elem_bytes
        bm = self.block_m
        if self.dq_swap:     # (bwd_m80.Layout): dSᵀ a slot, two 80 x 64 f32 dQ stages
            return kv + self.stages * (2 * bm * head_dim * elem_bytes + 2 * 384) + \
                self.stages * bm * self.block_n * elem_bytes + 2 * bm * 64 * 4 + \
                8 * (1 + 2 * self.stages)
        if self.wg3:         # (bwd_wg3.Layout): 1 dO stage, P and dS, three 64-column dQ stages
            return kv + (self.stages + 1) * (bm * head_dim * elem_bytes + bm * 4) + \
                2 * bm * 128 * elem_bytes + 3 * bm * 64 * 4 + 8 * (3 + 2 * self.stages)
        ring = self.stages * (2 * bm * padded(head_dim) * elem_bytes + 4 * bm * 4)
        stage = (2 * head_dim * BLOCK_M * 4 if not self.col_split
                 else head_dim * BLOCK_M * 4) if self.dq_tma else 0
        ds = (4 if self.ds_double else 2) * bm * 64 * elem_bytes
        return kv + ring + ds + stage + 8 * (1 + 2 * self.stages) + \
            (8 if self.kv_pair else 0)


@lru_cache(maxsize=1)
def rows() -> tuple[dict, ...]:
    """The table (read once: a file of the package, not state)."""
    data = json.loads((Path(__file__).with_name("bwd_plans.json")).read_text())
    return tuple(data["rows"])


def choose_bwd(head_dim: int, dtype_name: str, mask: Mask, softcap: bool = False,
               deterministic: bool = False, varlen: bool = False) -> BwdConfig:
    """The table's config for this call (a row with a ``softcap``, ``deterministic`` or
    ``varlen`` list holds only for those settings; ``varlen`` skips rows of 128-query steps,
    since varlen's padded rows start every 64); a ValueError for a head dim no row covers."""
    kind = "full" if not mask.any else "causal" if mask.tag == "causal" else "window"
    for row in rows():
        if head_dim in row["head_dims"] and dtype_name in row["dtypes"] and kind in row["masks"] \
                and bool(softcap) in row.get("softcap", (False, True)) \
                and bool(deterministic) in row.get("deterministic", (False, True)) \
                and bool(varlen) in row.get("varlen", (False, True)) \
                and not (varlen and row["config"].get("block_m", BLOCK_M) != BLOCK_M):
            c = BwdConfig(**row["config"])
            assert c.smem_bytes(head_dim) <= SMEM_PER_CTA, (row, c.smem_bytes(head_dim))
            return c
    raise ValueError(f"no backward plan for head dim {head_dim} ({dtype_name}, {kind}); the "
                     f"backward takes head dims {', '.join(map(str, BWD_HEAD_DIMS))}")


def kernel_checks(c: BwdConfig, d: int, deterministic: bool, varlen: bool) -> None:
    """What :func:`.bwd.build_backward` refuses beyond the config's own checks: the
    combinations with a head dim, the deterministic mode or varlen."""
    if c.kv_pair and (deterministic or varlen):  # (the turns assume one key block a CTA)
        raise ValueError("kv_pair walks two key blocks a CTA in the dense default mode: not "
                         "deterministic or varlen")
    if varlen and c.dkv_tma:    # (a sequence's last key block would write the next one's)
        raise ValueError("dkv_tma stores whole key blocks by TMA: not with varlen")
    if varlen and not (c.dq_tma and c.dq_swizzle):
        raise ValueError("the varlen backward adds dQ by TMA from a swizzled stage: it needs "
                         "dq_tma and dq_swizzle")
    if d not in (64, 96, 128, 192, 256) or (d > 128) != c.col_split:
        raise ValueError(f"head dim {d}: the backward kernel takes 64, 96 or 128, and 192 or "
                         f"256 with col_split (col_split={c.col_split})")
    if d % 64 and c.dq_tma and not c.dq_swizzle:
        raise ValueError(f"head dim {d}: dQ's last 32 columns are staged as a swizzled "
                         f"32-column panel: dq_tma needs dq_swizzle")
    if c.block_m > BLOCK_M and (d != 64 or varlen):
        raise ValueError(f"block_m 128 is head dim 64's dense layout, got head dim {d}"
                         f"{' (varlen)' if varlen else ''}")
    if varlen and c.dq_frag:    # (its blocks are the dense layout's 64-row blocks)
        raise ValueError("dq_frag adds dQ to the dense layout's 64-row blocks: not with varlen")
    if c.dq_split and d != 128:
        raise ValueError(f"dq_split gives each warpgroup 64 of dQ's columns: head dim 128, "
                         f"got {d}")


__all__ = ["BwdConfig", "choose_bwd", "rows", "BWD_HEAD_DIMS", "BLOCK_M", "BLOCK_M_SWAP",
           "BLOCK_N", "BLOCK_N_SPLIT", "BLOCK_N_WG3", "kernel_checks"]
