"""What every gallery script does besides its kernel: pick GPU or interpreter, time on a GPU.

Not an example itself: the scripts beside it import it (``python FILE.py`` and the
``ptxdsl`` command both put this folder first on ``sys.path``).
"""
from __future__ import annotations



def on_gpu() -> bool:
    """Use the GPU when there is one, unless PTXDSL_INTERPRET asks for the interpreter."""
    import ptxdsl  # the scripts have put the repository on sys.path by now
    return not ptxdsl.interpret_requested() and ptxdsl.gpu_available()


def run(k, *inputs):
    """Launch on the GPU, else run on the CPU interpreter; returns the (first) output array."""
    out = k(*inputs) if on_gpu() else k.interpret(*inputs)
    return out[0] if isinstance(out, (tuple, list)) else out


def time_us(fn, iters: int = 100) -> float:
    """Mean µs of ``fn()`` over ``iters`` back-to-back calls between two CUDA events."""
    import torch
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) * 1e3 / iters


def report(shape: str, nbytes: int, ours, peer_name: str, peer, copy) -> None:
    """Time ptxdsl, a torch peer and a device copy moving the same bytes; print one line."""
    import torch
    t_ours, t_peer, t_copy = time_us(ours), time_us(peer), time_us(copy)
    tb = nbytes / 1e12
    print(f"  {shape} f32 on {torch.cuda.get_device_name()}: ptxdsl {t_ours:.1f} µs "
          f"({tb / t_ours * 1e6:.2f} TB/s, {100 * t_copy / t_ours:.0f}% of a copy of the same "
          f"bytes {t_copy:.1f} µs) | {peer_name} {t_peer:.1f} µs ({tb / t_peer * 1e6:.2f} TB/s)")
