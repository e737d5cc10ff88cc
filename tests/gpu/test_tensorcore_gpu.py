"""Tensor-core instructions on the GPU against the interpreter, with identical inputs.

Every mma.sync form (shape x types x layouts, the same list as
tests/interp/test_tensorcore.py) runs on the device and on the interpreter:
integer forms must agree bit for bit; float forms must each lie within the
bound documented in ``ptxdsl/interp/semantics/tensorcore.py`` of the exact result
(inputs span many binades and both signs, so the device's accumulation order
shows in the low bits), and the measured largest deviation per form is
printed (``-s``) for the docs. ldmatrix / stmatrix / movmatrix (all .xN, with
and without .trans) and the fp8 conversions must agree bit for bit. The
layouts themselves are proven by the first test: a wrong (row, col) for any
element would put whole products in the wrong place, far outside the bound.

Run (repository root): ``python -m pytest tests/gpu/test_tensorcore_gpu.py -q -s``
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import ptxdsl  # noqa: E402
from gpu_env import NEEDS_GPU
from ptxdsl.isa import resolve  # noqa: E402
from tensorcore_kernels import (ALL_MMA, build_matrix_ops, build_mma, chain,  # noqa: E402
                                matrix_expect, mma_case)

pytestmark = NEEDS_GPU


def _device_sm() -> int:
    from ptxdsl.runtime import driver
    major, minor = driver.get().device(0).cc
    return 10 * major + minor


def _arch(form) -> str:
    """Run every form at the device's own target (sm_90a on an H100/H200)."""
    sm = _device_sm()
    need = resolve(chain(form).split(".")).sm
    if need > sm:
        pytest.skip(f"{chain(form)} needs sm_{need}")
    return f"sm_{sm}a" if sm in (90, 100) else f"sm_{sm}"


def _one(x):
    return x[0] if isinstance(x, (tuple, list)) else x


@pytest.mark.parametrize("form", ALL_MMA, ids=[chain(f)[17:] for f in ALL_MMA])
def test_mma_gpu_vs_interpreter(form):
    arch = _arch(form)
    k = build_mma(form, arch, warps=4)
    worst = None
    for seed in range(3):
        args, check = mma_case(form, seed=zlib.crc32(chain(form).encode()) + seed, warps=4)
        gpu = np.asarray(_one(k(*args)))
        cpu = np.asarray(_one(k.interpret(*args)))
        excess_gpu, _ = check(gpu)
        excess_cpu, _ = check(cpu)
        assert excess_cpu <= 0
        if form[4] == "s32":
            assert (gpu == cpu).all(), f"{chain(form)}: integer results differ"
        else:
            assert excess_gpu <= 0, f"{chain(form)}: GPU off by {excess_gpu} past the bound"
            differ = int((gpu != cpu).sum())
            worst = max(worst or 0, differ)
    if worst is not None:
        print(f"\n{chain(form)}: {worst} of {gpu.size} result registers differ in some bit "
              f"from the interpreter (within the documented bound)")


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_matrix_ops_gpu(num, trans):
    if _device_sm() < 90:
        pytest.skip("stmatrix needs sm_90")
    k = build_matrix_ops(num, trans, f"sm_{_device_sm()}a")
    x = np.random.default_rng(num + 7 * trans).integers(0, 1 << 16, num * 64).astype(np.uint16)
    r, s, m = (np.asarray(v) for v in k(x))
    want, mov = matrix_expect(x, num, trans)
    assert (r == want).all()
    assert (s == x).all()
    assert (m == mov).all()
    r2, s2, m2 = (np.asarray(v) for v in k.interpret(x))
    assert (r2 == r).all() and (s2 == s).all() and (m2 == m).all()


def test_cvt_fp8_gpu():
    from ptxdsl import Tile, kernel, ptx, reg
    from ptxdsl.core.types import e4m3x2, e5m2x2, f16x2, f32, u16, u32
    sm = _device_sm()
    if sm < 89:
        pytest.skip("fp8 cvt needs sm_89")
    arch = f"sm_{sm}a" if sm in (90, 100) else f"sm_{sm}"

    @kernel(in_specs=(Tile(256, 2, f32),),
            out_specs=(Tile(256, u16), Tile(256, u16), Tile(256, u32), Tile(256, u16)),
            grid=(1, 1, 1), block=(256, 1, 1), arch=arch)
    def conv(X, P, Q, H, R):
        px, pp, pq, ph, pr = ptx.global_ptrs(X, P, Q, H, R)
        t = reg.scalar(u32)
        ptx.inst.mov.u32(t, ptx.special.tid.x())
        hi, lo = reg.scalar(f32), reg.scalar(f32)
        ptx.inst.ld.global_.v2.f32([hi, lo], ptx.addr(px + t * 8))
        p, q = reg.scalar(e4m3x2), reg.scalar(e5m2x2)
        ptx.inst.cvt.rn.satfinite.e4m3x2.f32(p, hi, lo)
        ptx.inst.cvt.rn.satfinite.relu.e5m2x2.f32(q, hi, lo)
        ptx.inst.st.global_.b16(ptx.addr(pp + t * 2), p)
        ptx.inst.st.global_.b16(ptx.addr(pq + t * 2), q)
        h = reg.scalar(f16x2)
        ptx.inst.cvt.rn.f16x2.e5m2x2(h, q)
        ptx.inst.st.global_.b32(ptx.addr(ph + t * 4), h)
        r = reg.scalar(e4m3x2)
        ptx.inst.cvt.rn.satfinite.e4m3x2.f16x2(r, h)
        ptx.inst.st.global_.b16(ptx.addr(pr + t * 2), r)

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((256, 2)) * np.exp2(rng.integers(-12, 18, (256, 2))))
    x = x.astype(np.float32)
    x[:4] = [[np.inf, -np.inf], [np.nan, 0.0], [-0.0, 448.0], [464.0, 1e6]]
    gpu = [np.asarray(v) for v in conv(x)]
    cpu = [np.asarray(v) for v in conv.interpret(x)]
    for name, g, c in zip(("e4m3x2", "e5m2x2 relu", "f16x2", "e4m3x2 from f16x2"), gpu, cpu):
        bad = np.flatnonzero(g != c)
        assert not len(bad), (f"{name}: {len(bad)} differ, e.g. input {x[bad[0]]}: GPU "
                              f"{int(g[bad[0]]):#x}, interpreter {int(c[bad[0]]):#x}")
