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
destinations, ``.aligned`` barriers that split a warp, deadlocks (naming each
warp's wait) and kernels that exceed ``max_steps``. See :mod:`.machine` for the
lockstep execution model, :mod:`.schedule` for warps as scheduled units (and
the waiting API for semantic functions), :mod:`.fround` and :mod:`.floatops`
for float semantics, and :mod:`.cluster` for kernels launched as clusters (CTAs of a
cluster scheduled together, distributed shared memory, cluster barriers).
"""
from __future__ import annotations

import numpy as np

from ..core import ir
from ..core.errors import InterpreterError, LaunchError, user_location
from ..core.tensormap import TensorMapError
from .hb import Tracker
from .machine import MAX_STEPS, Machine, compiled
from .schedule import Blocked, Deadlock, levels, run_units, thread_units
from .memory import GLOBAL_BASE, GUARD, PARAM_BASE, SHARED_BASE, Region, Space, align_up
from .hostio import is_torch, to_numpy, wrap_output, write_back
from .semantics import NO_CPU_SEMANTICS, handlers_for_run, supported, unsupported
from .tma import tensormap_handle
from . import transactions

__all__ = ["interpret", "run_program", "NO_CPU_SEMANTICS", "supported", "unsupported"]

# Threads run in one numpy vector; larger grids run in batches of whole CTAs.
MAX_BATCH_THREADS = 1 << 16
MAX_BATCH_SHARED = 1 << 22
# A deadlock of warps whose threads are split across branches is retried with one
# unit per thread (independent thread scheduling) when the batch is this small.
MAX_THREAD_UNITS = 2048
# Guard gaps between global tensors: at least GUARD, up to the tensor's size.
MAX_GUARD = 1 << 20


def _as_array(x, name: str, tile) -> np.ndarray:
    h = to_numpy(x, name, tile)
    a = h.array
    if a.ndim != len(tile.dims):
        raise LaunchError(f"argument {name} must have {len(tile.dims)} dimensions for {tile}, "
                          f"got shape {a.shape}", user_location())
    return a


def _bind_dims(kernel, arrays: dict, given: dict) -> dict:
    dims = dict(given)
    for name, (arr, tile) in arrays.items():
        for axis, (d, n) in enumerate(zip(tile.dims, arr.shape)):
            if isinstance(d, int):
                if d != n:
                    raise LaunchError(f"argument {name} has shape {arr.shape} but {tile} needs "
                                      f"{d} along axis {axis}", user_location())
            elif d in dims and dims[d] != n:
                raise LaunchError(f"dim {d} is {dims[d]} elsewhere but argument {name} has "
                                  f"{n} along axis {axis} (shape {arr.shape})", user_location())
            else:
                dims[d] = n
    missing = [d for d in kernel.dim_names if d not in dims]
    if missing:
        raise LaunchError(f"dims {', '.join(missing)} appear only in outputs; pass them by "
                          f"keyword, e.g. {missing[0]}=...", user_location())
    for d, v in dims.items():
        if isinstance(v, bool) or not (isinstance(v, (int, np.integer)) and 0 <= v < 2 ** 32):
            raise LaunchError(f"dim {d} must be a 32-bit int >= 0, got {v!r}", user_location())
    return dims


def _inner(a: np.ndarray) -> int:
    n = 1
    for d in a.shape[1:]:
        n *= d
    return n


def _bind_strides(arrays: dict) -> dict:
    """Row strides (elements) of the arrays whose Tile names one; shared names must agree."""
    out: dict = {}
    for name, (a, tile) in arrays.items():
        if tile.stride is None:
            continue
        inner = _inner(a)
        if a.shape[0] > 1 and a.ndim >= 2 and (
                np.ascontiguousarray(a[0]).strides != a[0].strides
                or a.strides[0] % a.itemsize or a.strides[0] < inner * a.itemsize):
            raise LaunchError(f"argument {name}: rows may be strided but each row must be "
                              f"contiguous (strides {a.strides})", user_location())
        s = a.strides[0] // a.itemsize if a.shape[0] > 1 else inner
        if out.get(tile.stride, s) != s:
            raise LaunchError(f"arguments sharing stride {tile.stride!r} disagree: {name} has "
                              f"{s}, another has {out[tile.stride]}", user_location())
        out[tile.stride] = s
    return out


def _strided_extent(a: np.ndarray, stride: int) -> np.ndarray:
    """The bytes a strided (M, ...) array spans, as the GPU would see them, flattened."""
    m, inner = a.shape[0], _inner(a)
    flat = np.zeros((m - 1) * stride + inner if m else 0, a.dtype)
    for r in range(m):
        flat[r * stride:r * stride + inner] = a[r].reshape(-1)
    return flat


def interpret(kernel, *args, max_steps: int = MAX_STEPS, allow_uninitialized: bool = False,
              **dims):
    """Run ``kernel`` on the CPU; see the module docstring for the argument convention.

    ``max_steps`` bounds the instructions executed (per batch of CTAs): a kernel
    that spins forever stops with an :class:`InterpreterError` instead of hanging.
    ``allow_uninitialized=True`` lets the kernel read bytes nobody wrote (shared
    memory, outputs not passed: they read as zeros) instead of stopping there.
    """
    prog = kernel.program()
    nin, nout = len(kernel.in_specs), len(kernel.out_specs)
    if len(args) not in (nin, nin + nout):
        raise LaunchError(f"kernel {kernel.name} takes {nin} inputs (and optionally its {nout} "
                          f"outputs to write into), got {len(args)} arguments", user_location())
    unknown = [k for k in dims if k not in kernel.dim_names]
    if unknown:
        raise LaunchError(f"unknown keyword arguments {unknown}; this kernel's named dims are "
                          f"{list(kernel.dim_names) or 'none'}", user_location())
    ptr_params = [p for p in prog.params if p.kind == "ptr"]
    names = [p.tensor for p in ptr_params]
    specs = kernel.in_specs + kernel.out_specs
    arrays = {}
    for i, (name, tile, a) in enumerate(zip(names, specs, args)):
        if i >= nin and isinstance(a, np.ndarray) and not a.flags.writeable:
            raise LaunchError(f"kernel {kernel.name}: output {name} (argument {i + 1}) is a "
                              f"read-only numpy array; pass a writable array (e.g. "
                              f"np.empty_like(x), or x.copy())", user_location())
        arrays[name] = (_as_array(a, name, tile), tile)
    dims = _bind_dims(kernel, arrays, dims)
    strides = _bind_strides(arrays)
    tensors = {}
    for i, (name, tile) in enumerate(zip(names, specs)):
        if name in arrays:
            tensors[name] = arrays[name][0]
        else:
            tensors[name] = np.zeros(tile.shape_for(dims), tile.dtype.np_dtype)
        if tile.stride is not None:
            strides.setdefault(tile.stride, _inner(tensors[name]))
            tensors[name] = _strided_extent(tensors[name], strides[tile.stride])
    if 0 in dims.values():  # empty tensors: nothing to run (as on the GPU)
        results = {name: tensors[name] for name in names}
    else:
        grid = kernel.grid_for(dims)
        results = run_program(prog, kernel.block, grid, tensors, {**dims, **strides},
                              cooperative=bool(getattr(kernel, "cooperative", False)
                                               or getattr(kernel, "resident", None)),
                              max_steps=max_steps, initialized=set(arrays),
                              allow_uninitialized=allow_uninitialized,
                              tmaps=_tensor_maps(prog, names, specs, tensors, dims, strides),
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


def _tensor_maps(prog, names, specs, tensors, dims, strides) -> dict:
    """The tensor map of each ``X.tma_desc()`` argument, as the runtime would encode it
    from the argument's shape and (row) strides; the address is filled in later."""
    out = {}
    tiles = dict(zip(names, specs))
    for p in prog.params:
        if p.kind != "tmap" or p.tensor not in tiles:
            continue
        tile = tiles[p.tensor]
        shape = tuple(int(d) for d in tile.shape_for(dims))
        el = None
        if tile.stride is not None:
            el = [0] * len(shape)
            acc = 1
            for ax in range(len(shape) - 1, 0, -1):
                el[ax] = acc
                acc *= shape[ax]
            el[0] = strides[tile.stride]
        try:
            out[p.tensor] = p.tma.spec_for(tile.dtype, shape, el, dims=dims,
                                           address=GLOBAL_BASE)
        except TensorMapError as exc:
            raise LaunchError(f"the tensor map of {p.tensor} (shape {shape}): {exc.message}",
                              user_location()) from None
    return out


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


def _global_space(prog, tensors, initialized=None) -> tuple[Space, dict]:
    """Every tensor at its own address, a guard gap at least as large as the tensor
    between neighbours (an overrun by up to a whole tensor faults, never lands in the
    next one); bytes of tensors not in ``initialized`` (None: all) start poisoned."""
    regions, addrs, cursor = [], {}, GLOBAL_BASE
    for p in prog.params:
        if p.kind != "ptr":
            continue
        a = np.ascontiguousarray(tensors[p.tensor])
        regions.append(Region(p.tensor, cursor, a.nbytes))
        addrs[p.name] = cursor
        cursor = align_up(cursor + a.nbytes + max(GUARD, min(a.nbytes, MAX_GUARD)), 256)
    sp = Space("global", GLOBAL_BASE, regions)
    sp.tracker = Tracker(sp.buf.size, False, reads=False)
    for p in prog.params:
        if p.kind == "ptr":
            sp.fill_region(p.tensor, np.ascontiguousarray(tensors[p.tensor]))
            if initialized is None or p.tensor in initialized:
                r = sp.region(p.tensor)
                sp.tracker.init[r.start - sp.base:r.start - sp.base + r.size] = True
    sp.tracker.all_init = initialized is None or all(
        p.tensor in initialized for p in prog.params if p.kind == "ptr")
    return sp, addrs


def _param_space(prog, addrs, dims, tmaps=None) -> Space:
    regions, cursor, values, specs = [], PARAM_BASE, {}, []
    ptr_of = {p.tensor: p.name for p in prog.params if p.kind == "ptr"}
    for p in prog.params:
        size = p.dtype.bytes * max(getattr(p, "count", 1) or 1, 1)
        cursor = align_up(cursor, max(p.dtype.bytes, getattr(p, "align", 0) or 0))
        regions.append(Region(p.name, cursor, size))
        cursor += size
        if p.kind == "tmap":
            spec = (tmaps or {}).get(p.tensor)
            if spec is None or p.tensor not in ptr_of:
                raise LaunchError(f"tensor-map parameter {p.name}: no tensor map for argument "
                                  f"{p.tensor} (run the kernel with kernel.interpret)",
                                  user_location())
            specs.append(spec.with_address(addrs[ptr_of[p.tensor]]))
            values[p.name] = tensormap_handle(len(specs) - 1)
        elif p.kind == "ptr":
            values[p.name] = np.array(addrs[p.name], np.uint64)
        elif p.kind in ("dim", "stride"):
            values[p.name] = np.array(dims[p.tensor or p.name.rsplit("_", 1)[0]],
                                      p.dtype.np_dtype)
        else:
            raise LaunchError(f"parameter {p.name} of kind {p.kind!r} has no value", user_location())
    sp = Space("param", PARAM_BASE, regions)
    sp.tensormaps = specs
    for name, v in values.items():
        sp.fill_region(name, v)
    return sp


def _shared_regions(prog) -> list[Region]:
    regions, cursor = [], SHARED_BASE
    for d in prog.shared:
        cursor = align_up(cursor, max(d.align, 16))
        regions.append(Region(d.name, cursor, d.nbytes))
        # A guard gap as large as the variable (at least 4 KiB) makes an overrun of
        # one fault instead of landing in the next.
        cursor += d.nbytes + max(4096, d.nbytes)
    return regions


def _run_batch(prog, top, block, grid, first, n, gsp, psp, sregions, opts) -> None:
    """Run CTAs ``first .. first+n-1``: in lockstep first, and if a thread must wait for
    one lockstep has not run, again from the start with finer scheduling units."""
    snapshot = gsp.buf.copy()
    init = gsp.tracker.init.copy()
    ladder = None
    level = -1
    while True:
        gsp.tracker.reset()   # CTAs of earlier batches ran first: nothing to order against
        shared = Space("shared", SHARED_BASE, sregions, rows=n)
        shared.tracker = Tracker(shared.buf.size, False)
        spaces = {"global": gsp, "param": psp, "shared": shared,
                  "local": Space("local", 0, []), "const": Space("const", 0, [])}
        mach = Machine(prog, tuple(block), tuple(grid), first, n, spaces, opts["cluster"])
        mach.max_steps = opts["max_steps"]
        mach.check_init = not opts["allow_uninitialized"]
        if opts.get("pdl"):
            mach.grid_waited = np.zeros(mach.T, bool)
        try:
            if level < 0:
                mach.run(top)
            else:
                mach.per_thread = ladder[level][0] == "thread"
                mach.split_warpgroups = ladder[level][0] != "warpgroup"
                run_units(mach, top, ladder[level][1], level == len(ladder) - 1)
            transactions.at_exit(mach)
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
                initialized=None, allow_uninitialized: bool = False,
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
    """
    _check_supported(prog)
    handlers = handlers_for_run()
    top = compiled(prog, handlers)
    gsp, addrs = _global_space(prog, tensors, initialized)
    psp = _param_space(prog, addrs, dims, tmaps)
    sregions = _shared_regions(prog)
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
                       {"max_steps": max_steps, "allow_uninitialized": allow_uninitialized,
                        "cluster": cluster, "pdl": pdl})
    out = {}
    for p in prog.params:
        if p.kind == "ptr":
            t = tensors[p.tensor]
            out[p.tensor] = gsp.region_bytes(p.tensor).copy().view(t.dtype).reshape(t.shape)
    return out
