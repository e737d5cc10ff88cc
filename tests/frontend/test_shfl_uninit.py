"""The uninitialised-read rule for shfl.sync (Triton 3.6 shuffles registers that some
lanes never wrote): the shuffle itself is no error; the result is uninitialised in each
lane that took a never-written value, and reading it there is reported."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl
from ptxdsl.core.errors import InterpreterError

HALF = """
.version 8.5
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{
	.reg .pred %p<3>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [k_param_0];
	mov.u32 %r1, %tid.x;
	setp.lt.u32 %p1, %r1, 16;
	@%p1 add.s32 %r2, %r1, 100;
	shfl.sync.bfly.b32 %r3, %r2, 16, 31, -1;
	@%p1 bra $done;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r1, 4;
	add.s64 %rd2, %rd2, %rd3;
	st.global.u32 [%rd2], %r3;
$done:
	ret;
}
"""


def test_a_discarded_shuffle_of_unwritten_lanes_runs():
    out = np.zeros(32, np.uint32)
    ptxdsl.from_ptx(HALF).interpret(out, grid=1, block=32)
    np.testing.assert_array_equal(out[16:], np.arange(16) + 100)


def test_using_a_value_shuffled_from_an_unwritten_lane_is_reported_at_the_use():
    bad = HALF.replace("@%p1 bra $done;", "@!%p1 bra $done;")
    with pytest.raises(InterpreterError, match=r"<ptx>:19: st.global.u32: register %r3 .*"
                                               r"never written in this thread"):
        ptxdsl.from_ptx(bad).interpret(np.zeros(32, np.uint32), grid=1, block=32)
