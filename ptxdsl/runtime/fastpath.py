"""The launch fast path: the parameter-buffer layout and the generated per-kernel call.

:class:`~ptxdsl.runtime.launcher.Launcher` owns the entries (one per argument
signature); this module writes the few lines of Python that find an entry and
launch it (see the launcher's module docstring for what a fast call does), and
binds an entry for callers that key signatures themselves.
"""
from __future__ import annotations

import ctypes
import struct

from .args import Binding, single_dtype, stream_handle

_STRUCT_CODE = {("u", 64): "Q", ("s", 64): "q", ("b", 64): "Q", ("u", 32): "I", ("s", 32): "i",
                ("b", 32): "I", ("f", 32): "f", ("f", 64): "d", ("u", 16): "H", ("s", 16): "h",
                ("b", 16): "H", ("u", 8): "B", ("s", 8): "b", ("b", 8): "B"}


class ParamLayout:
    """Where each kernel parameter lives in the packed parameter buffer (natural alignment,
    which is the ABI layout ``CU_LAUNCH_PARAM_BUFFER_POINTER`` needs)."""

    def __init__(self, params):
        self.params = tuple(params)
        self.offsets: list[int] = []
        self.codes: list[str] = []
        off = 0
        for p in self.params:
            size = p.dtype.bytes
            off = -(-off // size) * size
            self.offsets.append(off)
            self.codes.append(_STRUCT_CODE[(p.dtype.kind, p.dtype.bits)])
            off += size
        self.size = -(-off // 8) * 8
        n_ptr = sum(1 for p in self.params if p.kind == "ptr")
        # The fast path packs only the pointers; it needs them first, back to back.
        self.ptr_prefix = all(p.kind == "ptr" for p in self.params[:n_ptr]) and \
            self.offsets[:n_ptr] == [8 * i for i in range(n_ptr)]
        self.n_ptr = n_ptr
        self.pack_ptrs = struct.Struct("<" + "Q" * n_ptr).pack_into

    def values(self, ptrs: list[int], binding: Binding) -> list:
        out, it = [], iter(ptrs)
        for p in self.params:
            if p.kind == "ptr":
                out.append(next(it))
            elif p.kind == "dim":
                out.append(binding.dims[p.tensor or p.name.removesuffix("_dim")])
            else:
                out.append(binding.strides[p.tensor or p.name.removesuffix("_stride")])
        return out

    def buffer(self, values: list):
        """A fresh ctypes buffer holding ``values``, and the kernelParams pointer array."""
        buf = ctypes.create_string_buffer(max(self.size, 8))
        for code, off, v in zip(self.codes, self.offsets, values):
            struct.pack_into("<" + code, buf, off, v)
        base = ctypes.addressof(buf)
        arr = (ctypes.c_void_p * max(len(self.params), 1))(*[base + o for o in self.offsets])
        return buf, arr


def generate(self) -> dict:
    """The per-kernel call function (source generated and exec-ed) and its globals."""
    sig, n_in, n_all = self.sig, self.sig.n_in, self.sig.n_all
    strided = [bool(getattr(s, "stride", None)) for s in sig.specs]
    itemsize = [s.dtype.bytes for s in sig.specs]

    def key_expr(idx):
        parts = []
        for i in idx:
            layout = f"a{i}.stride()" if strided[i] else f"a{i}.is_contiguous()"
            parts.append(f"a{i}.shape, a{i}.dtype, a{i}.get_device(), {layout}")
        return "(" + ", ".join(parts) + ",)"

    def unpack(idx):
        return ", ".join(f"a{i}" for i in idx) + ("," if len(idx) == 1 else "")

    def align_check(idx, ind):
        conds = [f"p{i} & {sig.align[i] - 1}" for i in idx if sig.align[i] > itemsize[i]]
        return [f"{ind}if {' or '.join(conds)}:", f"{ind}    return SLOW(args, stream, kw)"] \
            if conds else []

    outs = list(range(n_in, n_all))
    out_expr = ("None" if not outs else f"a{outs[0]}" if len(outs) == 1
                else "(" + ", ".join(f"a{j}" for j in outs) + ")")
    ptrs = ", ".join(f"p{i}" for i in range(n_all))
    # cuLaunchCooperativeKernel takes no trailing ``extra``.
    if self.cooperative:
        call_args = "cs, params"
    elif self.mode == "ctypes":
        call_args = "cs, params, None"
    else:
        call_args = "cs, params, 0"
    failed = "r" if self.mode == "ctypes" else "r[0]"
    # An output may be allocated with empty_like(input) when its Tile is the input's
    # and that Tile admits one dtype only (so the input's dtype is the one the
    # general path would allocate; a .b32 tile admits float32 and int32).
    like = {}
    for j in outs:
        for i in range(n_in):
            sj, si = sig.specs[j], sig.specs[i]
            if (sj.dims == si.dims and sj.dtype == si.dtype and not strided[i]
                    and single_dtype(sj.dtype)):
                like[j] = i
                break
    L = ["def __call__(self, *args, stream=None, **kw):"]
    if not self.fast_hits_possible:
        L.append("    return SLOW(args, stream, kw)")
    else:
        L += ["    if kw:", "        return SLOW(args, stream, kw)", "    n = len(args)",
              f"    if n == {n_all}:",
              f"        {unpack(range(n_all))} = args",
              "        try:", f"            key = {key_expr(range(n_all))}",
              "        except Exception:", "            return SLOW(args, stream, kw)",
              "        e = ENTRIES.get(key)", "        if e is None:",
              "            return SLOW(args, stream, kw)"]
        L += [f"        p{i} = a{i}.data_ptr()" for i in range(n_all)]
        L += align_check(range(n_all), "        ")
        if outs and n_in > 0:
            L += [f"    elif n == {n_in}:",
                  f"        {unpack(range(n_in))} = args",
                  "        try:", f"            key = {key_expr(range(n_in))}",
                  "        except Exception:", "            return SLOW(args, stream, kw)",
                  "        e = ENTRIES.get(key)", "        if e is None:",
                  "            return SLOW(args, stream, kw)"]
            L += [f"        p{i} = a{i}.data_ptr()" for i in range(n_in)]
            L += align_check(range(n_in), "        ")
            for k, j in enumerate(outs):
                L.append(f"        a{j} = EMPTY_LIKE(a{like[j]})" if j in like
                         else f"        a{j} = e[13][{k}]()")
                L.append(f"        p{j} = a{j}.data_ptr()")
        L += ["    else:", "        return SLOW(args, stream, kw)",
              "    dev, func, gx, gy, gz, bx, by, bz, smem, lock, pack, buf, params, allocs"
              " = e",
              "    s = RAW_STREAM(dev) if stream is None else STREAM_HANDLE(stream)",
              "    cs = STREAMS.get(s)", "    if cs is None:", "        cs = STREAM_OBJ(s)",
              "    if TLS.device != dev or CUR_DEV() != dev:",
              f"        return RELAUNCH(e, ({ptrs},), s, {out_expr}, None)",
              "    with lock:", f"        pack(buf, 0, {ptrs})",
              f"        r = LAUNCH(func, gx, gy, gz, bx, by, bz, smem, {call_args})",
              f"    if {failed}:",
              f"        return RELAUNCH(e, ({ptrs},), s, {out_expr}, {failed})"]
        if self.sync_always:
            L.append("    SYNC(e, s)")
        L.append(f"    return {out_expr}")
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
        "SLOW": self._slow, "RELAUNCH": self._relaunch, "SYNC": self._sync_entry,
        "ENTRIES": self.entries, "STREAM_HANDLE": stream_handle, "TLS": drv.tls,
        # Filled when torch is first seen (entries exist only for torch tensors).
        "RAW_STREAM": None, "EMPTY_LIKE": None, "CUR_DEV": None,
    }
    if self.mode == "ctypes":
        cl = self._ctypes
        g.update(LAUNCH=cl.fn, STREAMS=cl._voidp, STREAM_OBJ=cl.handle)
    else:
        g.update(LAUNCH=drv.launch_raw_cooperative if self.cooperative else drv.launch_raw,
                 STREAMS=getattr(drv, "_streams", {}), STREAM_OBJ=drv.stream)
    exec(compile(src, f"<ptxdsl launcher for {sig.name}>", "exec"), g)  # noqa: S102
    g["__source__"] = src
    g["__launcher_class__"] = type(f"Launcher[{sig.name}]", (type(self),),
                                   {"__call__": g["__call__"], "__module__": type(self).__module__})
    g["__like__"] = like
    return g


def bind(self, *args):
    """A launch bound to the exact signature of ``args`` (torch tensors, inputs and
    outputs): ``run(*data_ptrs)`` packs the pointers and launches on torch's current
    stream, skipping the per-call signature and alignment checks.

    For callers that key their own cache on everything the signature is made of
    (shapes, strides, dtypes, device, 16-byte alignment), as ``ptxdsl.ops`` does.
    Returns None when ``args`` have no fast-path entry (e.g. not torch tensors).
    """
    self.warm(*args)
    try:
        e = self.entries.get(self._g["KEY_ALL"](args))
    except Exception:
        return None
    if e is None:
        return None
    dev, func, gx, gy, gz, bx, by, bz, smem, lock, pack, buf, params, _ = e
    g = self._g
    raw_stream, cur_dev, streams, stream_obj = g["RAW_STREAM"], g["CUR_DEV"], \
        g["STREAMS"], g["STREAM_OBJ"]
    launch, tls, relaunch = g["LAUNCH"], self.drv.tls, self._relaunch
    ctypes_mode = self.mode == "ctypes"
    # The launch function's trailing argument: ``extra`` (none for a cooperative launch).
    tail = () if self.cooperative else (None,) if ctypes_mode else (0,)

    def run(*ptrs):
        s = raw_stream(dev)
        cs = streams.get(s)
        if cs is None:
            cs = stream_obj(s)
        if tls.device != dev or cur_dev() != dev:
            return relaunch(e, ptrs, s, None, None)
        with lock:
            pack(buf, 0, *ptrs)
            r = launch(func, gx, gy, gz, bx, by, bz, smem, cs, params, *tail)
        code = r if ctypes_mode else r[0]
        if code:
            return relaunch(e, ptrs, s, None, code)
        return None
    return run
