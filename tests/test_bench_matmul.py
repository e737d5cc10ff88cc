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
        {"shape": [16, 4096, 4096], "group": "small", "results": {
            "cuBLAS": {"us": 10.0, "tflops": 53.0}, "pyptx": {"skip": "M % 256"},
            "ptxdsl": {"error": "wrong result"}}}]}
    bench.print_table(result)
    out = capsys.readouterr().out.splitlines()
    assert "1.11x" in out[-3] and "1.06x" in out[-3]
    assert "skip" in out[-2] and "ERR" in out[-2]
    assert out[-1].startswith("geomean ptxdsl/cuBLAS (M >= 128): 1.111")
