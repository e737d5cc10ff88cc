"""Config.q_prefetch (the producer prefetches its CTA's next tile's Q into L2 once a tile's
last K/V load is issued), lab/attention_plans.py's ``fwd1k`` set, on the CPU interpreter
with every detector on: the output and LSE bitwise those of the same config without it,
within rounding of the float64 reference, and each CTA's prefetches exactly the Q boxes
it loads next (every tile but its first, none past the last)."""
from __future__ import annotations

import collections

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from attention_fwd_checks import inputs, same_and_right
from ptxdsl.interp import semantics
from ptxdsl.interp.semantics import tma as tma_sem
from ptxdsl.ops.attention.config import Config, Mask


def test_off_by_default():
    assert not Config().q_prefetch


def _recorder(monkeypatch):
    """Per (run, CTA): the boxes (tensor map, coordinates) of its TMA loads and of its L2
    prefetches, in issue order."""
    loads, prefetches = collections.defaultdict(list), collections.defaultdict(list)

    def wrap(op, into, operand):
        real = semantics.HANDLERS[op]

        def handler(mach, instr, mask):
            top = instr.operands[operand]
            if op == "cp.async.bulk.tensor" and instr.match.chosen["dst"] != "shared::cluster":
                return real(mach, instr, mask)          # (stores: not recorded)
            maps = tma_sem.addresses(mach, instr, top, mask)
            coords = tma_sem._coords(mach, instr, top, mask)
            for t in np.flatnonzero(mask).tolist():
                into[id(mach), int(mach.cta[t])].append(
                    (int(maps[t]), tuple(int(c[t]) for c in coords)))
            return real(mach, instr, mask)
        monkeypatch.setitem(semantics.HANDLERS, op, handler)

    wrap("cp.async.bulk.tensor", loads, 1)
    wrap("cp.async.bulk.prefetch.tensor", prefetches, 0)
    return loads, prefetches


def _prefetched_next(loads, prefetches, per_tile):
    """Each CTA prefetched the Q boxes of its tiles after its first (``per_tile`` boxes a
    tile: panels, times consumers under q_split), in order, and nothing else (Q: the
    boxes loaded through the tensor map the prefetches name)."""
    assert prefetches, "no prefetch was issued"
    qmap = {m for boxes in prefetches.values() for m, _ in boxes}
    runs = {run for run, _ in prefetches}           # (not the run without the option)
    assert len(qmap) == 1 and len(runs) == 1
    for cta, boxes in loads.items():
        if cta[0] not in runs:
            continue
        q = [b for b in boxes if b[0] in qmap]
        assert len(q) > per_tile, "a CTA of one tile: nothing to check"
        assert prefetches.get(cta, []) == q[per_tile:], cta


_ROW128 = dict(block_n=64, persistent=True, lazy_rescale=True, uniform_cons=True)


@pytest.mark.long
@pytest.mark.parametrize("kw,mask,d,sms,per_tile", [
    (dict(_ROW128, q_double=True, tma_store=True, store_wait_once=True,
          late_epilogue=True), Mask(-1, 0), 64, 1, 1),
])
def test_q_prefetch(monkeypatch, kw, mask, d, sms, per_tile):
    """Ragged Sq and Sk (tiles of a persistent grid of 1 CTA, several), causal (the
    snake's next tile), GQA, with the hd128 causal row's options past 1k keys (Q in two
    buffers, the late epilogue). q_prefetch is a lab option (in no plans row): its one
    interpreter case."""
    q, k, v = inputs(1, 200, 150, 2, 1, d, 41)
    loads, prefetches = _recorder(monkeypatch)
    same_and_right(Config(**kw), q, k, v, mask, sms=sms, q_prefetch=True)
    if kw.get("dynamic"):        # which CTA takes which tile is the interpreter's order
        got = sorted(b for boxes in prefetches.values() for b in boxes)
        qmap, runs = {m for m, _ in got}, {run for run, _ in prefetches}
        want = sorted(b for (run, _), boxes in loads.items() for b in boxes
                      if b[0] in qmap and run in runs)
        assert set(got) < set(want) and len(got) == len(set(got))
    else:
        _prefetched_next(loads, prefetches, per_tile)


@pytest.mark.long
def test_no_effect_without_a_persistent_grid():
    """One CTA a tile: no next tile to prefetch, the kernel unchanged."""
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.attention.fwd import build_forward
    c = Config(block_n=80, pingpong=True, lazy_rescale=True)
    one = build_forward(c, bf16, 256, Mask(), scale=0.1)
    two = build_forward(Config(block_n=80, pingpong=True, lazy_rescale=True,
                               q_prefetch=True), bf16, 256, Mask(), scale=0.1)
    assert one.name == two.name and "prefetch.tensor" not in two.ptx()
