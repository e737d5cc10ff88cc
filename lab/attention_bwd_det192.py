"""``lab/attention_bwd_plans.py --set det192``: head dim 192's deterministic mode (issue #51:
0.74-0.83 of the default mode on the H200, the widest gap of the four head dims; the
target is within 15%).

The deterministic row (``wg3``, ``dq_warp``, ``det_pipe``, ``det_units`` 16) predates the
default rows' step options, so part of the gap is theirs, not the turns': the default
rows took ``uniform_cons``, ``wg3_fence1``, ``wg3_pfree``, ``wg3_ahead`` 2 (with them
1.03-1.05 at 4k and 16k) and, causal, ``prep_wide``, ``dkv_tma``, ``dq_exit_read``
(1.01-1.02), none ever timed in the deterministic mode. The rest is the writer warp's
serial work a row block: poll the turn (an L2 round trip even when it came long ago),
three warpgroups' adds, wait for their landing, release. ``det_poll`` (new in wg3: the
next row block's word read into shared memory while this block's adds land) takes the
poll off that path, which matters where the writer's cycle nears a 64-query step (about
3.3 us at head dim 192, one dQ stage a warpgroup to absorb it).

Variants (deterministic unless named ``default``), over the deterministic row this set
started from (``det_pipe``, ``det_units`` 16; ``plan det``: the plan table's row):
``dpl`` ``det_poll`` alone; ``st fx`` the default rows' step and fixed-cost options;
``st fx dpl`` with ``det_poll`` (the plan's row since this set's run,
bench/results/attention_bwd_det192_h200.json, which also timed a per-panel count of
turns, 0.70-0.77 of the default, since removed); ``st fx u4`` and ``st fx u8`` (sections of 4 / 8 units,
more co-resident key blocks of a unit and better L2 reuse of its rows: 32 and 64 lost to
16 before, but at 4k full the L2 rule's 4 units beat 16, 384 against 373 TFLOP/s,
attention_bwd_detpipe_h200.json). Shapes: S 1k, 4k, 16k, full and
causal (the worst ratios first; none starts past ``budget_s``). Every variant checked
against cuDNN's gradients (max relative error <= 3e-2) and for bitwise repeats over two
more calls before timing, then interleaved rounds (:func:`lab.attention_bwd_det2.run`);
JSON to ``$OUT/attention_bwd_det192.json``; a table last (TFLOP/s, / default)."""
from __future__ import annotations

GRID = ((4096, 192, True), (4096, 192, False), (1024, 192, True), (16384, 192, True),
        (1024, 192, False), (16384, 192, False))
STEP = dict(uniform_cons=True, wg3_fence1=True, wg3_pfree=True, wg3_ahead=2)
FIXED = dict(prep_wide=True, dkv_tma=True, dq_exit_read=True)


def variants(d):
    """name -> (config, or None for the plan table's, deterministic)."""
    from dataclasses import replace
    from ptxdsl.ops.attention.bwd_config import BwdConfig
    if d != 192:
        raise ValueError(f"det192 times head dim 192 only, got {d}")
    before = BwdConfig(stages=2, dq_tma=True, dq_swizzle=True, wg3=True, consumer_regs=160,
                    overlap=2, dq_warp=True, det_pipe=True, det_units=16)
    stf = replace(before, **STEP, **FIXED)
    return {"default": (None, False), "plan det": (None, True),
            "dpl": (replace(before, det_poll=True), True),
            "st fx": (stf, True),
            "st fx dpl": (replace(stf, det_poll=True), True),
            "st fx u4": (replace(stf, det_units=4), True),
            "st fx u8": (replace(stf, det_units=8), True)}


def run(rounds: int = 7, block_ms: float = 8.0, budget_s: float = 95.0) -> None:
    """About 10 s a shape on the H200 (lab det2's pace: 14 shapes of 6-10 variants in
    110 s at 5 rounds); no shape starts past ``budget_s``: the command ends within 150 s."""
    from lab.attention_bwd_det2 import run as timed
    timed(rounds=rounds, block_ms=block_ms, budget_s=budget_s, grid=GRID,
          variants_of=variants, name="attention_bwd_det192")


__all__ = ["run", "variants", "GRID"]
