"""bench/matmul.py without a GPU: the sweep it runs and the table it prints."""
from __future__ import annotations

import importlib.util
import os

import pytest

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


def test_both_layouts_share_values_and_split_into_rows_per_layout():
    """--layout both: one set holds b = W.T and a row-major copy of the same values; each
    contender runs on each (pyptx, which takes W itself, on x @ W.T only); the row splits
    into one per layout under the contenders' own names."""
    torch = pytest.importorskip("torch")
    (a, b, b_nn), = bench.make_sets(4, 8, 16, "both", l2=10**9, device="cpu")[:1]
    assert b.stride() == (1, 16) and b_nn.stride() == (8, 1) and torch.equal(b, b_nn)
    seen = []
    base = {"cuBLAS": (lambda x, y: seen.append(y.stride()) or x @ y, None),
            "pyptx": (lambda x, y: seen.append(y.stride()), "rule")}
    both = bench.both_layouts(base)
    assert list(both) == ["cuBLAS", "cuBLAS a@b", "pyptx"] and both["pyptx"][1] == "rule"
    both["cuBLAS"][0](a, b, b_nn)
    both["cuBLAS a@b"][0](a, b, b_nn)
    both["pyptx"][0](a, b, b_nn)
    assert seen == [(1, 16), (8, 1), (1, 16)]
    parts = bench.split_layouts({"cuBLAS": 1, "cuBLAS a@b": 2, "ptxdsl": 3, "ptxdsl a@b": 4})
    assert parts == {"linear": {"cuBLAS": 1, "ptxdsl": 3}, "nn": {"cuBLAS": 2, "ptxdsl": 4}}


def test_table_compares_each_layout_with_cublas_in_that_layout(capsys):
    res = lambda c, p: {"cuBLAS": {"tflops": c}, "ptxdsl": {"tflops": p}}  # noqa: E731
    result = {"device": "GPU", "date": "today", "layout": "both", "rows": [
        {"shape": [4096, 4096, 4096], "group": "llm", "layout": "linear", "results": res(600, 660)},
        {"shape": [4096, 4096, 4096], "group": "llm", "layout": "nn", "results": res(660, 600)}]}
    bench.print_table(result)
    out = capsys.readouterr().out
    assert "(linear: x @ W.T)" in out and "(nn: a @ b)" in out
    assert "over the LLM shapes with M >= 128: 1.100" in out
    assert "over the LLM shapes with M >= 128: 0.909" in out


def test_fp8_block_scale_b_is_laid_out_as_torch_reads_it():
    """torch._scaled_mm's 128x128 mode checks scale_b.t() against b.t() (N, K): shape
    (ceil(N/128), ceil(K/128)), row-major; the values are ptxdsl's (ceil(K/128), ...)."""
    torch = pytest.importorskip("torch")
    from bench.matmul_fp8 import torch_block_scale_b
    sb = torch.rand(128, 56)                          # K = 16384, N = 7168
    laid = torch_block_scale_b(sb)
    assert torch.equal(laid, sb) and laid.t().shape == (56, 128) and laid.t().stride() == (128, 1)


def test_grouped_row_wise_fp8_reference_and_loop_agree():
    """bench/matmul_grouped.py's row-wise float8 rows: the float64 reference with the
    scales per row of a and per column of each b[g], an empty group, the loop of row-wise
    torch._scaled_mm (CPU torch runs it) within e4m3 products' rounding of it."""
    torch = pytest.importorskip("torch")
    import bench.matmul_grouped as mg
    sizes = (16, 0, 32)
    a, b, offs, _ = mg.make_set(3, 32, 64, sizes, torch.float8_e4m3fn, device="cpu")
    sa, sb = mg.row_scales(3, 32, sum(sizes), device="cpu")
    ref = mg.reference(a, b, sizes, sa, sb)
    plain = mg.reference(a, b, sizes)
    assert torch.allclose(ref[:16], plain[:16] * sa[:16, None].double() * sb[0].double())
    out = mg.row_contenders()["loop _scaled_mm"](a, b, offs, sizes, sa, sb)
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-2
