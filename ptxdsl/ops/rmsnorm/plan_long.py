"""Which cluster kernels take the rows one CTA cannot hold (sm_90): the plans of
:func:`long_rows` and the measurements behind them.

Split from :mod:`.plan`, which asks this module first for every row (and re-exports its
names).
"""
from __future__ import annotations

import dataclasses

from ...core.types import PtxType
from .bwd import plan_backward
from .bwd_cluster import plan_backward_cluster
from .devices import Device
from .fwd_cluster import plan_cluster

# Rows one CTA cannot hold go to a cluster of CTAs per row on sm_90 (fwd_cluster,
# bwd_cluster): each CTA holds a slice and the row's sum is reduced through distributed
# shared memory, so x (and dy) are read from DRAM once. The choice per device, N and
# dtype (H100 SXM: 132 SMs, 3.35 TB/s, 50 MB L2; H200: 132 SMs, 4.8 TB/s, 60 MB L2):
#
# * forward: from N > 32768 (f32, f16, bf16; both devices), where the row-per-CTA kernel
#   cannot keep the row in the registers of 1024 threads and reads it twice (the second
#   time from L2, which at 131072 bf16 left it at 70% of the copy on an H200, 64% at
#   262144; issue 21), except rows of at most FORWARD_L2_ROW_BYTES (65536 halves), whose
#   second read L2 serves at copy speed (measured, below). Clusters of C = N*size/64 KiB
#   CTAs (65536 bf16: 2, 131072: 4, 262144: 8; f32 twice as many, 262144 f32: 16) of 512
#   threads holding 128 bytes of the row each, two CTAs per SM (fwd_cluster.plan_cluster),
#   one cluster per row: the first plan, still what a call with a residual takes. The
#   history that follows led to the plans _long_forward chooses among now: the slices
#   read twice (two-pass, 64 KiB slices below 256 KiB), their wide slices from 256 KiB
#   to 1 MiB, and the persistent ring (RING_ROW_BYTES) past that.
# * backward: wherever the one-CTA backward would stream the row twice from memory
#   (plan_backward(...).streaming: 32768 halves and up, 32768 f32 and up) or stage it
#   through a ring of one buffer only (14336 and 16384 f32: no row loads while one is
#   reduced; kernel time on an H100 against clusters of 2, bench/results/
#   rmsnorm_bwd_ktime_cluster_h100.json: M=1024 77.0 against 73.2 us, copy 68.2; M=4096
#   283.6 against 278.2; M=32, the one-CTA kernel's few-rows form, 20.4 against 7.2), and
#   the row has 16-byte chunks: clusters of C = N*size/32 KiB CTAs (131072 bf16: 8, 262144
#   bf16 and 131072 f32: 16) of 512 threads, one per SM, staging dy and x through three
#   ring buffers of 64 KiB (bwd_cluster.plan_backward_cluster), as many clusters as the
#   driver says run at once (cuOccupancyMaxActiveClusters: the SMs' grouping into GPCs
#   decides how many 16-CTA clusters fit).
#
# What differs between the devices is the bytes in flight an SM needs to cover DRAM's
# latency (about bandwidth x 1 us / SMs: 25 KB on an H100, 36 KB on an H200), and both
# kernels keep more than that (the forward 2 x 64 KiB per SM while loading, the backward
# two rows of 64 KiB ahead). The H100 bears it out (bench/results/rmsnorm_long_h100.json:
# forward 95-101%, backward 94-99% of the copy, M=32768 bf16); the H200 does not
# (bench/results/rmsnorm_long_h200.json: forward 96/88/84% and backward 93/90/84% at N
# 65536/131072/262144). bench/rmsnorm_long.py --tune on an H200 (bench/results/
# rmsnorm_long_tune_h200.json, three runs, bf16 M=32768) found every one-row-per-cluster
# split within 1% of the plan's (131072: C2/C4/C8 4471-4555 us against the copy's 4004;
# 262144: C4/C8 9413-9506 against 8000), clusters that take rows in turn 20% slower, and
# the persistent ring kernel with two or three buffers of 64 KiB slices (one CTA per SM,
# 120 of the 132 SMs in clusters of 4 or 8) ahead by 1% at 131072 and 3% at 262144, and
# the same kernel with one buffer of 128 KiB slices (1024 threads x 8 chunks) ahead of
# everything: 131072 in 4268-4286 us (clusters of 2, all 132 SMs; copy 4045, 95%), 262144
# in 8689-8703 (clusters of 4, 120 SMs; copy 8031, 92%), against 4458-4462 and 9237-9255
# for the two- and three-buffer rings in the same runs (rmsnorm_long_tune_h200.json,
# "ring_s1"). So half-precision rows of RING_ROW_BYTES and more take the one-buffer ring;
# at 65536 it lost to the one-CTA kernel (2168 against 2094 us). On an H100 it ties the
# one-row-per-cluster kernel at 131072 and leads at 262144, in two runs on two days
# (rmsnorm_long_tune_h100.json "ring_s1": 5939 against 5926 us and 11859 against 12028,
# copy 5672 and 11344; rmsnorm_long_variants_h100.json, 2026-11-24: 5939 against 5931
# and 11850 against 12051, copy 5667 and 11331: 95.6% of the copy against 94.0%), so both
# devices take it.
# Ring variants measured slower on an H200 (rmsnorm_long_variants_h200.json, same runs,
# M=32768 bf16, % of the copy at 131072 / 262144, the one-buffer ring 94.1 / 92.3):
# each chunk's place refilled with the next row right after its y store (93.6 / 90.7);
# the slices brought in by one bulk copy per CTA and row (92.4 / 90.1), and y stored by
# one too (86.3 / 80.8); two or three bulk-filled buffers of 64 KiB (84-90); 256 KiB
# slices (clusters of 2 at 262144, all 132 SMs) with a quarter of each held in registers
# and w read from L2 per row (92.6 / 93.1; on an H100 95.3 at 262144 against the ring's
# 95.6); the ring's cp.async copies with .L2::256B (93.2 / 90.9; .L2::128B: no change);
# every other row held in registers, w from L2 (89.9 / 87.0 against the ring's 93.2 /
# 92.4 in that run, "alternate"). Diagnostics: with no DSMEM traffic (a relaxed barrier)
# the ring ran as fast (the exchange costs nothing); with a fence in place of the barrier
# (timing only: each CTA normalised by its own sum, free to drift) a point slower; with
# fewer clusters slower by each SM left out: an SM's own pace bounds the ring. No other
# split of a 262144 row covers more SMs at once on an H200: clusters of 3 (176 KiB
# slices) hold 117 SMs, of 5 110, of 6 102, of 8 or 16 at two CTAs per SM 120 and 112;
# clusters of 2 (all 132) need 256 KiB slices (rmsnorm_long_clusters_h200.json). At
# 131072 the same file times 64 KiB slices two CTAs per SM in clusters of 4 (124 SMs)
# at 90.0% of the copy and 512-thread CTAs of 16 chunks at 93.7%, against the ring's 94.0%.
# y's stores with .cs, .L1::no_allocate or an L2 evict_first / evict_last priority all
# ran under the ring as it is (93.2-93.5% at 131072, 91.2-91.5% at 262144, against 94.0
# and 92.3; rmsnorm_long_yhints_h200.json).
# Elsewhere (no sm_90a, or the interpreter without clusters) the kernels above run.
def long_rows(n: int, dt: PtxType, vec: int, arch: str, device=None):
    """The cluster plans (``.forward``, ``.backward``; None each where the one-CTA
    kernels run) for rows of ``n`` on ``device`` (None: the CPU interpreter)."""
    dev = Device.of(device)
    fwd = bwd = None
    if arch == "sm_90a" and dev.clusters:
        if -(-n // vec) * vec > FORWARD_REGISTER_ROW and n * dt.bytes > FORWARD_L2_ROW_BYTES:
            fwd = _long_forward(n, dt, vec, dev)
        one = plan_backward(n, dt, dev.sms, vec=vec)
        if one.streaming or one.stages == 1:
            bwd = plan_backward_cluster(n, dt, sms=dev.sms, vec=vec)
    return _LongRows(fwd, bwd)


def _long_forward(n: int, dt: PtxType, vec: int, dev: Device):
    """The first of the forward plans that applies to rows of ``n``: two-pass 64 KiB
    slices, wide slices, the ring, the slices held in registers (what each is and why:
    the notes above the constants below)."""
    nbytes, whole = n * dt.bytes, vec * dt.bytes == 16
    if whole:
        wide = wide_slices(n, dt, vec, dev) if nbytes >= WIDE_SLICE_BYTES else None
        c = -(-nbytes // TWO_PASS_SLICE_BYTES)
        low = dev.in_flight_bytes <= TWO_PASS_IN_FLIGHT
        if nbytes < WIDE_SLICE_BYTES or (low and c <= TWO_PASS_CLUSTER and (
                wide is None or wide.hold > WIDE_HOLD_LOW_IN_FLIGHT)):
            return dataclasses.replace(
                plan_cluster(n, dt, vec, two_pass=True, cluster=c, per_thread=TWO_PASS_CHUNKS),
                reload_batch=TWO_PASS_RELOAD_BATCH)
        if wide is not None:
            return wide
        if nbytes >= RING_ROW_BYTES:
            return plan_cluster(n, dt, vec, stages=1, threads=RING_THREADS,
                                per_thread=RING_CHUNKS, sms=dev.sms)
    return plan_cluster(n, dt, vec)


def wide_slices(n: int, dt: PtxType, vec: int, dev: Device | None = None):
    """The wide-slice two-pass plan for rows of ``n`` (None past WIDE_SLICE_CLUSTER CTAs):
    clusters of ``max(2, bytes / WIDE_SLICE_BYTES)`` CTAs of 1024 threads, one per SM,
    each thread's last WIDE_SLICE_REREAD chunks (at most) read twice and its first ones
    held in registers (half slices of at most WIDE_HALF_HOLD_CHUNKS chunks on a ``dev``
    that needs more than TWO_PASS_IN_FLIGHT bytes in flight: WIDE_HALF_HOLD of them), the
    second read WIDE_SLICE_BATCH chunks ahead of the stores."""
    c = max(2, -(-n * dt.bytes // WIDE_SLICE_BYTES))
    if c > WIDE_SLICE_CLUSTER:
        return None
    p = plan_cluster(n, dt, vec, two_pass=True, cluster=c, threads=1024)
    if p is None:
        return None
    hold = max(0, p.per_thread - WIDE_SLICE_REREAD)
    if (dt.bytes == 2 and p.per_thread <= WIDE_HALF_HOLD_CHUNKS and dev is not None
            and dev.in_flight_bytes > TWO_PASS_IN_FLIGHT):
        hold = WIDE_HALF_HOLD
    return dataclasses.replace(p, min_ctas=1, hold=hold, reload_batch=WIDE_SLICE_BATCH)


# The persistent ring forward: rows of 16-byte chunks of at least RING_ROW_BYTES (until
# 2026-11-25 half rows only; f32 measured since, above), in slices
# of RING_THREADS x RING_CHUNKS 16-byte chunks (128 KiB: clusters of 2 at 131072, 4 at
# 262144), one buffer, one CTA per SM (measured above).
RING_ROW_BYTES = 256 * 1024
RING_THREADS, RING_CHUNKS = 1024, 8
# The two-pass cluster forward (fwd_cluster.ClusterPlan.two_pass): slices of at most
# TWO_PASS_SLICE_BYTES read twice (the second time from L1), TWO_PASS_CHUNKS 16-byte
# chunks a thread (up to 1024 threads, evened out), two CTAs per SM, one row per
# cluster, the sum exchanged through st.async and an mbarrier. For rows of 16-byte
# chunks (other rows, unmeasured, keep the plans before it) past FORWARD_L2_ROW_BYTES and
# under WIDE_SLICE_BYTES, and where an SM needs at most TWO_PASS_IN_FLIGHT bytes in
# flight (Device.in_flight_bytes: an H100) also for rows of up to TWO_PASS_CLUSTER
# slices whose wide slices (below) would hold more than WIDE_HOLD_LOW_IN_FLIGHT chunks a
# thread (448 to 512 KiB). Measured, % of the copy, the ring's and the plan's before (one
# row per cluster held in registers) beside it in the same run, M=32768 bf16:
# H100 131072 (clusters of 4) 98.6 against 95.4, 262144 (8) 98.1 against 95.5
# (bench/results/rmsnorm_long_two_pass_h100.json); H200 131072 95.8 against 94.3,
# 262144 91.5 against 92.8 (rmsnorm_long_tx_exchange_h200.json); f32
# (rmsnorm_long_f32_{h100,h200}.json, M 32768 / 16384 / 8192): 65536 H100 98.4 against
# 95.3 (plan before 95.5), H200 95.8 against 93.6 (89.6); 131072 H100 98.0 against 95.4
# (94.2), H200 91.6 against 92.7 (85.4); 262144, clusters of 16, H100 88.7 against 95.3
# (87.6), H200 81.6 against 89.8 (73.6). Rows of 192 and 200 KB (rmsnorm_long_mid_{h100,
# h200}.json, clusters of 3 and 4, the plan before in brackets): 98304 bf16 H100 99.0
# (96.1), H200 95.5 (88.0); 100000 bf16 H100 100.0 (92.4), H200 93.1 (83.2); 49152 f32
# H100 98.9 (96.2), H200 95.5 (88.5).
TWO_PASS_SLICE_BYTES = 64 * 1024
TWO_PASS_CHUNKS = 4
TWO_PASS_IN_FLIGHT = 30_000
TWO_PASS_CLUSTER = 8
# Its second read issued two chunks ahead of the stores (ClusterPlan.reload_batch).
# M=32768 bf16, % of the copy, chunk by chunk against two
# (bench/results/rmsnorm_reload_batch_{h200,h100}.json): H200 131072 95.8 against 96.9,
# 262144 91.5 against 92.6 (the ring there 93.3); H100 131072 98.6 against 98.3, 262144
# 98.2 against 98.9, f32 (M=16384) 65536 98.5 / 98.2, 131072 98.2 / 98.2. Four (which
# ptxas, in the 32 registers two CTAs per SM leave, issues two by two) ran 95.1 / 91.4
# on the H200.
TWO_PASS_RELOAD_BATCH = 2
# The wide-slice two-pass forward (wide_slices): a row over clusters of c = max(2,
# bytes / WIDE_SLICE_BYTES) CTAs of 1024 threads, up to 16 chunks a thread, one CTA per
# SM. A thread reads its last WIDE_SLICE_REREAD chunks twice (176 KiB of a CTA's slice
# kept in L1 for the second read) and holds the rest in registers (ClusterPlan.hold: at
# most 5 fit, ptxas spilling at 6), its second read WIDE_SLICE_BATCH chunks ahead of the
# stores. Clusters of 2 cover all 132 SMs of an H100 or H200; those of 8 with two CTAs
# per SM, and the ring's clusters of 4, only 120. Measured (lab/rmsnorm_long_ab.py,
# M=32768 bf16 / 16384 or 8192 f32, % of the copy; the plan before in brackets;
# bench/results/rmsnorm_long_wide_slices_{h200,h100}.json): H200 262144 bf16 (clusters
# of 2, hold 5) 95.7 (the ring 93.3; hold 4 / 3 / 2 94.8-94.9, batch 2 93.7-94.5), 229376
# 98.0 (ring 91.3), 196608 99.4 (91.2), 163840 100.0 (89.9), 131072 bf16 96.7 (two-pass
# clusters of 4: 96.9), f32 65536 100.6 (97.1), 131072 96.8 (ring 93.1), 196608 (clusters
# of 3) 95.4 (91.2), 262144 (4) 95.2 (89.7); H100 131072 bf16 101.0 (98.3), 196608 99.6
# (two-pass clusters of 6: 99.0), f32 65536 101.0 (98.2), 262144 (4) 97.3 (ring 95.2); but
# 262144 bf16 96.3 and f32 131072 97.1 against two-pass clusters of 8 at 98.9 and 98.2,
# hence WIDE_HOLD_LOW_IN_FLIGHT. Slices of 96 KiB (98304 bf16 in clusters of 2) ran
# 89.5-90.9 against 97.0 on the H200: rows under WIDE_SLICE_BYTES keep the 64 KiB slices.
WIDE_SLICE_BYTES = 256 * 1024
# Wide slices of at most WIDE_HALF_HOLD_CHUNKS half chunks a thread (rows of 256 KiB:
# 131072 halves), which the rule above has read twice whole, hold WIDE_HALF_HOLD of them
# in registers where an SM needs more than TWO_PASS_IN_FLIGHT bytes in flight (an H200).
# Measured there (lab/rmsnorm_long_ab.py, bench/results/rmsnorm_long_wide_hold_h200.json,
# M=32768, % of the copy, the op beside): 131072 bf16 hold 0 / 2 / 3 / 4 / 5: 96.6 / 97.7
# / 98.6 / 98.7-98.8 / 98.0 (op 96.6); f16 hold 4 98.2 against 97.1; f32 65536 (8 chunks
# too) hold 3 / 4 99.8 / 99.2 against 100.5, so f32 keeps none; 196608 bf16 hold 4 98.5
# against the rule's 1 at 99.2. Not measured on an H100.
WIDE_HALF_HOLD_CHUNKS = 8
WIDE_HALF_HOLD = 4
WIDE_SLICE_CLUSTER = 4
WIDE_SLICE_REREAD = 11
WIDE_SLICE_BATCH = 4
WIDE_HOLD_LOW_IN_FLIGHT = 1
# Longest row the row-per-CTA forward holds in registers (1024 threads x 32 values).
FORWARD_REGISTER_ROW = 32768
# Past the registers, rows of up to this many bytes still stay with the row-per-CTA
# forward: its second read of the row comes from L2 at copy speed. Measured on an H100
# (bench/results/rmsnorm_long_h100.json, M=32768, 2026-11-24): 65536 bf16 (128 KiB)
# took 2820.9 us one CTA per row against 2934.3 with clusters of 2 (copy 2836.4); at
# 131072 the one-CTA kernel fell to 7405.3 against 5894.2 (copy 5667.2).
FORWARD_L2_ROW_BYTES = 128 * 1024

# What long_rows gives at the rows of bench/rmsnorm_long.py on an H100 and, where
# LONG_ROW_CHOICES_H200 says otherwise, on an H200 (tests/test_ops_rmsnorm_cluster.py
# checks these tables against it): N -> (forward, backward) for f32 and for halves (f16,
# bf16); "-": the one-CTA kernels, "C8": a cluster of 8 CTAs, "/S1": a ring of one buffer
# (the backward's default is three; the forward's default is one row per cluster, no
# ring), "/2P": the two-pass forward of 64 KiB slices, "/W": its wide slices.
# The persistent grid of the backward is as many clusters as run at once: on a
# 132-SM H100 or H200, 8 clusters of 16 (one per GPC), and up to 132 // C for smaller C.
LONG_ROW_CHOICES = {
    # N:     f32 (fwd, bwd)   halves (fwd, bwd)
    4096:   (("-", "-"),      ("-", "-")),
    8192:   (("-", "-"),      ("-", "-")),
    16384:  (("-", "C2"),     ("-", "-")),     # halves: the backward's staged whole rows
    32768:  (("-", "C4"),     ("-", "C2")),
    65536:  (("C2/W", "C8"),    ("-", "C4")),    # 128 KiB half rows: the L2 read
    131072: (("C8/2P", "C16"),  ("C2/W", "C8")),
    262144: (("C4/W", "C16/S1"), ("C8/2P", "C16")),
}
LONG_ROW_CHOICES_H200 = {131072: (("C2/W", "C16"), ("C2/W", "C8")),
                         262144: (("C4/W", "C16/S1"), ("C2/W", "C16"))}


@dataclasses.dataclass(frozen=True)
class _LongRows:
    forward: object
    backward: object
