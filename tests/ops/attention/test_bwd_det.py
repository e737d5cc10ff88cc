"""The backward's deterministic mode (:mod:`ptxdsl.ops.attention.bwd_det`): the CTA ->
key block map (every block once, a unit's key blocks in launch order), and the
deterministic kernels themselves on the CPU interpreter: dq, dk, dv against float64, every
semaphore counting all its adds, and dQ's f32 accumulator bitwise identical whether the
CTAs run one at a time in launch order (a CTA waiting for a later one would spin forever,
which the interpreter reports) or all at once (another interleaving of the adds, which
changes the default kernel's bits)."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl.interp as interp
from ptxdsl.ops import attention_backward, attention_varlen_backward
from ptxdsl.ops.attention import attention_backward_reference, attention_reference, bwd_api
from ptxdsl.ops.attention.bwd_det import MAX_SECTION, det_cta, section_units
from attention_bwd_checks import GpuClaimingFrame
from attention_bwd_det_run import adds_per_block as _adds_per_block, check as _check, \
    run as _run

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("b,hk,nblk,sq,group,d", [
    (2, 3, 5, 4096, 1, 128), (1, 1, 7, 100, 4, 64), (3, 5, 2, 512, 2, 256),
    (1, 16, 32, 4096, 1, 128), (4, 1, 128, 16384, 8, 192), (2, 9, 3, 64, 1, 64)])
def test_det_cta_is_launch_ordered(b, hk, nblk, sq, group, d):
    """Every (batch, K/V head, key block) exactly once, and within a unit the key blocks
    in launch order: key block nb + 1 (whose turns follow nb's) only on a later CTA."""
    seen = {}
    for cta in range(b * hk * nblk):
        nb, h, bb = det_cta(cta, nblk, hk, b * hk, sq, group, d)
        assert 0 <= nb < nblk and 0 <= h < hk and 0 <= bb < b
        assert (bb, h, nb) not in seen
        seen[(bb, h, nb)] = cta
    for (bb, h, nb), cta in seen.items():
        if nb:
            assert seen[(bb, h, nb - 1)] < cta


def test_sections_keep_their_rows_in_l2():
    assert section_units(4096, 1, 128) == 6          # 6 x 4 MB of Q, dO and f32 dQ rows
    assert section_units(16384, 1, 128) == 1
    assert section_units(1024, 1, 64) == MAX_SECTION
    assert section_units(1 << 20, 8, 256) == 1


# the plan table's deterministic rows (head dim 64's other masks: test_bwd_det64_step.py;
# 192: test_bwd_det192.py; 256: test_bwd_det_desc.py)
CASES = [
    ((1, 65, 200, 2, 1), 64, dict()),                  # GQA, 2 key blocks, warpgroup turns
    pytest.param((1, 130, 200, 1, 1), 128, dict(causal=True), marks=pytest.mark.long),
    pytest.param((2, 70, 160, 1, 1), 128, dict(window_size=(40, 10)),
                 marks=pytest.mark.long),
    pytest.param((1, 90, 200, 1, 1), 96, dict(window_size=(-1, 20)), marks=pytest.mark.long),
]


@pytest.mark.parametrize("shape,d,kw", CASES)
@pytest.mark.long
def test_deterministic_in_launch_order_matches_float64(shape, d, kw, monkeypatch):
    """CTAs one at a time in launch order: no CTA waits for a later one, every block's
    semaphore counts all its adds, dq, dk, dv within bf16 of float64."""
    _, sem, got, args = _run(shape, d, kw, True, True, monkeypatch)
    _check(got, attention_backward_reference(*args, **kw))
    np.testing.assert_array_equal(sem, _adds_per_block(shape, d, kw))


@pytest.mark.long
def test_deterministic_bits_do_not_depend_on_the_interleaving(monkeypatch):
    """All CTAs at once (the interpreter interleaves their adds) gives the bits of one
    at a time: head dim 96's row, the consumers' own turns (the writer warp's:
    test_bwd_det64_step.py, test_bwd_det_pipe.py, test_bwd_det_desc.py)."""
    shape, d, kw = (1, 90, 200, 1, 1), 96, dict(window_size=(-1, 20))
    alone = _run(shape, d, kw, True, True, monkeypatch)[0]
    together = _run(shape, d, kw, True, False, monkeypatch)[0]
    assert np.array_equal(alone.view(np.uint32), together.view(np.uint32))


@pytest.mark.long
def test_the_default_kernel_adds_in_either_order(monkeypatch):
    """The check above can fail: the default kernel's bits change with the interleaving."""
    shape, d, kw = (1, 130, 257, 1, 1), 64, dict(causal=True)
    a = _run(shape, d, kw, False, True, monkeypatch)[0]
    b = _run(shape, d, kw, False, False, monkeypatch)[0]
    assert not np.array_equal(a.view(np.uint32), b.view(np.uint32))


class _DetOnCpu(GpuClaimingFrame):
    """:class:`GpuClaimingFrame` running each kernel on the interpreter itself."""

    def run(self, k, *args):
        return k.interpret(*args)


@pytest.mark.long
def test_varlen_deterministic_matches_float64(monkeypatch):
    """Packed ragged sequences (one without keys past the first block's), full (the
    head dim 128 deterministic row that serves varlen's full mask; causal and window run
    dense above), GQA: the deterministic varlen kernel, CTAs one at a time in launch
    order."""
    frame = bwd_api._frame
    monkeypatch.setattr(bwd_api, "_frame", lambda a: _DetOnCpu(frame(a)))
    monkeypatch.setattr(interp, "MAX_BATCH_SHARED", 1)
    lens_q, lens_k, h, hk, d = [70, 1, 65], [150, 20, 140], 2, 1, 128
    rng = np.random.default_rng(7)
    cq, ck = np.cumsum([0] + lens_q), np.cumsum([0] + lens_k)
    q, do = (rng.standard_normal((cq[-1], h, d)).astype(BF16) for _ in range(2))
    k, v = (rng.standard_normal((ck[-1], hk, d)).astype(BF16) for _ in range(2))
    out, lse = np.zeros_like(q), np.zeros((h, cq[-1]), np.float32)
    for i in range(3):
        sl, kl = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        o, l = attention_reference(q[sl][None], k[kl][None], v[kl][None])
        out[sl], lse[:, sl] = o[0].astype(BF16), l[0]
    got = attention_varlen_backward(do, q, k, v, out, lse, cq.astype(np.int32),
                                    ck.astype(np.int32), max(lens_q), max(lens_k),
                                    deterministic=True)
    for i in range(3):
        sl, kl = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        ref = attention_backward_reference(do[sl][None], q[sl][None], k[kl][None],
                                           v[kl][None])
        _check([g[None] for g in (got[0][sl], got[1][kl], got[2][kl])], ref)


@pytest.mark.long
def test_dense_api_deterministic_on_the_interpreter(monkeypatch):
    """attention_backward(deterministic=True) through the API with the deterministic
    kernels (the frame claims a GPU): GQA, causal, ragged, CTAs one at a time."""
    frame = bwd_api._frame
    monkeypatch.setattr(bwd_api, "_frame", lambda a: _DetOnCpu(frame(a)))
    monkeypatch.setattr(interp, "MAX_BATCH_SHARED", 1)
    rng = np.random.default_rng(3)
    q, do = (rng.standard_normal((1, 60, 4, 64)).astype(BF16) for _ in range(2))
    k, v = (rng.standard_normal((1, 200, 2, 64)).astype(BF16) for _ in range(2))
    out, lse = attention_reference(q, k, v, causal=True)
    got = attention_backward(do, q, k, v, out.astype(BF16), lse.astype(np.float32),
                             causal=True, deterministic=True)
    _check(got, attention_backward_reference(do, q, k, v, causal=True))
