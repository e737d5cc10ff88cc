"""torch.compile against eager for a scalar loss of leaf tensors (the ops' custom-op tests)."""
from __future__ import annotations


def assert_compiled_matches_eager(loss_of, leaves) -> None:
    """``loss_of(*leaves)`` compiled with ``fullgraph=True`` (aot_eager) gives the same
    loss and, after ``backward()``, the same gradients as eager, bit for bit."""
    import torch
    loss = torch.compile(loss_of, fullgraph=True, backend="aot_eager")(*leaves)
    loss.backward()
    grads = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    eager = loss_of(*leaves)
    eager.backward()
    assert torch.equal(loss, eager)
    for g, t in zip(grads, leaves):
        assert torch.equal(g, t.grad)
