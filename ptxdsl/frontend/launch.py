"""Launch an imported kernel on the GPU through the runtime's driver.

The kernel's canonical PTX is assembled for the device by ptxas and loaded as a cubin;
arguments are packed by the parameter types of the signature. Device arrays (torch,
DLPack, ``__cuda_array_interface__``) pass their address; numpy arrays are copied to
the device and back after the launch; scalars are packed as their parameter's type; a
tensor-map parameter takes ``(array, TMA or box)``, encoded at the array's device address.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .. import toolchain
from ..core.errors import LaunchError, user_location
from ..runtime import adapter, driver
from ..runtime.tensormaps import encode
from .hostrun import dim3
from .tmaparg import is_tensor_map_arg, tensor_map_of

_SMEM_OPTIN = 48 * 1024


def _device_of(args) -> int:
    for a in args:
        a = a[0] if is_tensor_map_arg(a) else a
        kind = adapter.classify(a)
        if kind and kind != "numpy":
            v = adapter.view_of(a, kind)
            if v.device >= 0:
                return v.device
    return 0


def _device_pointer(a, drv, stream, back, staged) -> int:
    """The device address of an array argument (a numpy array is copied there and back)."""
    kind = adapter.classify(a)
    view = adapter.view_of(a, kind, stream=stream)
    ptr = view.ptr
    if kind == "numpy":
        host = np.ascontiguousarray(a)
        ptr = drv.mem_alloc(host.nbytes)
        staged.append(ptr)
        drv.memcpy_htod(ptr, host.ctypes.data, host.nbytes, stream)
        back.append((a, host, ptr))
    return ptr


def _pack(kernel, args, drv, stream):
    """The kernelParams array, with buffers kept alive and numpy copies to bring back."""
    prog = kernel.fn.program   # the signature (program() inlines calls for the interpreter)
    if len(args) != len(prog.params):
        raise LaunchError(f"kernel {kernel.name} takes {len(prog.params)} arguments, got "
                          f"{len(args)}", user_location())
    keep, back, staged = [], [], []
    for i, (p, a) in enumerate(zip(prog.params, args)):
        where = f"kernel {kernel.name} argument {i + 1} ({p.name})"
        kind = adapter.classify(a) if a is not None else ""
        if p.count > 1 and is_tensor_map_arg(a):
            array, spec = tensor_map_of(a, where)
            ptr = _device_pointer(array, drv, stream, back, staged)
            spec = spec.with_address(ptr)
            spec.validate()
            keep.append(ctypes.create_string_buffer(encode(drv, spec), p.nbytes))
        elif p.count > 1:
            raw = bytes(a) if isinstance(a, (bytes, bytearray)) else \
                np.ascontiguousarray(a).tobytes()
            if len(raw) != p.nbytes:
                raise LaunchError(f"{where} takes {p.nbytes} bytes, got {len(raw)}",
                                  user_location())
            keep.append(ctypes.create_string_buffer(raw, p.nbytes))
        elif kind:
            keep.append(ctypes.c_uint64(_device_pointer(a, drv, stream, back, staged)))
        elif a is None:
            keep.append(ctypes.c_uint64(0))
        elif isinstance(a, (bool, int, float, np.generic)):
            v = np.array(a).astype(p.dtype.np_dtype)
            keep.append(ctypes.create_string_buffer(v.tobytes(), p.dtype.bytes))
        else:
            raise LaunchError(f"{where}: pass an array, None or a scalar, got "
                              f"{type(a).__name__}", user_location())
    ptrs = (ctypes.c_void_p * max(len(keep), 1))(*[ctypes.addressof(k) for k in keep])
    return ptrs, keep, back, staged


def launch(kernel, args, *, grid, block, shared: int = 0, stream=None, cluster=None):
    drv = driver.get()
    dev = _device_of(args)
    info = drv.device(dev)
    entered = drv.enter(dev)
    try:
        arch = info.arch
        if kernel.arch.endswith("a") and kernel.arch[:-1] == arch:
            arch = kernel.arch
        cache = kernel.__dict__.setdefault("_functions", {})
        fn = cache.get((dev, arch))
        if fn is None:
            cubin = toolchain.assemble(kernel.ptx(), arch).cubin
            mod, _ = drv.load_module(cubin, jit=False)
            fn = cache[(dev, arch)] = (mod, drv.get_function(mod, kernel.name))
        func = fn[1]
        if shared > _SMEM_OPTIN:
            drv.set_func_attribute(func, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
                                   shared)
        s = adapter.stream_handle(stream)
        ptrs, keep, back, staged = _pack(kernel, args, drv, s)
        drv.launch(func, dim3(grid, "grid"), dim3(block, "block"), int(shared), s,
                   ctypes.addressof(ptrs), cluster=None if cluster is None else
                   dim3(cluster, "cluster"))
        for a, host, ptr in back:
            drv.memcpy_dtoh(host.ctypes.data, ptr, host.nbytes, s)
        if back:
            drv.stream_sync(s)
            for a, host, _ in back:
                if host is not a:
                    np.copyto(a, host)
        for ptr in staged:
            drv.mem_free(ptr)
        del keep
    finally:
        if entered:
            drv.leave()
