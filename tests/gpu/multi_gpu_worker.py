"""One rank of the two-process test in ``test_multi_gpu.py``, started by
``torch.distributed.run`` (torchrun): each rank runs ``ops.rms_norm`` forward and
backward on its own GPU over its half of the rows, all-reduces dW through NCCL and saves
what it got for the test to compare with a single-GPU run.

    python -m torch.distributed.run --standalone --nproc_per_node=2 multi_gpu_worker.py OUT
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# NVLink multicast must stay off on shared hosts (the lent machines' rule), also in a
# process started with its own environment.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

M, N, EPS = 2 * 600, 1000, 1e-6   # 600 rows a rank: the grouped backward, its late arrivals


def inputs(torch):
    """The whole problem, made on the CPU from a fixed seed (the same bits everywhere)."""
    g = torch.Generator().manual_seed(20)
    x = torch.randn(M, N, generator=g)
    w = torch.randn(N, generator=g) * 0.1 + 1
    dy = torch.randn(M, N, generator=g)
    return x, w, dy


def main(out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from ptxdsl.ops import rms_norm, rms_norm_backward
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=torch.device("cuda", dev))
    x, w, dy = inputs(torch)
    rows = slice(rank * M // world, (rank + 1) * M // world)
    xr, dyr, wr = x[rows].cuda(), dy[rows].cuda(), w.cuda()
    y, rstd = rms_norm(xr, wr, EPS, return_rstd=True)
    dx, dw = rms_norm_backward(dyr, xr, wr, rstd)
    dw_sum = dw.clone()
    dist.all_reduce(dw_sum)  # f32 sum of the two ranks' dW
    torch.cuda.synchronize()
    torch.save({"rank": rank, "device": dev, "y": y.cpu(), "rstd": rstd.cpu(),
                "dx": dx.cpu(), "dw": dw.cpu(), "dw_sum": dw_sum.cpu()},
               os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
