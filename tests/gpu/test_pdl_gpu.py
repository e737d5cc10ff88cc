"""Programmatic dependent launch on a Hopper GPU: a ``pdl=True`` kernel starts before the
kernel ahead of it on the stream has finished, and its ``griddepcontrol.wait`` still
sees everything that kernel wrote.

The first kernel lets its dependents go at once (``griddepcontrol.launch_dependents``),
then spins for SPIN_NS of ``%globaltimer`` before it writes its output and the time it
finished. The second, launched with ``pdl=True``, records ``%globaltimer`` before its
wait (no global access), waits, then reads the first kernel's output. Launched plainly
it could only start after the first kernel finished; with the attribute it starts
during the spin, and the values it reads are still the finished ones. Every launch
mode the runtime has (the C shim, cuda.bindings' params) and the bound launch of
``ptxdsl.ops`` are checked.
"""
from __future__ import annotations

import numpy as np
import pytest

import ptxdsl  # noqa: E402
from ptxdsl import Tile, kernel, ptx, reg  # noqa: E402
from ptxdsl.runtime import driver as rdriver  # noqa: E402
from ptxdsl.runtime import launcher as rlauncher  # noqa: E402
from ptxdsl.core.types import s32, s64, u32, u64  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not ptxdsl.gpu_available(),
                                 reason="no usable CUDA GPU/driver: "
                                        + (rdriver.driver_unavailable_reason() or "0 devices"))]

SPIN_NS = 2_000_000   # 2 ms: far longer than any launch latency
N = 256


def _torch():
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs torch and a Hopper (sm_90) GPU")
    return torch


def _now(dst):
    ptx.inst.mov.u64(dst, ptx.special.globaltimer())


def build_producer(name):
    """X[i] = i + 1 after SPIN_NS; T[0] = when it finished (ns)."""
    @kernel(out_specs=(Tile(N, s32), Tile(1, s64)), block=(N, 1, 1), arch="sm_90a", name=name)
    def producer(X, T):
        px, pt = ptx.global_ptrs(X, T)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        ptx.inst.griddepcontrol.launch_dependents()
        t0, t = reg.scalar(u64), reg.scalar(u64)
        _now(t0)
        spin = ptx.label("spin")
        _now(t)
        ptx.bra(spin, pred=(t - t0) < SPIN_NS)
        ptx.inst.st.global_.u32(ptx.addr(px + tid * 4), tid + 1)
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            _now(t)
            ptx.inst.st.global_.u64(ptx.addr(pt), t)
    return producer


def build_consumer(name):
    """Y[i] = X[i] * 2 after the wait; S[0] = when it started (before the wait)."""
    @kernel(in_specs=(Tile(N, s32),), out_specs=(Tile(N, s32), Tile(1, s64)),
            block=(N, 1, 1), arch="sm_90a", name=name, pdl=True)
    def consumer(X, Y, S):
        px, py, ps = ptx.global_ptrs(X, Y, S)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        start = reg.scalar(u64)
        _now(start)
        ptx.inst.griddepcontrol.wait()
        x = reg.scalar(u32)
        ptx.inst.ld.global_.u32(x, ptx.addr(px + tid * 4))
        ptx.inst.st.global_.u32(ptx.addr(py + tid * 4), x * 2)
        with ptx.if_(tid == 0):
            ptx.inst.st.global_.u64(ptx.addr(ps), start)
    return consumer


def _buffers(torch):
    z = dict(device="cuda")
    return (torch.zeros(N, dtype=torch.int32, **z), torch.zeros(1, dtype=torch.int64, **z),
            torch.full((N,), -1, dtype=torch.int32, **z), torch.zeros(1, dtype=torch.int64, **z))


@pytest.mark.parametrize("mode", ["c", "params", "bound"])
def test_a_dependent_starts_early_and_still_reads_the_finished_values(mode):
    torch = _torch()
    prod, cons = build_producer(f"pdl_prod_{mode}"), build_consumer(f"pdl_cons_{mode}")
    launch_mode = "params" if mode == "params" else None
    x, t_end, y, t_start = _buffers(torch)
    # warmed first: loading a module may wait for the GPU, which would hide the overlap
    run_p = rlauncher.prepare(prod, x, t_end, mode=launch_mode)
    run_c = rlauncher.prepare(cons, x, y, t_start, mode=launch_mode)
    assert run_c.pdl and not run_p.pdl
    bound = run_c.bind(x, y, t_start) if mode == "bound" else None
    want = (np.arange(N, dtype=np.int64) + 1) * 2
    for rep in range(3):
        x, t_end, y, t_start = _buffers(torch)
        torch.cuda.synchronize()
        run_p(x, t_end)
        if bound is not None:
            bound(x.data_ptr(), y.data_ptr(), t_start.data_ptr())
        else:
            run_c(x, y, t_start)
        torch.cuda.synchronize()
        np.testing.assert_array_equal(y.cpu().numpy().astype(np.int64), want)
        # started during the producer's spin: the attribute took effect
        early = int(t_end.item()) - int(t_start.item())
        assert early > SPIN_NS // 4, (mode, rep, early)


def test_without_the_attribute_the_dependent_waits_for_the_whole_kernel(monkeypatch):
    """PTXDSL_PDL=0: the same kernels, launched plainly, never overlap."""
    torch = _torch()
    monkeypatch.setenv("PTXDSL_PDL", "0")
    prod, cons = build_producer("pdl_prod_off"), build_consumer("pdl_cons_off")
    run_p, run_c = rlauncher.Launcher(prod), rlauncher.Launcher(cons)
    assert not run_c.pdl
    x, t_end, y, t_start = _buffers(torch)
    run_p.warm(x, t_end)
    run_c.warm(x, y, t_start)
    torch.cuda.synchronize()
    run_p(x, t_end)
    run_c(x, y, t_start)
    torch.cuda.synchronize()
    assert int(t_start.item()) >= int(t_end.item())
    np.testing.assert_array_equal(y.cpu().numpy(), (np.arange(N) + 1) * 2)
