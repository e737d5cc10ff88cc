"""ptxdsl's own kernels through the PTX front end: each example and op kernel the
interpreter runs here runs again from its PTX parsed back, with bit-identical results
(see frontend_roundtrip.py). The long sweep reruns the ops' and examples' interpreter
tests with every run checked this way."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import frontend_roundtrip as rt
from ptxdsl.cli import command as cli

from paths import HELPERS, ROOT
HOPPER = os.path.join(ROOT, "examples", "hopper")


@pytest.fixture
def parsed_back(monkeypatch):
    monkeypatch.setenv("PTXDSL_INTERPRET", "1")
    rt.install(monkeypatch)
    rt.SEEN.clear()
    yield rt.SEEN


def _example(name):
    return cli._import_file(os.path.join(HOPPER, name))


@pytest.mark.parametrize("name", ["softmax.py", "swiglu.py", "layer_norm.py"])
def test_example_mains_run_parsed_back(parsed_back, name, capsys):
    _example(name).main()
    assert "[OK]" in capsys.readouterr().out
    assert parsed_back, f"{name} ran nothing on the interpreter"


def test_tensor_core_gemm_example_runs_parsed_back(parsed_back):
    assert _example("gemm_mma.py").check(64, 64, 64) <= 2 ** -7
    assert parsed_back


def test_rms_norm_example_runs_parsed_back(parsed_back):
    assert _example("rms_norm.py").check(3, 4097) < 2e-6
    assert parsed_back


def test_matmul_op_runs_parsed_back(parsed_back):
    from ptxdsl.ops.matmul import matmul
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (33, 17)).astype(np.float16)
    b = rng.integers(-3, 4, (17, 40)).astype(np.float16)
    np.testing.assert_array_equal(matmul(a, b, out_dtype=np.float32),
                                  a.astype(np.float32) @ b.astype(np.float32))
    assert parsed_back


def test_rmsnorm_op_runs_parsed_back(parsed_back):
    from ptxdsl.core.types import f32
    from ptxdsl.ops.rmsnorm.fwd import build_forward
    from ptxdsl.ops.rmsnorm.plan import max_vec, plan
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 1000)).astype(np.float32)
    w = rng.standard_normal(1000).astype(np.float32)
    k = build_forward(plan(1000, f32, max_vec(1000, f32)), f32, f32, eps=1e-6)
    y = np.zeros_like(x)
    k.interpret(x, w, y)
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    assert parsed_back


@pytest.mark.long
def test_ops_and_examples_interpreter_suites_parsed_back(request, tmp_path):
    """Every kernel the ops' and examples' interpreter tests run, parsed back (minutes)."""
    if "long" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("exhaustive sweep: run with -m long")
    paths = [os.path.join("tests", "ops"), os.path.join("tests", "docs", "test_examples.py")]
    log = tmp_path / "parsed_back.txt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HELPERS, ROOT]),
               FRONTEND_ROUNDTRIP_LOG=str(log))
    # the sweep is most of the long run's time: on every core where pytest-xdist is there
    spread = ["-n", str(max(2, os.cpu_count() or 1))] \
        if importlib.util.find_spec("xdist") is not None else []
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "frontend_roundtrip",
                           "-p", "no:cacheprovider", *spread, *paths],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # every process's count of programs parsed back (the plugin ran in each, xdist or not)
    counts = [int(n) for n in log.read_text().split()]
    print(f"parsed back: {sum(counts)} programs in {len(counts)} processes")
    assert sum(counts) > 500, counts
