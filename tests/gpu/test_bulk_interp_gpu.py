"""1-D bulk copies and TMA reductions on an H100/H200 against the CPU interpreter: the
kernels of tests/helpers/bulk_kernels.py (cp.async.bulk both ways; cp.reduce.async.bulk.tensor
for every operation on u32, add on f32 with subnormal and mixed-sign sums, add on bf16 /
f16, min / max on f16 / bf16 with NaNs and signed zeros) run on both, results compared
bit for bit. The interpreter's float rules for TMA reductions (round once to nearest,
no subnormal flush, min/max return the non-NaN operand, a NaN sum written as the
all-ones NaN) passed here on an H100 (2026-11-24).

Run: ``python -m pytest tests/gpu/test_bulk_interp_gpu.py -q``.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_sm90

pytestmark = NEEDS_GPU


def _run_gpu(torch, k, inputs, outputs, bf16=False):
    """``bf16``: the arrays hold bf16 bits as uint16 (as the interpreter takes them);
    on the GPU they travel as torch.bfloat16 tensors and come back as the same bits."""
    def dev(x):
        t = torch.from_numpy(np.ascontiguousarray(x))
        return (t.view(torch.bfloat16) if bf16 and x.dtype == np.uint16 else t).cuda()
    dev_in, dev_out = [dev(x) for x in inputs], [dev(x) for x in outputs]
    k(*dev_in, *dev_out)
    torch.cuda.synchronize()
    return [(d.view(torch.int16).cpu().numpy().view(np.uint16) if d.dtype == torch.bfloat16
             else d.cpu().numpy()) for d in dev_out]


def test_bulk_load_and_store_match():
    from bulk_kernels import N, bulk_load, bulk_store
    torch = torch_sm90()
    x = (np.arange(N, dtype=np.uint32) * 2654435761).astype(np.uint32)
    k = bulk_load()
    (y,) = _run_gpu(torch, k, [x], [np.zeros(N, np.uint32)])
    np.testing.assert_array_equal(y, k.interpret(x))
    k2 = bulk_store()
    y_cpu, z_cpu = k2.interpret()
    y, z = _run_gpu(torch, k2, [], [np.zeros(N, np.uint32), np.zeros(N, np.uint32)])
    np.testing.assert_array_equal(y, y_cpu)
    np.testing.assert_array_equal(z, z_cpu)


@pytest.mark.parametrize("op", ["add", "min", "max", "inc", "dec", "and", "or", "xor"])
def test_tma_reduce_u32(op):
    from ptxdsl.core.types import u32
    from bulk_kernels import tma_reduce
    torch = torch_sm90()
    rng = np.random.default_rng(3)
    c0 = rng.integers(0, 40, (12, 16)).astype(np.uint32)
    x = rng.integers(0, 40, 128).astype(np.uint32)
    k = tma_reduce(op, u32)
    cpu = k.interpret(x, c0.copy())
    (gpu,) = _run_gpu(torch, k, [x], [c0])
    np.testing.assert_array_equal(gpu, cpu)


def _edge_f32(rng):
    tiny = np.float32(1e-40)                       # subnormal
    vals = np.array([0.0, -0.0, tiny, -tiny, 1.0, -1.0, 3e38, -3e38, np.inf, np.nan,
                     1e-30, 1.0000001], np.float32)
    return rng.choice(vals, 128).astype(np.float32), rng.choice(vals, (8, 16)).astype(np.float32)


def test_tma_reduce_add_f32_edges():
    from ptxdsl.core.types import f32
    from bulk_kernels import tma_reduce
    torch = torch_sm90()
    x, c0 = _edge_f32(np.random.default_rng(4))
    k = tma_reduce("add", f32)
    cpu = k.interpret(x, c0.copy())
    (gpu,) = _run_gpu(torch, k, [x], [c0])
    np.testing.assert_array_equal(gpu.view(np.uint32), cpu.view(np.uint32))


@pytest.mark.parametrize("op", ["add", "min", "max"])
@pytest.mark.parametrize("half", ["bf16", "f16"])
def test_tma_reduce_half_precision(op, half):
    from ptxdsl.core.types import bf16, f16, f32_to_bf16_bits
    from bulk_kernels import tma_reduce
    torch = torch_sm90()
    rng = np.random.default_rng(5)
    raw = np.concatenate([rng.standard_normal(100), [0.0, -0.0, np.nan, 1e-7, -1e-7, np.inf]
                          * 5])[:128]
    if half == "bf16":
        x, c0 = f32_to_bf16_bits(raw.astype(np.float32)), f32_to_bf16_bits(
            rng.permutation(raw).reshape(8, 16).astype(np.float32))
        dt = bf16
    else:
        x, c0 = raw.astype(np.float16), rng.permutation(raw).reshape(8, 16).astype(np.float16)
        dt = f16
    k = tma_reduce(op, dt)
    cpu = k.interpret(x, c0.copy())
    (gpu,) = _run_gpu(torch, k, [x], [c0], bf16=half == "bf16")
    np.testing.assert_array_equal(gpu.view(np.uint16), np.asarray(cpu).view(np.uint16))
