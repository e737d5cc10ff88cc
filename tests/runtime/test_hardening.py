"""Issue #48's kernel-misuse and launch cases: bodies that would trace to nothing, a
kernel that calls itself, launches no device would start, interpreter dtype advice."""
from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx, reg, smem
from ptxdsl.core.errors import ArchError, LaunchError, PtxdslError, TraceError
from ptxdsl.core.limits import smem_limits
from ptxdsl.core.types import bf16, e4m3, f32, u32

HERE = __file__
SPECS = dict(in_specs=(Tile(32, f32),), out_specs=(Tile(32, f32),), block=(32, 1, 1))


def _at_here(e: PtxdslError) -> None:
    assert e.loc is not None and e.loc.file == HERE, str(e)


# ------------------------------------------------------------------ bodies
def test_generator_body_is_refused():
    with pytest.raises(TraceError, match="generator") as e:
        @kernel(**SPECS)
        def gen(X, Y):
            ptx.inst.ret()
            yield
    _at_here(e.value)


def test_async_body_is_refused():
    with pytest.raises(TraceError, match="async def") as e:
        @kernel(**SPECS)
        async def coro(X, Y):
            ptx.inst.ret()
    _at_here(e.value)


def test_kernel_name_must_be_a_ptx_identifier():
    with pytest.raises(TraceError, match="not a PTX identifier") as e:
        kernel(**SPECS, name="my-kernel")(lambda X, Y: None)
    _at_here(e.value)
    k = kernel(**SPECS)(lambda X, Y: None)          # "<lambda>" spelled for PTX
    assert k.name == "_lambda_" and ".entry _lambda_(" in k.ptx()
    assert k.check().cubin


def _finishes(fn, seconds=30.0):
    """Run ``fn`` in a thread; the exception it raised (a hang fails the test)."""
    box = {}

    def run():
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["e"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "hung"
    return box.get("e")


def test_recursive_kernel_is_a_trace_error_at_the_call():
    @kernel(**SPECS)
    def rec(X, Y):
        rec(X, Y)
    line = rec.defined_at.line + 2
    e = _finishes(rec.ptx)
    assert isinstance(e, TraceError) and "itself" in str(e), e
    assert e.loc.file == HERE and e.loc.line == line
    e = _finishes(lambda: rec.interpret(np.zeros(32, np.float32)))
    assert isinstance(e, TraceError), e


# ------------------------------------------------------------------ limits
def test_fixed_grid_and_block_beyond_every_device_are_refused_at_definition():
    with pytest.raises(TraceError, match="axis x") as e:
        @kernel(in_specs=(), out_specs=(), grid=(2**31, 1, 1))
        def huge():
            pass
    _at_here(e.value)
    with pytest.raises(TraceError, match="axis z"):
        @kernel(in_specs=(), out_specs=(), block=(1, 1, 128))
        def deep():
            pass


def test_grid_function_beyond_the_limits_is_refused_before_the_interpreter_runs():
    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), block=(32, 1, 1),
            grid=lambda N: (N, 70000, 1))
    def wide(X, Y):
        pass
    with pytest.raises(LaunchError, match="axis y") as e:
        wide.interpret(np.zeros(32, np.float32))
    _at_here(e.value)


def test_static_shared_memory_over_the_arch_limit_is_refused_before_running():
    @kernel(**SPECS)
    def big(X, Y):
        s = smem.alloc(f32, ((1 << 30) // 4,))
        s[0] = reg.scalar(f32, init=1.0)
    with pytest.raises(LaunchError, match="static shared memory") as e:
        big.interpret(np.zeros(32, np.float32))
    _at_here(e.value)
    assert smem_limits("sm_90a") == (232448, 232448)
    assert smem_limits("sm_80") == (49152, 166912)


def test_dynamic_shared_memory_over_the_arch_limit_is_refused():
    @kernel(**SPECS, arch="sm_80", extern_smem="dyn", smem=200 * 1024)
    def dyn(X, Y):
        pass
    with pytest.raises(LaunchError, match="dynamic shared memory"):
        dyn.interpret(np.zeros(32, np.float32))


def test_unknown_arch_names_the_definition():
    with pytest.raises(ArchError, match="sm_91") as e:
        @kernel(**SPECS, arch="sm_91")
        def k(X, Y):
            pass
    _at_here(e.value)


# ------------------------------------------------------------------ interpreter arguments
@kernel(in_specs=(Tile(32, bf16),), out_specs=(Tile(32, bf16),), block=(32, 1, 1))
def copy_bf16(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    h = reg.scalar(bf16)
    ptx.inst.ld.global_.b16(h, ptx.addr(px + t * 2))
    ptx.inst.st.global_.b16(ptx.addr(py + t * 2), h)


@kernel(in_specs=(Tile(32, e4m3),), out_specs=(Tile(32, e4m3),), block=(32, 1, 1))
def copy_e4m3(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    t = reg.scalar(u32)
    ptx.inst.mov.u32(t, ptx.special.tid.x())
    b = reg.scalar(u32)
    ptx.inst.ld.global_.u8(b, ptx.addr(px + t))
    ptx.inst.st.global_.u8(ptx.addr(py + t), b)


def test_bf16_advice_names_ml_dtypes_not_a_value_conversion():
    x = np.linspace(-2, 2, 32, dtype=np.float32)
    with pytest.raises(LaunchError) as e:
        copy_bf16.interpret(x)
    msg = str(e.value)
    assert "ml_dtypes.bfloat16" in msg and ".astype(np.uint16)" not in msg, msg
    _at_here(e.value)
    xb = x.astype(ml_dtypes.bfloat16)
    out = np.zeros(32, ml_dtypes.bfloat16)
    copy_bf16.interpret(xb, out)          # ml_dtypes in, written back as values
    assert (out == xb).all()
    assert (copy_bf16.interpret(xb.view(np.uint16)) == xb.view(np.uint16)).all()


def test_fp8_advice_and_ml_dtypes_output_written_as_bits():
    x = np.linspace(-4, 4, 32, dtype=np.float32)
    with pytest.raises(LaunchError, match="ml_dtypes.float8_e4m3fn"):
        copy_e4m3.interpret(x)
    x8 = x.astype(ml_dtypes.float8_e4m3fn)
    out = np.zeros(32, ml_dtypes.float8_e4m3fn)
    copy_e4m3.interpret(x8, out)
    assert (out.view(np.uint8) == x8.view(np.uint8)).all()


@pytest.mark.parametrize("bad", [None, [1.0] * 32, 3.0])
def test_non_arrays_are_named_not_given_astype_advice(bad):
    @kernel(**SPECS)
    def copy(X, Y):
        pass
    with pytest.raises(LaunchError, match="must be a numpy array or a torch tensor") as e:
        copy.interpret(bad)
    assert ".astype" not in str(e.value)
    _at_here(e.value)


# ------------------------------------------------------------------ messages
def test_special_register_without_call_says_call_it():
    @kernel(**SPECS)
    def uncalled(X, Y):
        t = reg.scalar(u32)
        ptx.inst.mov.u32(t, ptx.special.tid.x)
    with pytest.raises(TraceError, match=r"call it, ptx\.special\.tid\.x\(\)") as e:
        uncalled.ptx()
    assert e.value.loc.line == uncalled.defined_at.line + 3

    @kernel(**SPECS)
    def added(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        ptx.inst.st.global_.f32(ptx.addr(px + ptx.special.tid.x), reg.scalar(f32, init=1.0))
    with pytest.raises(TraceError, match=r"call it, ptx\.special\.tid\.x\(\)"):
        added.ptx()

    @kernel(**SPECS)
    def scaled(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        off = ptx.special.tid.x * 4      # the call forgotten inside arithmetic
        ptx.inst.st.global_.f32(ptx.addr(px + off), reg.scalar(f32, init=1.0))
    with pytest.raises(TraceError, match=r"without its call: call it, ptx\.special\.tid\.x\(\)") as e:
        scaled.ptx()
    assert e.value.loc.line == scaled.defined_at.line + 3
    with pytest.raises(TraceError, match=r"call it, ptx\.special\.laneid\(\)"):
        ptx.special.laneid + 1


def test_check_result_repr_is_short():
    @kernel(**SPECS)
    def small(X, Y):
        pass
    r = small.check()
    assert len(repr(r)) < 300 and "bytes>" in repr(r) and "small" in repr(r)


def test_kernel_misuse_is_a_ptxdsl_error_at_the_users_line():
    with pytest.raises(TraceError, match="in_specs takes a tuple of Tiles"):
        @kernel(in_specs=Tile(32, f32), out_specs=(Tile(32, f32),))
        def bare(X, Y):
            pass
    with pytest.raises(TraceError, match=r"version is a \(major, minor\) pair"):
        @kernel(**SPECS, version="8.0")
        def v(X, Y):
            pass

    @kernel(**SPECS)
    def fine(X, Y):
        pass
    with pytest.raises(ArchError, match="sm_91") as e:
        fine.ptx("sm_91")
    _at_here(e.value)
    with pytest.raises(TraceError, match="lines must be") as e:
        fine.ptx(lines="xyz")
    _at_here(e.value)


def test_wgmma_tiles_with_16_byte_rows_get_a_tma_and_swizzles_match_the_docs():
    from ptxdsl.isa.descriptors import swizzle_offset
    t = Tile.wgmma_b(16, 8, bf16)
    assert t.tma is not None and t.tma.swizzle == 0 and t.tma.box == (128, 8) and t.tma.clamp
    assert Tile.wgmma_a(64, 16, bf16).tma.box == (128, 16)
    for span, low, high in ((32, [4], [7]), (64, [4, 5], [7, 8]), (128, [4, 5, 6], [7, 8, 9])):
        for o in range(0, 4 * span * 8, 16):
            want = o
            for lo, hi in zip(low, high):
                want ^= ((o >> hi) & 1) << lo
            assert swizzle_offset(o, span) == want, (span, o)


@pytest.mark.parametrize("kw", [dict(max_steps="x"), dict(max_steps=0), dict(max_seconds=-1),
                                dict(max_steps=True)])
def test_interpreter_budgets_are_checked(kw):
    from ptxdsl.core.errors import LaunchError

    @kernel(**SPECS)
    def plain(X, Y):
        ptx.inst.exit()
    x = np.zeros(32, np.float32)
    with pytest.raises(LaunchError, match=f"{next(iter(kw))} must be a positive number") as e:
        plain.interpret(x, **kw)
    assert e.value.loc.file == __file__
