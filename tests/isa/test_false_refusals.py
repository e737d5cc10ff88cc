"""Forms ptxas accepts that the table once refused (issue 47's fuzzing against ptxas):
``fence.acquire`` / ``fence.release`` with a scope, ``getctarank`` / ``mapa`` naming a
shared variable, ``mbarrier.test_wait.parity``; each traces, verifies, assembles, and
the imported-PTX front end reads it. ``st.global.volatile`` stays refused in traced code
with the PTX order spelled out (the front end reorders it)."""
from __future__ import annotations

import pytest

import ptxdsl
from ptxdsl import Tile, kernel, ptx, reg, smem, toolchain
from ptxdsl.core.errors import IsaError
from ptxdsl.types import f32, pred, u32, u64

needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas found")


def _kernel(body, name):
    @kernel(in_specs=(Tile(32, f32),), out_specs=(), block=(32, 1, 1), arch="sm_90a",
            name=name)
    def k(X):
        body(X)
    return k


def _fences(X):
    ptx.inst("fence.acquire.cta")
    ptx.inst("fence.release.gpu")


def _ranks(X):
    s = smem.alloc(u32, (4,))
    r, a = reg.scalar(u32), reg.scalar(u32)
    ptx.inst("getctarank.shared::cluster.u32", r, s)            # the array object
    ptx.inst("getctarank.shared::cluster.u32", r, s.name)       # or its name
    ptx.inst("mapa.shared::cluster.u32", a, s, r)


def _parity(X):
    bar = smem.alloc(u64, (1,))
    done = reg.scalar(pred)
    ptx.mbarrier.init(bar, 1)
    ptx.inst("mbarrier.test_wait.parity.shared::cta.b64", done, ptx.addr(bar), 0)
    with ptx.if_(done):
        ptx.inst("fence.acquire.cta")


@pytest.mark.parametrize("body", [_fences, _ranks, _parity], ids=lambda f: f.__name__[1:])
def test_form_traces_and_verifies(body):
    k = _kernel(body, "form" + body.__name__)
    text = k.ptx()
    assert k.program() is not None and text
    back = ptxdsl.parse_ptx(text).kernels[k.name].program()      # and reads back
    ops = lambda p: sorted(i.match.text for i in p.walk() if i.match.spec.opcode != "bra")  # noqa: E731
    assert ops(back) == ops(k.program())


@needs_ptxas
@pytest.mark.parametrize("body", [_fences, _ranks, _parity], ids=lambda f: f.__name__[1:])
def test_form_assembles(body):
    _kernel(body, "asm" + body.__name__).check()


def test_fence_release_without_a_scope_is_refused_with_the_form():
    with pytest.raises(IsaError, match=r"fence\.release needs a scope"):
        _kernel(lambda X: ptx.inst("fence.release.shared::cta"), "norel").ptx()


def test_shared_array_elsewhere_still_wants_a_register():
    def body(X):
        s = smem.alloc(u32, (4,))
        r = reg.scalar(u32)
        ptx.inst("add.u32", r, s, 1)
    with pytest.raises(ptxdsl.PtxdslError, match=r"can only be taken by mov"):
        _kernel(body, "addsym").ptx()


def test_volatile_after_the_space_is_refused_with_the_order():
    def body(X):
        (px,) = ptx.global_ptrs(X)
        ptx.inst("st.global.volatile.f32", ptx.addr(px), reg.scalar(f32, init=1.0))
    with pytest.raises(IsaError, match=r"\.volatile \(sem\) must come before \.global"):
        _kernel(body, "vol").ptx()
