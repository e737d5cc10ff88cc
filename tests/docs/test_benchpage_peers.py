"""The Performance page's sections for issue 50's benchmarks, from JSON shaped as the
benchmarks write it: ptxdsl against Quack (``bench/rmsnorm.py --only ptxdsl,quack``, the
backward by both byte counts), GEMM in both layouts, grouped GEMM per kind."""
from __future__ import annotations

import json
import os
import sys

from paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "docs"))
import benchpage  # noqa: E402

from bench.rmsnorm import backward_bytes, copy_shares  # noqa: E402


def test_rmsnorm_quack_table_has_both_byte_counts(tmp_path):
    fwd = {"shape": [4096, 4096], "dtype": "bf16", "results": {
        "copy": {"us": 50.0}, "ptxdsl": {"us": 50.0}, "quack": {"us": 55.0}}}
    bwd = {"shape": [4096, 4096], "dtype": "bf16", "bytes": backward_bytes((4096, 4096), 2, 132),
           "results": {"copy": {"us": 80.0}, "ptxdsl": {"us": 100.0},
                       "quack": {"error": "RuntimeError: no kernel"}}}
    data = {"device": "NVIDIA H200", "date": "2026-11-29", "forward": [copy_shares(fwd)],
            "backward": [copy_shares(bwd)]}
    (tmp_path / "rmsnorm_quack_h200.json").write_text(json.dumps(data))
    md = benchpage.render(str(tmp_path), "rmsnorm_quack")
    assert md.count("<svg") == 1 and "`bench/results/rmsnorm_quack_h200.json`" in md
    assert "| bf16 | 4096×4096 | 50.0 | 55.0 | 1.10× | 100% | 91% |" in md
    share = 80 * bwd["bytes"]["quack"] / bwd["bytes"]["copy"]
    assert f"| bf16 | 4096×4096 | 100.0 | RuntimeError: no kernel |  | 80% |  | {share:.0f}% |  |" in md
    assert "ptxdsl % copy (Quack's bytes)" in md


def test_gemm_rows_of_two_layouts_get_a_chart_each(tmp_path):
    res = lambda c, p: {"cuBLAS": {"tflops": c}, "ptxdsl": {"tflops": p}}  # noqa: E731
    data = {"device": "NVIDIA H200", "date": "2026-11-29", "layout": "both", "rows": [
        {"shape": [4096, 4096, 4096], "group": "llm", "layout": "linear", "results": res(600, 660)},
        {"shape": [4096, 4096, 4096], "group": "llm", "layout": "nn", "results": res(660, 600)}]}
    (tmp_path / "matmul_h200.json").write_text(json.dumps(data))
    md = benchpage.render(str(tmp_path), "matmul")
    assert md.count("<svg") == 2 and "GEMM bf16 (x @ W.T), H200" in md
    assert "GEMM bf16 (a @ b), H200" in md
    assert "| llm | 1 | 600 | 1.10× |" in md and "| llm | 1 | 660 | 0.91× |" in md


def test_grouped_gemm_per_kind(tmp_path):
    row = {"shape": [8, 4096, 7168, 64, 2048], "sizes": [100, 0, 28], "fp8": True,
           "scales": "row", "results": {"ptxdsl fp8": {"tflops": 900.0},
                                        "torch._scaled_grouped_mm": {"tflops": 750.0}}}
    data = {"device": "NVIDIA H200", "date": "2026-11-29", "rows": [
        dict(row, fp8=False, scales=None, results={"ptxdsl": {"tflops": 500.0}}), row]}
    (tmp_path / "matmul_grouped_h200.json").write_text(json.dumps(data))
    md = benchpage.render(str(tmp_path), "matmul_grouped")
    assert md.count("<svg") == 2 and "**bf16**" in md and "**fp8 row**" in md
    assert "| G8 N4096 K7168 | 128 | 900 | 750 | 1.20× |" in md
