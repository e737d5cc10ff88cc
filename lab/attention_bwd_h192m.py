"""``lab/attention_bwd_plans.py --set h192m``: head dim 192's main loop (issue #51: the
hd192 rows, ``wg3``, trail FlashAttention-4 by about 7% at every S, 16k full too, where
the fixed costs of a call vanish, so the step's schedule is what to change).

Variants, each over the shipped plan row of the shape (full: ``wg3`` + ``overlap`` 2;
causal: that + ``prep_wide``, ``dkv_tma``, ``dq_exit_read``, ``lpt_units`` 16):

* ``sa2``: ``BwdConfig.wg3_ahead`` 2 (``bwd_wg3ahead.py``: the next step's S issued
  behind dQ's stage, queued behind dK, carried across the back edge; the step starts
  with dP and computes P under it);
* ``pf``: ``BwdConfig.wg3_pfree`` (P's stores wait for dO's ``empty`` phase of the step
  before, every warpgroup's dV done, not a 384-thread barrier: two CTA barriers a step);
* ``f1``: ``BwdConfig.wg3_fence1`` (one proxy fence a thread per P or dS exchange, the
  readers' after the barrier, not also the writers' before it);
* ``sa2 pf``, ``sa2 pf f1``; ``sa2 pf f1 dqw``: with the dQ writer warp (``dq_warp``).

(``wg3_ahead`` 1, the S right behind dK, spills at 160 registers: ptxas -v, not timed.)
S 1k, 4k, 16k, full and causal (B·S = 16k tokens, H = 2048 // 192 = 10: the bench's
shapes). Every variant's dq, dk, dv are checked against cuDNN's (max relative error
<= 3e-2) before any is timed; then interleaved rounds (``bench/timing.py``); JSON to
``$OUT/attention_bwd_h192m.json``; a table and each variant's geometric mean over the
plan's last."""
from __future__ import annotations

BOTH = dict(wg3_ahead=2, wg3_pfree=True)
VARIANTS = {"sa2": dict(wg3_ahead=2), "pf": dict(wg3_pfree=True), "f1": dict(wg3_fence1=True),
            "sa2 pf": BOTH, "sa2 pf f1": dict(BOTH, wg3_fence1=True),
            "sa2 pf f1 dqw": dict(BOTH, wg3_fence1=True, dq_warp=True)}
D = 192


def run(rounds: int = 9, block_ms: float = 10.0, tokens: int = 16384, width: int = 2048,
        fa4: bool = False) -> None:
    """:func:`lab.attention_bwd_short.run`'s rounds on head dim 192's shapes and these
    variants (``fa4``: FlashAttention-4 in the same rounds, off: its first calls compile
    for tens of seconds)."""
    from lab.attention_bwd_short import run as timed
    timed(rounds=rounds, block_ms=block_ms, tokens=tokens, width=width, fa4=fa4,
          grid=[(s, D, c) for s in (1024, 4096, 16384) for c in (False, True)],
          variants=VARIANTS, causal_only=(), name="attention_bwd_h192m")


__all__ = ["run", "VARIANTS"]
