"""Which RMSNorm kernel a call runs: the schedule, and what ptxas or the driver's
occupancy calculator is asked before choosing.

The measurements behind each choice are in ``bench/results/rmsnorm_tune_h200.md``
(from ``lab/rmsnorm_tune.py``); the sections are named below.
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
from .devices import Device
from .fwd_cluster import build_forward_cluster, plan_cluster
from .fwd import WARP, build_forward, max_vec, plan
from .fwd_loop import build_forward_loop, loop_ctas_per_sm
# Long rows (their plans, constants and measurements), re-exported here
from .plan_long import (
    FORWARD_L2_ROW_BYTES, FORWARD_REGISTER_ROW, LONG_ROW_CHOICES, LONG_ROW_CHOICES_H200,
    RING_CHUNKS, RING_ROW_BYTES, RING_THREADS, TWO_PASS_CHUNKS, TWO_PASS_CLUSTER,
    TWO_PASS_IN_FLIGHT, TWO_PASS_RELOAD_BATCH, TWO_PASS_SLICE_BYTES, WIDE_SLICE_BATCH,
    WIDE_SLICE_BYTES, long_rows, wide_slices)
from .quant import build_quant, plan_quant

__all__ = ["KERNELS", "MANY_ROWS_PER_SM", "SHORT_ROWS_BYTES", "backward_kernel", "ctas_per_sm",
           "dw_reduce_kernel", "forward_kernel", "quant_kernel", "vec_for"]

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
    """A cluster of CTAs per row for rows one CTA cannot hold (:func:`long_rows`), else
    the persistent kernel when a CTA's rows fit in registers (ptxas is asked whether
    one CTA per SM fits) and each of its CTAs walks at most LOOP_ROWS_PER_CTA of the
    call's ``m`` rows (None: unknown, taken as few), else one CTA per row
    (:func:`best_row_kernel`). ``device``: the GPU's
    :class:`~ptxdsl.runtime.driver.DeviceInfo` (None: the interpreter); ``offset``:
    Gemma's, added to each weight (0: the plain kernels)."""
    cp = long_rows(n, dt, vec, arch, device).forward
    if cp is not None and (cp.stages or cp.two_pass) and residual:
        cp = plan_cluster(n, dt, vec)  # the ring and two-pass kernels take no residual
    if cp is not None:
        def get(q):
            key = ("fwd_cluster", n, dt.name, wdt.name, vec, residual, want_rstd, eps, arch, q,
                   offset)
            return KERNELS.get(key, lambda: build_forward_cluster(
                q, dt, wdt, eps=eps, residual=residual, with_rstd=want_rstd, arch=arch,
                offset=offset))
        return _resident(cp, get, device)[1]
    p = wide_row_plan(plan(n, dt, vec), dt, device)
    cps = loop_ctas_per_sm(p)
    if cps and m is not None and m > LOOP_ROWS_PER_CTA * sms * cps and vec * dt.bytes == 16:
        p, cps = two_pass_1024(plan(n, dt, vec, threads=1024), dt, device), 0
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


# Rows past WIDE_ROW_BYTES that one CTA of 1024 threads takes (bf16 32769-65536, f32
# 16385-32768) are read twice, not held in registers, and where an SM needs more than
# TWO_PASS_IN_FLIGHT bytes in flight (an H200) x is read without the L1 priority and y
# stored with .cs. Measured (lab/rmsnorm_tune.py, M=32768, µs; copy beside;
# bench/results/rmsnorm_tune_wide_rows_{h100,h200}.json): f32 32768 H100 two-pass 2819.1
# against one-pass 2971.6 (copy 2835.3, torch.compile 2838.1), H200 with the hints 2014.3
# against 2126.4 (copy 2000.5, torch.compile 1987.3); bf16 65536 H200 with the hints
# 2033.9 against 2115.8 (copy 2005.1), H100 2848.8 against 2828.0 (so not there); bf16
# 49152 H200 1483.6 against 1512.8, H100 2111.9 against 2109.9.
WIDE_ROW_BYTES = 64 * 1024
# The second read goes out ahead of the stores (fwd.Plan.reload_batch), as many chunks
# as 32 registers hold once widened to f32 (8 f32 chunks, 4 half ones), so a thread has
# them all in flight at once rather than one round trip after another; Inductor's kernel
# for these rows issues all of them. Measured (lab/rmsnorm_tune.py --mode reload,
# M=32768, µs, one chunk at a time against the batch; bench/results/
# rmsnorm_reload_batch_{h200,h100}.json): f32 32768 H200 2023.9 against 1985.5 (copy
# 2011.6, torch.compile 1995.5), H100 2820.6 against 2813.0 (copy 2835.8); bf16 65536
# H200 2042.8 against 1986.2 (copy 2017.7), H100 2825.8 against 2810.7 (copy 2836.4);
# bf16 49152 H200 1490.3 against 1489.3.
WIDE_RELOAD_VALUES = 32
# The persistent forward (fwd_loop; f32 rows of 16384, 512 threads, one CTA per SM) only
# while each CTA walks at most this many rows; calls of more rows run the row-per-CTA
# two-pass kernel of 1024 threads (two_pass_1024). Measured on an H200 (rows of 16-byte
# chunks; lab/rmsnorm_loop_rows.py, bench/results/rmsnorm_loop_rows_h200.json, five
# interleaved rounds; % of the copy for the loop / two_pass_1024 / torch.compile):
# M=1024 (7.8 rows a CTA) 98.5 / 96.0 / 57.7, 1536 95.9 / 97.9 / 94.9, 2048 95.1 / 99.0
# / 96.6, 4096 94.7 / 100.2 / 98.8, 16384 95.8 / 100.8 / 100.4, 32768 96.0 / 101.0 /
# 100.7 (the loop had been chosen at 1024 rows, the main sweep's shape). Rows of
# narrower chunks (unaligned f32 rows of 4096-16384) keep the loop: not measured.
LOOP_ROWS_PER_CTA = 8


def wide_row_plan(p, dt: PtxType, device=None):
    """``p`` for a row of more than WIDE_ROW_BYTES over 1024 threads: :func:`two_pass_1024`."""
    if p.rows_per_cta != 1 or p.threads != 1024 or p.n * dt.bytes <= WIDE_ROW_BYTES:
        return p
    return two_pass_1024(p, dt, device)


def two_pass_1024(p, dt: PtxType, device=None):
    """Row-per-CTA plan ``p`` (1024 threads) read twice, its second read batched
    (WIDE_RELOAD_VALUES), and on a device that needs many bytes in flight per SM, the
    hints above."""
    p = dataclasses.replace(p, two_pass=True, preload_w=False, reload_batch=min(
        p.per_thread, max(1, WIDE_RELOAD_VALUES // p.vec)))
    if Device.of(device).in_flight_bytes > TWO_PASS_IN_FLIGHT:
        p = dataclasses.replace(p, x_hints=(), y_hints=("cs",))
    return p


def best_row_kernel(p, dt, wdt, eps, residual, want_rstd, arch, offset=0.0):
    """The one-CTA-per-row kernel for plan ``p``, asking ptxas for register counts.

    For a two-pass plan of at most two chunks per thread, w is loaded after the
    reduction instead when ptxas says that buys more CTAs per SM (measured: "forward:
    late w loads"; with more chunks per thread the late loads cost more than the
    occupancy gives back, and where the registers tie nothing changes).

    Rows of 512 threads then keep x in registers instead of reading it again, when
    ptxas, asked for the four CTAs per SM the threads allow (``.minnctapersm``), fits
    the row in the late two-pass kernel's registers without spilling (measured:
    "forward: one-pass 512-thread rows"). Without ptxas the plan stands as it is.
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
# Short rows (256 threads or fewer, N >= 1000) run one CTA per SM of several row groups
# (see backward_kernel), shaped by the call's rows and the device: each thread takes two
# 16-byte chunks of a row and an SM about SHORT_ROWS_BYTES of x and dy (rows and
# prefetched rows together), except for calls of at least MANY_ROWS_PER_SM rows an SM on
# a device whose SMs need at most MANY_ROWS_IN_FLIGHT bytes in flight (Device.
# in_flight_bytes: an H100's 25 KB, not an H200's 36), where each thread takes one chunk
# and an SM MANY_ROWS_BYTES.
SHORT_ROWS_BYTES = 64 * 1024
MANY_ROWS_BYTES = 40 * 1024
MANY_ROWS_PER_SM = 192
MANY_ROWS_IN_FLIGHT = 30 * 1000


def many_rows(m, sms: int, info) -> bool:
    """Whether a call of ``m`` rows (None: unknown) on ``info`` (None: the interpreter)
    takes the many-rows shape of short rows (see :data:`MANY_ROWS_PER_SM`)."""
    return (m is not None and m >= MANY_ROWS_PER_SM * sms
            and Device.of(info).in_flight_bytes <= MANY_ROWS_IN_FLIGHT)


def short_row_shape(n: int, dt: PtxType, vec: int, many: bool) -> tuple[int, int]:
    """(threads per row, row groups per CTA) for short rows of ``n`` (one CTA per SM,
    at most 1024 threads): ``many`` rows an SM or fewer (:data:`MANY_ROWS_PER_SM`)."""
    chunks = -(-n // vec)
    if many:
        threads = -(-chunks // WARP) * WARP
    else:  # a power of two (a row group's lanes by masking), at least a warp
        threads = max(WARP, 1 << (-(-chunks // 2) - 1).bit_length())
    budget = MANY_ROWS_BYTES if many else SHORT_ROWS_BYTES
    return threads, max(1, min(1024 // threads, int(budget / (4 * n * dt.bytes) + 0.5)))


def backward_kernel(n, dt: PtxType, wdt: PtxType, vec, arch, sms, info, offset=0.0,
                    m=None):
    """The backward kernel and its plan, with as many CTAs as the device holds at once,
    or, for a call of ``m`` rows (None: as many as there may be), fewer.

    The grid is as many CTAs as the device holds at once (the late arrivals that sum dW
    wait for the rest, :func:`~.bwd_dw.late_arrivals`); the plan's register
    estimate sizes it first, then the driver's occupancy for the compiled kernel
    (``Launcher.resident_ctas``) corrects it: down when the estimate was too hopeful,
    up when ptxas needed fewer registers (measured: "backward: CTAs per SM from the
    driver's occupancy").

    Half-precision rows left at one CTA per SM also prefetch into L2 the row after the
    one held in registers (``BwdPlan.l2_ahead``): one 512-thread CTA per SM has too
    few bytes in flight to cover DRAM's latency with 16 KiB rows; f32 rows, twice as
    long, go without (measured: "backward: L2 prefetch of the row after the one in
    registers").

    Short rows (256 threads or fewer, N >= 1000) run one CTA per SM of several row
    groups (:attr:`~.bwd.BwdPlan.groups`, :func:`short_row_shape`: eight groups of 64
    threads for 1000 or 1024 halves, four of 128 for f32 or 2048 halves; on an H100-class
    device, calls of :data:`MANY_ROWS_PER_SM` rows an SM and more five of 128 and three
    of 256, :func:`many_rows`), half-precision ones with the same L2 prefetch: as many
    rows in flight as that many one-row CTAs, with that many times fewer dW partial rows.
    Against the three one-row CTAs per SM of before, on an H100
    (bench/results/rmsnorm_tune_groups_h100.json): 32768 x 1024 bf16 81.4 -> 73.4 us
    per call (the copy: 70.8), 16384 x 1024 f16 45.7 -> 41.1 (37.2). The two-chunk shape
    against the one-chunk one, kernel time (bench/results/rmsnorm_bwd_ktime_h100.json,
    _h200.json): 4096 x 1000 bf16 8.9 against 9.9 us (H100), 8.5 against 9.8 (H200);
    32768 x 1024 bf16 74.4 against 70.9 on the H100 (hence many_rows), 53.7 against
    55.3 on the H200; 32768 x 1024 f32 99.6 against 105.6 (H200).

    Few rows, few CTAs: a CTA without a row still writes its partial row of dW (zeros)
    and the sum reads every CTA's, so ``m`` rows fewer than that grid run ``m`` rounded
    up to a power of two CTAs instead (:meth:`~.bwd.BwdPlan.for_rows`; 1x8192 bf16
    took 33 us on an H100, against 21.5 us for a copy of its bytes, every CTA of the
    device's grid moving a partial row of 32 KiB for one row of 16 KiB). That kernel
    is the device's plan's with a smaller ``G`` (a ``G`` of at most the CTA's warps
    sums dW a column tile per warp, :mod:`.bwd`). Its dW sum is fused (one launch)
    wherever the device's was, or its partial rows per thread are few enough; fused,
    the driver is asked whether its grid is resident (it is wherever the device's grid
    was, but for the registers of the differently unrolled dW sum): where not, the
    device's fused plan runs, or the smaller grid in two launches. Long rows' cluster
    kernels keep their grid.
    """
    cluster = _cluster_backward(n, dt, wdt, vec, arch, sms, info, offset)
    if cluster is not None:
        return cluster
    many = many_rows(m, sms, info)
    p, k = _device_backward(n, dt, wdt, vec, arch, sms, info, offset, many)
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


def _device_backward(n, dt, wdt, vec, arch, sms, info, offset, many=False):
    """:func:`backward_kernel`'s plan and kernel for as many rows as there may be
    (``many``: at least :data:`MANY_ROWS_PER_SM` an SM, else fewer)."""
    from ...runtime import prepare

    def get(p):
        return _backward_built(p, n, dt, wdt, vec, arch, offset)
    p = plan_backward(n, dt, sms, vec=vec)
    halves = p.prefetch and dt.bytes == 2 and vec * dt.bytes == 16
    # 1000: the shortest measured; power-of-two threads: a row group's lanes by masking
    short = (p.prefetch and p.threads <= 256 and n >= 1000 and vec * dt.bytes == 16
             and not p.threads & (p.threads - 1))
    if short:
        t, groups = short_row_shape(n, dt, vec, many)
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
    if halves and (p.grid == sms or short):
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
    return KERNELS.get(key, lambda: _best_quant(plan_quant(n, dt, vec), dt, wdt, residual,
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
