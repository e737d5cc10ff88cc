"""What a ``jax_call`` on the GPU carries in its FFI call, so that ``jax.export`` of it runs
in another process: the kernel's machine code and how to launch it.

Every shape in a jax computation is static, so everything about a launch but the buffer
addresses is known when jax traces the call: the grid, the block, the dynamic shared
memory, the cluster shape, and every kernel parameter that is not a pointer (the named
dims and strides). :func:`launch_attributes` computes them with ptxdsl's launcher and
returns the FFI attributes

- ``ptxdsl_kernel``: the 63-bit content hash of the kernel's PTX (as before);
- ``ptxdsl_image``: the cubin for the GPU jax runs on (uint8 array; NUL-terminated PTX
  for the driver's JIT where ptxas is missing);
- ``ptxdsl_launch``: the launch recipe, a JSON string (:data:`FORMAT`): the entry name,
  grid, block, shared memory, cluster, cooperative / PDL flags, and the parameter
  buffer's layout with the constant values written in and the pointers' slots marked.

The FFI handler (:mod:`.jax_ffi`) runs a kernel this process has the object of through
its launcher; otherwise it runs the recipe (:func:`run_recipe`): the image is loaded
once per (hash, device) and the pointers of XLA's buffers are packed into the buffer.
Kernels with tensor-map parameters (TMA) are encoded per launch from the buffers'
addresses by the launcher, so their exported calls run only where the kernel object is
(the recipe is left out and the handler says so).
"""
from __future__ import annotations

import ctypes
import json
import struct
import threading

import numpy as np

from ..core.errors import LaunchError, PtxdslError, user_location

__all__ = ["FORMAT", "launch_attributes", "run_recipe", "loaded_images", "raw_attribute",
           "parse_raw"]

FORMAT = 1
_LOADED: dict[tuple[int, int], object] = {}    # (content hash, device) -> CUfunction
_RECIPES: dict[bytes, dict] = {}               # recipe text -> parsed recipe
_LOCK = threading.Lock()


def _views(launcher, args, outs, device: int):
    from .adapter import ArgView
    from .args import dtype_name_for_tile
    views = []
    for i, a in enumerate(list(args) + list(outs)):
        spec = launcher.sig.specs[i]
        name = np.dtype(a.dtype).name
        if name == "bfloat16" or spec.dtype.name in ("e4m3", "e5m2"):
            name = dtype_name_for_tile(spec.dtype)
        views.append(ArgView(None, "cai", tuple(a.shape), None, name, device, ptr=0,
                             where=f"cuda:{device}"))
    return views


def launch_attributes(kernel, args, outs, key: int, device: int = 0,
                      raw: dict | None = None) -> dict:
    """The FFI attributes of a call of ``kernel`` on arrays shaped like ``args`` (inputs)
    and ``outs`` (``jax.ShapeDtypeStruct`` of the outputs), on GPU ``device``; ``raw``:
    the values of its raw parameters naming no dim (``jax_call(k, K=64)``), carried as
    the ``ptxdsl_raw`` attribute (:func:`raw_attribute`) and written into the recipe."""
    from .args import bind
    from .compile import build_image, resolve_toolchain
    from .launcher import prepare

    attrs = {"ptxdsl_kernel": np.int64(key)}
    launcher = prepare(kernel)
    checked = {}
    if launcher.sig.raw:
        from ..core.entry import raw_values
        checked = raw_values(kernel.name, launcher.sig.raw, raw or {}, user_location())
        attrs["ptxdsl_raw"] = raw_attribute(raw)
    if launcher.tmaps or launcher.layout.arrays:
        return attrs   # array parameters: the recipe's flat layout has no place for them
    binding = bind(launcher.sig, _views(launcher, args, outs, device))
    kf = launcher.function(device)
    image = build_image(kernel, kernel.compile(), kf.arch,
                        tools=resolve_toolchain(launcher.drv.version()))
    layout = launcher.layout
    n_ptr = sum(1 for p in layout.params if p.kind == "ptr")
    values = layout.values([None] * n_ptr, binding, raw=checked)
    grid = kernel.grid_for(binding.dims) if 0 not in binding.dims.values() else None
    smem = int(getattr(kernel, "dynamic_shared", 0) or 0)
    recipe = {"format": FORMAT, "name": kernel.compile().program.name,
              "image": image.kind, "grid": list(grid) if grid else None,
              "block": list(kernel.block), "smem": smem,
              "cluster": list(launcher.cluster) if launcher.cluster else None,
              "cooperative": launcher.cooperative, "pdl": launcher.pdl,
              "size": layout.size, "offsets": list(layout.offsets),
              "codes": list(layout.codes), "values": values}
    if grid is not None:
        launcher._check_limits(kf, launcher.drv.device(device), grid, tuple(kernel.block),
                               smem, launcher.cluster)
    attrs["ptxdsl_image"] = np.frombuffer(image.data, np.uint8)
    attrs["ptxdsl_launch"] = json.dumps(recipe, separators=(",", ":"))
    return attrs


def raw_attribute(raw: dict) -> str:
    """Raw parameter values as the ``ptxdsl_raw`` attribute: JSON, numbers as they are,
    bytes-like values as ``{"hex": ...}``; :func:`parse_raw` reads it back."""
    out = {}
    for name, v in raw.items():
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            out[name] = v.item() if isinstance(v, np.generic) else v
        else:
            out[name] = {"hex": bytes(memoryview(v).cast("B")).hex()}
    return json.dumps(out, separators=(",", ":"))


def parse_raw(text: bytes) -> dict:
    """The keyword values of a ``ptxdsl_raw`` attribute (see :func:`raw_attribute`)."""
    return {k: bytes.fromhex(v["hex"]) if isinstance(v, dict) else v
            for k, v in json.loads(text.decode()).items()}


def loaded_images() -> int:
    """How many (kernel, device) images the recipe path has loaded in this process."""
    return len(_LOADED)


def _function(drv, key: int, image: bytes, recipe: dict, device: int):
    func = _LOADED.get((key, device))
    if func is None:
        with _LOCK:
            func = _LOADED.get((key, device))
            if func is None:
                module, _ = drv.load_module(image, jit=recipe["image"] == "ptx")
                func = drv.get_function(module, recipe["name"])
                if recipe["smem"] > 48 * 1024:
                    drv.set_func_attribute(
                        func, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
                        recipe["smem"])
                if recipe["cluster"] and recipe["cluster"][0] * recipe["cluster"][1] * \
                        recipe["cluster"][2] > 8:
                    drv.set_func_attribute(
                        func, "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1)
                _LOADED[(key, device)] = func
    return func


def parse_recipe(text: bytes) -> dict:
    """The recipe of a ``ptxdsl_launch`` attribute (parsed once per distinct text)."""
    recipe = _RECIPES.get(text)
    if recipe is None:
        recipe = json.loads(text.decode())
        if recipe.get("format") != FORMAT:
            raise PtxdslError(f"ptxdsl_launch recipe format {recipe.get('format')!r}; this "
                              f"ptxdsl reads format {FORMAT} (export and run with the same "
                              f"ptxdsl version)")
        with _LOCK:
            if len(_RECIPES) > 1024:
                _RECIPES.clear()
            _RECIPES[text] = recipe
    return recipe


def run_recipe(drv, key: int, image: bytes, recipe_text: bytes, pointers: list[int],
               stream: int) -> None:
    """Launch an exported call: ``pointers`` are XLA's buffers (inputs, then outputs)."""
    recipe = parse_recipe(recipe_text)
    if recipe["grid"] is None:      # empty arrays: nothing to launch
        return
    # XLA calls the handler with its device's context current; the primary context of
    # that device otherwise (what ptxdsl's launcher uses)
    device = max(drv.current_device(), 0)
    pushed = drv.enter(device)
    try:
        _launch(drv, _function(drv, key, image, recipe, device), recipe, pointers, stream)
    finally:
        if pushed:
            drv.leave()


def _launch(drv, func, recipe: dict, pointers: list[int], stream: int) -> None:
    values, it = [], iter(pointers)
    for v in recipe["values"]:
        values.append(next(it) if v is None else v)
    buf = ctypes.create_string_buffer(max(recipe["size"], 8))
    base = ctypes.addressof(buf)
    for code, off, v in zip(recipe["codes"], recipe["offsets"], values):
        struct.pack_into("<" + code, buf, off, v)
    arr = (ctypes.c_void_p * max(len(values), 1))(*(base + o for o in recipe["offsets"]))
    cluster = tuple(recipe["cluster"]) if recipe["cluster"] else None
    drv.launch(func, tuple(recipe["grid"]), tuple(recipe["block"]), recipe["smem"], stream,
               ctypes.addressof(arr), cluster, recipe["cooperative"], recipe["pdl"])


def no_recipe(key: int) -> LaunchError:
    return LaunchError(f"no kernel with content hash {key} was passed to jax_call in this "
                       f"process, and the call carries no launch recipe (kernels with "
                       f"tensor-map parameters run where their jax_call was made)",
                       user_location())
