"""bench/matmul.py without a GPU: the sweep it runs and the table it prints."""
from __future__ import annotations

import importlib.util
import os

from paths import ROOT

spec = importlib.util.spec_from_file_location("bench_matmul",
                                              os.path.join(ROOT, "bench", "matmul.py"))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_sweep_is_the_issues():
    full = bench.shapes(False)
    squares = [s for s in full if s[3] == "square"]
    assert [s[0] for s in squares] == [1024, 2048, 4096, 8192, 16384]
    llm = [s for s in full if s[3] == "llm"]
    assert len(llm) == 4 * 7 and {s[0] for s in llm} == {128, 1024, 4096, 16384}
    assert {s[0] for s in full if s[3] == "small"} == {1, 16}


def test_table_reports_ratios_errors_and_skips(capsys):
    result = {"device": "GPU", "date": "today", "layout": "linear", "rows": [
        {"shape": [4096, 4096, 4096], "group": "square", "results": {
            "cuBLAS": {"us": 200.0, "tflops": 687.0}, "pyptx": {"us": 190.0, "tflops": 723.0},
            "ptxdsl": {"us": 180.0, "tflops": 763.5}}},
        {"shape": [1024, 4096, 4096], "group": "llm", "results": {
            "cuBLAS": {"us": 100.0, "tflops": 343.0}, "ptxdsl": {"us": 125.0, "tflops": 274.4}}},
        {"shape": [128, 4096, 4096], "group": "llm", "results": {
            "cuBLAS": {"us": 10.0, "tflops": 430.0}, "ptxdsl": {"us": 8.0, "tflops": 537.5}}},
        {"shape": [16, 4096, 4096], "group": "small", "results": {
            "cuBLAS": {"us": 10.0, "tflops": 53.0}, "pyptx": {"skip": "M % 256"},
            "ptxdsl": {"error": "wrong result"}}}]}
    bench.print_table(result)
    out = capsys.readouterr().out.splitlines()
    assert "1.11x" in out[-5] and "1.06x" in out[-5]      # 4096^3 against cuBLAS, pyptx
    assert "0.80x" in out[-4] and "1.25x" in out[-3]
    assert "skip" in out[-2] and "ERR" in out[-2]
    # issue 19's figure: the LLM shapes with M >= 128 (0.8 and 1.25: 1.000); the squares
    # and M < 128 apart; pyptx wherever it ran
    assert out[-1] == ("geomean ptxdsl/cuBLAS over the LLM shapes with M >= 128: 1.000 "
                       "(squares: 1.111); ptxdsl/pyptx where pyptx runs: 1.056")


class _FakeCuda:
    """A GPU queue in simulated time: each call adds its duration, scaled by a clock
    that drops while the recent work was heavy (a power cap's lag), and events read the
    queue's clock when recorded."""

    def __init__(self):
        self.now = 0.0          # ms
        self.calls = []         # (name, start ms)
        self.heat = 0.0

    def run(self, name, ms, watts):
        # the clock follows the heat of the last few ms of work (slow, like a power cap)
        self.heat += (watts - self.heat) * min(1.0, ms / 20.0)
        self.calls.append((name, self.now))
        self.now += ms * (1.0 + self.heat / 1000.0)

    def fake_torch(self):
        cuda = self

        class Event:
            def __init__(self, enable_timing=True):
                self.t = None

            def record(self):
                self.t = cuda.now

            def elapsed_time(self, other):
                return other.t - self.t

        import types
        return types.SimpleNamespace(cuda=types.SimpleNamespace(
            Event=Event, synchronize=lambda: None))


def test_timed_rounds_interleaves_slices_and_shares_the_clock(monkeypatch):
    """Contenders take turns in ~2 ms slices inside every round; two identical kernels time
    the same even though a light one (less power) runs in between, and a per-call time is
    the slices' time over their calls (median over rounds)."""
    gpu = _FakeCuda()
    monkeypatch.setattr(bench, "_torch", gpu.fake_torch)

    def contender(name, ms, watts):
        return lambda a, b: gpu.run(name, ms, watts)
    live = {"heavy1": contender("heavy1", 0.5, 700), "light": contender("light", 0.5, 300),
            "heavy2": contender("heavy2", 0.5, 700), "long": contender("long", 7.0, 700)}
    row = bench.timed_rounds(live, [(None, None)], rounds=3, block_ms=40.0, flop=1e9, row={})
    assert abs(row["heavy1"]["us"] - row["heavy2"]["us"]) < 0.02 * row["heavy1"]["us"]
    for name in live:
        r = row[name]
        assert len(r["rounds_us"]) == 3 and r["best_us"] <= r["us"]
        assert r["tflops"] == 1e9 / r["us"] / 1e6
    assert 500 <= row["heavy1"]["us"] < 500 * 1.7 and 7000 <= row["long"]["us"] < 7000 * 1.7
    # slices: a few calls of each 0.5 ms kernel, one of the 7 ms one, taking turns
    import itertools
    seq = [n for n, _ in gpu.calls[2 * len(live):]]      # after the sizing calls
    runs = [(n, len(list(g))) for n, g in itertools.groupby(seq)]
    assert [n for n, _ in runs[:8]] == list(live) * 2    # round 0: the names' order
    assert {c for n, c in runs if n != "long"} == {3} and {c for n, c in runs if n == "long"} == {1}
    counts = {n: seq.count(n) for n in live}
    for n in ("heavy1", "light", "heavy2"):   # at least block_ms each round
        assert counts[n] * 0.5 >= 3 * 40 / 1.7
