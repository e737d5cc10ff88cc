"""``lab/attention_bwd_plans.py --set levers``: the levers FlashAttention-4's sm90 backward
showed, in SASS (``lab/peer_sass.py``, bench/results/peer_sass_bwd64c.json) and in Nsight
Compute's warp-state samples (``lab/ncu_stalls.py``,
bench/results/ncu_stalls_bwd64_1k_full_h200.json), timed against the plan rows (issue #51;
bench/results/attention_bwd_levers_h200.json holds the runs that made them rows).

``lse<n>``: ``BwdConfig.lse_early``, the first n of the step's -LSE·log2e pairs loaded
before the wait for Sᵀ (the FMAs that take them waited on the short scoreboard). ``dqf``:
``BwdConfig.dq_frag`` (head dims 64 and 192), dQ staged in fragment order by
``st.shared.v4`` and added by one 1-D ``cp.reduce.async.bulk`` (the dQ stage held ~16% of
the step's stall samples). The rows that took a lever are timed without it (``no lse``,
``no dqf``), the others with it. (``ds_stsm``, dSᵀ by ``stmatrix.x4``, timed a tie and
removed, code in commit 57121a7; ``dq_frag`` at head dim 128's 80-query tile lost, 0.978,
code in b2cbf98.)

S 1k, 4k, 16k, full and causal (B·S = 16k tokens, H·D = 2048: the bench's shapes), head
dims 64, 128, 192 (each its own table and JSON, so a run cut short keeps the ones done).
Every variant's dq, dk, dv are checked against cuDNN's before it is timed; then
interleaved rounds (``bench/timing.py``, :func:`lab.attention_bwd_short.run`); JSON to
``$OUT/attention_bwd_levers_d<D>.json``; a table and each variant's geometric mean over
the plan's last."""
from __future__ import annotations

# (over each call's plan row; a variant equal to the row times the row twice)
VARIANTS = {64: {"no lse": dict(lse_early=0), "no dqf": dict(dq_frag=False),
                 "lse16": dict(lse_early=16)},
            128: {"no lse": dict(lse_early=0), "lse6": dict(lse_early=6)},
            192: {"no dqf": dict(dq_frag=False)}}
HEAD_DIMS = (64, 128, 192)


def run(rounds: int = 7, block_ms: float = 10.0, tokens: int = 16384, width: int = 2048,
        head_dims=HEAD_DIMS, variants=None) -> None:
    """:func:`lab.attention_bwd_short.run`'s rounds, one call a head dim."""
    from lab.attention_bwd_short import run as timed
    for d in head_dims:
        timed(rounds=rounds, block_ms=block_ms, tokens=tokens, width=width,
              grid=[(s, d, c) for s in (1024, 4096, 16384) for c in (False, True)],
              variants=variants or VARIANTS[d], causal_only=(),
              name=f"attention_bwd_levers_d{d}")


__all__ = ["run", "VARIANTS", "HEAD_DIMS"]
