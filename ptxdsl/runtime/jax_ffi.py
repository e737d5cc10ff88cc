"""Calling a ptxdsl kernel on jax arrays, inside ``jax.jit`` or not: ``jax_call(kernel)``.

``f = jax_call(k)`` is a function of the kernel's inputs (jax arrays, in ``in_specs``
order) that returns its outputs as jax arrays (one array, or a tuple for several
``out_specs``); the outputs' shapes come from the Tiles, their named dims bound from the
inputs' shapes. ``jax.jit(lambda a, b: f(a, b) * 2)`` traces it like any jax op:

- **on a GPU** (the jax backend is ``gpu``) the call is an XLA FFI custom call,
  ``ptxdsl_launch``, whose handler launches the kernel on XLA's CUDA stream through
  ptxdsl's launcher (the buffers XLA hands over are the arrays, nothing is copied). The
  handler is a C function pointer made by ``ctypes`` over XLA's FFI C API
  (``xla/ffi/api/c_api.h``): it answers XLA's metadata query, and at the execute stage
  reads the buffers, the attributes and the stream. The ``ptxdsl_kernel`` attribute (a
  63-bit content hash of the kernel's PTX) finds the kernel in this process's registry
  (filled by ``jax_call``); the call also carries the kernel's cubin and launch recipe
  (:mod:`.jax_export`), which a process without the kernel object runs, the image loaded
  once: so a ``jax.export`` of the computation (with ``DisabledSafetyCheck.custom_call(
  TARGET)``) runs in any process with ptxdsl that has called :func:`register`;
- **elsewhere** (jax on CPU) the call is a ``jax.pure_callback`` that runs the kernel on
  ptxdsl's CPU interpreter (``kernel.interpret``) with the inputs as numpy arrays: a
  fallback for testing on machines without a GPU, as exact as the interpreter and as
  slow.

``jax.vmap`` of the call runs it once per batch element (``vmap_method="sequential"``).
jax is imported only when ``jax_call`` is called; install it with ``pip install
'ptxdsl[jax]'`` (CPU) or jax's CUDA wheels.
"""
from __future__ import annotations

import ctypes
import hashlib
import threading

import numpy as np

from ..core.errors import PtxdslError, TraceError, user_location

__all__ = ["jax_call", "gpu_path_available", "register", "TARGET"]

TARGET = "ptxdsl_launch"
_ATTR = "ptxdsl_kernel"
_REGISTRY: dict[int, object] = {}  # content hash -> kernel, for the FFI handler
_LOCK = threading.Lock()


def _np_dtype(tile_dtype):
    name = tile_dtype.name
    if name in ("bf16", "e4m3", "e5m2"):
        import ml_dtypes
        return np.dtype({"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
                         "e5m2": ml_dtypes.float8_e5m2}[name])
    from .args import dtype_name_for_tile
    return np.dtype(dtype_name_for_tile(tile_dtype))


def _out_shapes(kernel, args):
    """``jax.ShapeDtypeStruct`` of each output, named dims bound from the inputs."""
    import jax
    if len(args) != len(kernel.in_specs):
        raise TraceError(f"jax_call({kernel.name}) takes {len(kernel.in_specs)} input "
                         f"array(s) (its in_specs), got {len(args)}", user_location())
    dims: dict = {}
    for i, (spec, a) in enumerate(zip(kernel.in_specs, args)):
        shape = tuple(a.shape)
        if len(shape) != len(spec.dims):
            raise TraceError(f"jax_call({kernel.name}): input {i} has shape {shape}, its "
                             f"Tile {spec} has {len(spec.dims)} dims", user_location())
        for d, n in zip(spec.dims, shape):
            if isinstance(d, str):
                if dims.setdefault(d, n) != n:
                    raise TraceError(f"jax_call({kernel.name}): dim {d} is {dims[d]} and "
                                     f"{n} in the inputs' shapes", user_location())
            elif d != n:
                raise TraceError(f"jax_call({kernel.name}): input {i} has shape {shape}, "
                                 f"its Tile {spec} wants {d} at that dim", user_location())
    outs = []
    for spec in kernel.out_specs:
        missing = [d for d in spec.names if d not in dims]
        if missing:
            raise TraceError(f"jax_call({kernel.name}): output dim(s) {', '.join(missing)} "
                             f"appear in no input's Tile, so jax cannot know the output's "
                             f"shape", user_location())
        outs.append(jax.ShapeDtypeStruct(spec.shape_for(dims), _np_dtype(spec.dtype)))
    return outs


def _interpret_on_host(kernel, outs, raw=None):
    def run(*arrays):
        res = kernel.interpret(*(np.asarray(a) for a in arrays), **(raw or {}))
        res = res if isinstance(res, tuple) else (res,)
        fixed = []
        for r, o in zip(res, outs):
            r = np.asarray(r)
            if r.dtype != o.dtype and r.dtype.itemsize == o.dtype.itemsize:
                r = r.view(o.dtype)  # bf16/fp8 come back as their bit patterns
            fixed.append(r.astype(o.dtype, copy=False).reshape(o.shape))
        return tuple(fixed)
    return run


def kernel_key(kernel) -> int:
    """The 63-bit content hash of the kernel's PTX (the FFI call's attribute)."""
    digest = hashlib.sha256(kernel.ptx().encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2 ** 63 - 1)


def jax_call(kernel, **raw):
    """``kernel`` as a function of jax arrays (see the module docstring). ``raw``: the
    values of its raw parameters that name no dim (``jax_call(k, K=64)``), checked here
    and passed to the launch (the FFI call's ``ptxdsl_raw`` attribute) or, on jax's CPU
    backend, to ``kernel.interpret``."""
    import jax
    if raw:
        from ..core.entry import raw_values
        raw_values(kernel.name, [p for p in kernel.program().params if p.kind == "raw"],
                   raw, user_location())   # checked once, here

    def call(*args):
        outs = _out_shapes(kernel, args)
        single = len(outs) == 1
        if jax.default_backend() == "gpu":
            _register()
            key = kernel_key(kernel)
            with _LOCK:
                _REGISTRY[key] = kernel
            from .jax_export import launch_attributes
            device = getattr(jax.devices()[0], "local_hardware_id", None) or 0
            res = jax.ffi.ffi_call(TARGET, outs, vmap_method="sequential")(
                *args, **launch_attributes(kernel, args, outs, key, device, raw))
        else:
            res = jax.pure_callback(_interpret_on_host(kernel, outs, raw), tuple(outs), *args,
                                    vmap_method="sequential")
        res = tuple(res)
        return res[0] if single else res

    call.__name__ = f"jax_call_{kernel.name}"
    call.__doc__ = f"ptxdsl kernel {kernel.name} on jax arrays (ptxdsl.runtime.jax_ffi)."
    return call


# --------------------------------------------------------------------------- the FFI handler
# Structures of xla/ffi/api/c_api.h (the C API is append-only: each struct begins with its
# size; the fields read here are in every version since jax 0.4.31).
class _Ext(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int),
                ("next", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("major", ctypes.c_int), ("minor", ctypes.c_int)]


class _Metadata(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("api_version", _Version),
                ("traits", ctypes.c_uint32), ("state_type_id", ctypes.c_int64)]


class _MetadataExt(ctypes.Structure):
    _fields_ = [("base", _Ext), ("metadata", ctypes.POINTER(_Metadata))]


class _Buffer(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("dtype", ctypes.c_int), ("data", ctypes.c_void_p), ("rank", ctypes.c_int64),
                ("dims", ctypes.POINTER(ctypes.c_int64))]


class _List(ctypes.Structure):  # XLA_FFI_Args / XLA_FFI_Rets
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("size", ctypes.c_int64), ("types", ctypes.POINTER(ctypes.c_int)),
                ("items", ctypes.POINTER(ctypes.c_void_p))]


class _Span(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Scalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("value", ctypes.c_void_p)]


class _Array(ctypes.Structure):  # XLA_FFI_Array
    _fields_ = [("dtype", ctypes.c_int), ("size", ctypes.c_size_t), ("data", ctypes.c_void_p)]


class _Attrs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("size", ctypes.c_int64), ("types", ctypes.POINTER(ctypes.c_int)),
                ("names", ctypes.POINTER(ctypes.POINTER(_Span))),
                ("attrs", ctypes.POINTER(ctypes.c_void_p))]


class _CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("api", ctypes.c_void_p), ("ctx", ctypes.c_void_p), ("stage", ctypes.c_int),
                ("args", _List), ("rets", _List), ("attrs", _Attrs),
                ("future", ctypes.c_void_p)]


class _Api(ctypes.Structure):  # the leading fields of XLA_FFI_Api
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("api_version", _Version), ("internal_api", ctypes.c_void_p),
                ("error_create", ctypes.c_void_p), ("error_get_message", ctypes.c_void_p),
                ("error_destroy", ctypes.c_void_p), ("handler_register", ctypes.c_void_p),
                ("stream_get", ctypes.c_void_p)]


class _ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("message", ctypes.c_char_p), ("errc", ctypes.c_int)]


class _StreamGetArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("ctx", ctypes.c_void_p), ("stream", ctypes.c_void_p)]


_CALL = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)  # XLA_FFI_Handler and friends
_METADATA, _EXECUTE, _INTERNAL_ERROR, _S64, _U8 = 1, 3, 13, 5, 6
_ARRAY, _SCALAR, _STRING = 1, 3, 4   # XLA_FFI_AttrType
# XLA_FFI_DataType -> the dtype name ptxdsl's launcher reads from __cuda_array_interface__
_DTYPES = {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16",
           8: "uint32", 9: "uint64", 10: "float16", 11: "float32", 12: "float64",
           16: "bfloat16", 19: "float8_e5m2", 20: "float8_e4m3fn"}


class _DeviceBuffer:
    """An XLA buffer as ``__cuda_array_interface__`` (its typestr is the dtype's name, which
    ptxdsl's adapter reads with ``np.dtype``: bf16 and fp8 included)."""

    def __init__(self, buf: _Buffer):
        shape = tuple(buf.dims[i] for i in range(buf.rank))
        if buf.dtype not in _DTYPES:
            raise PtxdslError(f"XLA buffer of FFI data type {buf.dtype}: no ptxdsl dtype")
        self.__cuda_array_interface__ = {"shape": shape, "typestr": _DTYPES[buf.dtype],
                                         "data": (int(buf.data or 0), False), "version": 3,
                                         "strides": None}


def _error(api: _Api, message: str) -> int:
    args = _ErrorCreateArgs(ctypes.sizeof(_ErrorCreateArgs), None, message.encode()[:4000],
                            _INTERNAL_ERROR)
    return _CALL(api.error_create)(ctypes.addressof(args))


def _attributes(frame: _CallFrame) -> dict:
    """The call's attributes: int64 scalars as ints, uint8 arrays and strings as bytes."""
    a, out = frame.attrs, {}
    for i in range(a.size):
        span = a.names[i].contents
        name = ctypes.string_at(span.ptr, span.len).decode()
        if a.types[i] == _SCALAR:
            sc = _Scalar.from_address(a.attrs[i])
            if sc.dtype == _S64:
                out[name] = ctypes.c_int64.from_address(sc.value).value
        elif a.types[i] == _ARRAY:
            arr = _Array.from_address(a.attrs[i])
            if arr.dtype == _U8:
                out[name] = ctypes.string_at(arr.data, arr.size)
        elif a.types[i] == _STRING:
            s = _Span.from_address(a.attrs[i])
            out[name] = ctypes.string_at(s.ptr, s.len)
    return out


def make_handler(what: str, execute):
    """An XLA FFI handler (a C function pointer; keep it alive for the process) that
    answers XLA's metadata query and, at the execute stage, calls ``execute(attrs, args,
    rets, stream)``: the attributes (:func:`_attributes`), the argument and result
    buffers (``_Buffer``) and XLA's CUDA stream. An exception is the call's error,
    ``"{what} failed: ..."``."""

    def handle(frame_addr: int):
        frame = _CallFrame.from_address(frame_addr)
        api = _Api.from_address(frame.api)
        try:
            if frame.extension_start and \
                    _Ext.from_address(frame.extension_start).type == _METADATA:
                md = _MetadataExt.from_address(frame.extension_start).metadata.contents
                md.api_version.major = api.api_version.major
                md.api_version.minor = api.api_version.minor
                md.traits = 0  # not command-buffer (CUDA graph) compatible: launched each time
                return None
            if frame.stage != _EXECUTE:
                return None
            attrs = _attributes(frame)
            sg = _StreamGetArgs(ctypes.sizeof(_StreamGetArgs), None, frame.ctx, None)
            err = _CALL(api.stream_get)(ctypes.addressof(sg))
            if err:
                return err
            execute(attrs, [_Buffer.from_address(frame.args.items[i])
                            for i in range(frame.args.size)],
                    [_Buffer.from_address(frame.rets.items[i])
                     for i in range(frame.rets.size)], int(sg.stream or 0))
            return None
        except BaseException as e:  # noqa: BLE001 - XLA gets it as the call's error
            return _error(api, f"{what} failed: {type(e).__name__}: {e}")

    return _CALL(handle)


def _launch(attrs: dict, args: list, rets: list, stream: int) -> None:
    key = attrs.get(_ATTR)
    if not isinstance(key, int):
        raise PtxdslError(f"the FFI call has no int64 {_ATTR} attribute")
    with _LOCK:
        kernel = _REGISTRY.get(key)
    bufs = args + rets
    if kernel is not None:
        from .jax_export import parse_raw
        raw = parse_raw(attrs["ptxdsl_raw"]) if "ptxdsl_raw" in attrs else {}
        kernel(*map(_DeviceBuffer, bufs), stream=stream, **raw)
        return
    from . import jax_export
    if "ptxdsl_launch" not in attrs or "ptxdsl_image" not in attrs:
        raise jax_export.no_recipe(key)
    from .driver import get
    jax_export.run_recipe(get(), key, attrs["ptxdsl_image"], attrs["ptxdsl_launch"],
                          [int(b.data or 0) for b in bufs], stream)


_HANDLER = make_handler("ptxdsl kernel launch", _launch)  # alive for the process: XLA holds it
_REGISTERED: set = set()


def register() -> None:
    """Register the ``ptxdsl_launch`` FFI target with jax (CUDA), once per process:
    ``jax_call`` does it; a process that only runs a deserialized ``jax.export`` of a
    computation calls it before the first call."""
    _register()


def _register(target: str = TARGET, handler=_HANDLER) -> None:
    """Register ``handler`` as the CUDA FFI target ``target`` (once per process)."""
    with _LOCK:
        if target in _REGISTERED:
            return
        import jax
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform="CUDA")
        _REGISTERED.add(target)


def gpu_path_available() -> bool:
    """Whether jax runs on a GPU here (then ``jax_call`` uses the FFI custom call)."""
    try:
        import jax
        return jax.default_backend() == "gpu"
    except ImportError:
        return False
