"""Block-wise fp8 GEMM variants timed side by side in one run (issue #50): which of the
Hopper kernel's block-wise plan fields closes the gap to cuBLAS's block-wise fp8 GEMM.

Per shape, on the same e4m3 operands (``bench/matmul_fp8.py``'s sets: ``a`` (M, K),
``b = W.T``, enough copies to stream from HBM) and block-wise scales (``scale_a`` (M, K/128)
column-major, ``scale_b`` (K/128, N/128), powers of two):

* ``api``: ``ptxdsl.ops.matmul`` as users call it (the plan ``plan.choose`` +
  ``plan.for_scaling`` give);
* the kernel built from plan variants around that plan (``base``, 256-column tiles as two
  128-column halves without a cluster); ``n128`` (128-column tiles in clusters of 2) and
  from it ``c1`` (no cluster), ``w2`` (``m_waves=2``: 256-row tiles), ``kp``
  (``kb_pairs``: a k-block's promotion under the next one's wgmmas), ``w2c1``, ``kpc1``;
  ``n256`` (the halves in a cluster of 2), ``st-1`` (one ring stage less) and the rolling
  k-blocks (``kb_roll``: two temporaries in turn, each promoted under the next one's
  wgmmas, the queue draining once per 2 or 4 k-blocks): ``r2``, ``r4``, ``r4c2``
  (128-column tiles), ``n256r2``, ``n256r4``, ``n256r4c2`` (256 columns in 64-column
  chunks); ``ss``, ``r4ss``, ``n256r4ss``, ``n128ss``: ``base``, ``r4``, ``n256r4``
  and ``n128`` with ``scale_a`` copied into each ring stage by the producer
  (``smem_scales``; ``n128ss`` is DeepGEMM's sm90 loop: 128 x 128 tiles, clusters of 2,
  one temporary, scales from shared memory); ``r8ss``, ``n256r8ss`` (eight k-blocks an
  iteration), ``n256r2ss``, and ``r4ss_stg``, ``r8ss_stg``, ``n256r2ss_stg`` (``kb_stagger``:
  the second consumer leads with an iteration of half the k-blocks, so the two
  consumers' drained wgmma queues do not coincide); ``n160ss``, ``n160r4ss``,
  ``n160r8ss``, ``n160r4ss_stg``: 160-column tiles (each across two ``scale_b`` blocks,
  in 80-column halves when rolling) for N = 7168's rounds; ``sbr``, ``r2sbr``, ``r8sbr``,
  ``n128r4sbr``: ``n256r4ss`` (the op's plan), its 2- and 8-k-block rolls and ``r4ss``
  with ``scale_b`` handed over through the ring by the producer (``sb_ring``; ``--set
  sbr`` times them beside ``base`` and ``r4ss``); ``--variants all`` adds ``n128,
  c1, w2, kp, st-1`` and
  ``tensor n128`` (the default leaves out what the 18:15 run showed behind ``base``);
* ``tensor n128`` / ``tensor n256``: the per-tensor kernel (scales 1) in 128- and
  256-column tiles: what the block-wise scales cost at one tile shape; ``tensor n128c1``
  / ``tensor n256c1`` the same without the cluster (the block-wise plans' choice),
  ``tensor n160`` in 160-column tiles;
* ``cuBLAS fp8 tensor``: ``torch._scaled_mm`` per tensor (scales 1) on the same operands,
  and ``cuBLAS fp8 block``: its 1 x 128 / 128 x 128 block-wise mode with the same scales
  (``bench.matmul_fp8.torch_block_scale_b``'s layout, made untimed), the ratios' base.

Every contender is validated before it is timed, against a float64 reference of 512 of
the output's rows (the first and last 256: both halves of a 256-row tile), relative
Frobenius error under 1e-2, and the block-wise variants also at a ragged shape (380 x 1000
x 528: a ragged last k-block and tile). Timing: ``bench.matmul.timed_rounds`` (the
contenders take turns in ``--block-ms`` slices, ``--rounds`` rounds, median kept). Writes
``$OUT/fp8_block_plans.json`` after every shape; about 90 s on an H200 (the default set).

    PYTHONPATH=. python lab/fp8_block_plans.py
    PYTHONPATH=. python lab/fp8_block_plans.py --shapes 4096x7168x16384 --variants base,r4
    PYTHONPATH=. python lab/fp8_block_plans.py --set sbr      # Plan.sb_ring, about 100 s
    PYTHONPATH=. python lab/fp8_block_plans.py --set onerow   # M = 128: the one-row plan's
                                                              # loop fields (ONE_ROW)
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench.matmul import rel_err, validate, warm  # noqa: E402
from lab.matmul_plans import time_and_record  # noqa: E402

# 4096^3, DeepGEMM's published shape, and a mixture-of-experts projection
# (2048 tokens of one expert, DeepSeek-V3's 2 x 2048 gate/up columns over 7168).
SHAPES = "4096x4096x4096,4096x7168x16384,2048x4096x7168"
VARIANTS = {"c1": dict(cluster=1), "w2": dict(m_waves=2), "w2c1": dict(m_waves=2, cluster=1),
            "kp": dict(kb_pairs=True), "kpc1": dict(kb_pairs=True, cluster=1)}
# kb_roll, smem_scales: plans set directly (fitted, not for_scaling, which keeps 256 columns unclustered)
ROLLING = {"r2": dict(bn=128, kb_roll=2, cluster=1), "r4": dict(bn=128, kb_roll=4, cluster=1),
           "r4c2": dict(bn=128, kb_roll=4, cluster=2),
           "n256r2": dict(bn=256, kb_roll=2, cluster=1),
           "n256r4": dict(bn=256, kb_roll=4, cluster=1),
           "n256r4c2": dict(bn=256, kb_roll=4, cluster=2),
           # scale_a through the ring (smem_scales), alone and with the rolling k-blocks
           "ss": dict(smem_scales=True), "r4ss": dict(bn=128, kb_roll=4, cluster=1,
                                                      smem_scales=True),
           "n128ss": dict(bn=128, cluster=2, smem_scales=True),     # DeepGEMM's loop
           "n256r4ss": dict(bn=256, kb_roll=4, cluster=1, smem_scales=True),
           # eight k-blocks an iteration (the queue drained half as often) and the second
           # consumer's iterations staggered by half of one (kb_stagger), 128- and
           # 256-column tiles, scale_a through the ring
           "r4ss_stg": dict(bn=128, kb_roll=4, cluster=1, smem_scales=True, kb_stagger=True),
           "r8ss": dict(bn=128, kb_roll=8, cluster=1, smem_scales=True),
           "r8ss_stg": dict(bn=128, kb_roll=8, cluster=1, smem_scales=True, kb_stagger=True),
           "n256r8ss": dict(bn=256, kb_roll=8, cluster=1, smem_scales=True),
           "n256r2ss": dict(bn=256, kb_roll=2, cluster=1, smem_scales=True),
           "n256r2ss_stg": dict(bn=256, kb_roll=2, cluster=1, smem_scales=True,
                                kb_stagger=True),
           # 160-column tiles (two scale_b blocks: 45 tiles across N = 7168, 1440 of
           # 128 x 160 over 132 SMs in 11 rounds, 99% busy, against 97% for 128 or 256)
           "n160ss": dict(bn=160, cluster=1, smem_scales=True),
           "n160r4ss": dict(bn=160, kb_roll=4, cluster=1, smem_scales=True),
           "n160r8ss": dict(bn=160, kb_roll=8, cluster=1, smem_scales=True),
           "n160r4ss_stg": dict(bn=160, kb_roll=4, cluster=1, smem_scales=True,
                                kb_stagger=True)}
# scale_b handed over through the ring by the producer (sb_ring: ld.shared per k-block in
# place of ld.global.nc, its address arithmetic and R2UR), beside the plan it varies
SB_RING = {"sbr": dict(bn=256, kb_roll=4, cluster=1, smem_scales=True, sb_ring=True),
           "r2sbr": dict(bn=256, kb_roll=2, cluster=1, smem_scales=True, sb_ring=True),
           "r8sbr": dict(bn=256, kb_roll=8, cluster=1, smem_scales=True, sb_ring=True),
           "n128r4sbr": dict(bn=128, kb_roll=4, cluster=1, smem_scales=True, sb_ring=True)}
ROLLING.update(SB_RING)
# one tile row (M <= 128): the rules' plan (``base``: for_scaling without one_row, the op's
# plan before fp8_block_onerow_h200.json) with the loop fields the many-row plans take
# (rolled k-blocks, scales through the ring, uniform consumer index), and 128-column tiles
# split in two along K
ONE_ROW = {"o_r2": dict(kb_roll=2), "o_r4": dict(kb_roll=4), "o_kp": dict(kb_pairs=True),
           "o_ss": dict(smem_scales=True), "o_r4ss": dict(kb_roll=4, smem_scales=True),
           "o_r8ss": dict(kb_roll=8, smem_scales=True),
           "o_r4sbr": dict(kb_roll=4, smem_scales=True, sb_ring=True),
           "o_uc": dict(uniform_cons=True),
           "o_r4ssuc": dict(kb_roll=4, smem_scales=True, uniform_cons=True),
           "o_n128s2": dict(bn=128, split=2), "o_n128s2r4": dict(bn=128, split=2, kb_roll=4)}
ONE_ROW_SHAPES = "128x8192x8192,128x4096x14336,128x14336x4096"
# --set NAME: the variants (and shapes) one question needs, beside api, base and cuBLAS
SETS = {"sbr": (["n256r4ss", "r4ss", *SB_RING, "tensor n256"], SHAPES),
        "onerow": (["base", *ONE_ROW, "tensor base"], ONE_ROW_SHAPES)}
# what the default run leaves out (behind base in bench/results/fp8_block_plans_h200.json)
BEHIND = {"n128", "c1", "w2", "kp", "st-1", "tensor n128", "tensor n128c1", "tensor n160",
          "tensor base"}


def variants(m, n, k, sms, device):
    """name -> block-wise Plan for one shape (duplicates of ``base`` dropped, and variants the
    Plan's checks refuse for this shape's plan: a split plan takes no cluster, m_waves...)."""
    from ptxdsl.core.types import bf16, e4m3
    from ptxdsl.ops.matmul.plan import choose, fitted, for_scaling
    base = for_scaling(choose(m, n, k, e4m3, bf16, sms, device=device, scaling="block"),
                       "block", e4m3, bf16)
    out = {"base": base}

    def put(name, make):
        try:
            out[name] = make()
        except ValueError as e:
            print(f"{name} left out: {e}"[:160])
    # the variants start from the plan without the loop fields for_scaling adds
    plain = dataclasses.replace(base, kb_roll=0, smem_scales=False)
    # the 128-column plan (cluster 2 where unsplit) the older fields vary
    n128 = fitted(dataclasses.replace(plain, bn=128, cluster=2 if plain.split == 1 else 1),
                  e4m3, bf16)
    out["n128"] = n128
    for name, kw in VARIANTS.items():
        put(name, lambda kw=kw: for_scaling(dataclasses.replace(n128, **kw), "block", e4m3,
                                            bf16))
    put("st-1", lambda: dataclasses.replace(base, stages=base.stages - 1))
    # 256-column tiles as two 128-column halves, in a cluster of 2 and without
    for name, c in (("n256", 2), ("n256c1", 1)):
        put(name, lambda c=c: fitted(dataclasses.replace(plain, bn=256, cluster=c), e4m3, bf16))
    for name, kw in ROLLING.items():
        put(name, lambda kw=kw: fitted(dataclasses.replace(plain, **kw), e4m3, bf16))
    if m <= 128:
        for name, kw in ONE_ROW.items():
            put(name, lambda kw=kw: fitted(dataclasses.replace(plain, **kw), e4m3, bf16))
    seen, res = set(), {}
    for name, p in out.items():
        if p not in seen:
            seen.add(p)
            res[name] = p
    return res


def tensor_plans(m, n, k, sms, device):
    """The per-tensor kernel's plan in 128- and 256-column tiles (ring re-fitted), with
    its cluster and without."""
    from ptxdsl.core.types import bf16, e4m3
    from ptxdsl.ops.matmul.plan import choose, fitted
    base = choose(m, n, k, e4m3, bf16, sms, device=device)
    out = {f"tensor n{bn}": fitted(dataclasses.replace(base, bn=bn), e4m3, bf16)
           for bn in (128, 256)}
    out["tensor base"] = base           # the per-tensor op's own plan
    # without the cluster, as the block-wise plans run: what the cluster gives per tensor
    out.update({f"tensor n{bn}c1": fitted(dataclasses.replace(base, bn=bn, cluster=1), e4m3,
                                          bf16) for bn in (128, 256)})
    # 160 columns: what N = 7168's fuller rounds give without block-wise scales
    out["tensor n160"] = fitted(dataclasses.replace(base, bn=160), e4m3, bf16)
    return out


def picked(t, m):
    """Rows ``0 .. 256`` and ``m - 256 .. m`` of ``t`` (all of them for ``m <= 512``) in
    float64 (slices, then a copy: no indexing kernel of a float8 tensor needed)."""
    if m <= 512:
        return t.double()
    import torch
    return torch.cat([t[:256].double(), t[m - 256:].double()])


def reference_rows(a64, bd, sa64, sb):
    """float64 ``(a * scale_a) @ (b * scale_b)`` of some output rows (``a64``, ``sa64``:
    those rows of ``a`` and ``scale_a`` in float64; ``bd``: ``b`` in float64): the
    block-wise sum over k-blocks, exactly, as one product of the dequantized operands."""
    k, n = bd.shape
    xa = a64 * sa64.repeat_interleave(128, 1)[:, :k]
    sbe = sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:k, :n]
    return xa @ (bd * sbe)


def main(argv=None):
    import torch
    from bench.matmul_fp8 import make_sets, torch_block_scale_b
    from ptxdsl.core.types import bf16, e4m3
    from ptxdsl.ops import matmul
    from ptxdsl.ops.matmul.hopper import build_hopper
    from ptxdsl.ops.matmul.plan import device_class
    from ptxdsl.runtime import driver, prepare
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--variants", default=None,
                    help="comma-separated names, or all (default: all but BEHIND)")
    ap.add_argument("--set", choices=sorted(SETS), default=None,
                    help="a named set of variants (and its shapes): sbr (Plan.sb_ring), "
                    "onerow (M = 128's plans)")
    ap.add_argument("--block-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    if a.set:
        names, shapes = SETS[a.set]
        a.variants = a.variants or ",".join(names)
        a.shapes = shapes if a.shapes == SHAPES else a.shapes
    t0 = time.time()
    props = torch.cuda.get_device_properties(0)
    sms, l2 = props.multi_processor_count, getattr(props, "L2_cache_size", 50 << 20)
    cls = device_class(driver.get().device(torch.cuda.current_device()))
    path = os.path.join(os.environ.get("OUT", "."), "fp8_block_plans.json")
    result = {"device": torch.cuda.get_device_name(), "sms": sms, "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%dT%H:%M"), "dtype": "e4m3 -> bf16",
              "block_ms": a.block_ms, "rounds": a.rounds, "rows": []}
    keep = set(a.variants.split(",")) if a.variants and a.variants != "all" else None
    skip = BEHIND if not a.variants else set()
    built = {}
    one = torch.ones(1, device="cuda")
    # the ragged check: 380 x 1000 x 528 (a 16-long last k-block, ragged tiles; M a multiple
    # of 4 for smem_scales)
    g = torch.Generator(device="cuda").manual_seed(3)
    ra = torch.randn(380, 528, device="cuda", generator=g).to(torch.float8_e4m3fn)
    rw = torch.randn(1000, 528, device="cuda", generator=g).to(torch.float8_e4m3fn)
    rsa = (2.0 ** torch.randint(-2, 2, (5, 380), device="cuda", generator=g)).float()
    rsb = (2.0 ** torch.randint(-2, 2, (5, 8), device="cuda", generator=g)).float()
    rref = reference_rows(ra.double(), rw.t().double(), rsa.t().double(), rsb)
    warm(1.0)
    for shape in a.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        sets = make_sets(m, n, k, l2, mode="block")
        x, b, sa, sb = sets[0]
        bd, x64 = b.double(), picked(x, m)
        ref = reference_rows(x64, bd, picked(sa, m), sb)
        plain = x64 @ bd
        del bd, x64
        row, live, plans = {}, {}, {}

        def check(name, fn, want, args=(x, b, sa, sb)):
            validate(name, fn, args, want, row, live, view=lambda o: picked(o, m))

        check("cuBLAS fp8 tensor", lambda x, b, sa, sb: torch._scaled_mm(
            x, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), plain)
        laid = torch_block_scale_b(sb)     # torch's layout of scale_b (every set shares sb)
        check("cuBLAS fp8 block", lambda x, b, sa, sb: torch._scaled_mm(
            x, b, scale_a=sa, scale_b=laid, out_dtype=torch.bfloat16), ref)
        check("api", lambda x, b, sa, sb: matmul(x, b, scale_a=sa, scale_b=sb), ref)
        todo = [(nm, p, "block") for nm, p in variants(m, n, k, sms, cls).items()] + \
            [(nm, p, True) for nm, p in tensor_plans(m, n, k, sms, cls).items()]
        for name, p, scaled in todo:
            if (keep is not None and name not in keep) or name in skip:
                continue
            plans[name] = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
            try:
                if (p, scaled) not in built:
                    built[p, scaled] = build_hopper(p, e4m3, bf16, sms=sms, scaled=scaled)
                kern = built[p, scaled]
            except Exception as err:  # noqa: BLE001
                row[name] = {"error": f"{type(err).__name__}: {str(err)[:200]}"}
                continue

            def args(x, b, sa, sb, c, scaled=scaled):  # scale_a as (K/128, M)
                return (x, b.t(), sa.t(), sb, c) if scaled == "block" else (x, b.t(), one, one, c)
            try:    # timed through the launch bound to this signature (the op's fast path)
                c0 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                kern(*args(x, b, sa, sb, c0))
                bound = prepare(kern).bind(*args(x, b, sa, sb, c0))
            except Exception as err:  # noqa: BLE001
                row[name] = {"error": f"{type(err).__name__}: {str(err)[:200]}"}
                continue

            def run(x, b, sa, sb, kern=kern, bound=bound, args=args):
                c = torch.empty(x.shape[0], b.shape[1], device="cuda", dtype=torch.bfloat16)
                if bound is None:
                    kern(*args(x, b, sa, sb, c))
                else:
                    bound(*(t.data_ptr() for t in args(x, b, sa, sb, c)))
                return c
            if scaled == "block":
                cr = torch.full((380, 1000), float("nan"), device="cuda", dtype=torch.bfloat16)
                try:
                    kern(ra, rw, rsa, rsb, cr)
                    torch.cuda.synchronize()
                except Exception as err:  # noqa: BLE001
                    row[name] = {"error": f"ragged: {type(err).__name__}: {str(err)[:200]}"}
                    continue
                e2 = rel_err(cr, rref)
                if not e2 < 1e-2:
                    row[name] = {"error": f"ragged 380x1000x528: relative error {e2:.3g}"}
                    continue
            check(name, run, ref if scaled == "block" else plain)
        del ref, plain
        time_and_record(live, sets, a, (m, n, k), row, plans, result, path)
        del sets, x, b
        cub = row.get("cuBLAS fp8 block", {}).get("tflops") \
            or row.get("cuBLAS fp8 tensor", {}).get("tflops")
        print(f"{shape} ({time.time() - t0:.0f}s): " + ", ".join(
            f"{nm}={v['tflops']:.0f}" + (f" ({v['tflops'] / cub:.2f}x)" if cub else "")
            if "tflops" in v else f"{nm}=ERR {v['error'][:80]}"
            for nm, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
