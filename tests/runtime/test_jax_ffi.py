"""ptxdsl kernels on jax arrays (ptxdsl.runtime.jax_ffi): the CPU path (a pure_callback
through the interpreter) inside jax.jit and jax.vmap, the output shapes from the Tiles,
and the FFI handler's C-API structures checked against jaxlib's c_api.h. The GPU path:
tests/gpu/test_jax_gpu.py."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from jax_kernels import axpy2, widen_and_copy  # noqa: E402
from ptxdsl.core.errors import TraceError  # noqa: E402
from ptxdsl.runtime import jax_ffi  # noqa: E402

pytestmark = pytest.mark.skipif(jax.default_backend() == "gpu",
                                reason="the CPU path; the GPU one is tests/gpu/test_jax_gpu.py")


def test_inside_jit_and_vmap_on_the_interpreter():
    f = jax_ffi.jax_call(axpy2)
    x = jnp.arange(200, dtype=jnp.float32)
    y = jnp.full(200, 0.5, jnp.float32)
    got = jax.jit(lambda a, b: f(a, b) + 1.0)(x, y)
    np.testing.assert_allclose(np.asarray(got), 2 * np.arange(200) + 1.5)
    batched = jax.vmap(f)(jnp.stack([x, y]), jnp.stack([y, x]))
    np.testing.assert_allclose(np.asarray(batched[1]), 2 * 0.5 + np.arange(200))


@pytest.mark.long
def test_bf16_inputs_and_several_outputs():
    x = (jnp.arange(2 * 64, dtype=jnp.float32) / 8).reshape(2, 64).astype(jnp.bfloat16)
    wide, same = jax.jit(jax_ffi.jax_call(widen_and_copy))(x)
    assert wide.dtype == jnp.float32 and same.dtype == jnp.bfloat16 and same.shape == (2, 64)
    np.testing.assert_array_equal(np.asarray(wide), np.asarray(x, np.float32))
    np.testing.assert_array_equal(np.asarray(same, np.float32), np.asarray(x, np.float32))


def test_shapes_are_checked_against_the_tiles():
    f = jax_ffi.jax_call(axpy2)
    with pytest.raises(TraceError, match="dim N is 8 and 9"):
        f(jnp.zeros(8, jnp.float32), jnp.zeros(9, jnp.float32))
    with pytest.raises(TraceError, match="takes 2 input"):
        f(jnp.zeros(8, jnp.float32))


def test_the_metadata_query_is_answered():
    api = jax_ffi._Api(ctypes.sizeof(jax_ffi._Api), None,
                       jax_ffi._Version(ctypes.sizeof(jax_ffi._Version), None, 0, 7))
    md = jax_ffi._Metadata(ctypes.sizeof(jax_ffi._Metadata))
    ext = jax_ffi._MetadataExt(jax_ffi._Ext(ctypes.sizeof(jax_ffi._MetadataExt), 1, None),
                               ctypes.pointer(md))
    frame = jax_ffi._CallFrame(ctypes.sizeof(jax_ffi._CallFrame), ctypes.addressof(ext),
                               ctypes.addressof(api))
    assert jax_ffi._HANDLER(ctypes.addressof(frame)) is None
    assert (md.api_version.major, md.api_version.minor, md.traits) == (0, 7, 0)


_FIELDS = {"XLA_FFI_CallFrame": ("_CallFrame", ["api", "ctx", "stage", "args", "rets",
                                                "attrs", "future"]),
           "XLA_FFI_Buffer": ("_Buffer", ["dtype", "data", "rank", "dims"]),
           "XLA_FFI_Args": ("_List", ["size", "types"]),
           "XLA_FFI_Attrs": ("_Attrs", ["size", "types", "names", "attrs"]),
           "XLA_FFI_Metadata": ("_Metadata", ["api_version", "traits", "state_type_id"]),
           "XLA_FFI_Api": ("_Api", ["api_version", "internal_api", "XLA_FFI_Error_Create",
                                    "XLA_FFI_Stream_Get"]),
           "XLA_FFI_Stream_Get_Args": ("_StreamGetArgs", ["ctx", "stream"]),
           "XLA_FFI_Error_Create_Args": ("_ErrorCreateArgs", ["message", "errc"])}
_OURS = {"XLA_FFI_Error_Create": "error_create", "XLA_FFI_Stream_Get": "stream_get",
         "types": "types"}


def test_the_handlers_structures_match_c_api_h(tmp_path):
    cc = shutil.which("cc")
    include = jax.ffi.include_dir()
    if cc is None or not os.path.isfile(os.path.join(include, "xla/ffi/api/c_api.h")):
        pytest.skip("needs a C compiler and jaxlib's FFI headers")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "xla/ffi/api/c_api.h"',
             "int main(void) {"]
    for cname, (_, fields) in _FIELDS.items():
        for f in fields:
            lines.append(f'printf("{cname} {f} %zu\\n", offsetof({cname}, {f}));')
    lines += ["return 0; }"]
    src = tmp_path / "offsets.c"
    src.write_text("\n".join(lines))
    subprocess.run([cc, "-I", include, str(src), "-o", str(tmp_path / "offsets")], check=True)
    out = subprocess.run([str(tmp_path / "offsets")], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        cname, field, off = line.split()
        ours = getattr(jax_ffi, _FIELDS[cname][0])
        name = {"args": "args", "rets": "rets"}.get(field, _OURS.get(field, field))
        if cname == "XLA_FFI_Args" and field == "types":
            name = "types"
        assert getattr(ours, name).offset == int(off), (cname, field)
