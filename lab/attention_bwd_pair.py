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
* ``kvp st``: ``kv_pair`` without ``dkv_tma``: K and V are free once the first block's
  last wgmmas have landed, so the second block's K, V load runs under its dK, dV
  ``st.global`` stores (with ``dkv_tma`` the load waits for the TMA stores' reads of K's
  and V's tiles).

S 1k, 4k, 16k, causal and full (B·S = 16k tokens, H = 32). Every variant's dq, dk, dv are
checked against cuDNN's (max relative error <= 3e-2) before any is timed; then
interleaved rounds (:func:`lab.attention_bwd_short.run`). JSON to
``$OUT/attention_bwd_pair.json``; a table and each variant's geometric mean over the
plan's last."""
from __future__ import annotations

VARIANTS = {"kvp": dict(kv_pair=True), "kvp ks": dict(kv_pair=True, dkv_stage=True),
            "kvp st": dict(kv_pair=True, dkv_tma=False)}
D = 64


def run(rounds: int = 7, block_ms: float = 10.0, tokens: int = 16384, width: int = 2048,
        fa4: bool = False) -> None:
    """:func:`lab.attention_bwd_short.run`'s rounds on head dim 64's shapes (``fa4``:
    FlashAttention-4 in the same rounds; off: its first calls compile for tens of
    seconds)."""
    from lab.attention_bwd_short import run as timed
    timed(rounds=rounds, block_ms=block_ms, tokens=tokens, width=width, fa4=fa4,
          grid=[(s, D, c) for c in (True, False) for s in (1024, 4096, 16384)],
          variants=VARIANTS, causal_only=(), name="attention_bwd_pair")


__all__ = ["run", "VARIANTS"]
