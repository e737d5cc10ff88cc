"""The examples gallery: every kernel of every example traces, assembles with ptxas for
sm_90a without spilling, and (on the CPU interpreter) matches its float64 reference.

The examples are imported the way ``ptxdsl`` imports them (``cli.load_kernels``), so
these tests also hold every example to the CLI's kernel-finding convention.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from ptxdsl.cli import command as cli
from ptxdsl import toolchain
from ptxdsl.core.errors import ToolchainError

from paths import ROOT
HOPPER = os.path.join(ROOT, "examples", "hopper")
# The gallery. rms_norm*.py come with the RMSNorm work, gemm*.py with the GEMMs; the rest are
# the docs' gallery.
EXAMPLES = ["vector_add.py", "softmax.py", "swiglu.py", "layer_norm.py", "rms_norm.py",
            "rms_norm_backward.py", "rms_norm_quant.py", "gemm_mma.py", "gemm.py",
            "flash_attention.py"]
# flash_attention.py's kernel costs most to trace and assemble: its main (which traces it)
# runs in the default run, the trace and ptxas checks in -m long.
BUILT = EXAMPLES[:-1] + [pytest.param(EXAMPLES[-1], marks=pytest.mark.long)]


def _have_ptxas() -> bool:
    try:
        return toolchain.find_ptxas() is not None
    except ToolchainError:
        return False


def _module(name):
    return cli._import_file(os.path.join(HOPPER, name))


def _entries(name):
    mod = _module(name)
    return cli.load_kernels(os.path.join(HOPPER, name), module=mod)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_exposes_kernels_and_a_main(name):
    mod = _module(name)
    assert callable(getattr(mod, "main", None)), f"{name} has no main()"
    entries = cli.load_kernels(os.path.join(HOPPER, name), module=mod)
    assert entries, f"{name} exposes no kernels (see docs/cli.md)"


@pytest.mark.parametrize("name", BUILT)
def test_example_kernels_trace(name):
    for e in _entries(name):
        text = e.kernel.ptx()
        assert ".target sm_90a" in text and f".entry {e.kernel.name}(" in text


@pytest.mark.ptxas
@pytest.mark.skipif(not _have_ptxas(), reason="no ptxas (pip install -e '.[test]')")
@pytest.mark.parametrize("name", BUILT)
def test_example_kernels_assemble_for_sm_90a_without_spills(name):
    for e in _entries(name):
        res = e.kernel.resources("sm_90a")
        assert res.registers > 0
        assert res.spill_stores == 0 and res.spill_loads == 0, (e.name, res)
        assert res.local == 0, (e.name, res)


# ------------------------------------------------------------------ interpreted vs float64
@pytest.fixture
def on_interpreter(monkeypatch):
    """The examples' run() helpers pick the interpreter when PTXDSL_INTERPRET is set."""
    monkeypatch.setenv("PTXDSL_INTERPRET", "1")


def _rng(seed=0):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("n", [4096, 1027, 5, 1])
def test_vector_add_interpreted(on_interpreter, n):
    mod = _module("vector_add.py")
    a = _rng(n).standard_normal(n).astype(np.float32)
    b = _rng(n + 1).standard_normal(n).astype(np.float32)
    c = mod.run(mod.build_vector_add(), a, b)
    np.testing.assert_array_equal(c, a + b)   # one f32 rounding: exactly numpy's


@pytest.mark.parametrize("B,N", [(3, 1024), (2, 8192), (5, 128), (2, 32768)])
def test_softmax_interpreted(on_interpreter, B, N):
    mod = _module("softmax.py")
    x = (_rng(B).standard_normal((B, N)) * 3).astype(np.float32)
    x[0, :3] = [80.0, -80.0, 0.0]   # a large spread: exp underflows for most of the row
    y = mod.run(mod.build_softmax(N), x)
    ref = mod.reference(x)
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=1e-7 * ref.max())
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("B,N", [(3, 1024), (2, 8192), (5, 128), (2, 32768)])
def test_swiglu_interpreted(on_interpreter, B, N):
    mod = _module("swiglu.py")
    g = (_rng(B).standard_normal((B, N)) * 4).astype(np.float32)
    u = _rng(B + 7).standard_normal((B, N)).astype(np.float32)
    g[0, :4] = [-100.0, 100.0, 0.0, -0.0]
    y = mod.run(mod.build_swiglu(N), g, u)
    np.testing.assert_allclose(y, mod.reference(g, u), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("B,N", [(3, 1024), (2, 8192), (5, 128), (2, 32768)])
def test_layer_norm_interpreted(on_interpreter, B, N):
    mod = _module("layer_norm.py")
    rng = _rng(B)
    x = (rng.standard_normal((B, N)) * 2 + 5).astype(np.float32)   # offset mean
    w = (rng.standard_normal(N) * 0.1 + 1).astype(np.float32)
    b = (rng.standard_normal(N) * 0.1).astype(np.float32)
    y = mod.run(mod.build_layer_norm(N), x, w, b)
    np.testing.assert_allclose(y, mod.reference(x, w, b), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["vector_add.py", "softmax.py", "swiglu.py", "layer_norm.py",
                                  "gemm.py", "rms_norm_quant.py", "flash_attention.py"])
def test_example_main_runs_on_the_interpreter(on_interpreter, name, capsys):
    """What `python examples/hopper/X.py` does on a machine without a GPU."""
    _module(name).main()
    out = capsys.readouterr().out
    assert "the CPU interpreter" in out
    assert "[OK]" in out and "FAIL" not in out


@pytest.mark.parametrize("shape", [(8, 4096), (3, 4097)])
def test_rms_norm_example_interpreted(on_interpreter, shape):
    mod = _module("rms_norm.py")
    assert mod.check(*shape) < 2e-6


def test_rms_norm_backward_example_interpreted(on_interpreter):
    mod = _module("rms_norm_backward.py")
    mod.check(16, 1024)


@pytest.mark.parametrize("shape", [(64, 64, 64),
                                   pytest.param((130, 136, 40), marks=pytest.mark.long)])
def test_gemm_mma_example_interpreted(on_interpreter, shape):
    """The tensor-core GEMM (cp.async ring, ldmatrix, mma.sync) against float64; the
    second shape has ragged M/N edges, two CTAs each way and a partial K tile."""
    mod = _module("gemm_mma.py")
    assert mod.check(*shape) <= 2 ** -7
