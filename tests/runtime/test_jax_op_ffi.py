"""The ops' jax path (ptxdsl.runtime.jax_op_ffi) without a GPU: lowered for CUDA each op
call is one ``ptxdsl_op`` FFI custom call (no host callback), and the FFI handler runs
the op named by its JSON attribute into XLA's result buffers (here host buffers viewed
as torch CPU tensors, so the op runs on the interpreter). On the GPU:
tests/gpu/test_jax_gpu.py."""
from __future__ import annotations

import ctypes
import functools
import json

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from jax import export  # noqa: E402

from fake_xla import attrs_struct, call_frame, fake_api  # noqa: E402
from ptxdsl.runtime import jax_ffi, jax_op_ffi, jax_ops  # noqa: E402


def _cuda_module(f, *shapes) -> str:
    exp = export.export(jax.jit(f), platforms=["cuda"], disabled_checks=[
        export.DisabledSafetyCheck.custom_call(jax_op_ffi.OP_TARGET)])(*shapes)
    return exp.mlir_module()


def _specs(text: str) -> list[dict]:
    out = []
    for chunk in text.split("custom_call @ptxdsl_op(")[1:]:
        raw = chunk.split('ptxdsl_op = "', 1)[1].split('"}', 1)[0]
        out.append(json.loads(raw.replace("\\22", '"')))
    return out


def test_cuda_lowering_is_one_ffi_call_per_op_call():
    # without torch the CUDA lowering is the host callback, which jax on a CPU backend
    # cannot export for CUDA
    pytest.importorskip("torch")
    x = jax.ShapeDtypeStruct((4, 64), jnp.float32)
    w = jax.ShapeDtypeStruct((64,), jnp.float32)
    text = _cuda_module(jax.grad(lambda a, b: jnp.sum(jax_ops.rms_norm(a, b, offset=1.0)),
                                 argnums=(0, 1)), x, w)
    assert "callback" not in text            # nothing through the host
    assert [s["op"] for s in _specs(text)] == ["rms_norm", "rms_norm_backward"]
    assert _specs(text)[0]["params"] == {"eps": 1e-6, "offset": 1.0}
    a = jax.ShapeDtypeStruct((16, 32), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((32, 8), jnp.bfloat16)
    text = _cuda_module(jax.grad(lambda p, q: jnp.sum(jax_ops.matmul(p, q,
                                                                     out_dtype=jnp.float32) ** 2),
                                 argnums=(0, 1)), a, b)
    assert [s["params"]["out_dtype"] for s in _specs(text)] == ["float32", None, None]
    q = jax.ShapeDtypeStruct((1, 64, 2, 64), jnp.bfloat16)
    text = _cuda_module(lambda *t: jax_ops.attention(*t, causal=True, window_size=(8, 0)),
                        q, q, q)
    (spec,) = _specs(text)
    assert spec == {"op": "attention", "params": {"causal": True, "softmax_scale": None,
                                                  "window_size": [8, 0], "softcap": 0.0}}


def _host_tensors(torch, bufs):
    """XLA buffers in host memory as torch CPU tensors (what _tensors does on the GPU)."""
    out = []
    for b in bufs:
        dt = np.dtype(jax_ffi._DTYPES[b.dtype])
        shape = tuple(b.dims[i] for i in range(b.rank))
        n = int(np.prod(shape)) * dt.itemsize
        raw = (ctypes.c_char * n).from_address(b.data)
        out.append(torch.from_numpy(np.frombuffer(raw, dt).reshape(shape)))
    return out


def _frame(handler, attrs, ins, outs):
    """Call ``handler`` as XLA would, with numpy arrays as the buffers; its error or None."""
    errors, keep = [], []

    def buf(a):
        dims = (ctypes.c_int64 * a.ndim)(*a.shape)
        keep.append(dims)
        code = {v: k for k, v in jax_ffi._DTYPES.items()}[a.dtype.name]
        b = jax_ffi._Buffer(ctypes.sizeof(jax_ffi._Buffer), None, code, a.ctypes.data, a.ndim,
                            dims)
        keep.append(b)
        return ctypes.addressof(b)

    api, _callbacks = fake_api(errors)
    a, keep_a = attrs_struct(attrs)
    lists = [(ctypes.c_void_p * len(xs))(*map(buf, xs)) for xs in (ins, outs)]
    frame = call_frame(api, lists[0], lists[1], a)
    handler(ctypes.addressof(frame))
    return errors[0] if errors else None


def test_the_handler_runs_the_op_into_the_result_buffers():
    torch = pytest.importorskip("torch")
    import contextlib
    handler = jax_ffi.make_handler("ptxdsl op", functools.partial(
        jax_op_ffi.execute, tensors=_host_tensors,
        on_stream=lambda *_: contextlib.nullcontext()))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    y, rstd = np.full_like(x, np.nan), np.full(3, np.nan, np.float32)
    spec = json.dumps({"op": "rms_norm", "params": {"eps": 1e-6, "offset": 0.0}})
    assert _frame(handler, {"ptxdsl_op": spec}, [x, w], [y, rstd]) is None
    r = 1 / np.sqrt(np.mean(x * x, -1) + 1e-6)
    np.testing.assert_allclose(rstd, r, rtol=1e-5)
    np.testing.assert_allclose(y, x * r[:, None] * w, rtol=1e-5, atol=1e-6)
    assert torch is not None
    bad = json.dumps({"op": "softmax", "params": {}})
    err = _frame(handler, {"ptxdsl_op": bad}, [x], [y])
    assert err.startswith("ptxdsl op failed: PtxdslError: ptxdsl_op: no op 'softmax'")
    assert "has no ptxdsl_op attribute" in _frame(handler, {"other": "x"}, [x], [y])


def test_matmul_writes_its_out_dtype_into_the_result_buffer():
    """jax_ops.matmul(out_dtype=float32) on bf16 operands: the result buffer XLA hands the
    handler is float32, and the op must be told that dtype as well as the buffer (the
    H200 run of tests/gpu/test_jax_gpu.py failed with 'out's dtype must be out_dtype')."""
    torch = pytest.importorskip("torch")
    a = torch.arange(16 * 16, dtype=torch.float32).reshape(16, 16).remainder(7).to(torch.bfloat16)
    b = torch.eye(16, dtype=torch.bfloat16)
    out = torch.full((16, 16), float("nan"), dtype=torch.float32)
    jax_op_ffi.run_op("matmul", {"out_dtype": "float32"}, [a, b], outs=[out])
    assert torch.equal(out, a.float())
