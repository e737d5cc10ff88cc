"""A/B of the attention forward's tile configs (``block_n``, ``stages``) on the current GPU,
at the FA3-paper shapes with S = 4096 (B·S = 16k, H·D = 2048), bf16, causal and not: what
the rows of ``ptxdsl/ops/attention/plans.json`` are chosen from. Each config's output is
checked against torch SDPA before it is timed (median of rounds of CUDA-event timed calls).
JSON goes to ``$OUT/attention_plans.json``.

    PYTHONPATH=. python lab/attention_plans.py
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

CANDIDATES = {64: [(128, 2), (128, 4), (64, 4), (192, 2)],
              128: [(128, 2), (128, 3), (64, 4), (176, 2)],
              256: [(64, 2), (48, 3), (80, 2)]}


def main() -> None:
    import torch
    import torch.nn.functional as F
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.attention.config import Config, Mask
    from ptxdsl.ops.attention.fwd import build_forward
    out = {"benchmark": "attention_plans", "device": torch.cuda.get_device_name(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "rows": []}
    path = os.path.join(os.environ.get("OUT", "."), "attention_plans.json")
    s = 4096
    for d, cands in CANDIDATES.items():
        b, h = 16384 // s, 2048 // d
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        for causal in (False, True):
            ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                 v.transpose(1, 2), is_causal=causal)
            ref = ref.transpose(1, 2).float()
            flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
            for bn, st in cands:
                row = {"D": d, "S": s, "causal": causal, "block_n": bn, "stages": st}
                try:
                    kern = build_forward(Config(block_n=bn, stages=st), bf16, d,
                                         Mask(-1, 0) if causal else Mask(), scale=d ** -0.5)
                    o = torch.empty_like(q)
                    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
                    kern(q, k, v, o, lse)
                    torch.cuda.synchronize()
                    row["max_err"] = float((o.float() - ref).abs().max() / ref.abs().max())
                    row["registers"] = kern.resources().registers
                    times = []
                    for _ in range(5):
                        e0, e1 = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                        e0.record()
                        for _ in range(10):
                            kern(q, k, v, o, lse)
                        e1.record()
                        e1.synchronize()
                        times.append(e0.elapsed_time(e1) / 10)
                    row["ms"] = statistics.median(times)
                    row["tflops"] = flops / row["ms"] / 1e9
                except Exception as e:  # noqa: BLE001 - recorded
                    row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                out["rows"].append(row)
                print(json.dumps(row), flush=True)
                with open(path, "w") as f:
                    json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
