"""Entry options (cluster, raw directives, extern shared memory, smem, raw params) and the
parameter/special-register helpers pyptx's Hopper kernels use."""
from __future__ import annotations

import pytest

from ptxdsl import Tile, kernel, ptx, reg
from ptxdsl.core.errors import OperandTypeError, TraceError
from ptxdsl.core.types import bf16, f32, u32, u64


def hopper_entry(**kw):
    opts = dict(arch="sm_90a", version=(8, 7), cluster=(2, 1, 1),
                raw_params=[("u32", "M"), ("u32", "K")], extern_smem="smem", smem=200_000,
                raw_directives=[("maxntid", (384, 1, 1)), ("explicitcluster", ()),
                                ("reqnctapercluster", (2, 1, 1))])
    opts.update(kw)

    @kernel(in_specs=(Tile("M", "K", bf16),), out_specs=(Tile("M", f32),), grid=(2, 1, 1),
            block=(384, 1, 1), **opts)
    def k(A, C):
        K = ptx.param(u32, "K")
        rank = reg.scalar(u32)
        ptx.inst.mov.u32(rank, ptx.sreg("%clusterid.x"))
        base = reg.scalar(u32)
        ptx.inst.mov.u32(base, "smem")
        ptx.inst.st.shared.u32(ptx.addr(base, 64), rank + K)
    return k


def test_hopper_entry_prints_and_assembles():
    k = hopper_entry()
    text = k.ptx()
    assert ".version 8.7" in text
    assert ".extern .shared .align 128 .b8 smem[];" in text
    head = text[text.index(".visible .entry"):text.index("{")]
    assert head.rstrip().endswith(".maxntid 384, 1, 1\n.explicitcluster\n.reqnctapercluster 2, 1, 1")
    assert "ld.param.u32 %r0, [K_dim];" in text
    assert "mov.u32 %r1, %clusterid.x;" in text and "mov.u32 %r2, smem;" in text
    assert k.cluster == (2, 1, 1) and k.dynamic_shared == 200_000
    k.check()


@pytest.mark.parametrize("kw, match", [
    (dict(cluster=(4, 4, 2)), "at most 16"),
    (dict(cluster=(2, 0)), "ints >= 1"),
    (dict(arch="sm_80", version=None, cluster=(2, 1, 1), raw_directives=()), "sm_90"),
    (dict(raw_directives=[("launch_bounds", (1,))]), "not a PTX entry directive"),
    (dict(raw_directives=[("maxntid", (128, 1, 1))]), "fewer threads than block"),
    (dict(raw_directives=[("explicitcluster", (1,))]), "takes no values"),
    (dict(raw_directives=[("reqnctapercluster", (4, 1, 1))]), "differs from cluster"),
    (dict(cluster=None, raw_directives=[("explicitcluster", ())]), "give cluster="),
    (dict(raw_directives=[("maxntid", (384,)), ("maxntid", (384,))]), "given twice"),
    (dict(extern_smem="smem", smem=None), "needs smem=BYTES"),
    (dict(smem=300_000), "227 KiB"),
    (dict(extern_smem="1smem"), "PTX identifier"),
    (dict(raw_params=[("q32", "Q")]), "not a scalar type"),
    (dict(raw_params=[("u64", "M")]), "32-bit"),
    (dict(maxntid=True), "give them one way"),
])
def test_entry_options_are_checked_at_definition(kw, match):
    with pytest.raises(TraceError, match=match):
        hopper_entry(**kw)


def test_unknown_symbol_and_special_register_are_named():
    @kernel(block=(32, 1, 1))
    def k1():
        r = reg.scalar(u32)
        ptx.inst.mov.u32(r, "nosuch")
    with pytest.raises(OperandTypeError, match="'nosuch' names no shared array"):
        k1.ptx()

    @kernel(block=(32, 1, 1))
    def k2():
        ptx.sreg("%clusterid.w")
    with pytest.raises(TraceError, match=r"did you mean %clusterid"):
        k2.ptx()

    @kernel(block=(32, 1, 1), arch="sm_80")
    def k3():
        ptx.sreg("%cluster_ctarank")
    with pytest.raises(TraceError, match="sm_90"):
        k3.ptx()


def test_param_reads_dims_pointers_and_refuses_wrong_widths():
    @kernel(in_specs=(Tile("N", f32),), block=(32, 1, 1))
    def k(X):
        ptx.param(u32, "N")
        ptx.param(u64, "X")
    text = k.ptx()
    assert "ld.param.u32 %r0, [N_dim];" in text and "ld.param.u64 %rd0, [X_ptr];" in text

    @kernel(in_specs=(Tile("N", f32),), block=(32, 1, 1))
    def bad(X):
        ptx.param(u64, "N")
    with pytest.raises(TraceError, match="N_dim is .u32"):
        bad.ptx()


def test_smem_too_small_for_a_dynamic_array():
    from ptxdsl import smem

    @kernel(block=(32, 1, 1), smem=1024)
    def k():
        smem.alloc(f32, (512,), dynamic=True)
    with pytest.raises(TraceError, match="smem=1024 bytes but the dynamic shared array"):
        k.ptx()
