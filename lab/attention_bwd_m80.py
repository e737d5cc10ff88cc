"""``lab/attention_bwd_plans.py --set m80``: head dim 128's plan row (64 queries a step,
``dq_split``, FA4's step) against ``BwdConfig.dq_swap`` (FlashAttention-3's hdim-128
full-mask tile: 80 queries a step, dQ computed transposed:
``ptxdsl/ops/attention/bwd_m80.py``), default mode, S = 1k, 4k, 16k, full and causal
(B·S = 16k tokens, H·D = 2048; FA3 takes 80 rows for the full mask only, the kernel
takes the causal one too). Every variant's dq, dk, dv are checked against cuDNN's (max
relative error <= 3e-2) before any is timed, then timed in interleaved rounds
(:func:`lab.attention_bwd_ahead.run`). JSON to ``$OUT/attention_bwd_m80.json``; a table
and the variant's geometric mean over the plan row last."""
from __future__ import annotations


def variants():
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    m80 = dict(stages=2, dq_tma=True, overlap=1, dq_swizzle=True, block_m=80,
               ds_double=True, dq_warp=True, dk_last=True, dq_swap=True)
    return {128: {"plan": None, "m80": BwdConfig(**m80)}}


def run(rounds: int = 7) -> None:
    from lab.attention_bwd_ahead import run as timed
    grid = [(s, 128, c) for s in (1024, 4096, 16384) for c in (False, True)]
    timed(rounds=rounds, grid=grid, table=variants(), name="attention_bwd_m80")
