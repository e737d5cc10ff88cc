"""ptxdsl's own kernels through the PTX front end: each example and op kernel the
interpreter runs here runs again from its PTX parsed back, with bit-identical results
(see frontend_roundtrip.py). The long sweep reruns one interpreter test per kernel
family of the ops with every run checked this way."""
from __future__ import annotations

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


@pytest.mark.long
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


# One interpreter test function (its default cases) per kernel family the ops ship, the
# cheapest that runs the family's distinctive PTX: the parser meets each family's forms
# (wgmma and TMA, mbarrier rings, clusters and DSMEM, stmatrix, fp8 promotion, the grouped
# cursor's redux.sync, the attention pipelines, rmsnorm's cluster exchange). The examples'
# kernels and the SIMT matmul and rmsnorm are the default tests above.
SWEEP = [
    # matmul, Hopper: the 16-bit epilogue (stmatrix, TMA store); a cluster of 2 along M
    # (multicast, mapa, remote arrives); a_rows beside split-K (partials through DSMEM)
    "tests/ops/matmul/test_hopper.py::test_interpreter_runs_the_shipped_kernel_bf16_output",
    "tests/ops/matmul/test_hopper.py::test_interpreter_runs_the_shipped_kernel_in_a_cluster_of_2",
    "tests/ops/matmul/test_hopper.py::test_interpreter_runs_a_rows_with_split_k",
    # matmul: block-wise fp8 (promotion, rolling k-blocks, scale_a through the ring); grouped
    "tests/ops/matmul/test_fp8_scales.py::test_interpreter_runs_block_loop_variants",
    "tests/ops/matmul/test_grouped.py::test_sm90_dispatch_runs_the_grouped_hopper_kernel",
    # attention: forward (masks, GQA), varlen, decode, backward (ragged GQA causal)
    "tests/ops/attention/test_interp.py::test_small_shapes_match_float64",
    "tests/ops/attention/test_interp.py::test_varlen_one_launch_ragged_lengths",
    "tests/ops/attention/test_decode.py::test_decode_matches_float64",
    "tests/ops/attention/test_bwd_interp.py::test_ragged_gqa_causal_matches_float64",
    # rmsnorm: a cluster's forward (DSMEM exchange), the few-rows backward, fp8 quant
    "tests/ops/rmsnorm/test_cluster_interp.py::test_forward_long_ragged_rows_with_residual",
    "tests/ops/rmsnorm/test_bwd_few_rows.py::test_every_row_is_walked_by_the_smaller_grid",
    "tests/ops/rmsnorm/test_quant.py::test_eps_is_applied",
]


@pytest.mark.long
def test_ops_interpreter_tests_parsed_back(request, tmp_path):
    """One interpreter test per kernel family of the ops (:data:`SWEEP`), every kernel it
    runs parsed back. (Every ops test parsed back took ~7.5 minutes on 2 cores, most of the
    long run; the families' forms are what the parser can miss.)"""
    if "long" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("sweep: run with -m long")
    log = tmp_path / "parsed_back.txt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HELPERS, ROOT]),
               FRONTEND_ROUNDTRIP_LOG=str(log))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "frontend_roundtrip",
                           "-p", "no:cacheprovider", "-rs", *SWEEP],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " skipped" not in proc.stdout.splitlines()[-1], proc.stdout[-2000:]
    # the process's count of programs parsed back: at least one a test function
    counts = [int(n) for n in log.read_text().split()]
    print(f"parsed back: {sum(counts)} programs")
    assert sum(counts) >= len(SWEEP), counts
