"""The deterministic backward's interpreter runs shared by its tests
(tests/ops/attention/test_bwd_det*.py): the main kernel called directly (the API runs the
default kernel on the interpreter), with the CTAs one at a time in launch order or all at
once, and what each row block's semaphore counts at the end."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import ptxdsl.interp as interp
from ptxdsl.ops.attention import attention_backward_reference, attention_reference
from ptxdsl.ops.attention.bwd_api import backward_kernels
from ptxdsl.ops.attention.bwd_config import BLOCK_M, choose_bwd
from ptxdsl.ops.attention.config import Mask

BF16 = ml_dtypes.bfloat16


def run(shape, d, kw, det, one_at_a_time, monkeypatch):
    """The main kernel's f32 dQ accumulator, the semaphores and dq, dk, dv (kernels called
    directly: the API runs the default kernel on the interpreter)."""
    b, sq, sk, h, hk = shape
    rng = np.random.default_rng(sq + sk + d)
    q, k, v, do = (rng.standard_normal(s).astype(BF16) for s in
                   ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d), (b, sq, h, d)))
    out, lse = attention_reference(q, k, v, **kw)
    out, lse = out.astype(BF16), lse.astype(np.float32)
    pre, main, post = backward_kernels(d, deterministic=det, **kw)
    sqp = -(-sq // BLOCK_M) * BLOCK_M
    dpsum, nlse2 = np.zeros((b, h, sqp), np.float32), np.zeros((b, h, sqp), np.float32)
    acc = np.zeros((b, h, sqp, d), np.float32)
    sem = [np.zeros((b, h, sqp // BLOCK_M), np.uint32)] if det else []
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(k)
    pre.interpret(out, do, lse, dpsum, nlse2, acc, *sem)
    with monkeypatch.context() as m:
        if one_at_a_time:             # a batch of one CTA: each runs alone, in order
            m.setattr(interp, "MAX_BATCH_SHARED", 1)
        main.interpret(q, k, v, do, nlse2, dpsum, acc, dk, dv, *sem)
    adds = acc.copy()
    post.interpret(acc, dq)
    return adds, (sem[0] if det else None), (dq, dk, dv), (do, q, k, v)


def adds_per_block(shape, d, kw, c=None):
    """What each 64-row block's (``dq_swap``: 80-row block's) semaphore counts at the end:
    every key block whose rows range takes it, twice (both warpgroups add; three times with
    wg3's three); with block_m 128 once a 64-row half (each has its word) for every key
    block whose range takes the half's 128-row step, whose CTA adds both halves (those
    within the padded rows), or with det_pipe once the first half's word alone (it serves
    both); ``c``: the config (the plan table's by default)."""
    b, sq, sk, h, _ = shape
    left, right = kw.get("window_size", (-1, -1))
    right = 0 if kw.get("causal") else right
    c = c or choose_bwd(d, "bf16", Mask(left, right), False, True, False)
    bn, off = c.block_n, sk - sq
    bm = c.block_m if c.dq_swap or c.block_m == 2 * BLOCK_M else BLOCK_M
    words = -(-sq // BLOCK_M)
    want = np.zeros((b, h, words), np.uint32)
    for mb in range(-(-sq // bm)):       # (dq_swap: the 80-row blocks' words first)
        rows = np.arange(mb * bm, mb * bm + bm)
        for nb in range(-(-sk // bn)):
            keys = np.arange(nb * bn, nb * bn + bn)
            lo = rows[:, None] + off - (left if left >= 0 else 1 << 30)
            hi = rows[:, None] + off + (right if right >= 0 else 1 << 30)
            if not ((keys[None] >= lo) & (keys[None] <= hi)).any():
                continue
            if c.block_m == 2 * BLOCK_M:
                want[:, :, 2 * mb:min(2 * mb + (1 if c.det_pipe else 2), words)] += 1
            else:
                want[:, :, mb] += 3 if c.wg3 else 2
    return want


def check(got, ref, tol=3e-2):
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        g = np.asarray(g).astype(np.float64)
        assert np.abs(g - r).max() <= tol * max(np.abs(r).max(), 1e-30), name


def check_turns(shape, d, kw, c, monkeypatch):
    """Deterministic mode with the config ``c`` (already the plan under monkeypatch): the
    gradients against float64, every row block's semaphore at its count of adds, and the
    f32 dQ accumulator bitwise the same run CTA by CTA in launch order or all together."""
    alone, sem, got, args = run(shape, d, kw, True, True, monkeypatch)
    check(got, attention_backward_reference(*args, **kw))
    np.testing.assert_array_equal(sem, adds_per_block(shape, d, kw, c))
    together = run(shape, d, kw, True, False, monkeypatch)[0]
    assert np.array_equal(alone.view(np.uint32), together.view(np.uint32))
