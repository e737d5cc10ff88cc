"""pyptx spellings over what ptxdsl has: calling a kernel without specs, raw parameters
that name no dim (scalars and arrays), tcgen05.cp's size with its multicast."""
from __future__ import annotations

import pytest

from ptxdsl import Tile, kernel, ptx, reg, toolchain
from ptxdsl.core.errors import LaunchError, NoSpecsError, TraceError
from ptxdsl.core.types import b32, b64, f32, u32

PTXAS = toolchain.find_ptxas()


def test_calling_a_kernel_without_specs_raises_before_any_driver(monkeypatch):
    @kernel
    def nothing():
        ptx.ret()

    # pyptx raises NotImplementedError naming in_specs; no driver is looked for first,
    # and PTXDSL_INTERPRET does not change that
    for interp in ("0", "1"):
        monkeypatch.setenv("PTXDSL_INTERPRET", interp)
        with pytest.raises(NotImplementedError, match="no in_specs or out_specs") as e:
            nothing()
        assert isinstance(e.value, NoSpecsError) and isinstance(e.value, LaunchError)
        assert __file__ in str(e.value)     # the caller's line
    assert "ret;" in nothing.ptx() and nothing.interpret() is None


def test_raw_params_that_name_no_dim_are_declared_and_read():
    @kernel(in_specs=(Tile("N", f32),), block=(32, 1, 1),
            raw_params=[("u32", "N"), ("u32", "K"), ("s64", "off"),
                        ("b8.align64.array128", "blob")])
    def k(X):
        n = ptx.param(u32, "N")          # a named dim: N_dim, filled from X's shape
        kv = ptx.param(u32, "K")         # declared as given, after the specs' parameters
        off = ptx.param(b64, "off")
        addr = ptx.param(b64, "blob")    # an array: its address, mov.b64 %rd, blob
        s = reg.scalar(u32, init=0)
        ptx.inst.add.u32(s, n, kv)
        t = reg.scalar(b64, init=0)
        ptx.inst.add.s64(t, off, addr)
    text = k.ptx()
    params = text[text.index("(") + 1:text.index(")")]
    assert [ln.strip().rstrip(",") for ln in params.strip().splitlines()] == [
        ".param .u64 X_ptr", ".param .u32 N_dim", ".param .u32 K", ".param .s64 off",
        ".param .align 64 .b8 blob[128]"]
    assert "ld.param.u32 %r0, [N_dim];" in text and "ld.param.u32 %r1, [K];" in text
    assert "mov.b64 %rd1, blob;" in text and "[blob]" not in text
    if PTXAS is not None:
        k.check()
    # the launcher takes their values by keyword (tests/runtime/test_raw_params_launch.py)
    from ptxdsl.runtime.args import KernelSignature
    assert KernelSignature.of(k, k.program()).raw_names == ("K", "off", "blob")


@pytest.mark.parametrize("raw, match", [
    ([("u64", "N")], "32-bit"),                       # a named dim's parameter is .u32
    ([("q32", "K")], "not a scalar type"),
    ([("b8.align64", "K")], "not a scalar type"),     # an alignment without an array
    ([("u32", "K"), ("u32", "K")], "given twice"),
    ([("u32", "1K")], "PTX identifier"),
    ([("b8.align48.array128", "K")], "power-of-two"),
])
def test_raw_params_are_checked_at_definition(raw, match):
    with pytest.raises(TraceError, match=match):
        kernel(in_specs=(Tile("N", f32),), raw_params=raw)(lambda X: None)


@pytest.mark.parametrize("name", ["X_ptr", "N_dim", "X_tmap"])
def test_raw_param_named_like_a_spec_parameter_is_refused(name):
    @kernel(in_specs=(Tile("N", f32),), raw_params=[("u64", name)])
    def k(X):
        ptx.ret()
    with pytest.raises(TraceError, match=f"'{name}' is also the name of a parameter"):
        k.ptx()


def test_tcgen05_cp_takes_the_multicast_inside_size():
    def body(**kw):
        @kernel(arch="sm_100a")
        def k():
            t = reg.scalar(b32, init=0)
            d = reg.scalar(b64, init=0)
            ptx.tcgen05.cp(t, d, **kw)
        return k.ptx()
    theirs = body(size="64x128b.warpx2::02_13")
    assert "tcgen05.cp.cta_group::1.64x128b.warpx2::02_13 [%r0], %rd0;" in theirs
    assert theirs == body(size="64x128b", multicast="warpx2::02_13")
    with pytest.raises(TraceError, match="warpx2"):
        body(size="64x128b.warpx9")
