"""``lab/attention_bwd_plans.py --set levers``: FlashAttention-4's sm90 backward read in SASS
(``lab/peer_sass.py``, bench/results/peer_sass_bwd64c.json, peer_sass_bwd128c.json) names
the places its kernel does less than ptxdsl's; each lever here is a variant over head dims
64's and 128's plan rows (issue #51: the backward trails FA4 by 2-8% there).
(``ds_stsm``, dSᵀ stored by ``stmatrix.x4``: SASS STS 80 -> 48 + 8 STSM at hd64 causal,
timed a tie, 1.000 at hd64, 0.997 at hd128, and removed; its code is in commit 57121a7.)
``lse<n>``: ``BwdConfig.lse_early``, the first n of the step's -LSE·log2e pairs loaded
before the wait for Sᵀ (ncu's source view of head dim 64's full step at S 1k, NVIDIA
H200: the FMAs that take them wait on the short scoreboard, ~6% of the step's stall
samples, against ~2% in FA4's). ``dqf``: ``BwdConfig.dq_frag`` (head dim 64), dQ staged in
fragment order by 8 ``st.shared.v4`` and added by one 1-D ``cp.reduce.async.bulk`` (FA4's
dQ path: ncu's source view puts ~16% of our step's stall samples in the dQ stage).

S 1k, 4k, 16k, full and causal (B·S = 16k tokens, H·D = 2048: the bench's shapes), head
dims 64 then 128 (each its own table and JSON, so a run cut short keeps the ones done).
Every variant's dq, dk, dv are checked against cuDNN's before it is timed; then
interleaved rounds (``bench/timing.py``, :func:`lab.attention_bwd_short.run`); JSON to
``$OUT/attention_bwd_levers_d<D>.json``; a table and each variant's geometric mean over
the plan's last."""
from __future__ import annotations

VARIANTS = {"lse4": dict(lse_early=4), "lse8": dict(lse_early=8), "lse16": dict(lse_early=16)}
HEAD_DIMS = (64, 128)


def run(rounds: int = 7, block_ms: float = 10.0, tokens: int = 16384, width: int = 2048,
        head_dims=HEAD_DIMS, variants=None) -> None:
    """:func:`lab.attention_bwd_short.run`'s rounds, one call a head dim."""
    from lab.attention_bwd_short import run as timed
    for d in head_dims:
        timed(rounds=rounds, block_ms=block_ms, tokens=tokens, width=width,
              grid=[(s, d, c) for s in (1024, 4096, 16384) for c in (False, True)],
              variants=variants or VARIANTS, causal_only=(),
              name=f"attention_bwd_levers_d{d}")


__all__ = ["run", "VARIANTS", "HEAD_DIMS"]
