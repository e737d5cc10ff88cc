"""TMA loads and stores on an H100/H200 against the CPU interpreter: the same kernel
(tests/helpers/tma_kernels.py's build_copy: a box load into swizzled shared memory, the raw
shared bytes dumped, the box stored back) over ragged shapes and every swizzle; the
dump checks the interpreter's swizzle, the padding of rows narrower than the swizzle
span and the out-of-bounds fill byte for byte.

Run: ``python -m pytest tests/gpu/test_tma_interp_gpu.py -q``.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu_env import NEEDS_GPU, torch_sm90

pytestmark = NEEDS_GPU


@pytest.mark.parametrize("swizzle,box,shape", [(0, (8, 8), (19, 12)), (32, (16, 8), (35, 12)),
                                               (64, (8, 16), (19, 28)),
                                               (128, (16, 32), (35, 60)),
                                               (128, (8, 32), (19, 60)),
                                               # rows narrower than the span: padded to it
                                               (32, (8, 4), (19, 28)),
                                               (64, (8, 8), (19, 28)),
                                               (128, (8, 16), (19, 28))])
def test_tma_box_bytes_match_the_interpreter(swizzle, box, shape):
    from tma_kernels import build_copy
    torch = torch_sm90()
    k = build_copy(box, swizzle)
    a = np.random.default_rng(swizzle).standard_normal(shape).astype(np.float32)
    grid = (-(-shape[0] // box[0])) * (-(-shape[1] // box[1]))
    c_cpu, d_cpu = k.interpret(a, G=grid)
    # a GPU launch reads named dims from the arrays: pass the outputs, which carry G
    c_gpu, d_gpu = (torch.from_numpy(np.zeros_like(x)).cuda() for x in (c_cpu, d_cpu))
    k(torch.from_numpy(a).cuda(), c_gpu, d_gpu)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(c_gpu.cpu().numpy(), c_cpu)
    np.testing.assert_array_equal(d_gpu.cpu().numpy().view(np.uint32), d_cpu.view(np.uint32))
