"""Launching kernels: a general path that checks everything, and a prepared fast path.

``kernel(*args)`` (or :func:`launch`) goes through the kernel's
:class:`Launcher`, created once per kernel by :func:`prepare`. A call is

* **fast** when every argument is a CUDA torch tensor whose signature (shape,
  dtype, device, contiguity or strides of each tensor) was seen before: the
  launcher finds a prepared *entry* (the loaded CUfunction, grid, block, shared
  memory, the output allocators, and a ctypes parameter buffer in which the named
  dims and strides are already written), first by the entry's C++ tensor guard,
  else by the signature key in a dict. What is left per call: one ``data_ptr()``
  per tensor, torch's raw current stream, an output allocation when outputs are
  not passed, one ``struct.pack_into`` of the pointers into the buffer, and
  ``cuLaunchKernel`` with the address of the buffer's pointer array as
  ``kernelParams``. The call function is generated per kernel (``exec`` of a few
  lines with the argument count, the key expressions and the alignment masks
  written out), so nothing loops over arguments at run time; see
  :mod:`ptxdsl.runtime.fastpath`. ``kernel(...)`` runs the same function: the
  kernel's launcher makes it the call of the kernel object (see :func:`prepare`);
* **general** otherwise (numpy, cupy, jax/DLPack, a first call, ``sync=True``,
  clusters, ...): every argument is read into an :class:`ArgView`, checked
  against the Tile specs (:func:`ptxdsl.runtime.args.bind`), the kernel is
  loaded on the arguments' device if needed, limits are checked, outputs are
  allocated in the inputs' framework, numpy arrays are staged through the GPU,
  and the launch is checked. A general call with torch tensors leaves an entry
  behind for the fast path.

Choosing the launch call: ``PTXDSL_LAUNCH=c`` (default) launches through the launch
shim of :mod:`.cshim`, a small C extension compiled with the machine's C compiler at
first use (optional: one C call packs the pointers and launches); ``params`` passes a
``kernelParams`` array of pointers through cuda.bindings (plain cuda-python), which is
also what every launcher falls back to where the shim cannot be built.
``bench/launch_overhead.py`` measures both.

Errors: a failed launch raises :class:`CudaError` naming the kernel. Kernel
faults (an illegal address) are asynchronous: they surface at a later call, and
they are sticky (the context is unusable afterwards, see
:class:`ptxdsl.runtime.driver.CudaError`). ``PTXDSL_SYNC=1`` or
``kernel(..., sync=True)`` synchronises after the launch so the fault is
reported by the call that caused it.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass, field

from ..core.errors import LaunchError, user_location
from . import driver as _driver
from .adapter import (ArgProblem, ArgView, allocate, classify, dlpack_device, stream_handle,
                      view_of)
from .args import Binding, KernelSignature, bind, dtype_name_for_tile
from .compile import KernelFunction, load_function
from .driver import CudaError
from . import fastpath, hostcheck, torch_private
from .fastpath import ParamLayout
from .limits import LaunchLimits, _leave_quietly
from .memory import Staging
from .tensormaps import TensorMapParams

__all__ = ["LAUNCH_MODES", "Launcher", "ParamLayout", "launch", "prepare"]

LAUNCH_MODES = ("params", "c")
# The mode a launcher uses unless PTXDSL_LAUNCH or prepare(mode=...) says otherwise
# ("c" where the launch shim builds, else "params"); bench/launch_overhead.py reports
# which mode is fastest on the machine it runs on.
DEFAULT_MODE = "c"
_CONTEXT_ERRORS = frozenset({"CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_INVALID_HANDLE"})
_OPTIONS = hostcheck.OPTIONS
_MAX_ENTRIES = 4096


def _env_flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    return value not in ("0", "false", "no", "off")


class Launcher(LaunchLimits):
    """The prepared launches of one kernel (see the module docstring).

    Call it like the kernel: ``launcher(*inputs)`` or ``launcher(*inputs, *outputs)``;
    keyword options: ``stream=``, ``sync=``, ``shared_mem=`` (dynamic shared
    memory bytes), ``cluster=`` (cluster dims, launched with cuLaunchKernelEx),
    ``device=`` (for calls with only host arrays). Returns the output (or a tuple
    of outputs).
    """

    def __new__(cls, kernel, **kw):
        # Each launcher is made as an instance of a subclass of its own, whose __call__
        # becomes the generated call in __init__: a call runs it with no frame of ours
        # in between. An object's class never changes after it is made.
        name = getattr(kernel, "name", "kernel")
        own = type(f"Launcher[{name}]", (cls,), {"__module__": cls.__module__})
        return super().__new__(own)

    def __init__(self, kernel, *, mode: str | None = None, drv=None):
        self.kernel = kernel
        self.drv = drv if drv is not None else _driver.get()
        self.mode = (mode or os.environ.get("PTXDSL_LAUNCH", "") or DEFAULT_MODE).strip().lower()
        if self.mode not in LAUNCH_MODES:
            raise LaunchError(f"PTXDSL_LAUNCH={self.mode!r}: use one of {', '.join(LAUNCH_MODES)}")
        self.sync_always = _env_flag("PTXDSL_SYNC")
        compiled = kernel.compile()
        self.sig = KernelSignature.of(kernel, compiled.program)
        self.layout = ParamLayout(compiled.program.params)
        self.tmaps = TensorMapParams(self.drv, self.sig, compiled.program.params)
        # The kernel's own cluster shape (kernel(cluster=...)): every launch, fast ones
        # too, goes through cuLaunchKernelEx with it.
        self.cluster = _cluster_dims(getattr(kernel, "cluster", None))
        # A programmatic dependent launch (kernel(pdl=True)) carries its attribute on every
        # launch (cuLaunchKernelEx) unless PTXDSL_PDL=0: then the kernel is launched plainly
        # and its griddepcontrol instructions return at once.
        self.pdl = bool(getattr(kernel, "pdl", False)) and _env_flag("PTXDSL_PDL", True)
        # The launch shim (mode "c"): where it cannot be built here, or the driver is not
        # cuda.bindings' (a test's fake), the params mode launches instead.
        self._c = self.drv.c_launcher() if self.mode == "c" and hasattr(
            self.drv, "c_launcher") else None
        if self.mode == "c" and self._c is None:
            self.mode = "params"
        self.functions: dict[int, KernelFunction] = {}
        # Fast-path entries by signature key (bounded; the last-used entry per argument
        # count is kept by the generated call itself).
        self.signatures = fastpath.Signatures(limit=_MAX_ENTRIES)
        self._fn_lock = threading.Lock()
        self.cooperative = bool(getattr(kernel, "cooperative", False))
        self.fast_hits_possible = self.layout.ptr_prefix and self.sig.n_all > 0
        self._g = self._generate()
        type(self).__call__ = self._g["__call__"]

    def __repr__(self) -> str:
        return (f"<ptxdsl Launcher {self.sig.describe_call()} mode={self.mode} "
                f"devices={sorted(self.functions)} entries={len(self.signatures)}>")

    @property
    def entries(self) -> dict:
        """The fast-path entries by signature key (read-only use; see :attr:`signatures`)."""
        return self.signatures.entries

    # ------------------------------------------------------------------ code generation
    def _generate(self) -> dict:
        return fastpath.generate(self)

    @property
    def source(self) -> str:
        """The generated fast-path source (for the curious and for tests)."""
        return self._g["__source__"]

    # ------------------------------------------------------------------ loading
    def function(self, device: int) -> KernelFunction:
        """The kernel loaded on ``device`` (compiled and cached on first use)."""
        kf = self.functions.get(device)
        if kf is None:
            with self._fn_lock:
                kf = self.functions.get(device)
                if kf is None:
                    kf = self.functions[device] = load_function(self.drv, self.kernel, device)
        return kf

    def specialisation(self, device: int) -> tuple[int, str, str]:
        """``(device, cubin arch, cache key)``: what one loaded module is specialised on.
        Named dims are not in it: one module serves every value."""
        kf = self.function(device)
        return (device, kf.arch, kf.key)

    def bind(self, *args):
        """A launch bound to the exact signature of ``args`` (torch tensors, inputs and
        outputs): ``run(*data_ptrs)`` packs the pointers and launches on torch's current
        stream, skipping the per-call signature and alignment checks.

        For callers that key their own cache on everything the signature is made of
        (shapes, strides, dtypes, device, 16-byte alignment), as the ops' memo does
        (:mod:`ptxdsl.runtime.memo`).
        Returns None when ``args`` have no fast-path entry (e.g. not torch tensors).
        """
        return fastpath.bind(self, *args)

    def warm(self, *args, **kw) -> None:
        """Do everything a call with these arguments does except the launch: load the
        kernel on their device and prepare the fast-path entry."""
        self._slow(args, kw.pop("stream", None), kw, launch=False)

    # ------------------------------------------------------------------ the general path
    def _options(self, kw: dict) -> dict:
        opts = hostcheck.check_options(self.sig, self.kernel, kw)
        opts["sync"] = opts["sync"] or self.sync_always
        return opts

    slow_calls = 0  # general-path calls (per instance once incremented): a fast-path miss meter

    def _slow(self, args, stream, kw, *, launch: bool = True):
        """The general path: read and check every argument, load, allocate, launch."""
        self.slow_calls += 1
        opts = self._options(kw)
        call = self._read(args, stream, opts)
        binding = bind(self.sig, call.views)
        if binding.device >= 0 and opts["device"] is not None and binding.device != opts["device"]:
            raise LaunchError(f"{self.sig.describe_call()}: device={opts['device']} but the "
                              f"arrays are on cuda:{binding.device}", user_location())
        if binding.device >= 0:
            call.device = binding.device
        kf = self.function(call.device)
        # A named dim of 0 means empty tensors: nothing to launch.
        grid = None if 0 in binding.dims.values() else self.kernel.grid_for(binding.dims)
        block = tuple(self.kernel.block)
        smem = int(opts["shared_mem"])
        if grid is not None:
            self._check_limits(kf, self.drv.device(call.device), grid, block, smem,
                               opts["cluster"])
        result = self._allocate_outputs(call, binding)
        if grid is None:
            return result
        if launch:
            self._run(call, binding, kf, grid, block, smem, opts)
        if not set(kw) - set(self.sig.raw_names):
            # an entry serves plain calls (and raw values, which are in its key); options
            # (shared_mem=...) are per call
            self._maybe_entry(args, call, binding, kf, grid, block, smem, opts, kw)
        return result

    def _read(self, args, stream, opts) -> "_Call":
        """Classify and read every argument; choose the device and the stream."""
        sig = self.sig
        n = len(args)
        if n not in (sig.n_in, sig.n_all):
            raise LaunchError(f"{sig.describe_call()}: takes {sig.n_in} input(s)"
                              + (f" and optionally {sig.n_out} output(s)" if sig.n_out else "")
                              + f", got {n} argument(s)", user_location())
        call = _Call(list(args) + [None] * (sig.n_all - n))
        for i, obj in enumerate(call.objs):
            if obj is None:
                if i < sig.n_in:
                    raise self._arg_error(i, "is None")
                call.kinds.append(None)
                continue
            kind = classify(obj)
            if not kind:
                raise self._arg_error(i, f"is a {type(obj).__name__}, not an array (pass a numpy "
                                      f"array, a torch/cupy/jax array, or an object with "
                                      f"__cuda_array_interface__ or __dlpack__)")
            if i >= sig.n_in:
                hostcheck.check_output(sig, i, obj, kind)
            call.kinds.append(kind)
        # Views; DLPack capsules wait for the stream, which may depend on the device.
        call.views = [None] * sig.n_all
        for i, (obj, kind) in enumerate(zip(call.objs, call.kinds)):
            if kind is not None and kind != "dlpack":
                try:
                    call.views[i] = view_of(obj, kind, pointer_device=self._pointer_device)
                except ArgProblem as exc:
                    raise self._arg_error(i, str(exc)) from None
        device = opts["device"]
        if device is None:
            device = next((v.device for v in call.views if v is not None and v.device >= 0),
                          None)
        if device is None:
            device = next((dlpack_device(o)[1] for o, k in zip(call.objs, call.kinds)
                           if k == "dlpack"), None)
        call.device = device if device is not None else max(self.drv.current_device(), 0)
        call.stream = (stream_handle(stream) if stream is not None
                       else self._default_stream(call))
        for i, (obj, kind) in enumerate(zip(call.objs, call.kinds)):
            if kind == "dlpack":
                try:
                    call.views[i] = view_of(obj, kind, stream=call.stream)
                except ArgProblem as exc:
                    raise self._arg_error(i, str(exc)) from None
        return call

    def _allocate_outputs(self, call: "_Call", binding: Binding):
        """Allocate the outputs not passed, in the framework of the first device input
        (numpy when every input is a host array); returns the call's result."""
        sig = self.sig
        device_kinds = [v.kind for v in call.views[:sig.n_in] if v is not None and v.device >= 0]
        framework = device_kinds[0] if device_kinds else "numpy"
        if framework == "torch":
            self._bind_torch()
        elif framework in ("cai", "dlpack"):
            framework = "device"
        outs = []
        for k, j in enumerate(range(sig.n_in, sig.n_all)):
            if call.objs[j] is None:
                name = dtype_name_for_tile(sig.specs[j].dtype)
                if framework != "torch" and name == "bfloat16":
                    name = "uint16"  # bf16 bit patterns where the framework has no bf16
                obj = allocate(framework, tuple(binding.out_shapes[k]), name, call.device,
                               stream=call.stream)
                call.objs[j] = obj
                call.kinds[j] = classify(obj)
                call.views[j] = view_of(obj, call.kinds[j], pointer_device=self._pointer_device)
                call.allocated.add(j)
            outs.append(call.objs[j])
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    def _run(self, call: "_Call", binding: Binding, kf: KernelFunction, grid, block,
             smem: int, opts: dict) -> None:
        """Stage host arrays, launch, wait when asked (or for host outputs), unstage."""
        drv, sig, s, views = self.drv, self.sig, call.stream, call.views
        staging = None
        pushed = drv.enter(call.device)
        try:
            if any(v.kind == "numpy" for v in views):
                staging = Staging(drv, s)
            ptrs = []
            for j, v in enumerate(views):
                if v.kind == "numpy":
                    # Explicit outputs are copied in too: a kernel may read what it updates.
                    v.ptr = staging.upload(v.obj, copy=j not in call.allocated)
                elif v.kind == "cai" and _other_stream(v.stream, s):
                    drv.stream_wait_stream(s, v.stream)  # the producer's work comes first
                ptrs.append(v.ptr)
            arrays = self.tmaps.values(views, binding.dims) if self.tmaps else None
            buf, arr = self.layout.buffer(self.layout.values(ptrs, binding, arrays,
                                                             opts["raw"]))
            if self.tmaps:
                self.tmaps.repoint(self.layout.array_addresses(arr), ptrs)
            try:
                drv.launch(kf.func, grid, block, smem, s, ctypes.addressof(arr), opts["cluster"],
                           self.cooperative, self.pdl)
            except CudaError as exc:
                raise exc.for_kernel(sig.name) from None
            try:
                if staging is not None:
                    for j in range(sig.n_in, sig.n_all):
                        if views[j].kind == "numpy":
                            staging.download(views[j].ptr, views[j].obj)
                    staging.finish()
                elif opts["sync"]:
                    drv.stream_sync(s)
            except CudaError as exc:
                # Kernel faults surface here, at the first call that waits for the kernel.
                raise exc.for_kernel(sig.name, "the launch (found when waiting for it)") \
                    from None
            del buf, arr
        finally:
            if staging is not None:
                staging.close()
            if pushed:
                _leave_quietly(drv)

    def _arg_error(self, i: int, text: str) -> LaunchError:
        sig = self.sig
        role = "input" if i < sig.n_in else "output"
        return LaunchError(f"{sig.describe_call()}: {role} {sig.arg_names[i]} (argument {i + 1}) "
                           f"{text}", user_location())

    def _pointer_device(self, ptr: int) -> int:
        fn = getattr(self.drv, "pointer_device", None)
        return fn(ptr) if fn is not None else -1

    def _default_stream(self, call: "_Call") -> int:
        """torch's current stream for torch tensors, cupy's for cupy arrays, a CAI
        producer's stream, else the legacy default stream (0)."""
        live = [v for v in call.views if v is not None and v.device >= 0]
        if any(v.kind == "torch" for v in live):
            self._bind_torch()
            return self._g["RAW_STREAM"](call.device)
        if any(v.kind == "cupy" for v in live):
            cupy = sys.modules["cupy"]
            with cupy.cuda.Device(call.device):
                return int(cupy.cuda.get_current_stream().ptr)
        for v in live:
            if v is not None and v.kind == "cai" and v.stream not in (None, 1):
                return int(v.stream)
        return 0

    _torch: torch_private.TorchHooks | None = None

    def _bind_torch(self) -> None:
        torch = sys.modules["torch"]
        hooks = self._torch
        if hooks is None or hooks.torch is not torch:
            hooks = self._torch = torch_private.hooks(torch)
            g = self._g
            g["RAW_STREAM"], g["CUR_DEV"] = hooks.raw_stream, hooks.current_device

    # ------------------------------------------------------------------ fast-path entries
    def _maybe_entry(self, args, call: "_Call", binding, kf, grid, block, smem, opts,
                     kw=None) -> None:
        """After a general call with CUDA torch tensors only: the fast-path entry for its
        signature (dims, strides, grid, output layout and parameter buffers fixed)."""
        sig = self.sig
        if not self.fast_hits_possible or opts["cluster"] != self.cluster:
            return
        if any(k != "torch" for k in call.kinds) or (opts["sync"] and not self.sync_always):
            return
        n = len(args)
        try:
            key = self._g["KEY_ALL" if n == sig.n_all else "KEY_IN"](args)
            rk = ()
            if sig.raw:
                rk = self._g["RAW_KEY"](kw or {})
                key = (key, rk)   # as the generated call builds it
        except Exception:  # noqa: BLE001 - not hashable / not torch after all
            return
        self._bind_torch()
        hooks = self._torch
        allocs, out_meta = [], []
        if n == sig.n_in:
            for j in range(sig.n_in, sig.n_all):
                o = call.objs[j]  # as the general path allocated it
                allocs.append(hooks.allocator(o.shape, o.stride(), o.dtype, binding.device))
                out_meta.append((tuple(o.shape), o.dtype))
        arrays = self.tmaps.values(call.views, binding.dims) if self.tmaps else None
        values = self.layout.values([0] * sig.n_all, binding, arrays, opts["raw"])
        buf, arr = self.layout.buffer(values)    # the owner thread's
        sbuf, sarr = self.layout.buffer(values)  # every other thread's, under the lock
        params, sparams = ctypes.addressof(arr), ctypes.addressof(sarr)
        func = int(kf.func) if self.mode == "c" else kf.func
        tmaps = {}
        if self.tmaps:  # the maps in each buffer, re-pointed by every fast call
            tmaps = dict(tmap_own=self.tmaps.handles(self.layout.array_addresses(arr)),
                         tmap_shared=self.tmaps.handles(self.layout.array_addresses(sarr)))
        entry = fastpath.Entry(
            guard=hooks.guard(args), dev=binding.device, func=func, gx=grid[0], gy=grid[1],
            gz=grid[2], bx=block[0], by=block[1], bz=block[2], smem=smem, buf=buf,
            params=params, owner=threading.get_ident(), lock=threading.Lock(), sbuf=sbuf,
            sparams=sparams, allocs=tuple(allocs), keep=(arr, sarr), kernel_function=kf,
            out_meta=tuple(out_meta), buf_addr=ctypes.addressof(buf),
            sbuf_addr=ctypes.addressof(sbuf), raw=rk, **tmaps)
        self.signatures.add(key, entry)

    def _relaunch(self, e, ptrs, s, out, code):
        """The fast path's way out: the thread's current context is not (known to be) the
        entry's device, or the launch failed. Launches with the context made current
        (pushed and popped if another one was current) and reports errors."""
        drv = self.drv
        if code is not None:
            name = drv.error_name(code)
            if name not in _CONTEXT_ERRORS:
                call = ("cuLaunchKernelEx" if self.cluster or self.pdl else
                        "cuLaunchCooperativeKernel" if self.cooperative else "cuLaunchKernel")
                raise drv.error(code, call).for_kernel(self.sig.name)
            drv.forget_thread_device()
        dev = e.dev
        pushed = drv.enter(dev)
        try:
            buf, arr = self.layout.buffer(self._values_from_entry(e, ptrs))
            if self.tmaps:
                self.tmaps.repoint(self.layout.array_addresses(arr), ptrs)
            try:
                drv.launch(e.kernel_function.func, e.grid, e.block, e.smem, s,
                           ctypes.addressof(arr), self.cluster, self.cooperative, self.pdl)
            except CudaError as exc:
                raise exc.for_kernel(self.sig.name) from None
            if self.sync_always:
                self._sync_entry(e, s)
        finally:
            if pushed:
                _leave_quietly(drv)
        return out

    def _relaunch_alloc(self, e, in_ptrs, s):
        """:meth:`_relaunch` for a call whose outputs ptxdsl allocates: torch's current
        device may not be the entry's, so the outputs name their device."""
        torch = sys.modules["torch"]
        device = torch.device("cuda", e.dev)
        outs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in e.out_meta]
        ptrs = tuple(in_ptrs) + tuple(o.data_ptr() for o in outs)
        return self._relaunch(e, ptrs, s, outs[0] if len(outs) == 1 else tuple(outs), None)

    def _values_from_entry(self, e, ptrs) -> list:
        """All parameter values: the new pointers plus the constants in the entry's buffer."""
        return list(ptrs) + self.layout.read(e.buf, e.keep[0])

    def _sync_entry(self, e, s) -> None:
        try:
            self._in_context(e.dev, self.drv.stream_sync, s)
        except CudaError as exc:
            raise exc.for_kernel(self.sig.name, "the launch (found when waiting for it)") \
                from None


@dataclass
class _Call:
    """One general-path call while it is being prepared."""

    objs: list
    kinds: list = field(default_factory=list)
    views: list[ArgView | None] = field(default_factory=list)
    device: int = 0
    stream: int = 0
    allocated: set = field(default_factory=set)  # output positions ptxdsl allocated


def _cluster_dims(c):
    if c is None:
        return None
    c = (c,) if isinstance(c, int) else tuple(c)
    return c + (1,) * (3 - len(c))


def _other_stream(producer: int | None, s: int) -> bool:
    """Whether a CAI producer stream differs from the launch stream (None: no sync
    needed; 1 is the legacy default stream, which the launch calls 0)."""
    if producer is None:
        return False
    return (0 if producer == 1 else producer) != (0 if s == 1 else s)


# ---------------------------------------------------------------------- public entry points
_prepare_lock = threading.Lock()


def prepare(kernel, *example_args, mode: str | None = None, **kw) -> Launcher:
    """The kernel's :class:`Launcher`, created once and kept in ``kernel.runtime_cache``.

    With example arguments it is also warmed: the kernel is compiled and loaded on
    their device and their signature gets a fast-path entry, so the first real call
    is already fast. ``mode`` (see :data:`LAUNCH_MODES`) makes a separate launcher
    that is not cached (the benchmark compares them).

    Creating the cached launcher also routes ``kernel(...)`` to it directly: the kernel
    object's class becomes a subclass of its own whose ``__call__`` is the launcher's
    generated call (what ``Kernel.__call__`` would reach through ``runtime_cache``,
    minus one Python call and one dict lookup per launch).
    """
    if mode is not None:
        launcher = Launcher(kernel, mode=mode)
    else:
        launcher = kernel.runtime_cache.get("launcher")
        if launcher is None:
            with _prepare_lock:
                launcher = kernel.runtime_cache.get("launcher")
                if launcher is None:
                    launcher = Launcher(kernel)
                    _route_calls(kernel, launcher)
                    kernel.runtime_cache["launcher"] = launcher
    if example_args:
        launcher.warm(*example_args, **kw)
    return launcher


def _route_calls(kernel, launcher: Launcher) -> None:
    """Make ``kernel(...)`` call ``launcher``'s generated function (it ignores ``self``)
    with no ``Kernel.__call__`` in between: every Kernel is made as the one instance of
    a class of its own (``Kernel.__new__``), whose ``__call__`` this sets. Other kernel
    objects keep their ``__call__``, which finds the launcher in ``runtime_cache``."""
    cls = type(kernel)
    if cls.__dict__.get("_ptxdsl_own_class"):
        cls.__call__ = launcher._g["__call__"]


def launch(kernel, *args, **kwargs):
    """Launch ``kernel`` on ``args`` (what ``kernel(*args)`` does); see :class:`Launcher`."""
    launcher = kernel.runtime_cache.get("launcher")
    if launcher is None:
        try:
            launcher = prepare(kernel)
        except _driver.DriverUnavailable:
            # No GPU here: a bad argument is still the first thing to report.
            hostcheck.precheck(kernel, args, kwargs)
            raise
    return launcher(*args, **kwargs)
