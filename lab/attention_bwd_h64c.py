"""``lab/attention_bwd_plans.py --set h64c``: head dim 64's backward under the causal mask
(issue #51: the hd64 row is 0.93 / 0.98 / 0.98 of FlashAttention-4 at S 1k / 4k / 16k full
but 0.90 / 0.93 / 0.93 causal, so about 5% is causal-specific).

What the causal kernel does beyond the full one (ptxas -v sm_90a, nvdisasm): one masked
step per key block and warpgroup (128 x 128 tiles, the diagonal's; fully masked row
blocks are outside the walk's bounds), 64 ``ISETP`` + ``FSEL`` and ~10 more per thread on
it (a ~750-instruction step against ~600 unmasked); every unmasked step runs the mask's
test and a uniform branch (~6 instructions). The CTAs go key block fastest from the
longest, as FlashAttention-4's sm90 backward (which masks every step). Variants, each
head dim 64's plan row with:

* ``peel``: ``BwdConfig.mask_peel`` (the steps that cross the mask in their own loop, the
  rest in a loop traced without it, :mod:`ptxdsl.ops.attention.bwd_peel`); at full mask
  it is the plan's kernel, so timed causal only;
* ``desc``: ``BwdConfig.m_desc`` (a key block's row blocks last to first: the masked
  diagonal step last, and the CTAs of a head start on the same Q, dO rows and dQ
  block, as at full mask);
* ``peel desc``: both (causal only);
* ``desc lpt8``: ``m_desc`` with ``lpt_units`` 8 (causal only; lpt8 alone lost at head
  dim 64: 287/438/504 against 286/444/513).

S 1k, 4k, 16k, causal and full (B·S = 16k tokens, H = 32). Every variant's dq, dk, dv
are checked against cuDNN's (max relative error <= 3e-2) before any is timed; then
interleaved rounds (:func:`lab.attention_bwd_short.run`). JSON to
``$OUT/attention_bwd_h64c.json``; a table and each variant's geometric mean over the
plan's last."""
from __future__ import annotations

VARIANTS = {"peel": dict(mask_peel=True), "desc": dict(m_desc=True),
            "peel desc": dict(mask_peel=True, m_desc=True),
            "desc lpt8": dict(m_desc=True, lpt_units=8)}
CAUSAL_ONLY = ("peel", "peel desc", "desc lpt8")
D = 64


def run(rounds: int = 7, block_ms: float = 10.0, tokens: int = 16384, width: int = 2048,
        fa4: bool = False) -> None:
    """:func:`lab.attention_bwd_short.run`'s rounds on head dim 64's shapes and variants
    (``fa4``: FlashAttention-4 in the same rounds; off: its first calls compile for tens
    of seconds)."""
    from lab.attention_bwd_short import run as timed
    timed(rounds=rounds, block_ms=block_ms, tokens=tokens, width=width, fa4=fa4,
          grid=[(s, D, c) for c in (True, False) for s in (1024, 4096, 16384)],
          variants=VARIANTS, causal_only=CAUSAL_ONLY, name="attention_bwd_h64c")


__all__ = ["run", "VARIANTS"]
