"""The deterministic backward on an sm_90 GPU at shapes whose CTAs form several sections of
(batch, K/V head) units (``bwd_det.det_cta``: a full section and a residual one) and walk
their row blocks last to first under causal and window masks: bitwise identical across
runs, within bf16 noise of the default mode (head dims 64, 128, 256), and the varlen form
likewise."""
from __future__ import annotations

import itertools

import pytest

from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops import attention, attention_backward, attention_varlen, attention_varlen_backward
from ptxdsl.ops.attention.bwd_det import section_units

pytestmark = NEEDS_GPU


def _close(det, ref, tol=2e-2):
    for name, a, b in zip(("dq", "dk", "dv"), det, ref):
        a, b = a.float(), b.float()
        assert float((a - b).abs().max()) <= tol * max(float(b.abs().max()), 1e-2), name


@pytest.mark.parametrize("b,s,h,hk,d,kw", [
    (3, 2048, 6, 3, 64, dict(causal=True)),             # 9 units: sections of 8 and 1
    (3, 3072, 4, 2, 128, dict(window_size=(300, 100))),  # 6 units: 4 and 2
    (3, 1024, 4, 4, 256, dict(causal=True)),             # 12 units: 8 and 4
    (5, 2048, 4, 4, 192, dict(causal=True)),             # 20 units: det_units 16 and 4
])
def test_deterministic_sections_are_bitwise_repeatable(b, s, h, hk, d, kw):
    torch = torch_sm90()
    assert b * hk > section_units(s, h // hk, d)        # (more than one section)
    g = torch.Generator(device="cuda").manual_seed(b + s + d)
    mk = lambda *sh: torch.randn(*sh, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(b, s, h, d), mk(b, s, hk, d), mk(b, s, hk, d), mk(b, s, h, d)
    out, lse = attention(q, k, v, return_lse=True, **kw)
    first = attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
    _close(first, attention_backward(do, q, k, v, out, lse, **kw))
    for _ in range(3):
        again = attention_backward(do, q, k, v, out, lse, deterministic=True, **kw)
        assert all(torch.equal(x, y) for x, y in zip(first, again))


def test_varlen_deterministic_walks_row_blocks_last_to_first():
    torch = torch_sm90()
    lens = [700, 64, 1, 1300, 333]
    cu = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(5)
    mk = lambda *sh: torch.randn(*sh, device="cuda", dtype=torch.bfloat16, generator=g)
    t = sum(lens)
    q, do, k, v = mk(t, 8, 128), mk(t, 8, 128), mk(t, 2, 128), mk(t, 2, 128)
    out, lse = attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=True,
                                return_lse=True)
    call = lambda det: attention_varlen_backward(do, q, k, v, out, lse, cu, cu, max(lens),
                                                 max(lens), causal=True, deterministic=det)
    first = call(True)
    _close(first, call(False))
    for _ in range(3):
        assert all(torch.equal(x, y) for x, y in zip(first, call(True)))
