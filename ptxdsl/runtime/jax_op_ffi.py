"""How :mod:`.jax_ops` calls an op from jax: ``call(name, params, outs, *arrays)``.

An op (``ptxdsl.ops``) is a plan and one or more kernel launches with workspaces, chosen
from the arrays' shapes, so one call is one XLA custom call of the whole op, whatever its
kernels, lowered per platform (``jax.lax.platform_dependent``):

- **CUDA**: the XLA FFI custom call ``ptxdsl_op``. Its handler (made by
  :func:`.jax_ffi.make_handler`) views XLA's buffers as torch CUDA tensors (no copy) and
  runs the op's torch path on XLA's stream (``torch.cuda.ExternalStream``): the kernels
  write the main output straight into XLA's result buffer (the ops' ``out=``), any other
  result (rms_norm's ``rstd``, attention's LSE, the gradients) with one device copy, and
  the op's scratch comes from torch's allocator on that stream. Nothing goes through the
  host. The call's only attribute is ``ptxdsl_op``, the op's name and plain parameters as
  JSON, so a ``jax.export`` of it runs in any process with ptxdsl and torch that has
  called :func:`register`. Without torch, the CUDA lowering falls back to the host path.
- **elsewhere** (CPU): ``jax.pure_callback`` into the op's numpy API, which runs ptxdsl's
  CPU interpreter (exact, slow: tiny shapes).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json

import numpy as np

from ..core.errors import PtxdslError
from .jax_ffi import _DTYPES, _register, make_handler

__all__ = ["OP_TARGET", "call", "register", "run_op"]

OP_TARGET = "ptxdsl_op"
_ATTR = "ptxdsl_op"


# ------------------------------------------------------------------ the ops, by name
def _rms_norm(x, w, *, eps, offset, outs=None):
    from ..ops import rmsnorm
    return rmsnorm.rms_norm(x, w, eps, offset=offset, return_rstd=True,
                            out=outs[0] if outs else None)


def _rms_norm_backward(dy, x, w, rstd, *, offset, outs=None):
    from ..ops import rmsnorm
    return rmsnorm.rms_norm_backward(dy, x, w, rstd, offset=offset)


def _matmul(a, b, *, out_dtype, outs=None):
    from ..ops.matmul import api
    return api.matmul(a, b, out_dtype=out_dtype, out=outs[0] if outs else None)


def _attention(q, k, v, *, outs=None, **opts):
    from ..ops.attention import api
    opts["window_size"] = tuple(opts["window_size"])
    return api.attention(q, k, v, return_lse=True, out=outs[0] if outs else None, **opts)


def _attention_backward(dout, q, k, v, out, lse, *, outs=None, **opts):
    from ..ops.attention import bwd_api
    opts["window_size"] = tuple(opts["window_size"])
    return bwd_api.attention_backward(dout, q, k, v, out, lse, **opts)


OPS = {"rms_norm": _rms_norm, "rms_norm_backward": _rms_norm_backward, "matmul": _matmul,
       "attention": _attention, "attention_backward": _attention_backward}


def run_op(name: str, params: dict, arrays, outs=None) -> tuple:
    """The op ``name`` on ``arrays`` (numpy or torch) with ``params``; ``outs`` (torch
    tensors, the call's results) receive what the op writes in place, the rest is
    returned: a tuple, one per result."""
    fn = OPS.get(name)
    if fn is None:
        raise PtxdslError(f"{OP_TARGET}: no op {name!r} (ops: {', '.join(OPS)})")
    res = fn(*arrays, outs=outs, **params)
    return res if isinstance(res, tuple) else (res,)


# ------------------------------------------------------------------ jax side
def _host(name, params, outs):
    def run(*arrays):
        res = run_op(name, dict(params), [np.asarray(a) for a in arrays])
        return tuple(np.asarray(r).astype(o.dtype, copy=False).reshape(o.shape)
                     for r, o in zip(res, outs))
    return run


def call(name: str, params: dict, outs, *args) -> tuple:
    """The op ``name`` as a jax computation of ``args`` whose results are ``outs``
    (``jax.ShapeDtypeStruct``); ``params`` plain JSON values (see the module docstring)."""
    import jax
    outs = tuple(outs)
    spec = json.dumps({"op": name, "params": params}, sort_keys=True)

    def on_host(*a):
        return tuple(jax.pure_callback(_host(name, params, outs), outs, *a,
                                       vmap_method="sequential"))

    def on_cuda(*a):
        if importlib.util.find_spec("torch") is None:
            return on_host(*a)          # the op's numpy path (GPU kernels, host copies)
        if jax.default_backend() == "gpu":
            register()
        return tuple(jax.ffi.ffi_call(OP_TARGET, outs, vmap_method="sequential")(
            *a, **{_ATTR: spec}))

    return tuple(jax.lax.platform_dependent(*args, cuda=on_cuda, default=on_host))


# ------------------------------------------------------------------ the FFI handler
_INT_TYPESTR = {1: "|u1", 2: "<i2", 4: "<i4", 8: "<i8"}


class _Cai:
    """An XLA buffer as ``__cuda_array_interface__`` of same-width ints (torch reads no
    bfloat16 or fp8 typestr; the tensor is then viewed as its dtype)."""

    def __init__(self, shape, itemsize: int, ptr: int):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": _INT_TYPESTR[itemsize],
                                         "data": (ptr, False), "version": 2, "strides": None}


def _tensors(torch, bufs) -> list:
    out = []
    for b in bufs:
        if b.dtype not in _DTYPES:
            raise PtxdslError(f"XLA buffer of FFI data type {b.dtype}: no ptxdsl dtype")
        dt = getattr(torch, _DTYPES[b.dtype])
        shape = tuple(b.dims[i] for i in range(b.rank))
        size = torch.empty((), dtype=dt).element_size()
        out.append(torch.as_tensor(_Cai(shape, size, int(b.data or 0))).view(dt))
    return out


def _on_stream(torch, stream: int, device):
    s = torch.cuda.ExternalStream(stream, device=device)
    return torch.cuda.stream(s)


def execute(attrs: dict, args: list, rets: list, stream: int, *, tensors=_tensors,
            on_stream=_on_stream) -> None:
    """Run the call's op on XLA's buffers and stream (the handler's execute stage;
    ``tensors`` / ``on_stream`` are the buffer view and stream context, replaceable for
    testing without a GPU)."""
    if _ATTR not in attrs:
        raise PtxdslError(f"the FFI call has no {_ATTR} attribute")
    spec = json.loads(attrs[_ATTR])
    import torch
    ins, outs = tensors(torch, args), tensors(torch, rets)
    device = (outs or ins)[0].device
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext(), \
            on_stream(torch, stream, device):
        res = run_op(spec["op"], spec["params"], ins, outs)
        for o, r in zip(outs, res):
            if r.data_ptr() != o.data_ptr():   # the op allocated it: one device copy
                o.copy_(r.reshape(o.shape))


_HANDLER = make_handler("ptxdsl op", execute)  # alive for the process: XLA holds it


def register() -> None:
    """Register the ``ptxdsl_op`` FFI target with jax (CUDA), once per process (a call
    traced with jax on a GPU does it; a process that only runs a deserialized
    ``jax.export`` calls it first)."""
    _register(OP_TARGET, _HANDLER)
