"""``lab/attention_bwd_plans.py --set h192f``: head dim 192's fixed costs (issue #51: the
hd192 row, ``wg3``, is 0.86-0.92 of FlashAttention-4 at every S, worst at 16k causal,
while head dims 64 and 128 gained 4-10% from :mod:`lab.attention_bwd_short`'s options).

Variants, each head dim 192's shipped plan row (``wg3`` + ``overlap`` 2, no writer warp)
with:

* ``pw``: ``BwdConfig.prep_wide`` (``bwd_prepw.py`` at D = 192: 8 threads a row, three
  16-byte chunks a thread, in place of a warp a row);
* ``kvt``: ``BwdConfig.dkv_tma`` (``bwd_wg3._store_kv_tma``: each warpgroup's dKᵀ, dVᵀ
  transposed by ``stmatrix`` into its column panel of K's and V's tiles, two TMA stores,
  in place of the dQ stage and 16-byte ``st.global`` a thread);
* ``xr``: ``BwdConfig.dq_exit_read`` (the consumers' last wait for their dQ adds' reads,
  not their landing);
* ``pw kvt xr``: the three; ``dqw pw kvt xr``: with the dQ writer warp (``dq_warp``);
* causal shapes: ``lpt8``, ``lpt16`` (``BwdConfig.lpt_units``: CTAs in key block-major
  sections of that many (batch, K/V head) units, so a section's longest key blocks start
  first; wg3's plain order is key block fastest, so the last unit's longest blocks start
  among the kernel's last CTAs) and ``pw kvt xr lpt8``, ``pw kvt xr lpt16``.

S 1k, 4k, 16k, full and causal (B·S = 16k tokens, H = 2048 // 192 = 10: the bench's
shapes). Every
variant's dq, dk, dv are checked against cuDNN's (max relative error <= 3e-2) before any
is timed; then interleaved rounds (``bench/timing.py``); per shape also the plan's and
``pw``'s small kernels timed alone (``pre``, ``pre_w``, ``main``, ``post``, ``post_w``).
JSON to ``$OUT/attention_bwd_h192f.json``; a table and each variant's geometric mean over
the plan's last."""
from __future__ import annotations

FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)
VARIANTS = {"pw": dict(prep_wide=True), "kvt": dict(dkv_tma=True), "xr": dict(dq_exit_read=True),
            "pw kvt xr": FIXED, "dqw pw kvt xr": dict(FIXED, dq_warp=True),
            "lpt8": dict(lpt_units=8), "lpt16": dict(lpt_units=16),
            "pw kvt xr lpt8": dict(FIXED, lpt_units=8),
            "pw kvt xr lpt16": dict(FIXED, lpt_units=16)}
CAUSAL_ONLY = ("lpt8", "lpt16", "pw kvt xr lpt8", "pw kvt xr lpt16")
D = 192


def run(rounds: int = 9, block_ms: float = 10.0, tokens: int = 16384, width: int = 2048,
        fa4: bool = False) -> None:
    """:func:`lab.attention_bwd_short.run`'s rounds on head dim 192's shapes and
    variants (``fa4``: FlashAttention-4 in the same rounds; off: its first calls compile
    for tens of seconds, and today's table has it)."""
    from lab.attention_bwd_short import run as timed
    timed(rounds=rounds, block_ms=block_ms, tokens=tokens, width=width, fa4=fa4,
          grid=[(s, D, c) for s in (1024, 4096, 16384) for c in (False, True)],
          variants=VARIANTS, causal_only=CAUSAL_ONLY, name="attention_bwd_h192f")


__all__ = ["run", "VARIANTS"]
