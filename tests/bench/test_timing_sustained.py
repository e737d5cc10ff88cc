"""bench/timing.py's time_sustained on a fake GPU and a fake nvidia-smi: the idle gap comes
before the loop, the loop runs whole groups of 10 calls for the seconds asked (at least one
group), the samples past the first quarter are averaged (lines it cannot read skipped), a
missing sampler leaves the clock None; and bench/attention.py's sustained table."""
from __future__ import annotations

import sys
import time
import types

import pytest

from bench.attention import sustained_table
from bench.timing import time_sustained


def _fake(call_ms: float):
    """A torch whose events read a GPU clock that each call advances by ``call_ms``."""
    state = types.SimpleNamespace(gpu=0.0, calls=0, syncs=0)

    class Event:
        def __init__(self, enable_timing=True):
            self.t = None

        def record(self):
            self.t = state.gpu

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return end.t - self.t

    def synchronize():
        state.syncs += 1

    def call(*args):
        state.calls += 1
        state.gpu += call_ms
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(Event=Event,
                                                             synchronize=synchronize))
    return torch, call, state


def _clock(step):
    t = [0.0]

    def clock():
        t[0] += step
        return t[0]
    return clock


def _smi(marker):
    """A sampler that prints its lines, then marks that it has, then waits to be stopped."""
    return [sys.executable, "-c",
            "import sys, time; print('1000, 100, 50'); print('N/A, 1, 1'); "
            "[print(f'{1500 + i}, 600, 60') for i in range(7)]; print('1600, 7'); "
            f"sys.stdout.flush(); open({str(marker)!r}, 'w').close(); time.sleep(30)"]


def test_idle_first_then_whole_groups_with_the_samples_past_the_ramp(tmp_path):
    torch, call, state = _fake(2.0)
    slept, marker, tick = [], tmp_path / "printed", _clock(0.3)

    def clock():            # the loop's first reading waits until the sampler printed
        deadline = time.time() + 30
        while not marker.exists() and time.time() < deadline:
            time.sleep(0.01)
        return tick()
    out = time_sustained(torch, call, seconds=1.0, idle=0.75, args=(1, 2),
                         smi=_smi(marker), sleep=lambda s: slept.append((s, state.calls)),
                         clock=clock)
    assert slept == [(0.75, 1)]                   # one call, then the idle gap
    assert (state.calls - 1) % 10 == 0 and state.calls > 1
    assert out["ms"] == pytest.approx(2.0)
    # 8 readable 3-column lines ('N/A' and the cut one skipped): the last 6 of them
    assert out["sm_mhz"] == pytest.approx(1503.5) and out["watts"] == 600.0
    assert out["temp_c"] == 60.0


def test_no_sampler_and_a_long_call_still_time_one_group():
    torch, call, state = _fake(5.0)
    out = time_sustained(torch, call, seconds=0.0, idle=0.0, smi=["/nonexistent/smi"],
                         sleep=lambda s: None, clock=_clock(10.0))
    assert state.calls == 11 and out["ms"] == pytest.approx(5.0)
    assert out["sm_mhz"] is None and out["watts"] is None


def test_sustained_table_rows_and_ratio():
    rows = [{"tag": "16384", "D": 128, "S": 16384, "Sk": 16384, "H": 16, "Hkv": 16,
             "causal": True, "results": {
                 "ptxdsl": {"tflops": 650.0, "sustained": {"tflops": 622.0, "sm_mhz": 1580}},
                 "fa4": {"tflops": 700.0, "sustained": {"tflops": 616.0, "sm_mhz": 1600}}}},
            {"tag": "1024", "D": 64, "S": 1024, "Sk": 1024, "H": 32, "Hkv": 32,
             "causal": False, "results": {"ptxdsl": {"tflops": 400.0}}}]
    lines = sustained_table(rows, ["ptxdsl", "fa4"])
    assert len(lines) == 1
    assert "622.0 @ 1580" in lines[0] and "616.0 @ 1600" in lines[0]
    assert lines[0].split()[-1] == f"{622 / 616:.2f}"


def test_attention_bench_refuses_an_unknown_sustained_contender():
    """A typo in --sustained-contenders is an error naming the known ones, before torch
    is imported (not a silently empty second table)."""
    import subprocess
    from pathlib import Path
    bench = Path(__file__).parents[2] / "bench" / "attention.py"
    r = subprocess.run([sys.executable, str(bench), "--sustained", "1",
                        "--sustained-contenders", "ptxdsl,fa-4"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown ['fa-4']" in r.stderr and "'fa4'" in r.stderr
