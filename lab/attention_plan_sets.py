"""The candidate configs of :mod:`lab.attention_plans`: :data:`CANDIDATES` (per head dim,
the default sweep) and :data:`SETS` (``--set NAME``: a named set's shapes, masks, heads and
candidates, the current plans row first), each with the measurements that motivated it."""
from __future__ import annotations

# Config keyword arguments per head dim, the current plans row first. Earlier sweeps (S =
# 1k, 4k: bench/results/attention_plans_h200.json, attention_plans_s1k_h200.json) tried
# 192 / 176 keys per block, 3 stages, ping-pong, persistent and the TMA-store epilogue.
# Three consumers (192-row tiles) compile without spills only at head dim 64 with 128
# keys per block (ptxas -v; 144 and more keys, or head dim 96 / 128, spill at 160
# registers); each was checked on the interpreter first. Dynamic (a global tile counter)
# with and without head sections: the causal rows' configs (no spills, ptxas -v).
_P, _L, _D = dict(persistent=True), dict(lazy_rescale=True), dict(dynamic=True)
CANDIDATES = {
    64: [dict(block_n=128, **_P), dict(block_n=128, **_P, **_D),
         dict(block_n=128, **_P, **_D, head_sections=True), dict(block_n=128, **_P, **_L),
         dict(block_n=128, consumers=3, **_P, **_L),
         dict(block_n=128, consumers=3, pingpong=True, **_P, **_L),
         dict(block_n=128, stages=3, consumers=3, **_P, **_L),
         dict(block_n=128, stages=3, consumers=3, **_P, **_L, head_sections=True),
         dict(block_n=128, stages=3, consumers=3, **_P, **_L, **_D),
         dict(block_n=128, stages=3, consumers=3, **_P, **_L, **_D, head_sections=True)],
    96: [dict(block_n=128, **_P), dict(block_n=128, **_P, **_L)],
    128: [dict(block_n=128, **_P), dict(block_n=128, **_P, **_L),
          dict(block_n=176, **_P, **_L), dict(block_n=128, pingpong=True, **_P, **_L),
          dict(block_n=128, stages=3, **_P, **_L),
          dict(block_n=128, **_P, **_L, head_sections=True),
          dict(block_n=128, **_P, **_L, **_D),
          dict(block_n=128, **_P, **_L, **_D, head_sections=True)],
    192: [dict(block_n=96, pingpong=True, **_P), dict(block_n=96, pingpong=True, **_P, **_L)],
    256: [dict(block_n=80, pingpong=True), dict(block_n=80, pingpong=True, **_L),
          dict(block_n=80, pingpong=True, **_P, **_L),
          dict(block_n=80, pingpong=True, **_P, **_L, head_sections=True),
          dict(block_n=80, pingpong=True, **_P, **_L, **_D),
          dict(block_n=80, pingpong=True, **_P, **_L, **_D, head_sections=True)],
}


def _variants(*rows):
    """Each row as it is, with head sections, dynamic, and dynamic with head sections."""
    return [dict(r, **x) for r in rows for x in ({}, dict(head_sections=True), _D,
                                                 dict(head_sections=True, **_D))]


_PL = dict(persistent=True, lazy_rescale=True)
_M3 = dict(consumers=3, **_PL)
_PK = dict(layout="packed")       # the GQA group's heads in one tile's rows (tiles.Packed)
_C = dict(causal=True)            # a candidate for the causal shapes only
_S, _S48 = dict(head_sections=True), dict(head_sections=True, section_mb=48)
_PLAN = dict(plan=True)           # the plans.json row of the shape (what attention() runs)
_W1 = dict(tma_store=True, store_wait_once=True)
_LATE = dict(late_epilogue=True)  # a tile's epilogue under the next tile's first Q·Kᵀ

# Named candidate sets (--set, comma-separated to run several in one process). A set is
# its candidates per head dim and, where it says, its shapes: ``seqs``, ``heads`` (H, Hkv:
# B = 16k / S), ``masks`` (False: full, True: causal); else --seqs, H * D = 2048 and both
# masks. A candidate's ``layout`` (dense, packed) and ``causal`` keys are not Config's:
# they pick the layout and restrict it to one mask. Its first candidate is the current
# plans row. ``dynamic``: the A/B of Config.dynamic on the causal rows. ``h96`` (the
# bench's d96 row, B4 S4k H16): 192-row tiles (three consumers, FA4's sm90 choice at head
# dim 96; 96 and 112 keys a block compile without spills, 128 spills), lazy rescale, wider
# blocks, the TMA-store epilogue. ``gqa`` (the bench's GQA row, B4 S4k H32 Hkv8): the
# packed layout (FA4 packs every GQA group on sm90), dynamic, and causal head sections,
# which count K/V heads, also of 48 MiB (FA4's sm90 causal order: sections of 50 MB of
# K/V, one CTA a tile).
# ``h128c`` (hd128 causal at 1k and 16k, the current rows first: sections at 1k, none at
# 16k): block_n, dynamic, sections of 24 and 48 MiB, one CTA a tile (FA4's grid),
# ping-pong, 3 stages, the TMA-store epilogue. Each set also has FA4's own sm90 choice
# in our terms (ping-pong, one CTA a tile, 48 MiB sections when causal; hd96: 192 rows).
# ``h128f``: the same at head dim 128 full, 4k and 16k (the current rows:
# 128 keys at 4k, 176 at 16k). ``causal`` (head dim 128 causal at 1k, 4k, 16k, where
# ptxdsl trails FA4 most): each shape's plans row (``plan``: the row attention() picks
# there, which differs between 1k and longer) and the same with the TMA-store epilogue
# (the 1k row has it; the others do not), also with its wait for the staging buffer's
# reads once per CTA (store_wait_once), not after every tile.
# ``diag`` (head dims 64, 128, 256 causal at 1k, 4k, 16k): each plans row with Config.late_epilogue (a tile's epilogue
# under the next tile's first Q·Kᵀ: the tensor cores idle through it otherwise, once a
# tile, most at S = 1k; at head dim 128 with the staging wait once a CTA, what the 4k/16k
# row has). Every candidate compiles without spills or serialized wgmmas
# (test_fwd_candidates.py).
# ``gqa_full`` (the bench's GQA full row, B4 S4k H32 Hkv8 hd128, where ptxdsl runs slower
# than at MHA and FA4 faster): the plans row, with the packed layout (FA4 packs every GQA
# group on sm90), one CTA a tile (FA4's grid, hardware-scheduled), both, and the TMA-store
# epilogue (FA4's) with its own buffer or in Q's (Config.o_in_q).
# ``h256c`` (head dim 256 causal at 1k and 4k): each plans row with the TMA-store epilogue
# staged in Q's buffer (the only place it fits beside Q and two 80-key stages; FA4 stages
# O in sQ), without ping-pong (FA4 takes turns only up to head dim 128), and FA4's sm90
# schedule in our terms (one CTA a tile, longest-first in 48 MiB sections), with both.
# ``s16k2`` (the 16k rows where ptxdsl trails FA4 most: head dim 128 causal and full, 64
# and 256 causal): each plans row with O staged in Q's buffer (Config.o_in_q: the
# TMA-store epilogue without a buffer of its own; the hd128 causal row's staging wait once
# a CTA goes, o_in_q waits every tile); at head dim 128 the freed buffer holds a third
# 128-key stage (229488 bytes) or the epilogue beside the full row's 176-key blocks
# (213072); FA4's sm90 causal schedule (one CTA a tile, 48 MiB head
# sections) with it, which is head dim 256's <= 4k row, also with ping-pong (FA4's sm90
# schedule whole at head dims 64 and 128: its consumers take turns up to head dim 128; at
# full, one CTA a tile without sections); head dim 64 (192-row tiles, 3 stages) also with
# the TMA-store epilogue in its own buffer and with a fourth stage.
# ``fwdc`` (head dims 128 and 64 causal at 4k and 16k, where ptxdsl's causal runs slower
# than its full per key and FA4's faster): each plans row with Config.uniform_cons (the
# consumer index through shfl.sync.idx: Q's descriptors in uniform registers, no R2UR
# before each Q·Kᵀ wgmma), Config.q_double (Q in two buffers: the next tile's Q and first
# K/V blocks load under the current tile, a cost paid per tile, twice as often per key
# under the causal mask), both, and both with the epilogue under the next tile's first
# Q·Kᵀ (late_epilogue: it lost at 4k waiting for the next Q, which q_double takes off).
# ``fwdu``: Config.uniform_cons on the other plan rows at 4k and 16k (hd128 full, hd64 and
# hd256 both masks), and hd128 causal's uniform_cons + q_double + late_epilogue again.
# ``fwdq``: after the fwdu rows: hd128 full without uniform_cons (1k is untimed with it),
# and q_double + late_epilogue (the hd128 causal row's win) on hd128 full (128 keys) and hd64,
# at 1k to 16k (head dim 256's second Q buffer does not fit).
# ``fwd1k`` (head dims 128 and 256 full at 1k, 0.94x / 0.95x FA4; 4k too, same kernels): a
# 1k tile is 8 (13) key blocks, so what a tile pays once (the epilogue's st.global of O,
# the next Q's load, the first Q.K^T alone) weighs 4x more than at 4k: the TMA-store
# epilogue (hd128: its own buffer, the wait once a CTA; hd256: O in Q's buffer), q_double
# + late_epilogue, the lazy rescale off at hd128 (1k's best runs were without), FA4's sm90
# schedules whole (one CTA a tile, O staged in Q; hd128 with ping-pong, hd256 without),
# ping-pong off at hd256, hd256 on 64-key blocks (1k and 4k keys in whole blocks, not
# 12.8 / 51.2 of 80 with a masked ragged last block; 64 + 2 x 64 KiB).
# Every candidate fits shared memory and compiles without spills or serialized wgmmas
# (test_fwd_candidates.py).
# ``fwdts1k``: the same at 1k (hd64's rows; hd128's causal 1k row has the TMA store, not
# the wait once a CTA); ``fwdts16b``: hd128's 16k full row with O in Q's buffer, and the
# 128-key row below 16k (with the TMA store now) at 16k.
# ``gqa32`` (the bench's GQA row with Sq = 32 against Sk = 4096, B 64, H 32 / Hkv 8, full:
# 0.94-0.95x FA4 in every run; packed 4 heads a tile, 32 key blocks a tile, memory-bound at
# ~3.9 TB/s against FA4's 4.15): the hd128 full row has one Q buffer, so the producer stops
# streaming K/V at each tile's end until the consumers release Q; with two (q_double), and
# the epilogue under the next tile's first Q·Kᵀ, and 64-key blocks in 4 stages (the same
# bytes in flight in finer steps). A set's ``sq`` / ``batch`` give Sq < Sk (full masks).
# ``fwdts`` / ``fwdts16``: fwd1k's winners on the rows it did not reach: the TMA-store
# epilogue waited once a CTA on head dim 64 (4k, 16k), O staged in Q's buffer on head dim
# 128's 176-key 16k full row and on head dim 256's 16k rows (full, and causal above 4k).
_OQ = dict(tma_store=True, o_in_q=True, q_double=False)   # (O in the one Q buffer)
_NO_OQ = dict(tma_store=False, o_in_q=False)
_FA4GRID = dict(persistent=False, dynamic=False)
_OQ1 = dict(store_wait_once=False, late_epilogue=False, **_OQ)  # (the hd128
# rows wait once a CTA, causal with the epilogue late and two Q buffers: none go with o_in_q)
_SUS = dict(suspend_ns=10_000_000)    # try_wait's suspend hint, CUTLASS's 10 ms
SETS = {
    # ``sus`` / ``gqasus``: the plan rows with and without Config.suspend_ns (ncu of hd128
    # 16k causal: ptxdsl's kernel ran 24.7M try_wait and 28.3M BRA, FA4's, whose waits pass
    # the hint, 3.1M and 4.6M; ncu_fwd_order_h200.json)
    "sus": {"seqs": [4096, 16384], "candidates": {
        64: [_PLAN, dict(_PLAN, **_SUS)], 128: [_PLAN, dict(_PLAN, **_SUS)],
        256: [_PLAN, dict(_PLAN, **_SUS)]}},
    "gqasus": {"seqs": [4096], "heads": (32, 8), "candidates": {
        128: [_PLAN, dict(_PLAN, **_SUS)]}},
    # ``kahead`` / ``gqaka`` / ``gqa32ka``: Config.k_ahead (K's block j + 1 loaded before
    # V's block j, FA3's producer order) on the plan rows, and on gqa32's two-Q-buffer
    # candidates (memory-bound: Sq 32 against Sk 4096)
    "kahead": {"seqs": [1024, 4096, 16384], "candidates": {
        64: [_PLAN, dict(_PLAN, k_ahead=True)], 128: [_PLAN, dict(_PLAN, k_ahead=True)],
        256: [_PLAN, dict(_PLAN, k_ahead=True)]}},
    "gqaka": {"seqs": [4096], "heads": (32, 8), "candidates": {
        128: [_PLAN, dict(_PLAN, k_ahead=True)]}},
    "gqa32ka": {"seqs": [4096], "sq": 32, "batch": 64, "heads": (32, 8), "masks": [False],
                "candidates": {128: [dict(_PLAN, q_double=True, **_LATE, **_PK),
                                     dict(_PLAN, q_double=True, **_LATE, k_ahead=True, **_PK),
                                     dict(_PLAN, k_ahead=True, **_PK)]}},
    "gqa32": {"seqs": [4096], "sq": 32, "batch": 64, "heads": (32, 8), "masks": [False],
              "candidates": {128: [dict(_PLAN, **_PK), dict(_PLAN, q_double=True, **_PK),
                                   dict(_PLAN, q_double=True, **_LATE, **_PK),
                                   dict(_PLAN, block_n=64, stages=4, **_PK)]}},
    "dynamic": {"candidates": {
        64: _variants(dict(block_n=128, **_P),
                      dict(block_n=128, stages=3, consumers=3, **_P, **_L)),
        128: _variants(dict(block_n=128, **_P, **_L)),
        256: _variants(dict(block_n=80, pingpong=True, **_P, **_L))}},
    "h96": {"seqs": [4096], "candidates": {96: [
        dict(block_n=128, **_P), dict(block_n=128, **_PL), dict(block_n=176, **_PL),
        dict(block_n=96, **_M3), dict(block_n=112, **_M3),
        dict(block_n=112, pingpong=True, **_M3), dict(block_n=96, stages=3, **_M3),
        dict(block_n=112, tma_store=True, **_M3), dict(block_n=112, **_M3, **_D, **_C),
        dict(block_n=112, consumers=3, pingpong=True, lazy_rescale=True)]}},
    "gqa": {"seqs": [4096], "heads": (32, 8), "candidates": {128: [
        dict(block_n=128, **_PL), dict(block_n=128, **_PL, **_S, **_C),
        dict(block_n=128, **_PL, **_S48, **_C), dict(block_n=128, **_PL, **_D),
        dict(block_n=128, **_PL, **_PK), dict(block_n=176, **_PL, **_PK),
        dict(block_n=128, **_PL, **_D, **_PK), dict(block_n=128, **_PL, **_S, **_PK, **_C),
        dict(block_n=128, **_PL, **_S48, **_D, **_PK, **_C),
        dict(block_n=128, lazy_rescale=True, **_S48, **_PK, **_C), dict(block_n=176, **_PL),
        dict(block_n=128, pingpong=True, **_PL, **_PK),
        dict(block_n=128, pingpong=True, lazy_rescale=True, **_PK, **_C),
        dict(block_n=128, pingpong=True, lazy_rescale=True, **_S48, **_PK, **_C)]}},
    "h128c": {"seqs": [1024, 16384], "masks": [True], "candidates": {128: [
        dict(block_n=128, **_PL, **_S), dict(block_n=128, **_PL),
        dict(block_n=176, **_PL), dict(block_n=160, **_PL), dict(block_n=128, **_PL, **_D),
        dict(block_n=128, **_PL, **_D, **_S), dict(block_n=128, **_PL, **_D, **_S48),
        dict(block_n=128, **_PL, **_S48), dict(block_n=128, lazy_rescale=True, **_S48),
        dict(block_n=128, pingpong=True, **_PL), dict(block_n=128, stages=3, **_PL),
        dict(block_n=128, tma_store=True, **_PL, **_S),
        dict(block_n=128, pingpong=True, **_PL, **_S48),
        dict(block_n=128, pingpong=True, lazy_rescale=True, **_S48)]}},
    "causal": {"seqs": [1024, 4096, 16384], "masks": [True], "candidates": {
        128: [_PLAN, dict(_PLAN, tma_store=True), dict(_PLAN, **_W1)]}},
    "diag": {"seqs": [1024, 4096, 16384], "masks": [True], "candidates": {
        64: [_PLAN, dict(_PLAN, **_LATE)],
        128: [_PLAN, dict(_PLAN, **_W1, **_LATE)],
        # (head dim 256 causal <= 4k now stages O in Q's buffer, which late_epilogue
        # does not take: the candidate takes it out, as the row it was measured against)
        256: [_PLAN, dict(_PLAN, **_LATE, **_NO_OQ)]}},
    "gqa_full": {"seqs": [4096], "heads": (32, 8), "masks": [False], "candidates": {128: [
        _PLAN, dict(_PLAN, **_PK), dict(_PLAN, **_FA4GRID),
        dict(_PLAN, **_FA4GRID, **_PK), dict(_PLAN, tma_store=True), dict(_PLAN, **_OQ1)]}},
    "h256c": {"seqs": [1024, 4096], "masks": [True], "candidates": {256: [
        _PLAN, dict(_PLAN, **_OQ), dict(_PLAN, pingpong=False),
        dict(_PLAN, pingpong=False, **_OQ), dict(_PLAN, **_FA4GRID, **_S48, **_OQ),
        dict(_PLAN, pingpong=False, **_FA4GRID, **_S48, **_OQ)]}},
    "s16k2": {"seqs": [16384], "masks": [True, False], "candidates": {
        128: [_PLAN, dict(_PLAN, **_OQ1),
              dict(_PLAN, block_n=128, stages=3, **_OQ1),
              dict(_PLAN, **_FA4GRID, **_S48, **_OQ1, **_C),
              dict(_PLAN, pingpong=True, **_FA4GRID, **_S48, **_OQ1, **_C),
              dict(_PLAN, block_n=128, stages=3, **_FA4GRID, **_S48, **_OQ1, **_C),
              dict(block_n=128, **_PL, **_OQ, causal=False),
              dict(block_n=128, pingpong=True, lazy_rescale=True, **_OQ, causal=False)],
        64: [dict(_PLAN, **_C), dict(_PLAN, tma_store=True, **_C), dict(_PLAN, **_OQ, **_C),
             dict(_PLAN, stages=4, **_OQ, **_C),
             dict(_PLAN, **_FA4GRID, **_S48, **_OQ, **_C),
             dict(_PLAN, pingpong=True, **_FA4GRID, **_S48, **_OQ, **_C)],
        256: [dict(_PLAN, **_C), dict(_PLAN, **_OQ, **_C),
              dict(_PLAN, **_FA4GRID, **_S48, **_OQ, **_C)]}},
    "fwdc": {"seqs": [4096, 16384], "masks": [True], "candidates": {
        128: [_PLAN, dict(_PLAN, uniform_cons=True), dict(_PLAN, q_double=True),
              dict(_PLAN, uniform_cons=True, q_double=True),
              dict(_PLAN, uniform_cons=True, q_double=True, **_LATE)],
        64: [_PLAN, dict(_PLAN, uniform_cons=True), dict(_PLAN, q_double=True),
             dict(_PLAN, uniform_cons=True, q_double=True)]}},
    "fwdu": {"seqs": [4096, 16384], "masks": [True, False], "candidates": {
        128: [_PLAN, dict(_PLAN, uniform_cons=True, causal=False),
              dict(_PLAN, uniform_cons=True, q_double=True, causal=True, **_LATE)],
        64: [_PLAN, dict(_PLAN, uniform_cons=True)],
        256: [_PLAN, dict(_PLAN, uniform_cons=True)]}},
    "fwdq": {"seqs": [1024, 4096, 16384], "masks": [True, False], "candidates": {
        128: [_PLAN, dict(_PLAN, uniform_cons=False, causal=False),
              dict(block_n=128, lazy_rescale=True, persistent=True, uniform_cons=True,
                   q_double=True, **_LATE, causal=False)],     # (176 keys: no room)
        64: [_PLAN, dict(_PLAN, q_double=True, **_LATE), dict(_PLAN, uniform_cons=True,
                                                               q_double=True, **_LATE)]}},
    "fwd1k": {"seqs": [1024, 4096], "masks": [False], "candidates": {
        128: [_PLAN, dict(_PLAN, lazy_rescale=False), dict(_PLAN, **_W1),
              dict(_PLAN, q_double=True, **_LATE), dict(_PLAN, q_double=True, **_W1, **_LATE),
              dict(_PLAN, pingpong=True, **_FA4GRID, **_OQ1)],
        256: [_PLAN, dict(_PLAN, **_OQ), dict(_PLAN, pingpong=False, **_OQ),
              dict(_PLAN, **_FA4GRID, **_OQ), dict(_PLAN, pingpong=False, **_FA4GRID, **_OQ),
              dict(_PLAN, block_n=64), dict(_PLAN, block_n=64, **_OQ)]}},
    "fwdts": {"seqs": [4096, 16384], "candidates": {64: [_PLAN, dict(_PLAN, **_W1)]}},
    "fwdts16": {"seqs": [16384], "candidates": {
        128: [_PLAN, dict(_PLAN, **_OQ1, causal=False)],     # (176 keys + a staging buffer:
        # 246,784 bytes, over the 232,448 an H200 allows; the first run's LaunchError)
        256: [_PLAN, dict(_PLAN, **_OQ)]}},
    "fwdts1k": {"seqs": [1024], "candidates": {
        64: [_PLAN, dict(_PLAN, **_W1), dict(_PLAN, **_OQ1)],
        128: [_PLAN, dict(_PLAN, store_wait_once=True, causal=True)]}},
    "fwdts16b": {"seqs": [16384], "masks": [False], "candidates": {128: [
        _PLAN, dict(_PLAN, **_OQ1),
        dict(block_n=128, uniform_cons=True, **_PL, **_W1)]}},
    "h128f": {"seqs": [4096, 16384], "masks": [False], "candidates": {128: [
        dict(block_n=128, **_PL), dict(block_n=176, **_PL),
        dict(block_n=128, pingpong=True, lazy_rescale=True)]}},
}

__all__ = ["CANDIDATES", "SETS"]
