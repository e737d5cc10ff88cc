"""The CPU interpreter: run a kernel's verified IR on numpy.

``interpret(kernel, *inputs, **dims)`` takes the same arguments as a GPU
call: one numpy array (or torch tensor, on any device) per input Tile, in order,
optionally followed by one per output Tile to write into. Outputs the call
allocates are torch tensors when any argument is one (see :mod:`.hostio`). Outputs not passed are allocated and
zero-filled (a kernel that forgets to write an element returns 0 there; pass
NaN-filled arrays explicitly to catch that). One output is returned as an
array, several as a tuple. Inputs are copied in and never written back, as
with device copies. Named dims (``Tile("B", N, f32)``) are read from the
arrays' shapes; a dim that only outputs carry is given by keyword
(``kernel.interpret(x, B=64)``). bf16 tensors are ``uint16`` bit patterns
(or an ``ml_dtypes.bfloat16`` array).

The run is faithful to PTX thread semantics and stops with an
:class:`~ptxdsl.core.errors.InterpreterError` naming the Python line, CTA, thread
and address on: out-of-bounds or misaligned accesses, reads of registers or
memory bytes nothing wrote, data races on shared and global memory (see
:mod:`.hb` for what orders accesses), reads of unfinished ``cp.async``
destinations, ``.aligned`` barriers that split a warp or that a branch skips, deadlocks
(naming each warp's wait), loops that spin without progress (:mod:`.progress`) and kernels
that exceed ``max_steps`` or ``max_seconds``. See :mod:`.machine` for the
lockstep execution model, :mod:`.schedule` for warps as scheduled units (and
the waiting API for semantic functions), :mod:`.fround` and :mod:`.semantics.floatmath`
for float semantics, and :mod:`.cluster` for kernels launched as clusters (CTAs of a
cluster scheduled together, distributed shared memory, cluster barriers).
"""
from __future__ import annotations

import sys
import time

import numpy as np

from ..core import ir
from ..core.entry import raw_values
from ..core.errors import InterpreterError, LaunchError, user_location
from ..core.limits import check_run
from .binding import as_array, bind_dims, bind_strides, row_elements, strided_extent, tensor_maps
from .hb import Tracker
from .machine import CHECK_EVERY, MAX_SECONDS, MAX_STEPS, Machine
from .program import compiled
from .schedule import Blocked, Deadlock, levels, run_units, thread_units
from .memory import SHARED_BASE, Space
from .hostio import is_torch, wrap_output, write_back
from .semantics import NO_CPU_SEMANTICS, handlers_for_run, supported, unsupported
from .spaces import global_space, param_space, shared_regions
from . import groups, landing, transactions
from .semantics.wgmma import at_exit as wgmma_at_exit

__all__ = ["interpret", "run_program", "NO_CPU_SEMANTICS", "supported", "unsupported"]

# Threads run in one numpy vector; larger grids run in batches of whole CTAs.
MAX_BATCH_THREADS = 1 << 16
MAX_BATCH_SHARED = 1 << 22
# A deadlock of warps whose threads are split across branches is retried with one
# unit per thread (independent thread scheduling) when the batch is this small.
MAX_THREAD_UNITS = 2048


def interpret(kernel, *args, max_steps: int = MAX_STEPS, allow_uninitialized: bool = False,
              max_seconds: float = MAX_SECONDS, **dims):
    """Run ``kernel`` on the CPU; see the module docstring for the argument convention.

    ``max_steps`` bounds the instructions executed (per batch of CTAs): a kernel
    that spins forever stops with an :class:`InterpreterError` instead of hanging;
    ``max_seconds`` bounds the CPU time a batch of CTAs may take (one minute by default),
    so an endless loop is reported within it rather than after hours of ``max_steps``.
    ``allow_uninitialized=True`` lets the kernel read bytes nobody wrote (shared
    memory, outputs not passed: they read as zeros) instead of stopping there.
    """
    prog = kernel.program()
    nin, nout = len(kernel.in_specs), len(kernel.out_specs)
    if len(args) not in (nin, nin + nout):
        raise LaunchError(f"kernel {kernel.name} takes {nin} inputs (and optionally its {nout} "
                          f"outputs to write into), got {len(args)} arguments", user_location())
    raw_params = [p for p in prog.params if p.kind == "raw"]
    unknown = [k for k in dims if k not in kernel.dim_names and
               not any(k == p.name for p in raw_params)]
    if unknown:
        raw = f" and raw parameters {[p.name for p in raw_params]}" if raw_params else ""
        raise LaunchError(f"unknown keyword arguments {unknown}; this kernel's named dims are "
                          f"{list(kernel.dim_names) or 'none'}{raw}", user_location())
    raw = raw_values(kernel.name, raw_params, dims, user_location()) if raw_params else {}
    dims = {k: v for k, v in dims.items() if k not in raw}
    ptr_params = [p for p in prog.params if p.kind == "ptr"]
    names = [p.tensor for p in ptr_params]
    specs = kernel.in_specs + kernel.out_specs
    arrays = {}
    for i, (name, tile, a) in enumerate(zip(names, specs, args)):
        if i >= nin and isinstance(a, np.ndarray) and not a.flags.writeable:
            raise LaunchError(f"kernel {kernel.name}: output {name} (argument {i + 1}) is a "
                              f"read-only numpy array; pass a writable array (e.g. "
                              f"np.empty_like(x), or x.copy())", user_location())
        arrays[name] = (as_array(a, name, tile), tile)
    dims = bind_dims(kernel, arrays, dims)
    strides = bind_strides(arrays)
    tensors = {}
    for i, (name, tile) in enumerate(zip(names, specs)):
        if name in arrays:
            tensors[name] = arrays[name][0]
        else:
            tensors[name] = np.zeros(tile.shape_for(dims), tile.dtype.np_dtype)
        if tile.stride is not None:
            strides.setdefault(tile.stride, row_elements(tensors[name]))
            tensors[name] = strided_extent(tensors[name], strides[tile.stride])
    if 0 in dims.values():  # empty tensors: nothing to run (as on the GPU)
        results = {name: tensors[name] for name in names}
    else:
        grid = kernel.grid_for(dims)
        results = run_program(prog, kernel.block, grid, tensors, {**dims, **strides, **raw},
                              cooperative=bool(getattr(kernel, "cooperative", False)
                                               or getattr(kernel, "resident", None)),
                              max_steps=max_steps, max_seconds=max_seconds,
                              initialized=set(arrays),
                              allow_uninitialized=allow_uninitialized,
                              tmaps=tensor_maps(prog, names, specs, tensors, dims, strides),
                              cluster=getattr(kernel, "cluster", None),
                              pdl=getattr(kernel, "pdl", False))
    for name, tile in zip(names, specs):
        if tile.stride is not None:
            shape = tile.shape_for(dims)
            flat = results[name]
            results[name] = np.lib.stride_tricks.as_strided(
                flat, shape, (strides[tile.stride] * flat.itemsize,) +
                tuple(np.zeros(shape[1:], flat.dtype).strides)).copy()
    outs = []
    like = next((a for a in args if is_torch(a)), None)  # torch in: torch out
    for i, (name, tile) in enumerate(zip(names[nin:], kernel.out_specs)):
        given = args[nin + i] if len(args) > nin else None
        if given is not None:
            write_back(given, results[name])
            outs.append(given)
        else:
            outs.append(wrap_output(results[name], tile, like))
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


def _check_supported(prog: ir.Program) -> None:
    for raw in ir.unchecked(prog.body):
        raise InterpreterError(
            f"ptx.raw line {raw.text!r} is unchecked PTX that the interpreter cannot run; "
            f"run this kernel on a GPU, or write the instruction with ptx.inst.<opcode>(...) "
            f"if the instruction table has it", raw.loc)
    bad = unsupported()
    for instr in prog.walk():
        if instr.match.spec.opcode in bad:
            raise InterpreterError(
                f"{instr.opcode} has no CPU semantics in the interpreter; this kernel runs only "
                f"on a GPU", instr.loc)


def _run_batch(prog, top, block, grid, first, n, gsp, psp, sregions, opts) -> None:
    """Run CTAs ``first .. first+n-1``: in lockstep first, and if a thread must wait for
    one lockstep has not run, again from the start with finer scheduling units."""
    snapshot = gsp.buf.copy()
    init = gsp.tracker.init.copy()
    ladder = None
    level = -1
    started = time.process_time()
    while True:
        gsp.tracker.reset()   # CTAs of earlier batches ran first: nothing to order against
        shared = Space("shared", SHARED_BASE, sregions, rows=n)
        shared.tracker = Tracker(shared.buf.size, False)
        spaces = {"global": gsp, "param": psp, "shared": shared,
                  "local": Space("local", 0, []), "const": Space("const", 0, [])}
        mach = Machine(prog, tuple(block), tuple(grid), first, n, spaces, opts["cluster"])
        mach.max_steps = opts["max_steps"]
        mach.max_seconds = opts.get("max_seconds", MAX_SECONDS)
        mach.started = started           # (one clock for every scheduling level)
        mach.next_check = min(CHECK_EVERY, mach.max_steps)
        mach.check_init = not opts["allow_uninitialized"]
        mach.warp_stores_merge = opts.get("warp_stores_merge", False)
        if opts.get("pdl"):
            mach.grid_waited = np.zeros(mach.T, bool)
        try:
            if level < 0:
                mach.run(top)
            else:
                mach.per_thread = ladder[level][0] == "thread"
                mach.split_warpgroups = ladder[level][0] != "warpgroup"
                run_units(mach, top, ladder[level][1], level == len(ladder) - 1)
            landing.land(mach)           # copies nobody waited for land at the end
            transactions.at_exit(mach)
            wgmma_at_exit(mach)
            groups.at_exit(mach)
            return
        except Blocked:
            ladder = levels(mach)
        except Deadlock as d:
            if level == len(ladder) - 1:
                if not (d.partial and n * mach.P <= MAX_THREAD_UNITS) or \
                        ladder[-1][0] == "thread":
                    raise InterpreterError(d.message, d.loc) from None
                ladder.append(("thread", thread_units(mach)))
        level += 1
        gsp.buf[:] = snapshot
        gsp.tracker.init[:] = init


def run_program(prog: ir.Program, block, grid, tensors: dict, dims: dict, *,
                cooperative: bool = False, max_steps: int = MAX_STEPS,
                max_seconds: float = MAX_SECONDS,
                initialized=None, allow_uninitialized: bool = False,
                warp_stores_merge: bool = False,
                tmaps: dict | None = None, cluster: tuple | None = None,
                pdl: bool = False) -> dict:
    """Run a verified program over a grid; returns the final contents of every tensor.

    ``tmaps`` maps a tensor's name to its :class:`~ptxdsl.core.tensormap.TensorMapSpec`
    (any address: the tensor's interpreter address replaces it) for the kernel's
    tensor-map parameters (``X.tma_desc()``), as the runtime would encode them.

    A cooperative grid (``cooperative``: also a kernel's ``resident=``) runs as one batch:
    its CTAs may wait for each other, which CTAs of a later batch could never answer.
    ``cluster``: the launch's cluster dims (default: the program's, ``cluster=`` or
    ``.reqnctapercluster``); the grid runs as a sequence of clusters, batches hold whole
    ones, and each CTA's shared addresses carry its rank (:mod:`.cluster`,
    :data:`.memory.RANK_SHIFT`). ``pdl``: the kernel is
    launched as a programmatic dependent (``@kernel(pdl=True)``), so a thread's global
    memory access before its ``griddepcontrol.wait`` is an error.
    ``warp_stores_merge``: lanes of one warp storing the same bits to one address in one
    ``st`` count as one write (for imported PTX, :mod:`ptxdsl.frontend`).
    """
    check_run(prog, tuple(grid), tuple(block), prog.name, user_location())
    for name, v, kinds in (("max_steps", max_steps, (int,)),
                           ("max_seconds", max_seconds, (int, float))):
        if isinstance(v, bool) or not isinstance(v, kinds) or not v > 0:
            raise LaunchError(f"{name} must be a positive number{' (an int)' if kinds == (int,) else ''}"
                              f", got {v!r}", user_location())
    depth = _nesting(prog.body)
    old = sys.getrecursionlimit()
    # a few Python frames per ptx.if_/range_ level, compiled and run recursively
    sys.setrecursionlimit(max(old, 8 * depth + 1000))
    try:
        return _run_program(prog, block, grid, tensors, dims, cooperative, max_steps,
                            max_seconds, initialized, allow_uninitialized, warp_stores_merge,
                            tmaps, cluster, pdl)
    finally:
        sys.setrecursionlimit(old)


def _nesting(body) -> int:
    """How deeply ``ptx.if_``/``ptx.range_`` regions nest in ``body`` (without recursion)."""
    deepest, todo = 0, [(body, 0)]
    while todo:
        nodes, d = todo.pop()
        deepest = max(deepest, d)
        for n in nodes:
            if isinstance(n, ir.If):
                todo.append((n.then_body, d + 1))
                if n.else_body is not None:
                    todo.append((n.else_body, d + 1))
            elif isinstance(n, ir.Loop):
                todo.append((n.body, d + 1))
    return deepest


def _run_program(prog, block, grid, tensors, dims, cooperative, max_steps, max_seconds,
                 initialized, allow_uninitialized, warp_stores_merge, tmaps, cluster,
                 pdl) -> dict:
    _check_supported(prog)
    handlers = handlers_for_run()
    top = compiled(prog, handlers)
    gsp, addrs = global_space(prog, tensors, initialized)
    psp = param_space(prog, addrs, dims, tmaps)
    sregions = shared_regions(prog)
    nthreads = block[0] * block[1] * block[2]
    P = -(-nthreads // 32) * 32
    ncta_total = grid[0] * grid[1] * grid[2]
    probe = Space("shared", SHARED_BASE, sregions)
    per_batch = max(1, min(ncta_total, MAX_BATCH_THREADS // P,
                           MAX_BATCH_SHARED // max(probe.row_bytes, 1)))
    if cluster is None:
        cluster = prog.cluster
    if cluster is not None:
        cluster = tuple(int(c) for c in cluster) + (1,) * (3 - len(cluster))
        if any(g % c for g, c in zip(grid, cluster)):
            raise LaunchError(f"grid {tuple(grid)} is not a whole number of clusters of "
                              f"{cluster} CTAs (each grid dimension must be a multiple of "
                              f"the cluster's); the GPU refuses such a launch", user_location())
        size = cluster[0] * cluster[1] * cluster[2]
        per_batch = -(-per_batch // size) * size     # whole clusters (cluster-major order)
    if cooperative:
        per_batch = ncta_total
    with np.errstate(all="ignore"):
        for first in range(0, ncta_total, per_batch):
            n = min(per_batch, ncta_total - first)
            _run_batch(prog, top, block, grid, first, n, gsp, psp, sregions,
                       {"max_steps": max_steps, "max_seconds": max_seconds,
                        "allow_uninitialized": allow_uninitialized,
                        "warp_stores_merge": warp_stores_merge,
                        "cluster": cluster, "pdl": pdl})
    out = {}
    for p in prog.params:
        if p.kind == "ptr":
            t = tensors[p.tensor]
            out[p.tensor] = gsp.region_bytes(p.tensor).copy().view(t.dtype).reshape(t.shape)
    return out
