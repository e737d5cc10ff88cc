"""A timeline of the deterministic backward's pipelined dQ writer (issue #51; lab only, with
``BwdConfig.det_trace``, head dim 192's wg3 kernel): each CTA's writer lane stamps
``%globaltimer`` before a row block's poll, when its turn has come, when every warpgroup's
add is issued, when they have landed and when the turn has passed, into u64 slots past the
semaphores (this lab passes ``sem`` as a view of a larger buffer). Then: the poll, the wait
for the consumers' stages, the landing and the release, the delay from a key block's
release to the next key block's turn where that one was already polling (the chain's link),
and the row blocks' period. (The plain writer's version, for head dim 64: 73a4eec.)

    PYTHONPATH=. python lab/attention_bwd_det_trace.py [--seq 4096] [--head-dim 64]
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def run(seq: int, d: int, causal: bool, reps: int = 3) -> dict:
    import numpy as np
    import torch
    from ptxdsl.ops.attention import bwd_api
    from ptxdsl.ops.attention.bwd_config import BLOCK_M
    from ptxdsl.ops.attention.bwd_detpipe import TRACE_SLOTS
    from lab.attention_bwd_case import case
    c = case(torch, seq, d, causal)
    b, h = c.b, c.h
    shipped = bwd_api.choose_bwd
    cfg = dataclasses.replace(shipped(d, "bf16", bwd_api.Mask(-1, 0 if causal else -1), False,
                                      True), det_trace=True)
    bwd_api.choose_bwd = lambda *_a, **_k: cfg
    try:
        pre, main, post = bwd_api.backward_kernels(d, "bf16", causal=causal,
                                                   deterministic=True)
    finally:
        bwd_api.choose_bwd = shipped
    sqp = -(-seq // BLOCK_M) * BLOCK_M
    nmb = sqp // BLOCK_M
    hk = c.k.shape[2]
    ctas = -(-seq // cfg.block_n) * b * hk
    words = b * h * nmb
    raw = torch.zeros(words * 4 + ctas * TRACE_SLOTS * 8, dtype=torch.uint8, device="cuda")
    sem = raw[:words * 4].view(torch.uint32).view(b, h, nmb)
    trace = raw[words * 4:].view(torch.int64).view(ctas, TRACE_SLOTS)
    f32 = torch.float32
    dpsum = torch.empty(b, h, sqp, device="cuda", dtype=f32)
    nlse2 = torch.empty_like(dpsum)
    dq_acc = torch.empty(b, h, sqp, d, device="cuda", dtype=f32)
    dq, dk, dv = (torch.empty_like(x) for x in (c.q, c.k, c.v))
    for _ in range(reps):            # the last call's stamps are kept
        trace.zero_()
        pre(c.out, c.do, c.lse, dpsum, nlse2, dq_acc, sem)
        main(c.q, c.k, c.v, c.do, nlse2, dpsum, dq_acc, dk, dv, sem)
        post(dq_acc, dq)
    torch.cuda.synchronize()
    err = max(float((x.float() - r).abs().max() / r.abs().max()) for x, r in
              zip((dq, dk, dv), c.ref))
    t = trace.cpu().numpy()
    return analyse(np, t, seq, cfg, err)


def analyse(np, t, seq, cfg, err) -> dict:
    t0 = t[:, 0][t[:, 0] > 0].min()
    start, smid, nb, bh, end = (t[:, 0] - t0) / 1e3, t[:, 1], t[:, 2], t[:, 3], \
        (t[:, 4] - t0) / 1e3
    rows = -(-seq // 64)
    r = t[:, 8:8 + rows * 8].reshape(len(t), rows, 8)[..., :5].astype(np.float64)
    r = np.where(r > 0, (r - t0) / 1e3, np.nan)              # µs from the first CTA's start
    pre, turn, issued, land, rel = (r[..., j] for j in range(5))
    life = np.nansum(end - start)
    out = {"seq": seq, "ctas": int(len(t)), "sms_used": int(len(np.unique(smid))),
           "err": err, "rows": rows, "kernel_us": float(np.nanmax(end)),
           "cta_us_median": float(np.nanmedian(end - start)),
           "poll_us": pct(np, turn - pre), "stages_us": pct(np, issued - turn),
           "landing_us": pct(np, land - issued), "release_us": pct(np, rel - land),
           "period_us": pct(np, np.diff(pre, axis=1)),
           "share": {k: float(np.nansum(v) / life) for k, v in
                     (("poll", turn - pre), ("stages", issued - turn),
                      ("landing", land - issued), ("release", rel - land))}}
    links, idle = [], []
    for u in np.unique(bh):
        sel = np.where(bh == u)[0]
        order = sel[np.argsort(-nb[sel] if cfg.det_desc else nb[sel])]
        for m in range(rows):
            for p, q in zip(order[:-1], order[1:]):
                if not (np.isfinite(rel[p, m]) and np.isfinite(pre[q, m])):
                    continue
                if pre[q, m] < rel[p, m]:           # q polled before p had passed
                    links.append(turn[q, m] - rel[p, m])
                else:
                    idle.append(pre[q, m] - rel[p, m])
    out["link_us_when_waiting"] = pct(np, np.array(links))
    out["waiting_share_of_links"] = len(links) / max(1, len(links) + len(idle))
    out["slack_us_when_not_waiting"] = pct(np, np.array(idle))
    return out


def pct(np, x) -> dict:
    x = x[np.isfinite(x)]
    if not len(x):
        return {}
    q = np.percentile(x, [10, 50, 90, 99])
    return {"mean": float(x.mean()), "p10": float(q[0]), "p50": float(q[1]),
            "p90": float(q[2]), "p99": float(q[3]), "n": int(len(x))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", default="4096")
    ap.add_argument("--head-dim", type=int, default=192)
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    import torch
    res = [run(int(s), a.head_dim, a.causal) for s in a.seq.split(",")]
    doc = {"lab": "attention_bwd_det_trace", "device": torch.cuda.get_device_name(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "head_dim": a.head_dim, "causal": a.causal, "runs": res}
    with open(os.path.join(os.environ.get("OUT", "."), "attention_bwd_det_trace.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
