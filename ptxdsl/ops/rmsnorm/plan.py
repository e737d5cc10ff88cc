"""Which RMSNorm kernel a call runs: the plan table's configuration (:mod:`.config`,
``plans.json``) for the call's device class, dtype, row length and rows, and the
refinements left to code: what ptxas and the driver's occupancy calculator allow
(registers, spills, resident CTAs and clusters), alignment, and cluster fitting.
"""
from __future__ import annotations

import dataclasses

from ...core.errors import LaunchError, ToolchainError
from ...core.types import PtxType
from ...runtime.adapter import address as data_ptr, element_strides as strides
from .._common.kernels import KernelCache
from .bwd import MAX_FUSED_ROWS, build_backward, plan_backward
from .bwd_dw import build_dw_reduce
from .bwd_cluster import build_backward_cluster
from .config import RowConfig, choose
from .devices import Device
from .fwd_cluster import build_forward_cluster, plan_cluster
from .fwd import WARP, build_forward, max_vec, plan
from .fwd_loop import build_forward_loop, loop_ctas_per_sm
from .plan_long import long_rows
from .quant import build_quant, plan_quant

__all__ = ["KERNELS", "backward_kernel", "ctas_per_sm", "dw_reduce_kernel", "forward_kernel",
           "long_rows", "quant_kernel", "row_config", "vec_for"]

# Built kernels, keyed by (kind, N, dtype, weight dtype, vec, variant flags, eps, arch, grid).
KERNELS = KernelCache()


def vec_for(n, dtype, weight, wdtype, *arrays) -> int:
    """Widest access every row of every array, and the weight, allow."""
    vec = max_vec(n, dtype)
    for a in arrays:
        if a is None:
            continue
        while vec > 1 and (strides(a)[0] % vec or data_ptr(a) % (vec * dtype.bytes)):
            vec //= 2
    while vec > 1 and data_ptr(weight) % (vec * wdtype.bytes):
        vec //= 2
    return vec


# ---------------------------------------------------------------- forward
def forward_kernel(n, dt, wdt, vec, residual, want_rstd, eps, arch, sms, device=None,
                   offset=0.0, m=None):
    """The forward kernel for rows of ``n`` on ``device`` (a
    :class:`~ptxdsl.runtime.driver.DeviceInfo`; None: the interpreter), for a call of
    ``m`` rows (None: unknown, taken as few); ``offset``: Gemma's, added to each weight.

    The table's cluster configurations take a residual only in the kernel that holds
    its slice in registers, and fall back to the device's one-CTA configuration where
    their split does not fit. One-CTA rows run the persistent loop where ptxas fits one
    CTA per SM and each CTA walks few enough rows (:class:`~.config.RowConfig`)."""
    cp = long_rows(n, dt, vec, arch, device).forward
    if cp is not None and (cp.stages or cp.two_pass) and residual:
        cp = plan_cluster(n, dt, vec)
    if cp is not None:
        def get(q):
            key = ("fwd_cluster", n, dt.name, wdt.name, vec, residual, want_rstd, eps, arch, q,
                   offset)
            return KERNELS.get(key, lambda: build_forward_cluster(
                q, dt, wdt, eps=eps, residual=residual, with_rstd=want_rstd, arch=arch,
                offset=offset))
        return _resident(cp, get, device)[1]
    cfg = row_config(n, dt, vec, device, arch)
    p = wide_row_plan(plan(n, dt, vec), cfg)
    cps = loop_ctas_per_sm(p)
    if (cps and m is not None and m > cfg.loop_rows_per_cta * sms * cps
            and vec * dt.bytes == 16):
        p, cps = two_pass_1024(plan(n, dt, vec, threads=1024), cfg), 0
    if cps:
        key = ("fwd_loop", n, dt.name, wdt.name, vec, residual, want_rstd, eps, arch, sms * cps,
               offset)
        k = KERNELS.get(key, lambda: build_forward_loop(p, dt, wdt, sms * cps, eps=eps,
                                                        residual=residual,
                                                        with_rstd=want_rstd, arch=arch,
                                                        offset=offset))
        if _fits(k, p.block):
            return k
    key = ("fwd", n, dt.name, wdt.name, vec, residual, want_rstd, eps, arch, offset, p)
    return KERNELS.get(key, lambda: best_row_kernel(p, dt, wdt, eps, residual, want_rstd,
                                                    arch, offset))


def row_config(n: int, dt: PtxType, vec: int, device=None, arch: str = "sm_90a") -> RowConfig:
    """The table's one-CTA forward configuration for rows of ``n`` on ``device``: its
    class's row, or where that row is a cluster kernel's (whose split did not fit), the
    row of the same class without the cluster kernels."""
    cls = Device.of(device).plan_class(arch)
    cfg = choose("forward", cls, dt, vec, n)
    if not isinstance(cfg, RowConfig):
        cfg = choose("forward", "one-cta/" + cls.split("/")[1], dt, vec, n)
    return cfg


def wide_row_plan(p, cfg: RowConfig):
    """``p``, or where ``cfg`` reads rows over 1024 threads twice and ``p`` is one,
    :func:`two_pass_1024`."""
    if not cfg.two_pass_1024 or p.rows_per_cta != 1 or p.threads != 1024:
        return p
    return two_pass_1024(p, cfg)


def two_pass_1024(p, cfg: RowConfig):
    """Row-per-CTA plan ``p`` (1024 threads) read twice, the second read's
    ``cfg.reload_values`` values issued ahead of the stores, with ``cfg``'s hints."""
    p = dataclasses.replace(p, two_pass=True, preload_w=False, reload_batch=min(
        p.per_thread, max(1, cfg.reload_values // p.vec)), y_hints=cfg.y_hints)
    if cfg.x_hints is not None:
        p = dataclasses.replace(p, x_hints=cfg.x_hints)
    return p


def best_row_kernel(p, dt, wdt, eps, residual, want_rstd, arch, offset=0.0):
    """The one-CTA-per-row kernel for plan ``p``, ptxas asked for register counts.

    A two-pass plan of at most two chunks per thread loads w after the reduction where
    that buys more CTAs per SM; its rows of 512 threads then keep x in registers where
    ptxas fits them without spilling at four CTAs per SM (``.minnctapersm``). Without
    ptxas the plan stands (measured: bench/results/rmsnorm_tune_h200.md, "forward: late
    w loads", "forward: one-pass 512-thread rows").
    """
    def build(q):
        return build_forward(q, dt, wdt, eps=eps, residual=residual, with_rstd=want_rstd,
                             arch=arch, offset=offset)
    k = build(p)
    if not (p.two_pass and p.preload_w and p.per_thread <= 2):
        return k
    lp = dataclasses.replace(p, preload_w=False, w_hints=("L1::evict_last",),
                             w_policy="evict_last")
    late = build(lp)
    try:
        late_ctas = ctas_per_sm(late, p.block)
        if late_ctas <= ctas_per_sm(k, p.block):
            return k
        if p.block == 512:
            one = build(dataclasses.replace(lp, two_pass=False, min_ctas=2048 // p.block))
            if not one.resources().spill_stores and ctas_per_sm(one, p.block) >= late_ctas:
                return one
        return late
    except ToolchainError:  # no ptxas to ask: keep the plan as it is
        return k


def ctas_per_sm(k, block: int) -> int:
    """CTAs of ``block`` threads one SM holds by registers (allocated 8 per thread at a
    time) and threads (2048): Hopper's limits, from ptxas' register count."""
    regs = -(-max(1, k.resources().registers) // 8) * 8
    return min(2048 // block, 65536 // (block * regs))


def _fits(k, block) -> bool:
    """Whether ptxas gave the kernel few enough registers for one CTA per SM (True when
    there is no ptxas to ask: the estimate that chose the kernel stands)."""
    try:
        return ctas_per_sm(k, block) >= 1
    except ToolchainError:
        return True


def _cluster_backward(n, dt, wdt, vec, arch, sms, info, offset=0.0):
    """The cluster backward's plan and kernel, its grid as many clusters as run at once
    on the device (the interpreter: ``sms // C``, at least one), or None."""
    p = long_rows(n, dt, vec, arch, info).backward
    if p is None:
        return None

    def get(q):
        return KERNELS.get(("bwd_cluster", n, dt.name, wdt.name, vec, arch, q, offset),
                           lambda: build_backward_cluster(q, dt, wdt, arch=arch,
                                                          offset=offset))
    return _resident(p, get, info)


def _resident(p, get, info):
    """``(plan, kernel)`` of a persistent cluster plan (``p.grid`` clusters) with its grid
    made as many clusters as the device runs at once (the driver's occupancy for the
    built kernel; on the interpreter the plan's own); other plans as they are."""
    k = get(p)
    if info is None or not p.stages:  # stages: the persistent kernels (their rings)
        return p, k
    from ...runtime import prepare
    q = prepare(k).resident_clusters(info.ordinal)
    if q < 1:
        raise LaunchError(f"{k.name}: {info.name} runs none of its clusters at once")
    if q != p.grid:
        p = dataclasses.replace(p, grid=q)
        k = get(p)
    return p, k


# ---------------------------------------------------------------- backward
def short_row_shape(n: int, dt: PtxType, vec: int, cfg) -> tuple[int, int]:
    """(threads per row, row groups per CTA) of short rows of ``n`` (one CTA per SM, at
    most 1024 threads) under backward configuration ``cfg``: one chunk a thread, the
    row's chunks rounded up to a warp; more, a power of two (a row group's lanes by
    masking), at least a warp."""
    chunks = -(-n // vec)
    if cfg.short_chunks == 1:
        threads = -(-chunks // WARP) * WARP
    else:
        threads = max(WARP, 1 << (-(-chunks // cfg.short_chunks) - 1).bit_length())
    return threads, max(1, min(1024 // threads,
                               int(cfg.short_rows_bytes / (4 * n * dt.bytes) + 0.5)))


def backward_kernel(n, dt: PtxType, wdt: PtxType, vec, arch, sms, info, offset=0.0,
                    m=None):
    """The backward kernel and its plan for a call of ``m`` rows (None: as many as there
    may be): the cluster backward for long rows (:func:`long_rows`), else the one-CTA
    backward of the table's configuration.

    Its persistent grid is as many CTAs as the device holds at once (the late arrivals
    that sum dW wait for the rest, :func:`~.bwd_dw.late_arrivals`): the plan's register
    estimate first, then the driver's occupancy for the compiled kernel. Short rows take
    row groups, fewer where ptxas spills or the grid would not be resident. Calls of
    fewer rows than that grid run ``m`` rounded up to a power of two CTAs
    (:meth:`~.bwd.BwdPlan.for_rows`), fused where the device's plan was or where the
    driver says the smaller grid is resident.
    """
    cluster = _cluster_backward(n, dt, wdt, vec, arch, sms, info, offset)
    if cluster is not None:
        return cluster
    cfg = choose("backward", Device.of(info).plan_class(arch), dt, vec, n, m, sms)
    p, k = _device_backward(n, dt, wdt, vec, arch, sms, info, offset, cfg)
    if m is None:
        return p, k
    q = p.for_rows(m)
    if q is p:
        return p, k
    kq = _backward_built(q, n, dt, wdt, vec, arch, offset)
    if info is not None and q.fused:
        from ...runtime import prepare
        if prepare(kq).resident_ctas(info.ordinal) < q.grid:  # its own shared memory
            if p.fused:
                return p, k
            q = dataclasses.replace(q, fused=False)
            kq = _backward_built(q, n, dt, wdt, vec, arch, offset)
    return q, kq


def _backward_built(p, n, dt, wdt, vec, arch, offset):
    """The (cached) one-CTA-per-row backward kernel of plan ``p``."""
    return KERNELS.get(("bwd", n, dt.name, wdt.name, vec, p, arch, offset),
                       lambda: build_backward(p, dt, wdt, arch=arch, offset=offset))


def _spills(k) -> bool:
    """Whether ptxas spilled registers in kernel ``k`` (False without ptxas to ask)."""
    try:
        return bool(k.resources().spill_stores)
    except ToolchainError:
        return False


def _device_backward(n, dt, wdt, vec, arch, sms, info, offset, cfg):
    """:func:`backward_kernel`'s plan and kernel for as many rows as there may be, under
    backward configuration ``cfg``."""
    from ...runtime import prepare

    def get(p):
        return _backward_built(p, n, dt, wdt, vec, arch, offset)
    p = plan_backward(n, dt, sms, vec=vec)
    ahead = cfg.l2_ahead and p.prefetch and vec * dt.bytes == 16
    # 1000: the shortest measured; power-of-two threads: a row group's lanes by masking
    short = (p.prefetch and p.threads <= 256 and n >= 1000 and vec * dt.bytes == 16
             and not p.threads & (p.threads - 1))
    if short:
        t, groups = short_row_shape(n, dt, vec, cfg)
        p = plan_backward(n, dt, sms, vec=vec, ctas_per_sm=1, threads=t, groups=groups)
        # ptxas may need more registers than one such CTA per SM has (it spills to
        # fit, .minnctapersm 1): fewer groups
        while p.groups > 1 and (
                _spills(get(p)) or info is not None
                and prepare(get(p)).resident_ctas(info.ordinal, 0) < p.grid):
            p = plan_backward(n, dt, sms, vec=vec, ctas_per_sm=1, threads=t,
                              groups=p.groups - 1)
    k = get(p)
    if info is None or not p.fused:
        return p, k
    per_sm = min(prepare(k).resident_ctas(info.ordinal, 0) // sms, 2048 // p.block, 32)
    if short:
        per_sm = min(per_sm, p.grid // sms)  # only ever fewer CTAs than chosen above
    if per_sm * sms != p.grid:
        q = plan_backward(n, dt, sms, vec=vec, ctas_per_sm=max(1, per_sm), fused=True,
                          threads=p.threads, groups=p.groups)
        kq = get(q)
        if prepare(kq).resident_ctas(info.ordinal, 0) >= q.grid and (
                q.grid < p.grid or -(-q.grid // q.slices) <= 2 * MAX_FUSED_ROWS):
            p, k = q, kq
        elif q.grid < p.grid:  # cannot happen unless occupancy changed between the builds
            raise LaunchError(f"rms_norm_backward: no resident grid fits for N={n}")
    if ahead and (p.grid == sms or short):
        r = dataclasses.replace(p, l2_ahead=True)
        kr = get(r)
        if prepare(kr).resident_ctas(info.ordinal, 0) >= r.grid:
            return r, kr
    return p, k


def dw_reduce_kernel(n: int, wdt: PtxType, grid: int, arch: str):
    """The second launch of an unfused backward: the (grid, N) partials summed into dw."""
    return KERNELS.get(("dw", n, wdt.name, grid, arch),
                       lambda: build_dw_reduce(n, grid, wdt, arch=arch))


# ---------------------------------------------------------------- FP8 output
def quant_kernel(n, dt: PtxType, wdt: PtxType, vec, residual: bool, dynamic: bool, eps: float,
                 offset: float, arch: str):
    """``rms_norm_quant``'s kernel (:mod:`.quant`): one CTA (or lane group) per row, the
    row in registers where it fits (:func:`~.quant.plan_quant`).

    As for the forward's one-pass half rows (:func:`best_row_kernel`), ptxas is asked
    for all the CTAs the threads allow (``.minnctapersm``, 2048 threads per SM) where
    its own choice of registers leaves fewer, then for one CTA more than its choice;
    the first variant that spills nothing is taken. Without ptxas the plan stands as it
    is.
    """
    key = ("quant", n, dt.name, wdt.name, vec, residual, dynamic, eps, offset, arch)
    cfg = choose("quant", None, dt, vec, n)
    return KERNELS.get(key, lambda: _best_quant(
        plan_quant(n, dt, vec, register_values=cfg.register_values), dt, wdt, residual,
        dynamic, eps, offset, arch))


def _best_quant(p, dt, wdt, residual, dynamic, eps, offset, arch):
    def build(q):
        return build_quant(q, dt, wdt, eps=eps, residual=residual, dynamic=dynamic,
                           offset=offset, arch=arch)
    k = build(p)
    most = 2048 // p.block
    try:
        have = ctas_per_sm(k, p.block)
        for want in dict.fromkeys((most, have + 1)):
            if want <= have:
                break
            q = build(dataclasses.replace(p, min_ctas=want))
            r = q.resources()
            if not r.spill_stores and not r.local and ctas_per_sm(q, p.block) > have:
                return q
        return k
    except ToolchainError:  # no ptxas to ask
        return k
