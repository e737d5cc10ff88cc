"""The launch fast path: the parameter-buffer layout, the fast-path entries, what torch
offers for them, and the generated per-kernel call.

:class:`~ptxdsl.runtime.launcher.Launcher` creates the entries (one per argument
signature, after a general-path call); this module writes the few lines of Python
that find an entry and launch it, and binds an entry for callers that key
signatures themselves.

What a fast call does (``launcher(x, y)`` for a kernel with 2 inputs and 1 output;
the code is generated per kernel with the argument count, key expressions and
alignment masks written out, so nothing loops at run time):

1. **find the entry**: the entry last used with this argument count is tried first,
   with its *guard*: torch's C++ tensor check (``TensorGuards.check``, what
   ``torch.compile`` guards tensors with) built from the tensors that made the entry;
   it passes only for tensors of the same type, dispatch keys, dtype, device, sizes,
   strides and ``requires_grad``. Otherwise the signature key (shape, dtype, device
   and contiguity or strides of each tensor) is looked up in the launcher's dict;
   a miss goes to the general path, which checks, explains and makes an entry.
   The guard is strictly finer than the key, so it never picks an entry the key
   would not; it fails (and the key decides) for the same tensor passed twice, and
   for calls under another dispatch state than the entry's (``inference_mode``).
2. one ``data_ptr()`` per tensor, and the alignment masks of vector accesses;
3. torch's raw current stream; whether this thread's CUDA context and torch's
   current device are the entry's device (if not, the careful path launches);
4. outputs not passed: allocated with the shape, strides and dtype the general path
   chose, through torch's caching allocator on the current device (inductor's
   ``_empty_strided_cuda``, which skips the argument parser and the dispatcher, when
   torch has it; unlike ``torch.empty`` it does not fill the memory with NaN under
   ``torch.use_deterministic_algorithms``);
5. the pointers packed into the entry's parameter buffer and ``cuLaunchKernel``,
   which reads the buffer with the GIL released. So the buffer needs exclusion: the
   thread that made the entry packs its own buffer without a lock (nobody else
   writes it); other threads share a second buffer under a lock.

What the fast path calls in torch (the raw stream, the current device, the entry
guard, the output allocator) comes from :mod:`ptxdsl.runtime.torch_private`, which
holds every private torch call behind its version gate and ``PTXDSL_TORCH_PRIVATE``.
"""
from __future__ import annotations

import ctypes
import struct
import threading
from typing import Callable, NamedTuple

from .adapter import stream_handle
from .args import Binding
from .torch_private import never

_STRUCT_CODE = {("u", 64): "Q", ("s", 64): "q", ("b", 64): "Q", ("u", 32): "I", ("s", 32): "i",
                ("b", 32): "I", ("f", 32): "f", ("f", 64): "d", ("u", 16): "H", ("s", 16): "h",
                ("b", 16): "H", ("u", 8): "B", ("s", 8): "b", ("b", 8): "B",
                ("f", 16): "e"}


class ParamLayout:
    """Where each kernel parameter lives in the packed parameter buffer (natural alignment,
    which is the ABI layout ``CU_LAUNCH_PARAM_BUFFER_POINTER`` needs)."""

    def __init__(self, params):
        self.params = tuple(params)
        self.offsets: list[int] = []
        self.codes: list[str] = []
        # Array parameters (tensor maps, ``.align 64 .b8 name[128]``) live after the
        # scalars at an address aligned as they ask (kernelParams points at each
        # parameter separately): (position, bytes, alignment), and their offset from the
        # end of the scalars in a buffer whose address is 0 mod the largest alignment.
        self.arrays: list[tuple[int, int, int]] = []
        off = 0
        for k, p in enumerate(self.params):
            if getattr(p, "count", 1) > 1:
                self.offsets.append(-1)
                self.codes.append(f"{p.nbytes}s")
                self.arrays.append((k, p.nbytes, p.alignment))
                continue
            size = p.dtype.bytes
            off = -(-off // size) * size
            self.offsets.append(off)
            self.codes.append(_STRUCT_CODE[(p.dtype.kind, p.dtype.bits)])
            off += size
        self.size = -(-off // 8) * 8
        self.array_align = max((a for _, _, a in self.arrays), default=8)
        self.array_bytes = sum(-(-n // self.array_align) * self.array_align
                               for _, n, _ in self.arrays)
        n_ptr = sum(1 for p in self.params if p.kind == "ptr")
        # The fast path packs only the pointers; it needs them first, back to back.
        self.ptr_prefix = all(p.kind == "ptr" for p in self.params[:n_ptr]) and \
            self.offsets[:n_ptr] == [8 * i for i in range(n_ptr)]
        self.n_ptr = n_ptr
        self.pack_ptrs = struct.Struct("<" + "Q" * n_ptr).pack_into

    def values(self, ptrs: list[int], binding: Binding, arrays: dict | None = None,
               raw: dict | None = None) -> list:
        """Every parameter's value: the pointers, the named dims and strides of
        ``binding``, ``raw[name]`` for raw parameters naming no dim (checked values,
        :func:`ptxdsl.core.entry.raw_values`), and ``arrays[position]`` (bytes) for the
        other array parameters (zeros if not given)."""
        out, it = [], iter(ptrs)
        for k, p in enumerate(self.params):
            if p.kind == "ptr":
                out.append(next(it))
            elif p.kind == "raw":
                out.append(self.raw_value(k, (raw or {})[p.name]))
            elif p.kind == "dim":
                out.append(binding.dims[p.tensor or p.name.removesuffix("_dim")])
            elif p.kind == "stride":
                out.append(binding.strides[p.tensor or p.name.removesuffix("_stride")])
            else:
                out.append((arrays or {}).get(k, bytes(p.nbytes)))
        return out

    def raw_value(self, k: int, v):
        """Parameter ``k``'s checked raw value (a numpy scalar holding its bits, or the
        bytes of an array) as ``struct`` packs it with the parameter's code."""
        code = self.codes[k]
        if code.endswith("s"):
            return bytes(memoryview(v).cast("B"))
        if code in "efd":
            return float(v)
        u, bits = int(v), 8 * self.params[k].dtype.bytes
        return u - (1 << bits) if code in "bhiq" and u >> (bits - 1) else u

    def buffer(self, values: list):
        """A fresh ctypes buffer holding ``values``, and the kernelParams pointer array."""
        extra = self.array_bytes + self.array_align if self.arrays else 0
        buf = ctypes.create_string_buffer(max(self.size + extra, 8))
        base = ctypes.addressof(buf)
        addrs = [base + o for o in self.offsets]
        if self.arrays:
            a = -(-(base + self.size) // self.array_align) * self.array_align
            for k, n, _ in self.arrays:
                addrs[k] = a
                a += -(-n // self.array_align) * self.array_align
        for code, off, v, addr in zip(self.codes, self.offsets, values, addrs):
            struct.pack_into("<" + code, buf, addr - base, v)
        arr = (ctypes.c_void_p * max(len(self.params), 1))(*addrs)
        return buf, arr

    def array_addresses(self, arr) -> list[int]:
        """Where the array parameters of a buffer made by :meth:`buffer` live (in
        parameter order), from its kernelParams array ``arr``."""
        return [int(arr[k]) for k, _, _ in self.arrays]

    def read(self, buf, arr) -> list:
        """The values of the non-pointer parameters held in a buffer (for a relaunch)."""
        base = ctypes.addressof(buf)
        raw = bytes(buf)
        return [struct.unpack_from("<" + code, raw, int(arr[k]) - base)[0]
                for k, code in enumerate(self.codes) if k >= self.n_ptr]


# ---------------------------------------------------------------------- entries
class Entry(NamedTuple):
    """A prepared launch for one argument signature (see the module docstring).

    The generated call unpacks it in one step (``_, dev, func, ... = e``, written
    from :attr:`_fields`, so the order lives here only); the careful path and
    :func:`bind` read it by name.
    """

    guard: Callable          # guard(*tensors): True only for tensors of this signature
    dev: int                 # CUDA ordinal
    func: object             # the CUfunction (its address as an int in the c mode)
    gx: int
    gy: int
    gz: int
    bx: int
    by: int
    bz: int
    smem: int                # dynamic shared memory bytes
    buf: object              # the owner thread's parameter buffer ...
    params: object           # ... and its kernelParams value
    owner: int               # the owner thread's id
    lock: object             # other threads share sbuf/sparams under this lock
    sbuf: object
    sparams: object
    allocs: tuple            # one allocator per output ptxdsl allocates (() when passed)
    keep: tuple              # the kernelParams arrays params/sparams point into
    kernel_function: object  # the loaded KernelFunction (the careful path launches it)
    out_meta: tuple          # (shape, dtype) of each output ptxdsl allocates
    tmap_own: tuple = ()     # tensor maps in buf / sbuf, re-pointed by every fast call
    tmap_shared: tuple = ()
    buf_addr: int = 0        # buf's and sbuf's addresses (the launch shim packs there)
    sbuf_addr: int = 0
    raw: tuple = ()          # the raw parameter values written in the buffers (raw_key)

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.gx, self.gy, self.gz)

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.bx, self.by, self.bz)


# What the generated call unpacks by name; the rest of an Entry it skips.
_UNPACKED = frozenset({"dev", "func", "gx", "gy", "gz", "bx", "by", "bz", "smem", "buf",
                       "params", "owner", "lock", "sbuf", "sparams", "allocs", "buf_addr",
                       "sbuf_addr"})


NO_ENTRY = (never,)  # what the generated call tries first before any entry was used


def raw_key(names: tuple):
    """The key of a call's raw parameter values (``kw``: its keywords but ``stream``):
    each value with its type, in parameter order; raises (KeyError, or TypeError when
    hashed) for a call the general path must take: a value missing, an unknown keyword,
    an unhashable value (a numpy array)."""
    n = len(names)

    def key(kw):
        if len(kw) != n:
            raise KeyError("keywords other than the raw parameters")
        k = tuple((type(v), v) for v in (kw[name] for name in names))
        hash(k)
        return k
    return key


class Signatures:
    """Fast-path entries by signature key, bounded and clearable, and the entry used
    last, which a call tries first by its guard: at most two lookups (the guard, then
    the key) before a launch or the general path. The launcher keeps one per kernel
    (its generated call reads ``entries`` and keeps the last-used entry per argument
    count itself)."""

    __slots__ = ("entries", "hot", "limit", "_lock")

    def __init__(self, hot=None, limit: int = 4096):
        self.entries: dict = {}
        self.hot = hot          # the entry used last (its guard is tried first)
        self.limit = limit
        self._lock = threading.Lock()

    def add(self, key, entry):
        """Keep ``entry`` for ``key`` (the first one stays if two threads race); past
        ``limit`` entries the oldest is dropped. Returns the entry kept."""
        with self._lock:
            if key not in self.entries and len(self.entries) >= self.limit:
                self.entries.pop(next(iter(self.entries)))
            return self.entries.setdefault(key, entry)

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self, hot=None) -> None:
        with self._lock:
            self.entries.clear()
            self.hot = hot


# ---------------------------------------------------------------------- the generated call
def generate(self) -> dict:
    """The per-kernel call function (source generated and exec-ed) and its globals."""
    sig, n_in, n_all = self.sig, self.sig.n_in, self.sig.n_all
    strided = [bool(getattr(s, "stride", None)) or getattr(getattr(s, "tma", None), "strided",
                                                           False) for s in sig.specs]
    itemsize = [s.dtype.bytes for s in sig.specs]

    def key_expr(idx):
        parts = []
        for i in idx:
            layout = f"a{i}.stride()" if strided[i] else f"a{i}.is_contiguous()"
            # .device, not .get_device(): another accelerator's tensor on index 0 must
            # not share a key with a CUDA tensor.
            parts.append(f"a{i}.shape, a{i}.dtype, a{i}.device, {layout}")
        return "(" + ", ".join(parts) + ",)"

    def names(prefix, idx):
        return ", ".join(f"{prefix}{i}" for i in idx)

    def unpack(idx):
        return names("a", idx) + ("," if len(idx) == 1 else "")

    outs = list(range(n_in, n_all))
    out_expr = ("None" if not outs else f"a{outs[0]}" if len(outs) == 1
                else "(" + ", ".join(f"a{j}" for j in outs) + ")")
    ptrs = names("p", range(n_all))
    # cuLaunchCooperativeKernel takes no trailing ``extra``.
    tail = "" if self.cooperative else ", 0"
    tmap_args = self.tmaps.args if getattr(self, "tmaps", None) else ()

    def repoint(handles):
        """Tensor maps re-pointed at this call's tensors (see runtime.tensormaps)."""
        if not tmap_args:
            return []
        out = [f"{'    ' * 3}tm = e.{handles}"]
        for k, i in enumerate(tmap_args):
            out += [f"{'    ' * 3}if REPOINT(tm[{k}], p{i})[0]:",
                    f"{'    ' * 4}return SLOW(args, stream, kw)"]
        return out
    c_mode = self.mode == "c"
    failed = "r" if c_mode else "r[0]"
    # The launch shim's call: the fixed arguments, then the pointers it packs into buf.
    cluster_args = "CX, CY, CZ, FLAGS, " if c_mode and _ex_launch(self) else ""

    def c_launch(params, buf, ptr_list):
        return (f"r = LAUNCH(func, gx, gy, gz, bx, by, bz, smem, s, {params}, {buf}, "
                f"{cluster_args}{ptr_list})")

    def block(n, hot):
        """The code for calls with ``n`` arguments; ``hot`` names the global holding
        the entry last used with that many."""
        idx = range(n)
        raw_check = " or e.raw != rk" if sig.raw else ""
        L = [f"    if n == {n}:",
             f"        {unpack(idx)} = args",
             f"        e = {hot}",
             f"        if not e[0]({names('a', idx)}){raw_check}:",
             "            try:",
             f"                key = {key_expr(idx)}" + (", rk" if sig.raw else ""),
             "            except Exception:",
             "                return SLOW(args, stream, kw)",
             "            e = ENTRIES.get(key)",
             "            if e is None:",
             "                return SLOW(args, stream, kw)",
             f"            {hot} = e",
             f"        {', '.join(f if f in _UNPACKED else '_' for f in Entry._fields)} = e"]
        L += [f"        p{i} = a{i}.data_ptr()" for i in idx]
        conds = [f"p{i} & {sig.align[i] - 1}" for i in idx if sig.align[i] > itemsize[i]]
        if conds:
            L += [f"        if {' or '.join(conds)}:", "            return SLOW(args, stream, kw)"]
        L += ["        s = RAW_STREAM(dev) if stream is None else STREAM_HANDLE(stream)"]
        if not c_mode:
            L += ["        cs = STREAMS.get(s)", "        if cs is None:",
                  "            cs = STREAM_OBJ(s)"]
        L += ["        if TLS.device != dev or CUR_DEV() != dev:"]
        if n == n_all:
            L.append(f"            return RELAUNCH(e, ({ptrs},), s, {out_expr}, None)")
        else:
            L.append(f"            return RELAUNCH_ALLOC(e, ({names('p', idx)},), s)")
            for k, j in enumerate(outs):
                L += [f"        a{j} = allocs[{k}]()", f"        p{j} = a{j}.data_ptr()"]
        if c_mode:
            L += ["        if GET_IDENT() == owner:"] + repoint("tmap_own") + [
                  f"            {c_launch('params', 'buf_addr', ptrs)}",
                  "        else:",
                  "            with lock:"] + ["    " + x for x in repoint("tmap_shared")] + [
                  f"                {c_launch('sparams', 'sbuf_addr', ptrs)}"]
        else:
            L += ["        if GET_IDENT() == owner:",
                  f"            PACK(buf, 0, {ptrs})"] + repoint("tmap_own") + [
                  f"            r = LAUNCH(func, gx, gy, gz, bx, by, bz, smem, cs, params{tail})",
                  "        else:",
                  "            with lock:",
                  f"                PACK(sbuf, 0, {ptrs})"] + [
                      "    " + x for x in repoint("tmap_shared")] + [
                  f"                r = LAUNCH(func, gx, gy, gz, bx, by, bz, smem, cs, "
                  f"sparams{tail})"]
        L += [f"        if {failed}:",
              f"            return RELAUNCH(e, ({ptrs},), s, {out_expr}, {failed})"]
        if self.sync_always:
            L.append("        SYNC(e, s)")
        L.append(f"        return {out_expr}")
        return L

    L = ["def __call__(self, *args, stream=None, **kw):"]
    if not self.fast_hits_possible:
        L.append("    return SLOW(args, stream, kw)")
    else:
        L += ["    global HOT_ALL, HOT_IN"]
        if sig.raw:  # the raw values (by keyword) are part of the entry's key
            L += ["    try:", "        rk = RAW_KEY(kw)", "    except Exception:",
                  "        return SLOW(args, stream, kw)"]
        else:
            L += ["    if kw:", "        return SLOW(args, stream, kw)"]
        L += ["    n = len(args)"]
        L += block(n_all, "HOT_ALL")
        if outs and n_in > 0:
            L += block(n_in, "HOT_IN")
        L.append("    return SLOW(args, stream, kw)")
    # Key builders for the general path, from the same expressions as the fast path.
    L += ["", "def KEY_ALL(args):",
          f"    {unpack(range(n_all))} = args" if n_all else "    pass",
          f"    return {key_expr(range(n_all))}" if n_all else "    return ()",
          "", "def KEY_IN(args):", f"    {unpack(range(n_in))} = args" if n_in else "    pass",
          f"    return {key_expr(range(n_in))}" if n_in else "    return ()"]
    src = "\n".join(L) + "\n"
    drv = self.drv
    g = {
        "__name__": f"ptxdsl.launch.{sig.name}",
        "SLOW": self._slow, "RELAUNCH": self._relaunch, "RELAUNCH_ALLOC": self._relaunch_alloc,
        "SYNC": self._sync_entry, "ENTRIES": self.signatures.entries, "STREAM_HANDLE": stream_handle,
        "TLS": drv.tls, "GET_IDENT": threading.get_ident, "PACK": self.layout.pack_ptrs,
        "HOT_ALL": NO_ENTRY, "HOT_IN": NO_ENTRY, "RAW_KEY": raw_key(sig.raw_names),
        # Filled when torch is first seen (entries exist only for torch tensors).
        "RAW_STREAM": None, "CUR_DEV": None,
    }
    if c_mode:
        g.update(c_launch_globals(self))
    else:
        cluster = getattr(self, "cluster", None)
        g.update(LAUNCH=(drv.ex_launcher(cluster, self.cooperative, getattr(self, "pdl", False))
                         if _ex_launch(self) else
                         drv.launch_raw_cooperative if self.cooperative else drv.launch_raw),
                 STREAMS=getattr(drv, "_streams", {}), STREAM_OBJ=drv.stream)
    if tmap_args:
        g["REPOINT"] = drv.cu.cuTensorMapReplaceAddress
    exec(compile(src, f"<ptxdsl launcher for {sig.name}>", "exec"), g)  # noqa: S102
    g["__source__"] = src
    return g


def _ex_launch(self) -> bool:
    """Whether the kernel's launches need ``cuLaunchKernelEx``: a cluster shape of its
    own, or a programmatic dependent launch."""
    return bool(getattr(self, "cluster", None)) or bool(getattr(self, "pdl", False))


def c_launch_globals(self) -> dict:
    """``LAUNCH`` (the shim's function for this kernel) and, for a launch through
    ``cuLaunchKernelEx``, the cluster shape (0, 0, 0: none) and the attribute flags the
    generated call passes to it."""
    from .cshim import EX_COOPERATIVE, EX_PDL
    shim = self._c
    if _ex_launch(self):
        cluster = getattr(self, "cluster", None) or (0, 0, 0)
        flags = (EX_COOPERATIVE if self.cooperative else 0) | (
            EX_PDL if getattr(self, "pdl", False) else 0)
        return dict(LAUNCH=shim.launch_ex, CX=cluster[0], CY=cluster[1], CZ=cluster[2],
                    FLAGS=flags)
    return dict(LAUNCH=shim.launch_coop if self.cooperative else shim.launch)


def bind(self, *args):
    """A launch bound to the exact signature of ``args`` (torch tensors, inputs and
    outputs): ``run(*data_ptrs)`` packs the pointers and launches on torch's current
    stream, skipping the per-call signature and alignment checks.

    For callers that key their own cache on everything the signature is made of
    (shapes, strides, dtypes, device, 16-byte alignment), as the ops' memo does
    (:mod:`ptxdsl.runtime.memo`).
    Returns None when ``args`` have no fast-path entry (e.g. not torch tensors). The
    bound launch's ``device`` is the CUDA ordinal it launches on.

    A kernel with tensor-map parameters has its maps re-pointed at the new pointers
    first: written straight into the parameter buffer where the driver keeps the
    address as a plain 64-bit field (:meth:`TensorMapParams.address_offset`), else with
    ``cuTensorMapReplaceAddress`` on the entry's map handles.
    """
    self.warm(*args)
    try:
        e = self.signatures.entries.get(self._g["KEY_ALL"](args))
    except Exception:
        return None
    if e is None:
        return None
    if self.mode == "c":
        return _bind_c(self, e, _map_writers(self, e))
    dev, func, smem, buf, params, owner, lock, sbuf, sparams = (
        e.dev, e.func, e.smem, e.buf, e.params, e.owner, e.lock, e.sbuf, e.sparams)
    (gx, gy, gz), (bx, by, bz) = e.grid, e.block
    g = self._g
    raw_stream, cur_dev, streams, stream_obj = g["RAW_STREAM"], g["CUR_DEV"], \
        g["STREAMS"], g["STREAM_OBJ"]
    launch, pack, tls, relaunch = g["LAUNCH"], g["PACK"], self.drv.tls, self._relaunch
    get_ident = g["GET_IDENT"]
    # The launch function's trailing argument: ``extra`` (none for a cooperative launch).
    tail = () if self.cooperative else (0,)
    maps = _map_writers(self, e)

    def run(*ptrs):
        s = raw_stream(dev)
        cs = streams.get(s)
        if cs is None:
            cs = stream_obj(s)
        if tls.device != dev or cur_dev() != dev:
            return relaunch(e, ptrs, s, None, None)
        if get_ident() == owner:
            pack(buf, 0, *ptrs)
            if maps and maps[0](ptrs):
                return relaunch(e, ptrs, s, None, None)
            r = launch(func, gx, gy, gz, bx, by, bz, smem, cs, params, *tail)
        else:
            with lock:
                pack(sbuf, 0, *ptrs)
                if maps and maps[1](ptrs):
                    return relaunch(e, ptrs, s, None, None)
                r = launch(func, gx, gy, gz, bx, by, bz, smem, cs, sparams, *tail)
        code = r[0]
        if code:
            return relaunch(e, ptrs, s, None, code)
        return None
    run.device = e.dev  # the CUDA ordinal it launches on
    return run


def _bind_c(self, e, maps):
    """:func:`bind`'s launch in the ``c`` mode: the shim packs the pointers."""
    g = c_launch_globals(self)
    launch = g["LAUNCH"]
    extra = (g["CX"], g["CY"], g["CZ"], g["FLAGS"]) if "CX" in g else ()
    dev, func, smem, params, sparams = e.dev, e.func, e.smem, e.params, e.sparams
    owner, lock, baddr, sbaddr = e.owner, e.lock, e.buf_addr, e.sbuf_addr
    (gx, gy, gz), (bx, by, bz) = e.grid, e.block
    raw_stream, cur_dev = self._g["RAW_STREAM"], self._g["CUR_DEV"]
    tls, relaunch, get_ident = self.drv.tls, self._relaunch, threading.get_ident

    def run(*ptrs):
        s = raw_stream(dev)
        if tls.device != dev or cur_dev() != dev:
            return relaunch(e, ptrs, s, None, None)
        if get_ident() == owner:
            if maps and maps[0](ptrs):
                return relaunch(e, ptrs, s, None, None)
            r = launch(func, gx, gy, gz, bx, by, bz, smem, s, params, baddr, *extra, *ptrs)
        else:
            with lock:
                if maps and maps[1](ptrs):
                    return relaunch(e, ptrs, s, None, None)
                r = launch(func, gx, gy, gz, bx, by, bz, smem, s, sparams, sbaddr, *extra,
                           *ptrs)
        if r:
            return relaunch(e, ptrs, s, None, r)
        return None
    run.device = e.dev  # the CUDA ordinal it launches on
    return run


def _map_writers(self, e):
    """For a bound launch of a kernel with tensor maps: two functions (the owner's buffer,
    the shared one) that point the entry's maps at ``ptrs`` and return a truthy value on
    failure; () for a kernel without maps."""
    tm = getattr(self, "tmaps", None)
    if not tm:
        return ()
    args = tm.args
    off = tm.address_offset()

    def writer(handles, buf):
        if off is not None:       # the address field itself, in the parameter buffer
            base = ctypes.addressof(buf)
            where = tuple((int(h.getPtr()) - base + off, i) for h, i in zip(handles, args))
            pack_q = tm.PACK_ADDRESS

            def write(ptrs):
                for o, i in where:
                    pack_q(buf, o, ptrs[i])
                return False
            return write
        pairs = tuple(zip(handles, args))
        rep = tm.repoint_handle

        def repoint(ptrs):
            for h, i in pairs:
                if rep(h, ptrs[i]):
                    return True
            return False
        return repoint
    return (writer(e.tmap_own, e.buf), writer(e.tmap_shared, e.sbuf))
