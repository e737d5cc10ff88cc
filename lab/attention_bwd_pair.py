"""``lab/attention_bwd_plans.py --set pair``: head dim 64's backward with two key blocks a
CTA (issue #51: the hd64 default row trails FlashAttention-4 most under the causal mask,
0.90-0.93, and a cost of about 3.7 step times per CTA fits its causal-to-full ratios).

Three variants beside head dim 64's plan row (``bwd_plans.json`` row 0):

* ``kvp``: ``BwdConfig.kv_pair`` (``ptxdsl/ops/attention/bwd_pair.py``): CTA ``p`` of a
  (batch, K/V head) unit walks key block ``p``, then ``nblk - 1 - p``; under the causal
  mask every CTA is ``nblk + 1`` steps long (one CTA a key block: 1 to ``nblk``), half
  as many CTAs pay the per-CTA cost, and the second block's first Q, dO slot loads while
  the first block's dK, dV leave by TMA;
* ``kvp ks``: ``kv_pair`` with ``dkv_stage``: each consumer warpgroup's dK, dV leave by
  TMA through its own dQ stage (64-row boxes), so K's and V's tiles are free once the
  first block's last wgmmas have landed and the second block's K, V load under that
  epilogue (the overlap ``kvp`` lacks);
* ``kvp ks pm32``: ``kvp ks`` with ``pair_max`` 32: units of more than 32 key blocks
  (S = 16k) keep a key block a CTA (there the fixed cost is small next to a CTA's 64 to
  128 steps, while equal-length pairs of 129 steps make the last wave coarser: 2048 CTAs
  on 132 SMs is 15.5 waves), so at S <= 4k it is ``kvp ks`` and at 16k the plan's order
  with ``dkv_stage``'s epilogue;
(``kv_pair`` without ``dkv_tma``, K, V loaded under ``st.global`` stores, is built and
tested but left out here: ``dkv_tma`` alone gained 3-6% at head dim 64.)

Then the deterministic mode (``bwd_plans.json`` row 1, 0.78-0.86 of the default), as
``--set det2`` times it (:func:`lab.attention_bwd_det2.run`: bitwise repeats checked, then
interleaved rounds beside the default row; S 4k full and causal, 1k causal and full, no
new shape past 30 s): ``det dkl``, the row with ``dk_last`` (FlashAttention-4's step, the
default row's: dK issued behind dQ, dQ staged under it; on the row before
``det_desc`` and the fixed-cost options it gained 2.5-4.6% at every shape,
``attention_bwd_det2b_h200.json``, and was never run with them), and ``det dkl sa2``
with ``s_ahead`` 2 as well (the default row's whole step). ptxas -v sm_90a: 168
registers, no spills; ``sa2`` carries the default row's C7519.

S 1k, 4k, 16k, causal and full (B·S = 16k tokens, H = 32). Every variant's dq, dk, dv are
checked against cuDNN's (max relative error <= 3e-2) before any is timed; then
interleaved rounds (:func:`lab.attention_bwd_short.run`). JSON to
``$OUT/attention_bwd_pair.json`` and ``$OUT/attention_bwd_pair_det.json``; a table and
each variant's geometric mean over the plan's after each part."""
from __future__ import annotations

VARIANTS = {"kvp": dict(kv_pair=True), "kvp ks": dict(kv_pair=True, dkv_stage=True),
            "kvp ks pm32": dict(kv_pair=True, dkv_stage=True, pair_max=32)}
# the deterministic mode's shapes, worst ratio first (bwd_plans.json row 1: 0.78 at 4k)
DET_GRID = ((4096, 64, False), (4096, 64, True), (1024, 64, True), (1024, 64, False))
D = 64


def det_variants(d):
    """name -> (config or None for the plan's, deterministic), as lab.attention_bwd_det2's:
    the default and deterministic rows, and the deterministic row with the default row's
    step (dk_last; and s_ahead 2)."""
    from dataclasses import replace
    from ptxdsl.ops.attention.bwd_config import choose_bwd
    from ptxdsl.ops.attention.config import Mask
    row = choose_bwd(d, "bf16", Mask(), False, True)     # (full and causal: one row)
    return {"default": (None, False), "plan det": (None, True),
            "det dkl": (replace(row, dk_last=True), True),
            "det dkl sa2": (replace(row, dk_last=True, s_ahead=2), True)}


def run(rounds: int = 7, block_ms: float = 10.0, tokens: int = 16384, width: int = 2048,
        fa4: bool = False) -> None:
    """:func:`lab.attention_bwd_short.run`'s rounds on head dim 64's shapes (``fa4``:
    FlashAttention-4 in the same rounds; off: its first calls compile for tens of
    seconds)."""
    from lab.attention_bwd_short import run as timed
    timed(rounds=rounds, block_ms=block_ms, tokens=tokens, width=width, fa4=fa4,
          grid=[(s, D, c) for c in (True, False) for s in (1024, 4096, 16384)],
          variants=VARIANTS, causal_only=(), name="attention_bwd_pair")
    from lab.attention_bwd_det2 import run as det_timed
    det_timed(rounds=5, budget_s=30.0, grid=DET_GRID, variants_of=det_variants,
              name="attention_bwd_pair_det")


__all__ = ["run", "VARIANTS", "DET_GRID", "det_variants"]
