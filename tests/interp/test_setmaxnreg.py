"""setmaxnreg on the interpreter: the CTA's register pool (the count every thread starts
with, as ptxas derives it from the launch bounds), ``.inc`` waiting for registers a
``.dec`` gives back, and a kernel whose ``.inc`` can never be satisfied (the dynamic
attention forward's 32 + 2 x 240 beside 3 x 168, which never finished on an H200)
reported at the ``.inc``."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.errors import InterpreterError
from ptxdsl.core.types import pred, u32
from ptxdsl.interp.registers import entry_count
from ptxas_resources import resources_or_skip  # noqa: E402


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(open(__file__), 1) if text.endswith(marker + "\n"))


def _roles(producer, consumer, groups=3, *, bounds=True, consumers_first=False,
           barrier=False):
    """Warpgroup 0 lowers its count to ``producer``, the others raise theirs to
    ``consumer``; ``consumers_first``: their branch comes first in the program (lockstep
    reaches the ``.inc`` before the ``.dec``); ``barrier``: every thread meets at
    ``bar.sync 0`` afterwards."""

    @kernel(block=(128 * groups, 1, 1), arch="sm_90a",
            min_ctas_per_sm=1 if bounds else None)
    def roles():
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())

        def produce():
            ptx.inst.setmaxnreg.dec.sync.aligned.u32(producer)

        def consume():
            ptx.inst.setmaxnreg.inc.sync.aligned.u32(consumer)  # <- inc

        with ptx.if_(tid >= 128 if consumers_first else tid < 128):
            (consume if consumers_first else produce)()
        with ptx.else_():
            (produce if consumers_first else consume)()
        if barrier:
            ptx.bar.sync(0)
    return roles


@pytest.mark.parametrize("producer,consumer,groups", [
    (24, 240, 3), (40, 232, 3), (32, 160, 4)])
def test_budgets_that_fit_the_pool_run(producer, consumer, groups):
    _roles(producer, consumer, groups).interpret()


def test_an_inc_reached_first_waits_for_the_dec():
    """Lockstep reaches the consumers' ``.inc`` before the producer's ``.dec`` gave
    registers back: the ``.inc`` waits, and runs once the ``.dec`` has."""
    _roles(24, 240, consumers_first=True, barrier=True).interpret()


@pytest.mark.parametrize("barrier", [False, True])
def test_an_inc_the_pool_never_satisfies_is_reported_at_the_inc(barrier):
    """32 + 2 x 240 = 512 beside 3 x 168 = 504: the second consumer's ``.inc`` waits
    forever (with ``barrier``, the others wait for it at ``bar.sync``)."""
    with pytest.raises(InterpreterError) as e:
        _roles(32, 240, barrier=barrier).interpret()
    text = str(e.value)
    assert e.value.loc.line == _line("# <- inc") and e.value.loc.file == __file__
    assert "setmaxnreg.inc to 240 (warpgroup 2) waits forever" in text
    assert "64512 = 384 threads x 168, the count at entry: .maxntid 384 with " \
           ".minnctapersm 1" in text
    assert "held: warpgroup 0 128 x 32, warpgroup 1 128 x 240, warpgroup 2 128 x 168" in text
    assert "it asks 9216 more registers and the CTA's pool has 8192 free" in text
    assert "32 + 240 + 240 = 512 a thread slot, more than the 3 x 168 = 504" in text
    assert "no launch bounds" not in text


def _polled(producer, consumer):
    """Thread 0 (warpgroup 0, after its ``.dec``) polls Y[0] until thread 256 (warpgroup
    2, after its ``.inc``) sets it, then copies it to Y[1]."""

    @kernel(in_specs=(), out_specs=(Tile(4, u32),), grid=1, block=(384, 1, 1),
            arch="sm_90a", min_ctas_per_sm=1)
    def polled(Y):
        (py,) = ptx.global_ptrs(Y)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid < 128):
            ptx.inst.setmaxnreg.dec.sync.aligned.u32(producer)
            with ptx.if_(tid == 0):
                v, again = reg.scalar(u32), reg.scalar(pred)
                with ptx.loop("poll", pred=again):
                    ptx.inst.ld.volatile.global_.u32(v, ptx.addr(py))
                    ptx.inst.setp.ne.u32(again, v, 1)
                ptx.inst.st.global_.u32(ptx.addr(py + 4), v)
        with ptx.else_():
            ptx.inst.setmaxnreg.inc.sync.aligned.u32(consumer)  # <- polled inc
            with ptx.if_(tid == 256):
                ptx.inst.st.release.gpu.global_.u32(ptx.addr(py), 1)
    return polled


def test_an_inc_that_waits_forever_is_the_cause_of_a_spinning_poll():
    """The no-progress detector sees the ``.inc`` as a wait: the producer's poll of a flag
    the stuck warpgroup would set is reported at the ``.inc``."""
    np.testing.assert_array_equal(_polled(24, 240).interpret(np.zeros(4, np.uint32)),
                                  [1, 1, 0, 0])
    with pytest.raises(InterpreterError, match=r"(?s)waits forever.*no progress.*spins") as e:
        _polled(32, 240).interpret(np.zeros(4, np.uint32))
    assert e.value.loc.line == _line("# <- polled inc")


def test_without_launch_bounds_the_report_says_the_count_is_assumed():
    with pytest.raises(InterpreterError, match=r"a CTA of 512 threads can start with; the "
                                               r"kernel declares no launch bounds.*C7508"):
        _roles(40, 160, 4, bounds=False).interpret()


def test_a_dec_above_the_count_at_entry_is_refused():
    with pytest.raises(InterpreterError, match=r"setmaxnreg\.dec to 200 would raise this "
                                               r"warpgroup's budget of 168 registers \(at "
                                               r"entry: \.maxntid 384 with \.minnctapersm 1"):
        _roles(200, 232).interpret()


# ptxas -v (CUDA 13.0, sm_90a) on a kernel whose warpgroups 1.. raise their count to
# ``inc``: (directives, inc) -> the count it reports (every thread's at entry)
MEASURED = [
    ((("maxntid", (384, 1, 1)), ("minnctapersm", (1,))), 240, 168),
    ((("maxntid", (512, 1, 1)), ("minnctapersm", (1,))), 240, 128),
    ((("maxntid", (384, 1, 1)), ("minnctapersm", (2,))), 240, 80),
    ((("maxntid", (288, 1, 1)), ("minnctapersm", (1,))), 240, 168),
    ((("maxntid", (544, 1, 1)), ("minnctapersm", (1,))), 240, 96),
    ((("maxntid", (288, 1, 1)), ("minnctapersm", (2,))), 240, 96),
    ((("maxntid", (128, 3, 1)), ("minnctapersm", (1,))), 240, 168),
    ((("reqntid", (384, 1, 1)), ("minnctapersm", (1,))), 240, 168),
    ((("maxntid", (256, 1, 1)), ("minnctapersm", (1,))), 240, 240),
    ((("maxntid", (128, 1, 1)), ("minnctapersm", (1,))), 256, 255),
    ((("maxntid", (384, 1, 1)), ("minnctapersm", (1,))), 120, 120),
    ((("maxnreg", (200,)),), 240, 200),
    ((("maxnreg", (255,)),), 248, 248),
    ((("maxnreg", (100,)),), 128, 100),
    ((("maxntid", (384, 1, 1)), ("minnctapersm", (1,)), ("maxnreg", (200,))), 240, 168),
]


@pytest.mark.parametrize("directives,inc,count", MEASURED)
def test_the_count_at_entry_is_what_ptxas_reports(directives, inc, count):
    prog = SimpleNamespace(directives=directives)
    assert entry_count(prog, 384, [inc])[::2] == (count, True)


def test_without_bounds_the_count_is_the_most_the_block_allows():
    prog = SimpleNamespace(directives=(("maxntid", (384, 1, 1)),))   # no .minnctapersm
    assert entry_count(prog, 384, [240])[::2] == (168, False)


@pytest.mark.ptxas
@pytest.mark.parametrize("producer,consumer,groups", [(40, 232, 3), (32, 160, 4),
                                                     (40, 120, 3)])
def test_ptxas_starts_the_kernel_at_the_interpreters_count(producer, consumer, groups):
    k = _roles(producer, consumer, groups)
    r = resources_or_skip(k)
    assert r.registers == entry_count(k.program(), 128 * groups, [consumer])[0]
