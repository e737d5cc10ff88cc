"""The contenders of ``bench/rmsnorm.py`` (``bench/rmsnorm_long.py`` takes some of them):
forward ``(x, w) -> y``, backward ``(dy, x, w, rstd) -> (dx, dw)``. ptxdsl, the torch
formula in eager mode, ``F.rms_norm``, ``torch.compile``, a plain Triton kernel, and the
optional peers, imported once (:func:`peers`), each one that cannot be imported named in
a note (never a silent gap):

* Liger (``liger-kernel``): ``LigerRMSNormFunction``, an autograd function.
* pyptx: the forward kernel its wheel ships (float32 only, no backward).
* Quack (``quack-kernels``, CuTe DSL; needs NVIDIA's CUTLASS DSL and a GPU):
  ``quack.rmsnorm.rmsnorm_fwd(x, weight, ..., eps=, store_rstd=)`` returns ``(out,
  residual_out, rstd)`` and ``rmsnorm_bwd(x, weight, dout, rstd)`` returns ``(dx, dw,
  db, dresidual)`` (the signatures of quack-kernels 0.6.5). Each compiles its kernel on
  the first call per dtype and row length: the benchmark's validation call, never timed.
"""
from __future__ import annotations

import functools
import importlib
import sys
import types

EPS = 1e-6


def _torch():
    import torch
    return torch


@functools.lru_cache(maxsize=None)
def triton_rms_fwd():
    """A plain Triton RMSNorm (one program per row, the row in one block); one
    ``triton.jit`` function per process (Triton caches its compiles per BLOCK)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _k(X, W, Y, stride, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)

    def run(x, w):
        y = _torch().empty_like(x)
        n = x.shape[-1]
        block = triton.next_power_of_2(n)
        warps = min(max(block // 256, 1), 16)
        _k[(x.shape[0],)](x, w, y, x.stride(0), n, EPS, BLOCK=block, num_warps=warps)
        return y
    return run


def _import_pyptx_rms_norm():
    """pyptx's RMSNorm: the module ``pyptx.examples.hopper.rms_norm`` that the pyptx
    wheel ships (``build_rms_norm(B, N, eps=..., arch=...)`` returns a kernel that takes
    torch tensors ``(x, w)`` and returns ``y``). The module imports ``jax`` at its top for
    its own JAX demo, which the kernel and the torch path never use; where jax is not
    installed it is imported with an empty stand-in ``jax`` that is removed right after."""
    importlib.import_module("pyptx")  # ImportError: not installed
    name = "pyptx.examples.hopper.rms_norm"
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if not (e.name or "").startswith("jax"):
            raise
    saved = {n: sys.modules.get(n) for n in ("jax", "jax.numpy")}
    stub, stub_np = types.ModuleType("jax"), types.ModuleType("jax.numpy")
    stub.numpy = stub_np
    sys.modules["jax"], sys.modules["jax.numpy"] = stub, stub_np
    try:
        return importlib.import_module(name)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def _version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return None


_INSTALL = "install: bash bench/gpu_session.sh with .whl/"
_INSTALL_QUACK = ("install quack-kernels with nvidia-cutlass-dsl, and put the DSL's "
                  "dsl_packages folder on PYTHONPATH")


@functools.lru_cache(maxsize=None)
def peers():
    """The optional peers, imported once: ``{"liger": LigerRMSNormFunction or None,
    "pyptx": pyptx's rms_norm module or None, "quack": quack.rmsnorm or None,
    "versions": {...}, "notes": [...]}``. A peer that cannot be imported gets a note
    (printed, and kept in the JSON), never a silent gap."""
    out = {"liger": None, "pyptx": None, "quack": None, "versions": {}, "notes": []}
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        out["liger"] = LigerRMSNormFunction
        out["versions"]["liger"] = _version("liger-kernel")
    except Exception as e:
        out["notes"].append(f"liger not available ({type(e).__name__}: {str(e)[:160]}); "
                            f"it is left out ({_INSTALL})")
    try:
        out["pyptx"] = _import_pyptx_rms_norm()
        out["versions"]["pyptx"] = _version("pyptx")
        out["notes"].append("pyptx has no RMSNorm backward (its wheel ships a forward "
                            "kernel only, float32, N a multiple of 32): forward table only")
    except Exception as e:
        out["notes"].append(f"pyptx not available ({type(e).__name__}: {str(e)[:160]}); "
                            f"it is left out ({_INSTALL})")
    try:
        mod = importlib.import_module("quack.rmsnorm")
        for name in ("rmsnorm_fwd", "rmsnorm_bwd"):
            if not callable(getattr(mod, name, None)):
                raise ImportError(f"quack.rmsnorm has no {name}")
        out["quack"] = mod
        out["versions"]["quack"] = _version("quack-kernels")
        out["versions"]["cutlass-dsl"] = _version("nvidia-cutlass-dsl")
    except Exception as e:  # ImportError, or the CUTLASS DSL failing to load
        out["notes"].append(f"quack not available ({type(e).__name__}: {str(e)[:160]}); "
                            f"it is left out ({_INSTALL_QUACK})")
    return out


_PYPTX_KERNELS: dict = {}


def pyptx_rms_fwd(mod, eps: float):
    """pyptx's forward: one kernel per (B, N), built (traced, JIT-compiled, registered
    with its launch shim) on the first call, i.e. in the validation call."""
    torch = _torch()
    try:
        from pyptx import detect_arch
        arch = detect_arch()
    except Exception:
        arch = "sm_90a"

    def run(x, w):
        if x.dtype != torch.float32 or w.dtype != torch.float32:
            raise TypeError(f"pyptx's RMSNorm kernel is float32 only, not {x.dtype}")
        key = (tuple(x.shape), arch)
        k = _PYPTX_KERNELS.get(key)
        if k is None:
            b, n = x.shape
            k = _PYPTX_KERNELS[key] = mod.build_rms_norm(b, n, eps=eps, arch=arch)
        return k(x, w)
    return run


def quack_fwd(mod, eps: float):
    """Quack's forward as ``(x, w) -> y``. Without ``store_rstd``: every forward
    contender writes y only (ptxdsl's ``rms_norm`` is timed without ``return_rstd``)."""
    def run(x, w):
        return mod.rmsnorm_fwd(x, w, eps=eps, store_rstd=False)[0]
    return run


def quack_bwd(mod):
    """Quack's backward as ``(dy, x, w, rstd) -> (dx, dw)``, from the saved ``rstd`` as
    ptxdsl's ``rms_norm_backward`` is timed; its dW partials' sum (a torch reduction it
    launches itself) is part of the call."""
    def run(dy, x, w, rstd):
        dx, dw = mod.rmsnorm_bwd(x, w, dy, rstd)[:2]
        return dx, dw
    return run


def quack_bwd_bytes(m: int, n: int, itemsize: int, w_itemsize: int, sms: int) -> int:
    """Bytes of one RMSNorm backward as Quack's benchmark counts them
    (``benchmarks/benchmark_rmsnorm.py`` of quack 0.6.4): x and dY read and dX written
    (3·M·N elements), the weight, rstd (M float32), and the dW partials, one float32 row
    of N per CTA of a grid of twice the SMs."""
    return 3 * m * n * itemsize + n * w_itemsize + 4 * m + 2 * sms * n * 4


def _fresh_compile_state():
    """Forget every graph torch.compile has made, so that the contenders built next
    compile for their own (shape, dtype).

    Dynamo caches compiled graphs on the Python code object, so one compiled function
    (or several made from one ``lambda``/``def``) run over many shapes recompiles per
    shape until dynamo's recompile limit (8) and then silently runs eager. Resetting
    before each contender set gives one compile per (shape, dtype); the limits are
    raised as well (``recompile_limit``, ``cache_size_limit`` in older torch), and
    hitting one raises where torch offers that, so a fall-back shows as an error cell
    rather than as a slow number.
    """
    _torch()
    import torch._dynamo as dynamo
    dynamo.reset()
    cfg = dynamo.config
    for names, value in ((("recompile_limit", "cache_size_limit"), 64),
                         (("accumulated_recompile_limit", "accumulated_cache_size_limit"), 1024)):
        for name in names:  # set one name only: newer torch keeps the old one as an alias
            if hasattr(cfg, name):
                setattr(cfg, name, max(int(getattr(cfg, name)), value))
                break
    for name in ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit"):
        if hasattr(cfg, name):
            setattr(cfg, name, True)
            break


def _compiled_rms_norm():
    """A new ``torch.compile`` of ``F.rms_norm`` (static shapes); compiles on its first call."""
    torch = _torch()
    import torch.nn.functional as F

    def rms_norm_compiled(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, EPS)
    return torch.compile(rms_norm_compiled, dynamic=False)


# Liger: offset 0.0 and casting mode "gemma" compute y = x * rstd * w in float32 and
# round once to the input dtype, as every other contender does ("llama" multiplies by
# w in the input dtype after a rounding; the bytes moved are the same either way).
LIGER_ARGS = (EPS, 0.0, "gemma")


def fwd_contenders(dtype):
    """The forward contenders for one (shape, dtype): call once per shape (it resets
    torch.compile's state, see ``_fresh_compile_state``)."""
    torch = _torch()
    import torch.nn.functional as F
    from ptxdsl.ops import rms_norm
    _fresh_compile_state()
    p = peers()
    out = {}
    # The same bytes as the forward: read x, write y.
    out["ptxdsl"] = lambda x, w: rms_norm(x, w, EPS)
    out["eager"] = lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True)
                                                          + EPS) * w.float()).to(x.dtype)
    out["F.rms_norm"] = lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS)
    out["torch.compile"] = _compiled_rms_norm()
    try:
        out["triton"] = triton_rms_fwd()
    except Exception:
        pass
    if p["liger"] is not None:
        liger = p["liger"]
        out["liger"] = lambda x, w: liger.apply(x, w, *LIGER_ARGS)
    if p["pyptx"] is not None:
        out["pyptx"] = pyptx_rms_fwd(p["pyptx"], EPS)
    if p["quack"] is not None:
        out["quack"] = quack_fwd(p["quack"], EPS)
    return out


class _AutogradBackward:
    """The backward of an autograd forward ``f(x, w)``, timed alone.

    ``prepare(sets)`` (called by ``_measure`` before validation, untimed) runs the
    forward once per input set and keeps its graph; each call is then one
    ``torch.autograd.grad(y, (x, w), dy, retain_graph=True)``: the backward kernels
    and the autograd engine's work, without the forward. ``own_dy`` gives the
    contender its own copy of each ``dy`` (Liger writes dx into dy in place).
    """

    def __init__(self, f, own_dy=False):
        self.f, self.own_dy, self.graphs = f, own_dy, {}

    def prepare(self, sets):
        for dy, x, w, _rstd in sets:
            xg = x.detach().requires_grad_()
            wg = w.detach().requires_grad_()
            y = self.f(xg, wg)
            self.graphs[id(x)] = (y, xg, wg, dy.clone() if self.own_dy else None)

    def __call__(self, dy, x, w, rstd):
        y, xg, wg, own = self.graphs[id(x)]
        return _torch().autograd.grad(y, (xg, wg), dy if own is None else own,
                                      retain_graph=True)


def bwd_contenders(dtype):
    """The backward contenders for one (shape, dtype): call once per shape."""
    import torch.nn.functional as F
    from ptxdsl.ops import rms_norm_backward
    _fresh_compile_state()
    p = peers()
    out = {}

    out["ptxdsl"] = lambda dy, x, w, rstd: rms_norm_backward(dy, x, w, rstd)
    out["F.rms_norm"] = _AutogradBackward(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS))
    out["torch.compile"] = _AutogradBackward(_compiled_rms_norm())
    if p["liger"] is not None:
        liger = p["liger"]
        # in_place=True (Liger's default): dx is written over (its own copy of) dy.
        out["liger"] = _AutogradBackward(lambda x, w: liger.apply(x, w, *LIGER_ARGS, True),
                                         own_dy=True)
    if p["quack"] is not None:
        out["quack"] = quack_bwd(p["quack"])
    return out


# Every contender bench/rmsnorm.py can run (the peers only where installed).
CONTENDERS = ("ptxdsl", "eager", "F.rms_norm", "torch.compile", "triton", "liger", "pyptx",
              "quack")

def parse_only(spec, fail) -> set | None:
    """The contender names of ``--only`` (``fail`` on a name no contender has)."""
    if not spec:
        return None
    got = {n.strip() for n in spec.split(",") if n.strip()} - {"copy"}
    unknown = sorted(got - set(CONTENDERS))
    if unknown:
        fail(f"--only: unknown contender(s) {', '.join(unknown)}; known: "
             f"{', '.join(CONTENDERS)}")
    return got


def only_contenders(build, only: set | None):
    """``build`` (``fwd_contenders`` or ``bwd_contenders``) keeping the contenders in
    ``only`` (all when None); the copy is added by the bench functions, always."""
    if not only:
        return build
    return lambda dtype: {k: v for k, v in build(dtype).items() if k in only}
