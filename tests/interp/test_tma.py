"""TMA on the interpreter: tensor-map parameters bound to the map the runtime would encode,
box loads (out-of-bounds zero fill, each swizzle, 1-D to 3-D) and clipped box stores,
checked against numpy; bad uses refused with located errors."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.errors import InterpreterError
from ptxdsl.core.tensormap import TMA
from ptxdsl.core.types import b64, f32, pred, u16, u32
from swizzle import swizzled_image
from tma_kernels import build_copy


def expected_boxes(a, box):
    br, bc = box
    m, n = a.shape
    gy, gx = -(-m // br), -(-n // bc)
    out = []
    for y in range(gy):
        for x in range(gx):
            b = np.zeros(box, a.dtype)
            blk = a[y * br:(y + 1) * br, x * bc:(x + 1) * bc]
            b[:blk.shape[0], :blk.shape[1]] = blk
            out.append(b)
    return out


@pytest.mark.parametrize("swizzle,box", [(0, (8, 8)), (32, (16, 8)), (64, (8, 16)),
                                         (128, (16, 32)), (32, (8, 4)), (64, (8, 8)),
                                         (128, (8, 16))])
def test_tma_load_store_ragged_each_swizzle(swizzle, box):
    rng = np.random.default_rng(swizzle)
    m, n = box[0] * 2 + 3, box[1] * 2 - 4          # ragged: OOB rows and columns
    a = rng.standard_normal((m, n)).astype(np.float32)
    k = build_copy(box, swizzle)
    grid = (-(-m // box[0])) * (-(-n // box[1]))
    c, d = k.interpret(a, G=grid)
    np.testing.assert_array_equal(c, a)           # the round trip, OOB clipped on store
    for i, b in enumerate(expected_boxes(a, box)):
        want = swizzled_image(b, swizzle).view(np.uint32)
        np.testing.assert_array_equal(d[i], want, err_msg=f"box {i}")


def test_tma_store_clips_rows_past_the_tensor():
    a = np.arange(20 * 8, dtype=np.float32).reshape(20, 8)
    k = build_copy((8, 8), 0, dump=False, store_shift=5)
    c_in = np.full_like(a, -1.0)
    c, _ = k.interpret(a, c_in, np.zeros((3, 64), np.uint32))
    want = np.full_like(a, -1.0)
    for y in range(3):                             # each box lands 5 rows lower, clipped
        rows = a[y * 8:min(y * 8 + 8, 20)]
        blk = np.zeros((8, 8), np.float32)
        blk[:len(rows)] = rows
        lo = y * 8 + 5
        hi = min(lo + 8, 20)
        if lo < 20:
            want[lo:hi] = blk[:hi - lo]
    np.testing.assert_array_equal(c, want)


def test_tma_16_bit_elements_128_byte_swizzle():
    rng = np.random.default_rng(7)
    a = rng.integers(0, 1 << 16, (40, 120), dtype=np.uint16)
    k = build_copy((32, 64), 128, dtype=u16)
    c, d = k.interpret(a, G=4)
    np.testing.assert_array_equal(c, a)
    for i, b in enumerate(expected_boxes(a, (32, 64))):
        np.testing.assert_array_equal(d[i], swizzled_image(b, 128).view(np.uint32))


@pytest.mark.parametrize("rank", [1, 3])
def test_tma_other_ranks(rank):
    """1-D and 3-D maps: the box at negative / past-the-end coordinates is zero-filled."""
    if rank == 1:
        shape, box, coords = (100,), (32,), (-8,)
    else:
        shape, box, coords = (3, 5, 16), (2, 4, 8), (12, 3, 2)   # innermost first
    t = TMA(box=box)
    nel = int(np.prod(box))
    dims = ("A", "B", "C")[:rank]

    @kernel(in_specs=(Tile(*dims, f32, tma=t),), out_specs=(Tile("E", f32),),
            grid=(1, 1, 1), block=(32, 1, 1), arch="sm_90a")
    def box_load(X, Y):
        tile = smem.alloc(f32, (nel,), align=128)
        bars = smem.alloc(b64, (1,), align=8)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        with ptx.if_(tid == 0):
            ptx.inst.mbarrier.init.shared__cta.b64(ptx.addr(bars.base), 1)
            ptx.inst.mbarrier.arrive.expect_tx.shared__cta.b64(ptx.sink, ptx.addr(bars.base),
                                                               nel * 4)
            ptx.tma.load(tile.base, X.tma_desc(), coords, bars.base)
        # loop: on the GPU one try_wait may give up before the copy lands
        ptx.mbarrier.wait(ptx.addr(bars.base), 0)
        (py,) = ptx.global_ptrs(Y)
        for j in range(0, nel, 32):
            with ptx.if_(tid + j < nel):
                v = reg.scalar(f32)
                ptx.inst.ld.shared.f32(v, ptx.addr(tile.base + (tid + j) * 4))
                ptx.inst.st.global_.f32(ptx.addr(py + (tid + j) * 4), v)

    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
    y = box_load.interpret(x, E=nel)
    pad = np.zeros([s + 2 * b for s, b in zip(shape, box)], np.float32)
    pad[tuple(slice(b, b + s) for s, b in zip(shape, box))] = x
    origin = [c + b for c, b in zip(reversed(coords), box)]
    want = pad[tuple(slice(o, o + b) for o, b in zip(origin, box))]
    np.testing.assert_array_equal(y, want.reshape(-1))


def test_expect_tx_counts_the_whole_box_including_oob():
    """A box half outside the tensor completes the whole box's bytes on the mbarrier (the
    zero-filled ones too): expecting them all works, expecting only the in-bounds half
    is reported as a surplus of completed bytes."""
    a = np.ones((4, 8), np.float32)               # rows 4..7 of the box are OOB
    c, _ = build_copy((8, 8), 0, dump=False).interpret(a, G=1)
    np.testing.assert_array_equal(c, a)
    with pytest.raises(InterpreterError, match=r"128 more transaction bytes"):
        build_copy((8, 8), 0, dump=False, expect=128).interpret(a, G=1)


def test_multicast_outside_the_cluster_is_refused():
    """ctaMask 0b11 names rank 1, but without cluster= every CTA is a cluster of one
    (a multicast across a real cluster: tests/interp/test_cluster.py)."""
    k = build_copy((8, 8), 0, dump=False, multicast=True)
    with pytest.raises(InterpreterError, match=r"ctaMask 0x0003 must name CTAs of the "
                                               r"cluster \(ranks 0\.\.0"):
        k.interpret(np.ones((8, 8), np.float32), G=1)


def test_a_register_that_is_no_tensor_map_is_refused():
    @kernel(in_specs=(Tile("M", "N", f32, tma=TMA(box=(8, 8))),), grid=(1, 1, 1),
            block=(32, 1, 1), arch="sm_90a")
    def bad(A):
        A.tma_desc()
        tile = smem.alloc(f32, (64,), align=128)
        ptx.tma.store(reg.scalar(b64, init=0x1234), (0, 0), tile.base)
    with pytest.raises(InterpreterError, match=r"not a tensor map"):
        bad.interpret(np.ones((8, 8), np.float32), allow_uninitialized=True)


def test_misaligned_shared_box_is_refused():
    @kernel(in_specs=(Tile("M", "N", f32, tma=TMA(box=(8, 8))),), grid=(1, 1, 1),
            block=(32, 1, 1), arch="sm_90a")
    def bad(A):
        tile = smem.alloc(f32, (80,), align=128)
        ptx.tma.store(A.tma_desc(), (0, 0), tile.base + 16)
    with pytest.raises(InterpreterError, match=r"128-byte"):
        bad.interpret(np.ones((8, 8), np.float32), allow_uninitialized=True)
