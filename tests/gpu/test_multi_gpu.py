"""ptxdsl on a host with two GPUs (issue 20): kernels and ops launch on their arrays'
device, in that device's context and on the caller's current stream for it, whatever
device is current; two threads drive two devices at once; two processes under
``torch.distributed`` (NCCL) each run the RMSNorm ops on their own GPU.

Skips with fewer than two GPUs. Run: ``python -m pytest tests/gpu/test_multi_gpu.py``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from gpu_env import NEEDS_GPU, torch_cuda

torch = torch_cuda()
pytestmark = NEEDS_GPU + [pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")]

from ptxdsl.core.errors import LaunchError  # noqa: E402
from ptxdsl.ops import RMSNorm, matmul, rms_norm, rms_norm_backward, rms_norm_quant  # noqa: E402
from ptxdsl.runtime import prepare  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EPS = 1e-6


def bits(t):
    """A tensor's bits, comparable with torch.equal whatever its dtype (NaN included)."""
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.view(torch.uint8)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[
        t.element_size()])


def on(dev, *ts):
    return [t.to(f"cuda:{dev}") for t in ts]


def rand(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


# Each case: a function of CPU-made inputs moved to one device, returning tensors.
def _rms_fwd(x, w):
    return [rms_norm(x, w, EPS)]


def _rms_fwd_residual(x, w):
    r = (x * 0.5).contiguous()
    y = rms_norm(x, w, EPS, residual=r)
    return [y, r]


def _rms_bwd_rows(x, w):  # 4096 x 1000: row groups, the late arrivals' dW sum
    y, rstd = rms_norm(x, w, EPS, return_rstd=True)
    return [y, rstd, *rms_norm_backward(x * 0.25, x, w, rstd)]


def _rms_bwd_few(x, w):   # 7 rows: a plain launch, the last CTA sums dW
    x7 = x[:7].contiguous()
    y, rstd = rms_norm(x7, w, EPS, return_rstd=True)
    return [y, *rms_norm_backward(x7 * 0.25, x7, w, rstd)]


def _rms_module(x, w):
    m = RMSNorm(x.shape[-1], eps=EPS, device=x.device, dtype=x.dtype)
    with torch.no_grad():
        m.weight.copy_(w)
    xr = x.detach().clone().requires_grad_()
    y = m(xr)
    y.backward(x * 0.5)
    return [y.detach(), xr.grad, m.weight.grad]


def _quant(x, w):
    return list(rms_norm_quant(x, w, EPS))


def _matmul(x, w):
    a, b = x[:256, :512].contiguous(), x[:512, :384].contiguous()
    return [matmul(a, b), matmul(a, b, bias=w[:384].contiguous(), activation="gelu")]


def _matmul_fp8(x, w):
    a = x[:256, :512].to(torch.float8_e4m3fn)
    b = x[:384, :512].to(torch.float8_e4m3fn).t()
    s = torch.tensor([0.5], device=x.device)
    return [matmul(a, b, scale_a=s, scale_b=s)]


CASES = {"rms_norm": (_rms_fwd, 4096, 1000), "rms_norm residual": (_rms_fwd_residual, 64, 4096),
         "rms_norm backward": (_rms_bwd_rows, 4096, 1000),
         "rms_norm backward few rows": (_rms_bwd_few, 8, 4096),
         "RMSNorm module": (_rms_module, 32, 2048), "rms_norm_quant": (_quant, 300, 1024),
         "matmul": (_matmul, 512, 1024), "matmul fp8": (_matmul_fp8, 512, 1024)}


@pytest.mark.parametrize("name", list(CASES))
def test_ops_on_the_second_gpu_while_the_first_is_current(name):
    """The op on cuda:1 with cuda:0 current (three calls: the general path, then the fast
    path) gives the bits it gives on cuda:0, leaves its outputs on cuda:1 and leaves
    cuda:0 current."""
    fn, m, n = CASES[name]
    x, w = rand(m, n, seed=1), rand(n, seed=2) * 0.1 + 1
    torch.cuda.set_device(0)
    ref = fn(*on(0, x, w))
    for _ in range(3):
        got = fn(*on(1, x, w))
        assert torch.cuda.current_device() == 0, name
        for r, g in zip(ref, got):
            assert g.device == torch.device("cuda", 1), name
            assert torch.equal(bits(g.cpu()), bits(r.cpu())), name


def test_a_user_kernel_on_the_second_gpu_under_either_current_device():
    from runtime_kernels import build_vadd
    cc = torch.cuda.get_device_capability(1)
    k = build_vadd(name=f"vadd_two_gpus_{os.getpid()}",
                   arch=f"sm_{cc[0]}{cc[1]}{'a' if cc[0] >= 9 else ''}")
    a1 = torch.randn(5000, device="cuda:1")
    with torch.cuda.device(0):
        for _ in range(3):
            torch.testing.assert_close(k(a1, a1), a1 * 2, rtol=0, atol=0)
    a0 = torch.randn(5000, device="cuda:0")
    with torch.cuda.device(1):
        torch.testing.assert_close(k(a0, a0), a0 * 2, rtol=0, atol=0)
        assert torch.cuda.current_device() == 1
    assert sorted(prepare(k).functions) == [0, 1]  # one module per device


def test_ops_launch_on_the_callers_stream_of_the_arrays_device():
    """With cuda:0 current, cuda:1's current stream is a side stream kept busy by a long
    sleep: the op on cuda:1 must queue behind it there (its output still zero when the
    other streams are idle), not on cuda:1's default stream."""
    x, w = on(1, rand(512, 4096, seed=3), rand(4096, seed=4))
    ref = rms_norm(x, w, EPS)
    torch.cuda.synchronize(1)           # x, w and ref ready for any stream
    side = torch.cuda.Stream(device=1)
    with torch.cuda.stream(side):      # makes cuda:1 current while inside
        y = torch.zeros_like(x)
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU cycles on the side stream
    torch.cuda.set_stream(side)         # cuda:1's current stream (and cuda:1 current)...
    torch.cuda.set_device(0)            # ...then cuda:0 current again
    try:
        assert torch.cuda.current_stream(1) == side
        rms_norm(x, w, EPS, out=y)
        snap = y.clone()                # on cuda:1's current stream: after the op
        early = torch.empty_like(y)
        with torch.cuda.stream(torch.cuda.default_stream(1)):
            early.copy_(y)              # on the default stream: runs at once
        torch.cuda.default_stream(1).synchronize()
        assert not side.query()         # the sleep is still running
        assert not early.any(), "the op did not wait for the caller's stream"
        side.synchronize()
        assert torch.equal(snap, ref) and torch.equal(y, ref)
    finally:
        torch.cuda.set_stream(torch.cuda.default_stream(1))
        torch.cuda.set_device(0)


def test_two_threads_drive_two_gpus_at_once():
    """One thread per device, started together, each running forward, backward and a
    matmul 50 times; one of them leaves cuda:0 current while it works on cuda:1. Every
    result equals that device's first one, bit for bit."""
    x, w = rand(2048, 1000, seed=5), rand(1000, seed=6) * 0.1 + 1
    start = threading.Barrier(2)
    errors, done = [], []

    def work(dev, set_current):
        try:
            if set_current:
                torch.cuda.set_device(dev)
            xd, wd = on(dev, x, w)

            def step():
                y, rstd = rms_norm(xd, wd, EPS, return_rstd=True)
                dx, dw = rms_norm_backward(xd, xd, wd, rstd)
                c = matmul(xd[:256, :512].contiguous(), xd[:512, :256].contiguous())
                return [y, dx, dw, c]
            first = [t.clone() for t in step()]
            start.wait()
            for _ in range(50):
                for a, b in zip(step(), first):
                    assert a.device.index == dev and torch.equal(bits(a), bits(b))
            torch.cuda.synchronize(dev)
            done.append(dev)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"cuda:{dev}: {exc!r}")

    threads = [threading.Thread(target=work, args=(0, True)),
               threading.Thread(target=work, args=(1, False))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == [] and sorted(done) == [0, 1]


def test_arrays_on_two_devices_in_one_call_are_refused():
    x0, w1 = rand(64, 1024).cuda(0), rand(1024).cuda(1)
    with pytest.raises(LaunchError, match="cuda:0.*cuda:1|cuda:1.*cuda:0|different GPUs"):
        rms_norm(x0, w1, EPS)
    a0, b1 = rand(128, 256).cuda(0), rand(256, 128).cuda(1)
    with pytest.raises(LaunchError, match="cuda:0.*cuda:1|cuda:1.*cuda:0|different GPUs"):
        matmul(a0, b1)


def test_two_processes_under_torch_distributed_match_one_gpu(tmp_path):
    """Two ranks (torchrun, NCCL), one GPU each, run rms_norm forward and backward on
    their halves of the rows and all-reduce dW: every rank's y, rstd and dx and the
    reduced dW equal a single-GPU run's, bit for bit."""
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node=2", os.path.join(HERE, "multi_gpu_worker.py"), str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sys.path.insert(0, HERE)
    try:
        import multi_gpu_worker as worker
    finally:
        sys.path.remove(HERE)
    x, w, dy = worker.inputs(torch)
    half = worker.M // 2
    dws = []
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert got["device"] == rank
        rows = slice(rank * half, (rank + 1) * half)
        xr, dyr, wr = on(0, x[rows], dy[rows], w)
        y, rstd = rms_norm(xr, wr, worker.EPS, return_rstd=True)
        dx, dw = rms_norm_backward(dyr, xr, wr, rstd)
        for key, want in (("y", y), ("rstd", rstd), ("dx", dx), ("dw", dw)):
            assert torch.equal(bits(got[key]), bits(want.cpu())), (rank, key)
        dws.append(dw.cpu())
    want = dws[0] + dws[1]  # two f32 addends: the same sum in either order
    for rank in (0, 1):
        assert torch.equal(bits(torch.load(tmp_path / f"rank{rank}.pt")["dw_sum"]), bits(want))
