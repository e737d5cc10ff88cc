"""``lab/attention_bwd_plans.py --set h128d``: where head dim 128's Pᵀ exponentials run
(issue #51: the 80-query tile trails FlashAttention-4 by 3-9%; ``uniform_cons`` cut the
consumers' step from 575 to 472 SASS instructions and timed mixed at the full mask).

Why the fewer instructions did not help: the step is not issue-bound. In ptxas's SASS of
both rows (13.0, sm_90a) dPᵀ's ``WARPGROUP.DEPBAR.LE gsb0, 0x0`` sits after 3 of the 40
``MUFU.EX2`` a thread (causal: 4), so ``overlap`` 1 overlaps almost nothing: both
consumer warpgroups (in lockstep through the dSᵀ exchange barrier) take their 40
exponentials, dSᵀ and its stores while the tensor pipe has nothing queued. Variants over
each shape's plan row (:func:`lab.attention_bwd_short.run`):

* ``uc``: ``uniform_cons`` (full only: the causal row has it, and ``s_ahead`` 2);
* ``uc pin``: + ``dp_pin`` (dPᵀ's wait in both arms of a uniform branch, Pᵀ packed after
  it: all 40 exponentials ahead of the wait; same arithmetic; causal: the row with it);
* ``uc pin sa2``: with ``s_ahead`` 2 and ``ahead_k`` too (full only: the causal row's
  ``uc pin``);
* ``uc dvf``: ``uniform_cons`` + ``dv_first`` (dV queued behind dPᵀ as soon as Pᵀ is
  packed, dSᵀ made and stored under dV from the packed Pᵀ), without ``s_ahead``;
* ``uc dvf sa2``: with ``s_ahead`` 2 and ``ahead_k`` (dQ then waits for dV: it takes Sᵀ's
  registers; causal: the row with ``dv_first``);
* ``uc dvf sa2 dqb xf1``: and ``dq_batch`` (the dQ writer issues both warpgroups' adds
  before waiting for the first's reads, as FlashAttention-4's sm90 writer: a faster step
  meets the writer sooner) and ``ds_fence1`` (no reader-side proxy fence, a
  ``MEMBAR.ALL.CTA``, between the exchange barrier and dQ's issue: FA4's exchange).

ptxas -v: 168 registers (240 by ``setmaxnreg``), no spills, no wgmma notice for any of
them. S 1k, 4k, 16k, full and causal (B·S = 16k tokens, H = 16). Every variant checked
against cuDNN (max relative error <= 3e-2) before it is timed, then interleaved rounds;
JSON to ``$OUT/attention_bwd_h128d_full.json`` and ``..._causal.json``; a table and each
variant's geometric mean over the plan's last, per mask."""
from __future__ import annotations

PLAIN, AHEAD = dict(s_ahead=0, ahead_k=False), dict(s_ahead=2, ahead_k=True)
VARIANTS = {"uc": dict(uniform_cons=True),
            "uc pin": dict(uniform_cons=True, dp_pin=True),
            "uc pin sa2": dict(uniform_cons=True, dp_pin=True, **AHEAD),
            "uc dvf": dict(uniform_cons=True, dv_first=True, **PLAIN),
            "uc dvf sa2": dict(uniform_cons=True, dv_first=True, **AHEAD),
            "uc dvf sa2 dqb xf1": dict(uniform_cons=True, dv_first=True, dq_batch=True,
                                       ds_fence1=True, **AHEAD)}
FULL_ONLY = ("uc", "uc pin sa2")     # (at causal: the plan, the same as "uc pin")
GRID = [(s, 128, c) for s in (1024, 4096, 16384) for c in (False, True)]


def run(rounds: int = 7, block_ms: float = 10.0, tokens: int = 16384, width: int = 2048,
        fa4: bool = False) -> None:
    """:func:`lab.attention_bwd_short.run`'s rounds over :data:`GRID` (``fa4``:
    FlashAttention-4 in the same rounds, off: its first calls compile for tens of
    seconds)."""
    from lab.attention_bwd_short import run as timed
    # (causal_only is short's "time at causal shapes only"; here some are full-only, so
    # the causal shapes and the full ones are two calls with their own variant sets)
    for causal, variants in ((False, VARIANTS),
                             (True, {n: v for n, v in VARIANTS.items() if n not in FULL_ONLY})):
        timed(rounds=rounds, block_ms=block_ms, tokens=tokens, width=width, fa4=fa4,
              grid=[g for g in GRID if g[2] == causal], variants=variants, causal_only=(),
              name=f"attention_bwd_h128d_{'causal' if causal else 'full'}")


__all__ = ["run", "VARIANTS", "GRID"]
