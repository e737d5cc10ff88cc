"""bench/matmul.py without a GPU: the sweep it runs and the table it prints."""
from __future__ import annotations

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_matmul",
                                              os.path.join(HERE, "..", "bench", "matmul.py"))
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
