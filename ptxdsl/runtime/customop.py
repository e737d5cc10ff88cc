"""Make a ``@kernel`` a ``torch.library`` custom op, so ``torch.compile`` keeps it whole.

::

    from ptxdsl import custom_op

    double_op = custom_op(double, "mylib::double")   # double is a @kernel
    y = double_op(x)                  # also torch.ops.mylib.double(x)
    torch.compile(lambda x: double_op(x) + 1, fullgraph=True)

The op takes one tensor per input Tile (in order) and returns the outputs the kernel
allocates: one tensor, or a tuple for several. Its fake (meta) implementation gives
each output the shape of its Tile (named dims bound from the inputs' shapes), the
Tile's dtype and the first input's device, contiguous, which is what the launcher
allocates. CUDA tensors launch on the GPU, CPU tensors run on the CPU interpreter.
``op.register_autograd(backward, setup_context=...)`` adds a gradient, as for any
``torch.library.custom_op``.
"""
from __future__ import annotations

import inspect

from ..core.errors import LaunchError, TraceError

__all__ = ["custom_op"]

_TORCH_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
                 "u8": "uint8", "s8": "int8", "s16": "int16", "u16": "uint16",
                 "s32": "int32", "u32": "uint32", "b32": "uint32", "s64": "int64",
                 "u64": "uint64", "b64": "uint64"}


def _names(kernel) -> list[str]:
    if kernel.arg_names is not None:
        return list(kernel.arg_names)
    return list(inspect.signature(kernel.fn).parameters)


def custom_op(kernel, name: str):
    """Register ``kernel`` as the torch custom op ``name`` (``"namespace::op"``); returns
    the op (callable; a ``torch.library.CustomOpDef``)."""
    import torch

    if "::" not in name:
        raise TraceError(f"custom_op needs a qualified name such as 'mylib::{name}', got "
                         f"{name!r}", kernel.defined_at)
    nin, nout = len(kernel.in_specs), len(kernel.out_specs)
    if nout == 0:
        raise TraceError(f"kernel {kernel.name} has no outputs to return; a custom op made "
                         f"by custom_op returns the kernel's out_specs", kernel.defined_at)
    in_dims = {d for spec in kernel.in_specs for d in spec.dims if isinstance(d, str)}
    only_out = [d for spec in kernel.out_specs for d in spec.dims
                if isinstance(d, str) and d not in in_dims]
    if only_out:
        raise TraceError(f"output dims {sorted(set(only_out))} of kernel {kernel.name} appear "
                         f"in no input, so a custom op cannot know the output shape",
                         kernel.defined_at)
    out_dtypes = []
    for spec in kernel.out_specs:
        tname = _TORCH_DTYPES.get(spec.dtype.name)
        if tname is None or not hasattr(torch, tname):
            raise TraceError(f"output {spec} has no torch dtype", kernel.defined_at)
        out_dtypes.append(getattr(torch, tname))
    names = _names(kernel)[:nin]

    def run(*args):
        if any(a.device.type != "cuda" for a in args):
            out = kernel.interpret(*args)
        else:
            out = kernel(*args)
        return tuple(out) if nout > 1 else out

    ret = torch.Tensor if nout == 1 else tuple.__class_getitem__((torch.Tensor,) * nout)
    run.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=torch.Tensor)
         for n in names], return_annotation=ret)
    run.__name__ = name.split("::", 1)[1]
    op = torch.library.custom_op(name, mutates_args=())(run)

    def fake(*args):
        dims = {}
        for a, spec in zip(args, kernel.in_specs):
            if a.dim() != len(spec.dims):
                raise LaunchError(f"{name}: argument for {spec} has {a.dim()} dimensions")
            for axis, d in enumerate(spec.dims):
                if isinstance(d, str):
                    dims.setdefault(d, a.shape[axis])
        outs = [args[0].new_empty(tuple(dims[d] if isinstance(d, str) else d
                                        for d in spec.dims), dtype=dt)
                for spec, dt in zip(kernel.out_specs, out_dtypes)]
        return outs[0] if nout == 1 else tuple(outs)

    fake.__signature__ = run.__signature__
    op.register_fake(fake)
    return op
