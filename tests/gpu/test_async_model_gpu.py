"""The correct kernels of the interpreter's bug-class tests (issue #47) on an H100/H200:
each gives the GPU the numbers the interpreter gives (atomic counters, a barrier a
uniform branch skips, flags polled across warps and lanes, CTAs taking turns through a
semaphore, a warp-specialized wgmma stage released after wait_group, a fenced handoff
through mbarrier.test_wait.parity in a cluster). (A flag set by a lane of the poller's own
warp is left out: a GPU that does not interleave the diverged lanes would hang here.)

Run: ``python -m pytest tests/gpu/test_async_model_gpu.py -q``.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_sm90

pytestmark = NEEDS_GPU
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interp"))


def _cases():
    import test_async_model as am
    import test_fuzzed_forms as ff
    import test_simt_model as sm
    z = lambda *shape: np.zeros(shape, np.uint32)  # noqa: E731
    return {
        "atomics": (lambda: sm.counter("atomics"), [], z(64)),
        "reset-after-syncwarp": (lambda: sm.counter("reset-after-syncwarp"), [], z(64)),
        "last-resets": (lambda: sm.counter("last-resets"), [], z(64)),
        "uniform-skip": (lambda: sm.skipped_barrier("uniform"), [], z(2, 64)),
        "uniform-round-skip": (lambda: sm.rounds(True), [], z(64)),
        "flag-other-warp": (lambda: sm.flag_poll("set", 32), [], z(64)),
        "turns-0-first": (lambda: sm.turns(0), [], z(4)),
        "turns-1-first": (lambda: sm.turns(1), [], z(4)),
        "staged-ring": (lambda: am.staged_ring(True), [am._ones_then_twos()],
                        np.zeros(128, np.float32)),
        "parity-handoff": (lambda: ff.handoff(0), [], z(64)),
    }


@pytest.mark.parametrize("name", ["atomics", "reset-after-syncwarp", "last-resets",
                                  "uniform-skip", "uniform-round-skip", "flag-other-warp",
                                  "turns-0-first", "turns-1-first",
                                  "staged-ring", "parity-handoff"])
def test_correct_kernels_give_the_interpreters_numbers(name):
    torch = torch_sm90()
    build, ins, out = _cases()[name]
    k = build()
    want = k.interpret(*ins, out.copy())
    got = torch.from_numpy(out.copy()).cuda()
    # uint16 inputs hold bf16 bits (the interpreter's numpy form); torch takes them as bf16
    dev = [torch.from_numpy(x).cuda() for x in ins]
    k(*(t.view(torch.bfloat16) if t.dtype == torch.uint16 else t for t in dev), got)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(got.cpu().numpy(), want)
