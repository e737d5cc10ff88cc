"""bench/rmsnorm.py's time_fn against a simulated host and GPU queue: CUDA events cost the
host as much as a launch, so events around every call starve a GPU whose kernels take
about as long as the host's work for the call, and blocks of calls between two events
measure the kernel where the GPU is the bound and the host where the host is."""
from __future__ import annotations

import types

import pytest

import bench.rmsnorm as br


class _Queue:
    """Host time advances by each operation's host cost; the GPU runs queued work in
    order, starting each item when it is both submitted and the previous item is done;
    an event reads the GPU clock when the GPU reaches it."""

    def __init__(self, record_us: float):
        self.host = 0.0
        self.gpu = 0.0
        self.record_us = record_us
        self.kernels = 0

    def submit(self, host_us: float, gpu_us: float) -> float:
        self.host += host_us
        self.gpu = max(self.gpu, self.host) + gpu_us
        return self.gpu

    def torch(self):
        q = self

        class Event:
            def __init__(self, enable_timing=True):
                self.t = None

            def record(self):
                self.t = q.submit(q.record_us, 0.0)

            def elapsed_time(self, end):
                return (end.t - self.t) / 1000.0  # ms, as CUDA events report

        def synchronize():
            q.host = max(q.host, q.gpu)

        return types.SimpleNamespace(cuda=types.SimpleNamespace(
            Event=Event, synchronize=synchronize))

    def op(self, host_us: float, kernel_us: float):
        def call(*_):
            self.kernels += 1
            self.submit(host_us, kernel_us)
            return object()
        return call


@pytest.mark.parametrize("kernel_us, host_us", [(26.0, 10.0), (90.0, 10.0), (5.0, 10.0)])
def test_blocks_time_the_bound_and_events_per_call_starve_the_gpu(monkeypatch, kernel_us,
                                                                  host_us):
    q = _Queue(record_us=9.0)
    monkeypatch.setattr(br, "_torch", q.torch)
    sets = [(i,) for i in range(8)]
    blocks = br.time_fn(q.op(host_us, kernel_us), sets, iters=100, block=10)
    assert q.kernels == 5 + 100                     # warm-up, then exactly iters calls
    # blocks: the GPU's time where it is the bound, the host's (its calls, plus the
    # record that ends a block) where the host is
    want = max(kernel_us, host_us + 9.0 / 10)
    assert blocks == pytest.approx(want, rel=0.05)
    per_call = br.time_fn(q.op(host_us, kernel_us), sets, iters=100, block=1)
    if kernel_us >= host_us + 2 * 9.0:
        assert per_call == pytest.approx(kernel_us, rel=0.01)   # GPU-bound either way
    else:
        # the host's records join the call's time (26 us kernels read 28, 5 us ones 19):
        # the kernels' differences hide behind the host's
        assert per_call >= host_us + 9.0 and per_call > blocks * 1.05


def test_block_never_exceeds_the_calls_asked_for(monkeypatch):
    q = _Queue(record_us=1.0)
    monkeypatch.setattr(br, "_torch", q.torch)
    us = br.time_fn(q.op(1.0, 50.0), [(0,)], warmup=2, iters=3)
    assert q.kernels == 2 + 3 and us == pytest.approx(50.0, rel=0.05)


def test_host_bound_shapes_get_more_rounds():
    """Calls under 8 MiB (host-bound: their numbers are the host's) get three times the
    rounds, the rest the rounds asked for; the same bound decides the GPU warm-up."""
    assert br._rounds_for(7, (8 << 20) - 1) == 21 and br._warm_for((8 << 20) - 1) == 0.0
    assert br._rounds_for(7, 8 << 20) == 7 and br._warm_for(8 << 20) > 0


def test_interleaved_rounds_alternate_the_order():
    """bench.rmsnorm.interleaved: every entry timed once a round, every other round in
    reverse order; name -> its times in round order."""
    from bench.rmsnorm import interleaved
    calls = []
    runs = {"a": "A", "b": "B", "c": "C"}
    times = interleaved(runs, 3, lambda fn: calls.append(fn) or len(calls))
    assert calls == ["A", "B", "C", "C", "B", "A", "A", "B", "C"]
    assert times == {"a": [1, 6, 7], "b": [2, 5, 8], "c": [3, 4, 9]}
