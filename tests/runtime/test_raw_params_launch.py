"""Raw parameters that name no dim, launched on a (fake) GPU: their values come by keyword
as on the interpreter (``k(x, scale=0.5, ...)``), are checked the same way and packed into
the parameter buffer at their place in the kernel's parameter list. The real GPU:
tests/gpu/test_raw_params_gpu.py."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from ptxdsl import Tile, kernel, ptx
from ptxdsl.core.entry import raw_values
from ptxdsl.core.errors import LaunchError
from ptxdsl.runtime.args import Binding, KernelSignature
from ptxdsl.runtime.fastpath import ParamLayout
from ptxdsl.types import b64, f32, u32
from raw_param_kernels import affine_impl, make_affine
from runtime_fakes import f32_array


def test_the_buffer_holds_each_raw_value_at_its_parameter():
    k = make_affine()
    prog = k.program()
    sig = KernelSignature.of(k, prog)
    assert sig.raw_names == ("scale", "shift", "pair", "tag")
    raw = raw_values(k.name, sig.raw, dict(scale=0.5, shift=-2, pair=bytes(range(8)),
                                           tag=2 ** 64 - 1), None)
    layout = ParamLayout(prog.params)
    buf, arr = layout.buffer(layout.values([0x1000, 0x2000], Binding({"N": 7}, {}, 0), raw=raw))
    got = {}
    for k_, p in enumerate(prog.params):   # read back at the address kernelParams gives
        a = int(arr[k_])
        got[p.name] = ctypes.string_at(a, p.nbytes)
    assert [p.name for p in prog.params] == ["X_ptr", "Y_ptr", "N_dim", "scale", "shift",
                                             "pair", "tag"]
    assert got["N_dim"] == (7).to_bytes(4, "little")
    assert got["scale"] == np.float32(0.5).tobytes()
    assert got["shift"] == np.int32(-2).tobytes()
    assert got["pair"] == bytes(range(8)) and int(arr[5]) % 8 == 0   # .align 8
    assert got["tag"] == b"\xff" * 8


def test_a_launch_takes_raw_values_by_keyword_like_the_interpreter(gpu):
    k = make_affine("affine_launch")
    gpu.cu.register(k, affine_impl)
    x = np.arange(20, dtype=np.float32)
    pair = np.array([10, 3], np.int32)
    y = k(x, scale=0.5, shift=-2, pair=pair.tobytes(), tag=5)
    np.testing.assert_array_equal(y, x * 0.5 + (-2 + 10 - 3))
    np.testing.assert_array_equal(y, k.interpret(x, scale=0.5, shift=-2, pair=pair, tag=5))
    rec = gpu.cu.launches[-1]
    assert rec["params"][2:] == [20, 0.5, 2 ** 32 - 2, pair.tobytes(), 5]
    y2 = np.empty_like(x)
    k(x, y2, scale=2.0, shift=1, pair=pair, tag=0)     # new values: no stale entry
    np.testing.assert_array_equal(y2, x * 2 + (1 + 10 - 3))


@pytest.mark.parametrize("kw, match", [
    (dict(shift=0, pair=bytes(8), tag=0), r"raw parameter scale \(\.f32\) names no dim.*"
                                          r"affine_e\(\.\.\., scale=\.\.\.\)"),
    (dict(scale=1.0, shift=2 ** 31, pair=bytes(8), tag=0), r"shift \(\.s32\) takes an int in "
                                                           r"\[-2147483648, 2147483647\]"),
    (dict(scale=1.0, shift=0, pair=bytes(4), tag=0), r"pair \(\.b8 \[8\], 8 bytes\) takes a "
                                                     r"bytes-like value of exactly 8 bytes"),
    (dict(scale=1.0, shift=0, pair=bytes(8), tag=-1), r"tag \(\.u64\) takes an int in"),
    (dict(scale=1.0, shift=0, pair=bytes(8), tag=0, K=1), r"unknown keyword argument\(s\) K.*"
                                                          r"raw parameters by keyword \(scale, "
                                                          r"shift, pair, tag\)"),
])
def test_launch_errors_name_the_parameter_at_the_callers_line(gpu, kw, match):
    k = make_affine("affine_e")
    gpu.cu.register(k, affine_impl)
    with pytest.raises(LaunchError, match=match) as e:
        k(np.ones(4, np.float32), **kw)
    assert __file__ in str(e.value)
    assert not gpu.cu.launches


def test_without_a_driver_the_raw_values_are_still_checked_first(monkeypatch):
    from ptxdsl.runtime import hostcheck
    k = make_affine("affine_pre")
    with pytest.raises(LaunchError, match="raw parameter tag .* names no dim") as e:
        hostcheck.precheck(k, (np.ones(4, np.float32),), dict(scale=1.0, shift=0,
                                                               pair=bytes(8)))
    assert __file__ in str(e.value)


def test_a_raw_parameter_may_not_take_a_launch_options_name():
    @kernel(in_specs=(Tile("N", f32),), raw_params=[("u32", "stream")])
    def k(X):
        ptx.param(u32, "stream")
    with pytest.raises(LaunchError, match="raw parameter stream has the name of a launch "
                                          "option"):
        KernelSignature.of(k, k.program())


def test_a_jax_call_carries_the_raw_values_to_the_launch(gpu, monkeypatch):
    jax = pytest.importorskip("jax")
    from ptxdsl.runtime import jax_export, jax_ffi
    monkeypatch.setattr(jax_export, "_LOADED", {})
    k = make_affine("affine_jax")
    gpu.cu.register(k, affine_impl)
    spec = jax.ShapeDtypeStruct((40,), np.float32)
    raw = dict(scale=0.25, shift=-3, pair=np.array([1, 2], np.int32), tag=9)
    attrs = jax_export.launch_attributes(k, [spec], [spec], key=5, raw=raw)
    assert jax_export.parse_raw(attrs["ptxdsl_raw"].encode()) == dict(
        scale=0.25, shift=-3, pair=np.array([1, 2], np.int32).tobytes(), tag=9)
    assert "ptxdsl_launch" not in attrs      # an array parameter: the handler has the kernel
    # the handler calls the registered kernel with them by keyword
    seen = []
    monkeypatch.setattr(jax_ffi, "_REGISTRY", {5: lambda *bufs, **kw: seen.append(kw)})
    dims = (ctypes.c_int64 * 1)(40)
    bufs = [jax_ffi._Buffer(ctypes.sizeof(jax_ffi._Buffer), None, 11, p, 1, dims)
            for p in (0x1000, 0x2000)]
    jax_ffi._launch({"ptxdsl_kernel": 5, "ptxdsl_raw": attrs["ptxdsl_raw"].encode()},
                    bufs[:1], bufs[1:], 77)
    assert seen == [dict(stream=77, scale=0.25, shift=-3, tag=9,
                         pair=np.array([1, 2], np.int32).tobytes())]
    with pytest.raises(LaunchError, match="tag .* names no dim"):
        jax_export.launch_attributes(k, [spec], [spec], key=5, raw=dict(scale=1.0, shift=0,
                                                                       pair=bytes(8)))


def test_a_recipe_holds_the_raw_scalars(gpu):
    jax = pytest.importorskip("jax")
    import json
    from ptxdsl.runtime import jax_export

    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), block=(32, 1, 1),
            name="scaled", raw_params=[("f32", "scale"), ("s64", "bias")])
    def scaled(X, Y):
        ptx.param(f32, "scale")
        ptx.param(b64, "bias")
    gpu.cu.register(scaled)
    spec = jax.ShapeDtypeStruct((8,), np.float32)
    attrs = jax_export.launch_attributes(scaled, [spec], [spec], key=3,
                                         raw=dict(scale=1.5, bias=-7))
    recipe = json.loads(attrs["ptxdsl_launch"])
    assert recipe["values"] == [None, None, 8, 1.5, -7]
    assert recipe["codes"][-2:] == ["f", "q"]


def test_raw_values_are_part_of_the_fast_path_key(gpu, torch):
    from launch_helpers import count_slow
    from ptxdsl.runtime import launcher as rlaunch
    k = make_affine("affine_fast")
    gpu.cu.register(k, affine_impl)
    launcher = rlaunch.prepare(k)
    misses = count_slow(launcher)
    x = torch.tensor_on(np.arange(64, dtype=np.float32))
    kw = dict(scale=0.5, shift=-2, pair=bytes(8), tag=1)
    for _ in range(3):
        y = k(x, **kw)
    assert len(misses) == 1 and len(launcher.entries) == 1      # then fast
    np.testing.assert_array_equal(y.numpy(), x.numpy() * 0.5 - 2)
    y = k(x, **dict(kw, shift=3))                                # new values: a new entry
    np.testing.assert_array_equal(y.numpy(), x.numpy() * 0.5 + 3)
    k(x, **dict(kw, shift=3))
    assert len(misses) == 2 and len(launcher.entries) == 2
    y = k(x, **dict(kw, scale=1))                                # 1 is not 1.0: its own entry
    np.testing.assert_array_equal(y.numpy(), x.numpy() - 2)
    assert len(misses) == 3
    k(x, **kw)                                                   # the first entry again
    assert len(misses) == 3 and gpu.cu.launches[-1]["params"][3:5] == [0.5, 2 ** 32 - 2]
    with pytest.raises(LaunchError, match="shift .* takes an int"):
        k(x, **dict(kw, shift=2.5))                              # checked on the general path
    k(x, **dict(kw, pair=np.zeros(2, np.int32)))                 # unhashable: general path
    assert len(misses) == 5
