"""The maintained benchmarks' command lines: every script in bench/ that runs as a program
names its command line in its docstring and answers ``--help`` without a GPU."""
from __future__ import annotations

import ast
import glob
import os
import subprocess
import sys

import pytest

from paths import ROOT
SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "bench", "*.py"))
                 if '__name__ == "__main__"' in open(p, encoding="utf-8").read())


def test_the_maintained_benchmarks_are_there():
    for name in ("rmsnorm.py", "rmsnorm_long.py", "rmsnorm_quant.py", "rmsnorm_host.py",
                 "matmul.py", "matmul_fp8.py", "matmul_host.py", "launch_overhead.py",
                 "examples.py", "pyptx_compat.py", "ampere_gemm.py", "interp.py",
                 "install_wheels.py"):
        assert name in SCRIPTS, name


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_documents_and_answers_help(name):
    path = os.path.join(ROOT, "bench", name)
    doc = ast.get_docstring(ast.parse(open(path, encoding="utf-8").read())) or ""
    assert f"bench/{name}" in doc, f"{name}'s docstring does not show its command line"
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, path, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr[-2000:]
