"""wgmma on the interpreter: descriptors decoded as the hardware does (every swizzle, both
B majors, several N) against float64 numpy, and accumulators unreadable while in flight."""
from __future__ import annotations

import numpy as np
import pytest

from wgmma_kernels import build_wgmma, random_case
from ptxdsl import kernel, ptx, reg, smem
from ptxdsl.errors import InterpreterError
from ptxdsl.interp.hopper import operand_offsets
from ptxdsl.isa.descriptors import SmemDescriptor
from ptxdsl.types import bf16, f32


@pytest.mark.parametrize("n,swizzle,mn", [
    (8, 0, False), (16, 32, False), (32, 64, False), (64, 128, False),
    (16, 0, True), (32, 32, True), (64, 64, True), (64, 128, True), (256, 128, False),
    (128, 128, True)])
def test_wgmma_matches_numpy(n, swizzle, mn):
    a_img, b_img, ref = random_case(n, swizzle, mn)
    k = build_wgmma(n, swizzle, mn, len(a_img), len(b_img))
    d = k.interpret(a_img, b_img)
    d = d[0] if isinstance(d, (list, tuple)) else d
    np.testing.assert_allclose(np.asarray(d, np.float64), ref, rtol=1e-5, atol=1e-5)


def test_operand_offsets_k_major_128():
    d = SmemDescriptor(start=0, leading=16, stride=1024, swizzle=128)
    off = operand_offsets(d, 16, 16, 2, False)
    assert off[0, 0] == 0 and off[0, 8] == 16             # row 0: chunks in order
    assert off[1, 0] == 128 + 16 and off[1, 8] == 128      # row 1: chunks swapped
    assert off[8, 0] == 1024                               # next 8-row group: stride


def test_accumulator_is_unreadable_until_wait_group():
    @kernel(block=(128, 1, 1), arch="sm_90a")
    def early():
        s = smem.alloc(bf16, (64, 64), swizzle=128)
        acc = ptx.wgmma.accumulator(8, f32, init=0.0)
        d = ptx.wgmma.descriptor(s)
        ptx.wgmma.fence()
        ptx.wgmma.mma(acc, d, d, ab_type=bf16)
        ptx.wgmma.commit()
        x = reg.scalar(f32)
        ptx.inst.mov.f32(x, acc[0])                         # read before wait_group
        ptx.wgmma.wait(0)
    with pytest.raises(InterpreterError, match=r"still in flight"):
        early.interpret()
