"""XLA's side of an FFI call, faked in ctypes for the jax FFI handlers' CPU tests: the
attributes struct XLA builds, its API table (stream and error callbacks) and a call frame."""
from __future__ import annotations

import ctypes

import numpy as np

from ptxdsl.runtime import jax_ffi


def attrs_struct(attrs: dict):
    """An XLA_FFI_Attrs as XLA builds it (kept alive by the returned list)."""
    keep, names, types, ptrs = [], [], [], []
    for name, v in attrs.items():
        raw = name.encode()
        keep.append(raw)
        span = jax_ffi._Span(ctypes.cast(ctypes.c_char_p(raw), ctypes.c_void_p), len(raw))
        keep.append(span)
        names.append(ctypes.pointer(span))
        if isinstance(v, (int, np.integer)):
            val = ctypes.c_int64(int(v))
            item = jax_ffi._Scalar(jax_ffi._S64, ctypes.cast(ctypes.pointer(val),
                                                               ctypes.c_void_p))
            keep.append(val)
            types.append(jax_ffi._SCALAR)
        elif isinstance(v, np.ndarray):
            data = np.ascontiguousarray(v)
            item = jax_ffi._Array(jax_ffi._U8, data.size, data.ctypes.data)
            keep.append(data)
            types.append(jax_ffi._ARRAY)
        else:
            raw = v.encode()
            keep.append(raw)
            item = jax_ffi._Span(ctypes.cast(ctypes.c_char_p(raw), ctypes.c_void_p), len(raw))
            types.append(jax_ffi._STRING)
        keep.append(item)
        ptrs.append(ctypes.addressof(item))
    n = len(attrs)
    a = jax_ffi._Attrs(ctypes.sizeof(jax_ffi._Attrs), None, n, (ctypes.c_int * n)(*types),
                       (ctypes.POINTER(jax_ffi._Span) * n)(*names),
                       (ctypes.c_void_p * n)(*ptrs))
    keep += [a._objects]
    return a, keep


def fake_api(errors: list):
    """``(api, keep)``: an XLA_FFI_Api whose stream is 0 and whose error messages are
    appended to ``errors`` (``keep`` holds the callbacks alive)."""
    @jax_ffi._CALL
    def stream_get(addr):
        jax_ffi._StreamGetArgs.from_address(addr).stream = 0
        return None

    @jax_ffi._CALL
    def error_create(addr):
        errors.append(jax_ffi._ErrorCreateArgs.from_address(addr).message.decode())
        return 1

    api = jax_ffi._Api(ctypes.sizeof(jax_ffi._Api), None, jax_ffi._Version(), None,
                       ctypes.cast(error_create, ctypes.c_void_p).value, None, None, None,
                       ctypes.cast(stream_get, ctypes.c_void_p).value)
    return api, (stream_get, error_create)


def call_frame(api, ins, outs, attrs):
    """An execute-stage XLA_FFI_CallFrame: ``ins`` / ``outs`` arrays of buffer addresses
    (``ctypes.c_void_p * n``), ``attrs`` an :func:`attrs_struct`."""
    lists = [jax_ffi._List(ctypes.sizeof(jax_ffi._List), None, len(xs), None, xs)
             for xs in (ins, outs)]
    return jax_ffi._CallFrame(ctypes.sizeof(jax_ffi._CallFrame), None, ctypes.addressof(api),
                              None, jax_ffi._EXECUTE, *lists, attrs, None)


__all__ = ["attrs_struct", "fake_api", "call_frame"]
