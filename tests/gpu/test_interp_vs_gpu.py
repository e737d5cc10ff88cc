"""The CPU interpreter against the GPU, with identical inputs.

Every example kernel (examples/hopper), the interpreter tests' own kernels
(softmax, SwiGLU, LayerNorm, the seed RMSNorm) and a sweep of single
instructions run on both. Integer and IEEE-rounded float instructions must
agree bit for bit; ``.approx`` instructions within the hardware bounds
documented in ``ptxdsl/interp/floatops.py``; whole kernels to ~1e-5.

Run: ``PYTHONPATH=.:tests python -m pytest tests/gpu/test_interp_vs_gpu.py -q``.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [p for p in (os.path.join(ROOT, "tests"), ROOT) if p not in sys.path]

import ptxdsl  # noqa: E402
from ptxdsl import cli  # noqa: E402
from ptxdsl.types import f32_to_bf16_bits  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not ptxdsl.gpu_available(),
                                 reason="no usable CUDA GPU/driver in this process")]

EXAMPLES = ["vector_add.py", "softmax.py", "swiglu.py", "layer_norm.py", "rms_norm.py",
            "rms_norm_backward.py"]
DIM_VALUES = {"N": 1000, "B": 3, "M": 5}


def _inputs(k, rng):
    dims = {d: DIM_VALUES.get(d, 4) for d in k.dim_names}
    out = []
    names = k.arg_names or ()
    for i, tile in enumerate(k.in_specs):
        shape = tile.shape_for(dims)
        if i < len(names) and names[i] == "WS":
            # A cooperative kernel's barrier workspace must start at zero.
            out.append(np.zeros(shape, tile.dtype.np_dtype))
            continue
        x = rng.standard_normal(shape).astype(np.float32)
        if tile.dtype.name == "bf16":
            out.append(f32_to_bf16_bits(x))
        elif tile.dtype.is_float:
            out.append(x.astype(tile.dtype.np_dtype))
        else:
            out.append(rng.integers(0, 1 << 16, shape).astype(tile.dtype.np_dtype))
    return out, dims


def _values(a, tile):
    a = np.asarray(a)
    if tile.dtype.name == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def _compare(k, inputs, dims, rtol):
    extra = {d: v for d, v in dims.items()
             if not any(d in t.names for t in k.in_specs)}
    gpu = k(*inputs, **extra)
    cpu = k.interpret(*inputs, **extra)
    gpu = gpu if isinstance(gpu, tuple) else (gpu,)
    cpu = cpu if isinstance(cpu, tuple) else (cpu,)
    worst = 0.0
    for g, c, tile in zip(gpu, cpu, k.out_specs):
        gv, cv = _values(g, tile), _values(c, tile)
        np.testing.assert_array_equal(np.isnan(gv), np.isnan(cv))
        scale = max(float(np.nanmax(np.abs(gv))), 1e-30)
        err = float(np.nanmax(np.abs(gv - cv))) / scale if gv.size else 0.0
        worst = max(worst, err)
        tol = 1e-2 if tile.dtype.name == "bf16" else rtol
        assert err <= tol, (k.name, err)
    return worst


def _example_kernels():
    out = []
    for name in EXAMPLES:
        path = os.path.join(ROOT, "examples", "hopper", name)
        if os.path.exists(path):
            out += [(name, e.name) for e in cli.load_kernels(path)]
    return out


@pytest.mark.parametrize("example,kname", _example_kernels())
def test_example_kernels_agree(example, kname):
    entries = cli.load_kernels(os.path.join(ROOT, "examples", "hopper", example))
    k = next(e.kernel for e in entries if e.name == kname)
    inputs, dims = _inputs(k, np.random.default_rng(0))
    err = _compare(k, inputs, dims, 2e-5)
    print(f"{example}:{kname} max relative difference GPU vs interpreter {err:.2e}")


def test_interpreter_test_kernels_agree():
    import test_interp_kernels as tk
    from seed_kernels import build_rms_norm
    rng = np.random.default_rng(1)
    for k in (tk.build_softmax(512), tk.build_swiglu(100), tk.build_layer_norm(256),
              build_rms_norm(4, 4096), build_rms_norm(3, 96)):
        inputs, dims = _inputs(k, rng)
        err = _compare(k, inputs, dims, 2e-5)
        print(f"{k.name}: max relative difference {err:.2e}")


# ------------------------------------------------------------------ single instructions
EXACT = [  # (chain, input types, output type)
    ("add.rz.f32", ["f32", "f32"], "f32"), ("mul.rm.f32", ["f32", "f32"], "f32"),
    ("fma.rp.f32", ["f32", "f32", "f32"], "f32"), ("div.rn.f32", ["f32", "f32"], "f32"),
    ("div.rz.f64", ["f64", "f64"], "f64"), ("sqrt.rp.f32", ["f32"], "f32"),
    ("rcp.rm.f64", ["f64"], "f64"), ("fma.rn.f64", ["f64", "f64", "f64"], "f64"),
    ("add.rn.ftz.sat.f32", ["f32", "f32"], "f32"), ("fma.rn.bf16x2", ["b32"] * 3, "b32"),
    ("mul.rn.f16x2", ["b32", "b32"], "b32"), ("cvt.rn.bf16.f32", ["f32"], "b16"),
    ("cvt.rz.f16.f32", ["f32"], "b16"), ("cvt.rni.s32.f32", ["f32"], "s32"),
    ("cvt.rpi.u16.f32", ["f32"], "u16"), ("cvt.rm.f32.s64", ["s64"], "f32"),
    ("cvt.rna.tf32.f32", ["f32"], "b32"), ("min.f32", ["f32", "f32"], "f32"),
    ("max.NaN.f32", ["f32", "f32"], "f32"), ("mul.hi.s64", ["s64", "s64"], "s64"),
    ("mad.wide.s32", ["s32", "s32", "s64"], "s64"), ("div.s32", ["s32", "s32"], "s32"),
    ("rem.s64", ["s64", "s64"], "s64"), ("bfe.s32", ["s32", "u32", "u32"], "s32"),
    ("bfi.b64", ["b64", "b64", "u32", "u32"], "b64"), ("prmt.b32", ["b32"] * 3, "b32"),
    ("prmt.b4e.b32", ["b32"] * 3, "b32"), ("prmt.ecr.b32", ["b32"] * 3, "b32"),
    ("shr.s32", ["s32", "u32"], "s32"), ("shl.b64", ["b64", "u32"], "b64"),
    ("clz.b64", ["b64"], "u32"), ("brev.b32", ["b32"], "b32"), ("popc.b64", ["b64"], "u32"),
    ("add.sat.s32", ["s32", "s32"], "s32"), ("copysign.f32", ["f32", "f32"], "f32"),
]
APPROX = [("ex2.approx.f32", 2.0 ** -22), ("lg2.approx.f32", 2.0 ** -21),
          ("rsqrt.approx.f32", 2.0 ** -22), ("sin.approx.f32", 2.0 ** -20),
          ("cos.approx.f32", 2.0 ** -20), ("tanh.approx.f32", 2.0 ** -10.9),
          ("rcp.approx.f32", 2.0 ** -22), ("sqrt.approx.f32", 2.0 ** -22)]


def _edge_values(t, n, rng):
    from ptxdsl.types import by_name
    dt = by_name(t).np_dtype
    raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).view(dt)
    if t in ("f32", "f64"):
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.5, 1e-40, -1e-310,
                            3.4e38, 1.0000001], dt)
        raw[:len(special)] = special
    elif t in ("u32", "u16"):
        raw = raw % dt.type(40)  # shift amounts, bit positions, lengths near the width
    return raw


@pytest.mark.parametrize("chain,ins,out", EXACT)
def test_instructions_bit_exact(chain, ins, out):
    from test_interp_util import make_op_kernel
    n = 1024
    rng = np.random.default_rng(abs(hash(chain)) % 2 ** 32)
    k = make_op_kernel(chain, ins, [out], n)
    inputs = [_edge_values(t, n, rng) for t in ins]
    gpu = np.asarray(k(*inputs))
    cpu = np.asarray(k.interpret(*inputs))
    bad = gpu.view(f"u{gpu.dtype.itemsize}") != cpu.view(f"u{cpu.dtype.itemsize}")
    if out in ("f32", "f64"):  # any NaN equals any NaN (payloads are not specified)
        bad &= ~(np.isnan(gpu) & np.isnan(cpu))
    assert not bad.any(), (chain, [x[bad][:4] for x in inputs], gpu[bad][:4], cpu[bad][:4])


@pytest.mark.parametrize("chain,bound", APPROX)
def test_approx_instructions_within_bounds(chain, bound):
    from test_interp_util import make_op_kernel
    n = 1024  # one CTA of make_op_kernel's block
    x = np.random.default_rng(5).uniform(-3, 3, n).astype(np.float32)
    if chain.startswith(("lg2", "rsqrt", "sqrt")):
        x = np.abs(x) + np.float32(0.01)
    k = make_op_kernel(chain, ["f32"], ["f32"], n)
    gpu = np.asarray(k(x)).astype(np.float64)
    cpu = np.asarray(k.interpret(x)).astype(np.float64)
    scale = np.maximum(np.abs(gpu), 1.0) if chain.startswith(("sin", "cos", "lg2")) \
        else np.abs(gpu)
    err = np.max(np.abs(gpu - cpu) / scale)
    print(f"{chain}: max difference {err:.3g} (bound {bound:.3g})")
    assert err <= 2 * bound
