"""Tensor-map parameters of imported PTX (``.param .align 64 .b8 tmap[128]``) take
``(array, ptxdsl.TMA(...))`` or ``(array, box)`` on the interpreter: a DSL TMA copy
kernel's PTX, parsed back, copies the array through its two maps."""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl
from ptxdsl.core.errors import LaunchError
from ptxdsl.core.tensormap import TMA

from tma_kernels import build_copy


@pytest.fixture(scope="module")
def copy_kernel():
    return ptxdsl.from_ptx(build_copy((8, 32), 0, dump=False).ptx())


def test_tensor_map_parameters_take_an_array_and_its_tma(copy_kernel):
    assert [p.count for p in copy_kernel.params][-2:] == [128, 128]
    a = np.arange(16 * 64, dtype=np.float32).reshape(16, 64)
    c = np.zeros_like(a)
    # the pointer and dim parameters are unused by the TMA path: null and zero
    copy_kernel.interpret(None, None, None, 0, 0, 0, (a, TMA(box=(8, 32))), (c, (8, 32)),
                          grid=(2, 2), block=128)
    np.testing.assert_array_equal(c, a)


def test_a_box_of_the_wrong_rank_is_refused(copy_kernel):
    a = np.zeros((16, 64), np.float32)
    with pytest.raises(LaunchError, match=r"A_tmap.*box \(8,\) has 1 entries for a 2-d"):
        copy_kernel.interpret(None, None, None, 0, 0, 0, (a, (8,)), (a, (8, 32)),
                              grid=(2, 2), block=128)
