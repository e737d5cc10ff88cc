"""The varlen forward's serving paths on the CPU interpreter, every detector on, against the
float64 reference of each sequence alone: GQA packing (a tile holds the query heads of a
group, ``H / Hkv`` in 2, 4, 8; other groups unpacked), the order pass that sorts the
m-blocks by the key blocks they see (checked against a numpy count of the same), and the
forward taking its tiles in that order over a persistent grid of 2 CTAs (the snake over
rounds). Ragged lengths 0, 1, 63, 100, 200; causal and windows aligned bottom-right per
sequence. The wider sweep is marked ``long``."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from ptxdsl.core.types import f16, f32
from ptxdsl.ops import attention_varlen
from ptxdsl.ops.attention import varlen
from ptxdsl.ops.attention.config import Mask
from ptxdsl.ops.attention.varlen_order import SLOTS, build_order
from ptxdsl.ops.attention.varlen_tiles import EMPTY
from ptxdsl.runtime.adapter import Frame
from varlen_checks import check_varlen

ml_dtypes = pytest.importorskip("ml_dtypes")


def _spy(monkeypatch):
    """Records the (layout, group) of each forward kernel the call builds."""
    seen, real = [], varlen.forward_kernel
    monkeypatch.setattr(varlen, "forward_kernel", lambda *a, **kw: seen.append(
        (kw["layout"], kw["group"])) or real(*a, **kw))
    return seen


@pytest.mark.parametrize("lq,lk,h,hk,d,dtype,kw,packed", [
    # 8 heads per tile of three consumers (192 rows: 24 positions), a sequence without keys
    ([40, 0, 1], [70, 5, 0], 8, 1, 64, "bf16", {}, 8),
])
def test_gqa_packed_varlen_matches_float64(monkeypatch, lq, lk, h, hk, d, dtype, kw, packed):
    seen = _spy(monkeypatch)
    check_varlen(lq, lk, h, hk, d, ml_dtypes.bfloat16 if dtype == "bf16" else dtype, sum(lq),
           **kw)
    assert seen == [("varlen", packed)]


def _tiles(cq, ck, group, bm, bn, mask):
    """numpy: every m-block's (sequence, first packed row) and the key blocks it sees."""
    out = []
    for i in range(len(cq) - 1):
        sq, sk = int(cq[i + 1] - cq[i]), int(ck[i + 1] - ck[i])
        off, nblk = sk - sq, -(-sk // bn)
        for m0 in range(0, sq * group, bm):
            hi = nblk
            if mask.right >= 0:
                last = min((m0 + bm - 1) // group, sq - 1)
                hi = min(max(last + off + mask.right + bn, 0) // bn, nblk)
            lo = 0
            if mask.left >= 0:
                lo = min(max(m0 // group + off - mask.left, 0) // bn, hi)
            out.append(((i, m0), hi - lo))
    return out


@pytest.mark.parametrize("group,bm,bn,mask", [
    (1, 128, 128, Mask()), (4, 128, 128, Mask(-1, 0)), (2, 192, 80, Mask(50, 10)),
    (8, 128, 64, Mask(-1, 0))])
def test_order_pass_sorts_m_blocks_longest_first(group, bm, bn, mask):
    """The order pass's entries: every m-block once, the most key blocks first, then the
    numbers no m-block has; each entry's key blocks what numpy counts for it."""
    lens_q = [1, 63, 100, 200, 0, 300, 129, 700]
    lens_k = [5, 63, 100, 200, 3, 10, 400, 700]
    cq, ck = (np.cumsum([0] + x).astype(np.int32) for x in (lens_q, lens_k))
    nv = len(lens_q) + int(cq[-1]) * group // bm
    got = np.asarray(build_order(group, bm, bn, mask).interpret(
        cq, ck, np.zeros((nv, 2), np.int32))).tolist()
    want = dict(_tiles(cq, ck, group, bm, bn, mask))
    entries = [tuple(e) for e in got]
    real = [e for e in entries if e[1] != EMPTY]
    assert sorted(real) == sorted(want) and len(real) == len(set(real))
    assert entries[len(real):] == [(0, EMPTY)] * (nv - len(real))
    costs = [min(want[e], SLOTS - 2) for e in real]
    assert costs == sorted(costs, reverse=True) and costs[0] > costs[-1]


@pytest.mark.long
@pytest.mark.parametrize("lq,lk,h,hk,d,kw", [
    ([200, 1, 63, 100], [200, 300, 63, 1], 8, 2, 128, dict(causal=True)),     # G = 4
    # one head a K/V head: the unbounded causal row (q_double, late_epilogue)
    ([130, 1, 63], [130, 200, 63], 2, 2, 128, dict(causal=True)),
])
def test_varlen_gqa_wider_sweep(lq, lk, h, hk, d, kw):
    check_varlen(lq, lk, h, hk, d, ml_dtypes.bfloat16, sum(lq) + d, **kw)


@pytest.mark.long
@pytest.mark.parametrize("ordered,group", [(False, 2), (True, 1)])
def test_forced_order_and_packing_give_the_same_bits(ordered, group):
    """Tiles in numbering order, or unpacked: the same result, bit for bit, as the
    default (ordered, packed): each tile's rows are computed alike in any order."""
    rng = np.random.default_rng(5)
    lq = lk = [1, 63, 130]
    q = rng.standard_normal((sum(lq), 4, 64)).astype(np.float16)
    k, v = (rng.standard_normal((sum(lk), 2, 64)).astype(np.float16) for _ in range(2))
    cq = ck = np.cumsum([0] + lq).astype(np.int32)
    want, wlse = attention_varlen(q, k, v, cq, ck, 130, 130, causal=True, return_lse=True)
    frame = Frame(q, "attention")
    out = frame.empty(q.shape, q)
    lse = varlen.run(frame, f16, q, k, v, cq, ck, out, frame.empty((4, sum(lq)), q, f32),
                     causal=True, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                     group=group, ordered=ordered)
    if group == 2:
        np.testing.assert_array_equal(out.view(np.int16), want.view(np.int16))
        np.testing.assert_array_equal(lse, wlse)
    else:       # another tile shape: the same values up to the summation order
        assert np.abs(out.astype(np.float64) - want.astype(np.float64)).max() <= 4e-3 * max(
            np.abs(want.astype(np.float64)).max(), 1)
