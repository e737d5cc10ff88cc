"""Run an imported kernel on the interpreter: bind the caller's arguments to its
``.param`` list, run, and write arrays back.

A PTX signature says nothing about which ``.u64`` is a pointer, so the arguments decide:
a numpy array is a pointer to a copy of it (written back after the run), ``None`` or
``0`` a null pointer (an access through it faults), a Python or numpy scalar the
parameter's value, ``bytes`` the contents of a byte-array parameter (``.b8 name[16]``),
``(array, TMA or box)`` a tensor map (:mod:`.tmaparg`). Module ``.global``/``.const``
variables are bound by :mod:`.modvars`.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..core import ir
from ..core.errors import InterpreterError, LaunchError, user_location
from ..interp import run_program
from ..interp.machine import MAX_STEPS
from ..core.types import u64
from .modvars import bind_module_vars
from .tmaparg import is_tensor_map_arg, tensor_map_of


def dim3(v, what: str) -> tuple[int, int, int]:
    if isinstance(v, (int, np.integer)):
        v = (int(v),)
    try:
        t = tuple(int(x) for x in v)
    except TypeError:
        raise LaunchError(f"{what} must be an int or a tuple of up to 3 ints, got {v!r}",
                          user_location()) from None
    if not 1 <= len(t) <= 3 or any(x < 1 for x in t):
        raise LaunchError(f"{what} must be 1 to 3 positive ints, got {v!r}", user_location())
    return t + (1,) * (3 - len(t))


def _bind(prog: ir.Program, args, tmaps: dict) -> tuple[list, dict, dict, dict]:
    if len(args) != len(prog.params):
        names = ", ".join(f"{p.name} (.{p.dtype.name})" for p in prog.params)
        raise LaunchError(f"kernel {prog.name} takes {len(prog.params)} arguments ({names}), "
                          f"got {len(args)}", user_location())
    params, tensors, dims, given = [], {}, {}, {}
    for i, (p, a) in enumerate(zip(prog.params, args)):
        where = f"argument {i + 1} ({p.name}, .{p.dtype.name}{f'[{p.count}]' if p.count > 1 else ''})"
        if hasattr(a, "__array__") and not isinstance(a, (np.ndarray, np.generic)):
            a = np.asarray(a)   # array-likes other than numpy (a CPU torch tensor)
        if p.count > 1 and is_tensor_map_arg(a):
            # (array, TMA or box): the map's array sits in global memory behind a hidden
            # pointer parameter; the 128 bytes hold the interpreter's tensor-map handle
            array, spec = tensor_map_of(a, where)
            name = f"__tmap_{p.name}"
            params.append(dataclasses.replace(p, kind="tmap", tensor=name))
            tensors[name] = np.ascontiguousarray(np.asarray(array))
            tmaps[name] = spec
            if isinstance(array, np.ndarray):
                given[name] = array
        elif p.count > 1:
            raw = bytes(a) if isinstance(a, (bytes, bytearray)) else (
                np.ascontiguousarray(a).tobytes() if isinstance(a, np.ndarray) else None)
            if raw is None or len(raw) != p.nbytes:
                raise LaunchError(f"{where} is a {p.nbytes}-byte parameter: pass bytes (or a "
                                  f"numpy array) of exactly {p.nbytes} bytes", user_location())
            params.append(dataclasses.replace(p, kind="dim", tensor=p.name))
            dims[p.name] = np.frombuffer(raw, p.dtype.np_dtype).copy()
        elif isinstance(a, np.ndarray) and a.ndim > 0:
            if p.dtype.bits != 64 or p.dtype.is_float:
                raise LaunchError(f"{where} got an array, but only a 64-bit integer parameter "
                                  f"can hold its address", user_location())
            params.append(dataclasses.replace(p, kind="ptr", tensor=p.name))
            tensors[p.name] = np.ascontiguousarray(a)
            given[p.name] = a
        elif a is None:
            params.append(dataclasses.replace(p, kind="dim", tensor=p.name))
            dims[p.name] = 0
        elif isinstance(a, (bool, int, float, np.generic)):
            if p.dtype.is_int or p.dtype.kind == "b":
                if isinstance(a, (float, np.floating)) and p.dtype.kind != "b":
                    raise LaunchError(f"{where} is an integer parameter, got {a!r}",
                                      user_location())
                if isinstance(a, (float, np.floating)):  # .b32 / .b64: the float's bits
                    a = np.array(a, np.float32 if p.dtype.bits == 32 else np.float64).view(
                        p.dtype.np_dtype)[()]
                v = int(a) & ((1 << p.dtype.bits) - 1)
                dims[p.name] = np.array(v, f"u{p.dtype.bytes}").view(p.dtype.np_dtype)[()]
            else:
                dims[p.name] = a
            params.append(dataclasses.replace(p, kind="dim", tensor=p.name))
        else:
            raise LaunchError(f"{where}: pass a numpy array (a pointer), None (a null "
                              f"pointer) or a scalar, got {type(a).__name__}", user_location())
    for name in tmaps:    # the hidden pointers of the tensor maps' arrays
        params.append(ir.Param(name + "_data", u64, "ptr", name))
    return params, tensors, dims, given


def _check_symbols(prog: ir.Program) -> None:
    for instr in prog.walk():
        for op in instr.operands:
            base = op.base if isinstance(op, ir.Addr) else op
            if isinstance(base, ir.Symbol) and base.space not in ("shared", "param"):
                raise InterpreterError(f"{instr.opcode}: the .{base.space} variable "
                                       f"{base.name} is not supported by the interpreter yet",
                                       instr.loc)


def interpret(prog: ir.Program, args, *, grid=1, block=1, shared: int = 0, cluster=None,
              max_steps: int = MAX_STEPS, allow_uninitialized: bool = False,
              module_vars=(), builder=None) -> None:
    """Run ``prog`` (an imported kernel's IR) over ``grid`` x ``block`` threads with
    ``shared`` bytes of dynamic shared memory; arrays passed are written back.
    ``module_vars``: the module's ``.global``/``.const`` declarations (:mod:`.modvars`)."""
    grid, block = dim3(grid, "grid"), dim3(block, "block")
    if cluster is not None:
        cluster = dim3(cluster, "cluster")
    tmaps: dict = {}
    params, tensors, dims, given = _bind(prog, args, tmaps)
    shared_decls = []
    for d in prog.shared:
        if d.dynamic:
            n = int(shared) // d.dtype.bytes
            d = dataclasses.replace(d, shape=(max(n, 0),))
        shared_decls.append(d)
    run = dataclasses.replace(prog, params=params, shared=shared_decls)
    run, variables = bind_module_vars(run, module_vars, builder)
    tensors.update(variables)
    _check_symbols(run)
    results = run_program(run, block, grid, tensors, dims, max_steps=max_steps,
                          initialized=set(tensors), allow_uninitialized=allow_uninitialized,
                          cluster=cluster, warp_stores_merge=True, tmaps=tmaps)
    for name, a in given.items():
        out = results[name].reshape(a.shape)
        if a.flags.writeable:
            np.copyto(a, out)
