"""``lab/attention_bwd_plans.py --set bwdu``: ``BwdConfig.uniform_cons`` over each head
dim's plan row (issue #51: the backward trails FlashAttention-4 by 3-10%). The consumers'
warpgroup index, read from lane 0 through ``shfl.sync.idx``, lets ptxas keep the wgmma
descriptors and shared addresses derived from it in uniform registers: ptxas 13.0 sm_90a
SASS of the consumers' step, without -> with, R2UR 32 -> 0 (hd64), 48 -> 0 (hd128,
dq_swap), 76 -> 0 (hd192, wg3), 120 -> 1 (hd256, col_split), and the step's instructions
655 -> 597, 575 -> 472, 507 -> 369, 717 -> 470 at the full mask (the forward's
``Config.uniform_cons`` gained 0.3-2.6%).

One variant, ``uc``, beside the shipped plan row of each shape; head dims 64, 128, 192,
256 (in that order, each head dim its own table and JSON, so a run cut short keeps the
ones done), S 1k, 4k, 16k, full and causal (B·S = 16k tokens, H·D = 2048: the bench's
shapes). Every variant's dq, dk, dv are checked against cuDNN's (SDPA flash's where cuDNN
refuses the head dim; max relative error <= 3e-2) before it is timed; then interleaved
rounds (``bench/timing.py``, :func:`lab.attention_bwd_short.run`); JSON to
``$OUT/attention_bwd_bwdu_d<D>.json``; a table and the variant's geometric mean over the
plan's last."""
from __future__ import annotations

VARIANTS = {"uc": dict(uniform_cons=True)}
HEAD_DIMS = (64, 128, 192, 256)


def run(rounds: int = 7, block_ms: float = 10.0, tokens: int = 16384, width: int = 2048,
        head_dims=HEAD_DIMS, fa4: bool = False) -> None:
    """:func:`lab.attention_bwd_short.run`'s rounds, one call a head dim (``fa4``:
    FlashAttention-4 in the same rounds, off: its first calls compile for tens of
    seconds)."""
    from lab.attention_bwd_short import run as timed
    for d in head_dims:
        timed(rounds=rounds, block_ms=block_ms, tokens=tokens, width=width, fa4=fa4,
              grid=[(s, d, c) for s in (1024, 4096, 16384) for c in (False, True)],
              variants=VARIANTS, causal_only=(), name=f"attention_bwd_bwdu_d{d}")


__all__ = ["run", "VARIANTS", "HEAD_DIMS"]
