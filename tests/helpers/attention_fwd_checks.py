"""Checks shared by the attention forward's interpreter tests of plan options that change
which instructions run, never a value (tests/ops/attention/test_fwd_store_wait.py,
test_fwd_late.py): the kernel with an option must give bitwise the output and LSE of the
same config without it, and agree with the float64 reference."""
from __future__ import annotations

import dataclasses

import numpy as np

from ptxdsl.core.types import f16
from ptxdsl.ops.attention import attention_reference
from ptxdsl.ops.attention.config import Config
from ptxdsl.ops.attention.fwd import build_forward


def inputs(b, sq, sk, h, hk, d, seed):
    """Random normal f16 q (b, sq, h, d), k and v (b, sk, hk, d)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float16)
            for s in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d))]


def run(c, q, k, v, mask, layout="dense", group=1, sms=2):
    """(kernel name, out, lse (B, H, SQ)); out and LSE start as NaN."""
    kern = build_forward(c, f16, q.shape[-1], mask, scale=0.125, sms=sms, layout=layout,
                         group=group)
    b, sq, h, d = q.shape
    out = np.full(q.shape, np.nan, np.float16)
    lse = np.full((b, h // group, group, sq), np.nan, np.float32)
    view = (lambda a: a.reshape(b, sq, h // group, group, d)) if group > 1 else (lambda a: a)
    word = (np.zeros(1, np.uint32),) if c.dynamic else ()
    kern.interpret(view(q), k, v, view(out), lse if group > 1 else lse.reshape(b, h, sq),
                   *word)
    assert not word or int(word[0][0]) == 0
    return kern.name, out, lse.reshape(b, h, sq)


def same_and_right(base: Config, q, k, v, mask, layout="dense", group=1, sms=2, **on):
    """The config with ``on`` gives bitwise the output and LSE of ``base`` (a persistent
    grid of ``sms`` CTAs), and both agree with the float64 reference (:func:`right`)."""
    _, want, wlse = run(base, q, k, v, mask, layout, group, sms)
    got, glse = right(dataclasses.replace(base, **on), q, k, v, mask, layout, group, sms)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(glse.view(np.uint32), wlse.view(np.uint32))


def right(c: Config, q, k, v, mask, layout="dense", group=1, sms=2):
    """``(out, lse)`` of config ``c``, which agree with the float64 reference (fully
    masked rows: 0 and -inf); its kernel's name tells its options."""
    name, got, glse = run(c, q, k, v, mask, layout, group, sms)
    assert ("_w1" in name) == c.store_wait_once
    assert ("_late" in name) == (c.late_epilogue and layout in ("dense", "packed"))
    ref, rlse = attention_reference(q, k, v, softmax_scale=0.125,
                                    window_size=(mask.left, mask.right))
    o = got.astype(np.float64)
    assert not np.isnan(o).any() and np.abs(o - ref).max() <= 4e-3 * np.abs(ref).max()
    np.testing.assert_array_equal(np.isneginf(glse), np.isinf(rlse))
    fin = ~np.isinf(rlse)
    assert (np.abs(glse[fin] - rlse[fin]) / np.maximum(np.abs(rlse[fin]), 1.0)).max() <= 1e-3
    return got, glse
