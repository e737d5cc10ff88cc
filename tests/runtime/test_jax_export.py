"""The self-contained FFI call (ptxdsl.runtime.jax_export) on a fake GPU: the launch
recipe a jax_call carries, the FFI handler reading its attributes (int64, uint8 array,
string) and launching a kernel this process has no object of from the recipe, the image
loaded once. The real round trip (jax.export, serialize, deserialize, call in a fresh
process): tests/gpu/test_jax_gpu.py."""
from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from fake_xla import attrs_struct, call_frame, fake_api  # noqa: E402
from launch_helpers import vadd_on  # noqa: E402
from ptxdsl.runtime import jax_export, jax_ffi  # noqa: E402
from runtime_fakes import f32_array  # noqa: E402


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(jax_export, "_LOADED", {})
    monkeypatch.setattr(jax_ffi, "_REGISTRY", {})


def _buffers(gpu, n, values):
    gpu.drv.enter(0)
    ptrs = [gpu.drv.mem_alloc(4 * n) for _ in values]
    for p, v in zip(ptrs, values):
        f32_array(p, n)[:] = v
    return ptrs


def test_the_recipe_has_every_constant_of_the_launch(gpu, fresh):
    k = vadd_on(gpu)
    spec = jax.ShapeDtypeStruct((300,), np.float32)
    attrs = jax_export.launch_attributes(k, [spec, spec], [spec], key=7)
    assert int(attrs["ptxdsl_kernel"]) == 7 and attrs["ptxdsl_image"].dtype == np.uint8
    recipe = json.loads(attrs["ptxdsl_launch"])
    assert recipe["format"] == jax_export.FORMAT and recipe["name"] == "vadd"
    assert recipe["grid"] == list(k.grid_for({"N": 300})) and recipe["block"] == list(k.block)
    assert recipe["values"] == [None, None, None, 300]     # three pointers, then N
    assert recipe["image"] == "ptx"                        # the fixture has no ptxas


def test_the_handler_launches_an_exported_call_from_its_recipe(gpu, fresh):
    k = vadd_on(gpu)
    n = 300
    spec = jax.ShapeDtypeStruct((n,), np.float32)
    attrs = jax_export.launch_attributes(k, [spec, spec], [spec], key=11)
    ptrs = _buffers(gpu, n, [np.arange(n), 0.5, 0.0])
    dims = (ctypes.c_int64 * 1)(n)
    bufs = [jax_ffi._Buffer(ctypes.sizeof(jax_ffi._Buffer), None, 11, p, 1, dims)
            for p in ptrs]
    items = [(ctypes.c_void_p * 2)(*(ctypes.addressof(b) for b in bufs[:2])),
             (ctypes.c_void_p * 1)(ctypes.addressof(bufs[2]))]
    errors = []

    api, _callbacks = fake_api(errors)
    a, keep = attrs_struct(attrs)
    loads = len(gpu.cu.loads)
    for _ in range(2):
        frame = call_frame(api, items[0], items[1], a)
        assert jax_ffi._HANDLER(ctypes.addressof(frame)) is None, errors
    assert len(gpu.cu.loads) == loads + 1                 # the image is loaded once
    np.testing.assert_array_equal(f32_array(ptrs[2], n), np.arange(n) + 0.5)
    assert gpu.cu.launches[-1]["params"][3] == n and gpu.cu.launches[-1]["name"] == "vadd"

    a, keep2 = attrs_struct({"ptxdsl_kernel": 12})      # no recipe, no kernel object
    frame = call_frame(api, items[0], items[1], a)
    assert jax_ffi._HANDLER(ctypes.addressof(frame)) == 1
    assert "no kernel with content hash 12" in errors[-1] and "launch recipe" in errors[-1]
