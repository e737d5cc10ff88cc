"""The bf16 shapes where ``ptxdsl.ops.matmul`` trailed cuBLAS (issue #50), each with the
plans that might close the gap, timed in both layouts beside cuBLAS, the op and the
current plan in the same interleaved rounds.

The shapes and the reason for each candidate are in :data:`TRAILING` (ratios from
``bench/results/matmul_both_20261129_h200.json``, H200, 60 ms blocks), then
:data:`EXTRA`: shapes at or above cuBLAS whose split-K plans the same kernel options
(``Plan.one_partial``, ``Plan.b_prefetch``, ``Plan.epi_in_ring``) may speed up. Operands as
``bench/matmul.py --layout both`` makes them: ``a`` (M, K) row-major, ``b = W.T`` for
``x @ W.T`` (``linear``, B K-major) and a row-major copy ``b_nn`` for ``a @ b`` (``nn``,
B MN-major). Each candidate is built for the layouts it names (``plan.for_majors`` must
leave it as given: a width of part-atoms has no MN-major B), validated before it is
timed (at the timed shape against a float64 product of the same inputs, output
prefilled with NaN, and at the ragged 379 x 1000 x 528), then every contender of the
shape (``NAME`` on ``x @ W.T``, ``NAME a@b`` on ``a @ b``) runs in
``bench.matmul.timed_rounds``'s slices. ``current`` is the plan ``plan.choose`` and
``plan.for_majors`` give now, launched as the candidates are; ``op`` is
``ptxdsl.ops.matmul`` itself. Writes ``$OUT/matmul_trailing.json`` after every shape: a
row per shape and layout, the contenders under their bare names, as ``bench/matmul.py``
and ``tests/ops/matmul/test_plans.py`` read them.

    PYTHONPATH=. python lab/matmul_trailing.py                # every shape, --budget-s 140
    PYTHONPATH=. python lab/matmul_trailing.py --shapes 128x6144x4096 --rounds 5
    PYTHONPATH=. python lab/matmul_trailing.py --check        # CPU: build + ptxas -v each
    PYTHONPATH=. python lab/matmul_trailing.py --set streamk  # STREAM_K's candidates
    PYTHONPATH=. python lab/matmul_trailing.py --set m64      # M64_SET's (64-row tiles,
                                                              # dense epi_overlap)
    PYTHONPATH=. python lab/matmul_trailing.py --set nn96     # NN96_SET's (a @ b's B in
                                                              # 64-byte swizzle atoms)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

LIN, NN = "linear", "nn"
BOTH = (LIN, NN)
ONE_ROW = dict(cluster=1, cluster_n=1, a_rows=0)

# (M, N, K) -> {candidate: (fields over the current plan, layouts)}. The ratios are
# ptxdsl / cuBLAS (x @ W.T, a @ b) in bench/results/matmul_both_20261129_h200.json.
TRAILING = {
    # 0.93 / 0.97. 96 tiles of 128 x 64 (current) leave 36 SMs idle; 96-wide tiles with K
    # split in two are 64 x 2 = 128 CTAs (K-major B only: 96 is not whole 64-column atoms);
    # one_partial gives the ring the 24 KiB of the buffer no consumer of a rank uses.
    (128, 6144, 4096): {
        "n96s2op": (dict(bn=96, split=2, one_partial=True, **ONE_ROW), (LIN,)),
        "n96s2": (dict(bn=96, split=2, **ONE_ROW), (LIN,)),
        "n128s2op": (dict(bn=128, split=2, one_partial=True, **ONE_ROW), BOTH),
        "n64cn4": (dict(bn=64, split=1, cluster=1, cluster_n=4, a_rows=0), BOTH),
        # x @ W.T trails a @ b with the same plan by ~3% at one tile row (19.5 against
        # 18.8 us here, 42.5 against 41.0 at 8192 x 8192): a K-major B's rows are read
        # 256 bytes at a time, k-block by k-block; b_prefetch asks for 8 k-blocks at once
        "pf8": (dict(b_prefetch=8), (LIN,)),
        # the ring's depth alone: whether this shape is bound by the bytes in flight
        "st6": (dict(stages=6), BOTH),
        # epi_in_ring (one tile per CTA): C staged in ring stages, the staging buffers'
        # 16-32 KiB to the ring: 9 stages at 128 x 64, 7 at 128 x 96 split, 6 at 128 x 128
        "er": (dict(epi_in_ring=True), BOTH),
        "n96s2op_er": (dict(bn=96, split=2, one_partial=True, epi_in_ring=True, **ONE_ROW),
                       (LIN,)),
        "n96s2op_er_pf8": (dict(bn=96, split=2, one_partial=True, epi_in_ring=True,
                                b_prefetch=8, **ONE_ROW), (LIN,)),
        "n128s2op_er": (dict(bn=128, split=2, one_partial=True, epi_in_ring=True, **ONE_ROW),
                        BOTH),
        "n96s2op_pf8": (dict(bn=96, split=2, one_partial=True, b_prefetch=8, **ONE_ROW),
                        (LIN,)),
    },
    # 1.00 / 0.98. 128 x 64 tiles (128 CTAs) read A from L2 once per CTA: 2 MiB each,
    # twice B's share; 128 x 128 split in two is also 128 CTAs and reads half as much A.
    # It ran 0.90-0.93 with a 4-stage ring; one_partial makes it 5.
    (128, 8192, 8192): {
        "n128s2op": (dict(bn=128, split=2, one_partial=True, **ONE_ROW), BOTH),
        "n128s2": (dict(bn=128, split=2, **ONE_ROW), BOTH),
        "n64cn2": (dict(bn=64, split=1, cluster=1, cluster_n=2, a_rows=0), (NN,)),
        "pf8": (dict(b_prefetch=8), (LIN,)),
        "pf16": (dict(b_prefetch=16), (LIN,)),
        "n128s2op_pf8": (dict(bn=128, split=2, one_partial=True, b_prefetch=8, **ONE_ROW),
                         (LIN,)),
        "er": (dict(epi_in_ring=True), BOTH),
        "er_pf8": (dict(epi_in_ring=True, b_prefetch=8), (LIN,)),
        "n128s2op_er": (dict(bn=128, split=2, one_partial=True, epi_in_ring=True, **ONE_ROW),
                        BOTH),
    },
    # 0.96 / 1.09. 128 x 128 in pairs along M (896 tiles, 7 rounds at 97%); without the
    # cluster it ran 0.96-1.03 against the pairs' 0.94-1.03 in five H200 runs, and
    # 128 x 176 (656 tiles: 5 rounds at 99%) 0.975 against 0.964 in one.
    (1024, 14336, 4096): {
        "c1": (dict(cluster=1), BOTH),
        "n176c1": (dict(bn=176, cluster=1), (LIN,)),
    },
    # 0.98 / 0.995. 128 x 256 pairs: 3072 tiles, 24 rounds at 97%; 128 x 128: 47 rounds at
    # 99%, ahead of 128 x 256 by 1.3% and 2.5% in two H200 runs (matmul_plans_h200*.json).
    (16384, 6144, 4096): {
        "n128": (dict(bn=128), BOTH),
        "n128c1": (dict(bn=128, cluster=1), BOTH),
    },
    # 0.99 / 0.99. 128 x 256 pairs: 28 rounds at 97%; 128 x 128 pairs: 55 rounds at 99%.
    (4096, 28672, 8192): {
        "n128": (dict(bn=128), BOTH),
    },
}

# Not below cuBLAS, but run by the same split-K kernel whose ring one_partial deepens
# (the table's rows there: split 2 with 7 stages at 128 x 64, 4 at 128 x 128).
EXTRA = {
    (128, 4096, 4096): {"n64s2op": (dict(bn=64, split=2, one_partial=True, **ONE_ROW), BOTH)},
    (128, 4096, 14336): {"n64s2op": (dict(bn=64, split=2, one_partial=True, **ONE_ROW), BOTH),
                         "n64s2op_pf8": (dict(bn=64, split=2, one_partial=True, b_prefetch=8,
                                              **ONE_ROW), (LIN,))},
    (128, 8192, 28672): {"n128s2op": (dict(bn=128, split=2, one_partial=True, **ONE_ROW),
                                      BOTH),
                         "n128s2op_pf8": (dict(bn=128, split=2, one_partial=True,
                                               b_prefetch=8, **ONE_ROW), (LIN,)),
                         "n128s2op_er": (dict(bn=128, split=2, one_partial=True,
                                              epi_in_ring=True, **ONE_ROW), BOTH)},
}
SETS = {**TRAILING, **EXTRA}

SK = dict(stream_k=True, **ONE_ROW)
# --set streamk: the three shapes still below cuBLAS in matmul_trailing_h200.json, with
# Plan.stream_k (every SM an equal share of all tiles' k-blocks, split tiles added up
# through the workspace) at several tile widths. (Split-K clusters filling the SMs with
# wide tiles, 192 x split 4 or 256 x split 4, do not fit: their 96-128 KiB of DSMEM
# partials leave 2 ring stages and ptxas spills.)
STREAM_K = {
    # 96 tiles of 128 x 64 on 96 SMs now (1.5 MB of A and B each): stream-K gives all 132
    # the same 1.1 MB (64), 0.75 MB (128), 0.63 MB (192) or 0.56 MB (256)
    (128, 6144, 4096): {
        "sk64": (dict(bn=64, **SK), BOTH),
        "sk128": (dict(bn=128, **SK), BOTH),
        "sk192": (dict(bn=192, **SK), BOTH),
        "sk256": (dict(bn=256, **SK), BOTH),
    },
    # 128 tiles of 128 x 64 (3 MB of A and B per CTA): stream-K 2.9, 2 or 1.5 MB
    (128, 8192, 8192): {
        "sk64": (dict(bn=64, **SK), BOTH),
        "sk128": (dict(bn=128, **SK), BOTH),
        "sk256": (dict(bn=256, **SK), BOTH),
    },
    # x @ W.T 0.967: 896 tiles of 128 x 128 in 7 rounds; 128 x 224 is 512 tiles, 4 rounds
    # of 128 CTAs with a third less operand traffic per flop; stream-K evens the rounds
    (1024, 14336, 4096): {
        "n224": (dict(bn=224), (LIN,)),
        "n224c1": (dict(bn=224, cluster=1), (LIN,)),
        "sk128": (dict(bn=128, **SK), BOTH),
        "sk256": (dict(bn=256, **SK), BOTH),
        # the same with B shared by the cluster pairs along M, as the current plan's
        "sk128c2": (dict(bn=128, stream_k=True), BOTH),
        "sk256c2": (dict(bn=256, stream_k=True), BOTH),
        # 128 x 256 pairs unsplit: 448 tiles, 4 rounds at 85% (what stream-K evens out)
        "n256": (dict(bn=256), BOTH),
    },
}
M64 = dict(consumers=1, split=1, cluster_n=1, a_rows=0)
# --set m64: the three shapes of matmul_trailing_streamk_h200.json still below cuBLAS.
# At M = 128 a CTA of 128 x 64 streams 16 KiB of A (from L2) and 8 KiB of B per k-block,
# and every such plan ran ~80 GB/s per SM whatever its width (1.5 MB in 19.2 us at 6144,
# 3 MB in 39.5 us at 8192), so the SMs that stream matter. Plan.consumers = 1 makes
# 64-row tiles: M = 128 is two, and a cluster of two along M shares B's tile by multicast,
# so a CTA loads 8 KiB of A and half of B, the ring as deep as fits (plan.fitted: 10
# stages at n96, 8 at n128, 9 at n128 with epi_in_ring).
# 1024 x 14336 x 4096 runs ~7 tiles of 128 x 128 per CTA, each epilogue with the tensor
# cores idle: Plan.epi_overlap issues the next tile's first k-blocks before it.
M64_SET = {
    # 96 CTAs of 128 x 64 now; 64-row tiles: n96 pairs are 128 CTAs (K-major B only),
    # n128 pairs 96 CTAs loading 16 KiB per k-block where they load 24 now
    (128, 6144, 4096): {
        "m64n96c2": (dict(bn=96, cluster=2, **M64), (LIN,)),
        "m64n96c1": (dict(bn=96, cluster=1, **M64), (LIN,)),
        "m64n128c2": (dict(bn=128, cluster=2, **M64), BOTH),
        "m64n128c1": (dict(bn=128, cluster=1, **M64), BOTH),
    },
    # 128 CTAs of 128 x 64 now; n128 pairs are 128 CTAs too, 16 KiB per k-block each
    (128, 8192, 8192): {
        "m64n128c2": (dict(bn=128, cluster=2, **M64), BOTH),
        "m64n128c1": (dict(bn=128, cluster=1, **M64), BOTH),
        "m64n128c2er": (dict(bn=128, cluster=2, epi_in_ring=True, **M64), BOTH),
    },
    # 896 tiles of 128 x 128 (448 pairs: 6.8 rounds of 66, the last 79% busy). 128 x 176
    # pairs are 328: 4.97 rounds (K-major B only); n176c1 ran 0.99 of the plan unpaired
    (1024, 14336, 4096): {
        "eo1": (dict(epi_overlap=1), BOTH),
        "eo2": (dict(epi_overlap=2), BOTH),
        "n176": (dict(bn=176), (LIN,)),
        "n176eo2": (dict(bn=176, epi_overlap=2), (LIN,)),
        "n176c1eo2": (dict(bn=176, cluster=1, epi_overlap=2), (LIN,)),
    },
}
M64SW = dict(M64, b_swizzle=64)
PP = dict(pingpong=True, consumers=2, split=1, cluster_n=1, a_rows=0)
# --set nn96: a @ b at M = 128 through the 64-byte swizzle (Plan.b_swizzle = 64: an
# MN-major B in 32-column atoms, so 96-wide tiles; a pair along M shares B by each CTA
# loading half of every atom's K-rows), the 64 x 96 pairs that took x @ W.T to 1.03
# (matmul_trailing_m64_h200.json) now in both layouts; and 1024 x 14336 x 4096 x @ W.T
# and 4096^3 with Plan.pingpong.
NN96_SET = {
    # 96 CTAs of 128 x 64 now (a @ b 0.97); 64 x 96 pairs are 128 CTAs, 16 KiB per k-block
    (128, 6144, 4096): {
        "m64n96c2sw": (dict(bn=96, cluster=2, **M64SW), (NN,)),
        "m64n96c1sw": (dict(bn=96, cluster=1, **M64SW), (NN,)),
        # the 64 x 128 pairs' B in 32-column atoms: the swizzle width alone
        "m64n128c2sw": (dict(bn=128, cluster=2, **M64SW), (NN,)),
        # one tile per CTA: C staged in the ring, 11 stages where 10 fit beside a buffer
        "m64n96c2swer": (dict(bn=96, cluster=2, epi_in_ring=True, **M64SW), (NN,)),
        "m64n96c2er": (dict(bn=96, cluster=2, epi_in_ring=True, **M64), (LIN,)),
    },
    # 128 CTAs of 128 x 64 now (a @ b 0.99): 64 x 96 pairs are 172 CTAs (1.3 rounds of
    # 132), 64 x 160 pairs 104; 64 x 128 pairs 128 (0.991) with the ring one deeper
    (128, 8192, 8192): {
        "m64n160c2sw": (dict(bn=160, cluster=2, **M64SW), (NN,)),
        "m64n128c2er": (dict(bn=128, cluster=2, epi_in_ring=True, **M64), (NN,)),
    },
    # x @ W.T 0.96 with 128 x 128 pairs (a @ b 1.09 with the same plan: the gap is the
    # mainloop's, not the tile count's); 128 x 192 pairs are 300 cluster tiles, 4.5 rounds
    # of 66 at 91%, with 1.5 times the flops per byte of shared memory read
    (1024, 14336, 4096): {
        "n192": (dict(bn=192), (LIN,)),
        "n192c1": (dict(bn=192, cluster=1), (LIN,)),
        # Plan.pingpong: the consumers on alternate 64-row tiles, each one's epilogue under
        # the other's wgmmas; 64 x 256 pairs: 448 cluster tiles, 6.8 rounds of 66;
        # 64 x 224: 512, 7.8 rounds; 64 x 128: 896, 13.6 rounds
        "pp256": (dict(bn=256, **PP), BOTH),
        "pp224": (dict(bn=224, **PP), (LIN,)),
        "pp128": (dict(bn=128, **PP), (LIN,)),
        "pp256c1": (dict(bn=256, cluster=1, **PP), (LIN,)),
    },
    # 0.95 in both layouts (issue #50): 128 x 256 pairs, 256 cluster tiles, 3.9 rounds;
    # 64 x 256 pingpong pairs 512, 7.8 rounds
    (4096, 4096, 4096): {
        "pp256": (dict(bn=256, **PP), BOTH),
        "pp192": (dict(bn=192, **PP), BOTH),
    },
}
GROUPS = {"trailing": SETS, "streamk": STREAM_K, "m64": M64_SET, "nn96": NN96_SET}


def current(m, n, k, layout, sms, device):
    """The plan ``ptxdsl.ops.matmul`` runs for this shape and layout (bf16 in and out)."""
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.matmul.plan import choose, for_majors
    bm = "K" if layout == LIN else "MN"
    return for_majors(choose(m, n, k, bf16, bf16, sms, device=device, b_major=bm), bf16,
                      bf16, "K", bm)


def candidates(m, n, k, sms=132, device="H200", table=None) -> dict:
    """``{(name, layout): Plan}`` for one shape: ``current`` in both layouts, then each
    candidate of :data:`TRAILING` in its layouts, the ring fitted unless given, dropped
    where it equals the current plan of that layout."""
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.matmul.plan import choose, fitted, for_majors
    out = {("current", lay): current(m, n, k, lay, sms, device) for lay in BOTH}
    # the candidates' fields replace those of the plan an MN-major B gets (rows measured
    # for one layout only are K-major ones)
    base = choose(m, n, k, bf16, bf16, sms, device=device, b_major="MN")
    # a 64-row row (a @ b at M = 128 since nn96): the sets were written on the 128 x 64 row
    if base.consumers == 1:
        base = fitted(dataclasses.replace(base, consumers=2, b_swizzle=128, epi_in_ring=False,
                                          bn=64, cluster=1), bf16, bf16)
    for name, (fields, layouts) in (SETS if table is None else table).get((m, n, k),
                                                                          {}).items():
        p = dataclasses.replace(base, **fields)
        if "stages" not in fields:
            p = fitted(p, bf16, bf16)
        for lay in layouts:
            bm = "K" if lay == LIN else "MN"
            if for_majors(p, bf16, bf16, "K", bm) != p:
                raise ValueError(f"candidate {name} of {m}x{n}x{k} is not buildable with "
                                 f"a {bm}-major B as given: {p}")
            if p != out[("current", lay)]:
                out[(name, lay)] = p
    return out


def build(p, layout, sms=132):
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.matmul.hopper import build_hopper
    return build_hopper(p, bf16, bf16, sms=sms, b_major="K" if layout == LIN else "MN")


def check(shapes, table=None) -> int:
    """CPU: build every candidate and report ptxas's registers, spills and warnings (wgmma
    serialized: C7510-C7520); 1 if any spills or warns."""
    bad = 0
    for m, n, k in shapes:
        for (name, lay), p in candidates(m, n, k, table=table).items():
            kern = build(p, lay)
            r, warns = kern.resources(), kern.check().warnings
            spill = r.spill_stores or r.spill_loads or r.local
            bad |= bool(spill) or bool(warns)
            for w in warns:
                print(f"  ptxas warning: {w}", flush=True)
            print(f"{m}x{n}x{k} {lay:6s} {name:9s} bn={p.bn} stages={p.stages} "
                  f"cluster={p.cluster}/{p.cluster_n} split={p.split} "
                  f"one_partial={p.one_partial} b_prefetch={p.b_prefetch} "
                  f"epi_in_ring={p.epi_in_ring} stream_k={p.stream_k} consumers={p.consumers} "
                  f"epi_overlap={p.epi_overlap} b_swizzle={p.b_swizzle} pingpong={p.pingpong} "
                  f"uniform_cons={p.uniform_cons}: "
                  f"regs {r.registers}, spills "
                  f"{r.spill_stores}/{r.spill_loads}, local {r.local}"
                  f"{'  SPILLS' if spill else ''}", flush=True)
    return bad


def workspace(kern, m, n, k, sms):
    """A stream-K kernel's flags (zero) and partials, made once per contender; else []."""
    import torch
    from ptxdsl.ops.matmul import streamk
    p = getattr(kern, "stream_k_plan", None)
    if p is None:
        return []
    elems = streamk.workspace_elems(p, streamk.grid(p, m, n, k, sms))
    return [torch.zeros(streamk.FLAG_CAP, device="cuda", dtype=torch.int32),
            torch.empty(elems - streamk.FLAG_CAP, device="cuda", dtype=torch.float32)]


def contender(kern, layout, c_shape, ws=()):
    """``fn(a, b, b_nn)`` launching ``kern`` through its bound fast path, as the op does
    (``ws``: a stream-K kernel's workspace, :func:`workspace`)."""
    import torch
    from ptxdsl.runtime import prepare
    cache = {}
    wp = [w.data_ptr() for w in ws]

    def run(a, b, b_nn):
        bb = b.t() if layout == LIN else b_nn          # W (N, K) itself, or (K, N)
        c = torch.empty(c_shape, device="cuda", dtype=torch.bfloat16)
        if "bound" not in cache:
            cache["bound"] = prepare(kern).bind(a, bb, *ws, c)
        bound = cache["bound"]
        if bound is None:
            kern(a, bb, *ws, c)
        else:
            bound(a.data_ptr(), bb.data_ptr(), *wp, c.data_ptr())
        return c
    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=None,
                    help="MxNxK,... (default: every TRAILING shape, then every EXTRA one)")
    ap.add_argument("--block-ms", type=float, default=40.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="CPU only: ptxas -v of each candidate")
    ap.add_argument("--budget-s", type=float, default=140.0,
                    help="start no shape after this many seconds (TRAILING's come first)")
    ap.add_argument("--set", default="trailing", choices=sorted(GROUPS),
                    help="the candidates: TRAILING + EXTRA, STREAM_K (Plan.stream_k), "
                         "M64_SET (Plan.consumers = 1, dense Plan.epi_overlap) or NN96_SET "
                         "(Plan.b_swizzle = 64)")
    a = ap.parse_args(argv)
    table = GROUPS[a.set]
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")] \
        if a.shapes else list(table)
    if a.check:
        return check(shapes, table)
    import torch            # the GPU run only: --check is CPU work
    from bench.matmul import make_sets, rel_err, timed_rounds, validate, warm
    from ptxdsl.ops import matmul as op
    from ptxdsl.ops.matmul.plan import device_class
    from ptxdsl.runtime import driver
    props = torch.cuda.get_device_properties(0)
    sms, l2 = props.multi_processor_count, getattr(props, "L2_cache_size", 50 << 20)
    cls = device_class(driver.get().device(torch.cuda.current_device()))
    path = os.path.join(os.environ.get("OUT", "."), "matmul_trailing.json" if a.set ==
                        "trailing" else f"matmul_trailing_{a.set}.json")
    result = {"device": props.name, "sms": sms, "class": cls, "dtype": "bf16",
              "date": time.strftime("%Y-%m-%dT%H:%M"), "block_ms": a.block_ms,
              "rounds": a.rounds, "rows": []}
    g = torch.Generator(device="cuda").manual_seed(1)
    ra = torch.randn(379, 528, device="cuda", generator=g).to(torch.bfloat16)
    rw = torch.randn(1000, 528, device="cuda", generator=g).to(torch.bfloat16)
    ragged = {LIN: rw, NN: rw.t().contiguous()}
    rref = ra.double() @ rw.double().t()
    t0 = time.time()
    warm(1.0)
    for m, n, k in shapes:
        if time.time() - t0 > a.budget_s:
            print(f"budget spent: {m}x{n}x{k} and the shapes after it left out", flush=True)
            break
        sets = make_sets(m, n, k, "both", l2)
        x, b, b_nn = sets[0]
        ref = x.double() @ b.double()
        row, plans, live = {}, {}, {}
        for name, fn in {"cuBLAS": lambda x, b, b_nn: torch.matmul(x, b),
                         "cuBLAS a@b": lambda x, b, b_nn: torch.matmul(x, b_nn),
                         "op": lambda x, b, b_nn: op(x, b),
                         "op a@b": lambda x, b, b_nn: op(x, b_nn)}.items():
            validate(name, fn, sets[0], ref, row, live)
        for (name, lay), p in candidates(m, n, k, sms, cls, table).items():
            key = name if lay == LIN else name + " a@b"
            plans[key] = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
            try:
                kern = build(p, lay, sms)
                ws = workspace(kern, m, n, k, sms)
                run = contender(kern, lay, (m, n), ws)
                c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                kern(x, b.t() if lay == LIN else b_nn, *ws, c)
                cr = torch.full((379, 1000), float("nan"), device="cuda", dtype=torch.bfloat16)
                kern(ra, ragged[lay], *workspace(kern, 379, 1000, 528, sms), cr)
                torch.cuda.synchronize()
                e1, e2 = rel_err(c, ref), rel_err(cr, rref)
                del c
                if not (e1 < 1e-2 and e2 < 1e-2):
                    row[key] = {"error": f"err={e1:.3g} ragged={e2:.3g}"}
                    continue
                row[key] = {"err": e1}
                live[key] = run
            except Exception as ex:  # noqa: BLE001 - reported in the table
                row[key] = {"error": f"{type(ex).__name__}: {str(ex)[:200]}"}
        del ref
        warm(0.2)
        timed_rounds(live, sets, a.rounds, a.block_ms, 2.0 * m * n * k, row)
        for lay, suffix in ((LIN, ""), (NN, " a@b")):  # a row per layout, names bare
            mine = {nm[:len(nm) - len(suffix)]: v for nm, v in row.items()
                    if nm.endswith(" a@b") == bool(suffix)}
            result["rows"].append({"shape": [m, n, k], "layout": lay, "results": mine,
                                   "plans": {nm[:len(nm) - len(suffix)]: v
                                             for nm, v in plans.items()
                                             if nm.endswith(" a@b") == bool(suffix)}})
        with open(path, "w") as f:      # after every shape: a run cut short keeps it
            json.dump(result, f, indent=1)
        for r in result["rows"][-2:]:
            lay, res = r["layout"], r["results"]
            cub = res.get("cuBLAS", {}).get("tflops")
            cells = [(nm, v) for nm, v in res.items() if nm != "cuBLAS"]
            print(f"{m}x{n}x{k} {lay} ({time.time() - t0:.0f}s) cuBLAS "
                  f"{cub or float('nan'):.0f} TFLOP/s; vs cuBLAS: " + ", ".join(
                      f"{nm} {v['tflops'] / cub:.3f}" if "tflops" in v and cub else
                      f"{nm} ERR {v.get('error', '')[:80]}" for nm, v in cells), flush=True)
        del sets, x, b, b_nn
        torch.cuda.empty_cache()
    summary(result["rows"])
    return 0


def summary(rows) -> None:
    """The run's table last: per shape and layout cuBLAS's TFLOP/s, the current plan's
    ratio to it, and the best candidate's (validated ones only)."""
    print(f"{'shape':18s} {'layout':6s} {'cuBLAS':>6s} {'current':>7s}  best candidate")
    for r in rows:
        res = r["results"]
        cub = res.get("cuBLAS", {}).get("tflops")
        if not cub:
            continue
        ratio = {nm: v["tflops"] / cub for nm, v in res.items()
                 if "tflops" in v and nm not in ("cuBLAS", "op")}
        cands = {nm: x for nm, x in ratio.items() if nm != "current"}
        best = max(cands, key=cands.get) if cands else None
        print(f"{'x'.join(map(str, r['shape'])):18s} {r['layout']:6s} {cub:6.0f} "
              f"{ratio.get('current', float('nan')):7.3f}  "
              + (f"{best} {cands[best]:.3f}" if best else "-"), flush=True)


if __name__ == "__main__":
    sys.exit(main())
