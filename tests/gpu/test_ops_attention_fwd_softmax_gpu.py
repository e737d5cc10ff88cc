"""Config.max_ilp (the row max in interleaved chains) and Config.exp_emu (some
exponentials by a cubic on the FMA pipe), lab/attention_plans.py's ``fwd64`` set, on an
sm_90 GPU on the plans rows' shapes they are timed beside (hd64 full and causal, 192-row
tiles and the 1k causal 128 x 2 row; hd96), B2 H8 Hkv2, Sq 1000, Sk 1017: max_ilp gives
bitwise the output and LSE of the row without it; exp_emu within bf16 rounding of the
float64 reference and of the row without it; repeat launches bit-identical."""
from __future__ import annotations

import dataclasses

import pytest

from attention_fwd_gpu_checks import against_reference, launch, same_and_right
from gpu_env import NEEDS_GPU, torch_sm90
from ptxdsl.ops.attention.config import Config, Mask

pytestmark = NEEDS_GPU

_F64 = dict(block_n=128, consumers=3, persistent=True, lazy_rescale=True, uniform_cons=True)
_C64 = dict(block_n=128, consumers=3, stages=3, persistent=True, lazy_rescale=True)
_C1K = dict(block_n=128, persistent=True)
_F96 = dict(block_n=96, stages=3, consumers=3, persistent=True, lazy_rescale=True)
CASES = [(64, _F64, Mask()), (64, _C64, Mask(-1, 0)), (64, _C1K, Mask(-1, 0)),
         (96, _F96, Mask()), (96, dict(block_n=128, persistent=True), Mask(-1, 0))]


@pytest.mark.parametrize("d,kw,mask", CASES)
def test_max_ilp_same_bits(d, kw, mask):
    base = Config(**kw)
    same_and_right(d, base, dataclasses.replace(base, max_ilp=4), "dense", mask)


@pytest.mark.parametrize("d,kw,mask", [c for c in CASES if c[0] == 64])
@pytest.mark.parametrize("emu", [2, 4])
def test_exp_emu_right(d, kw, mask, emu):
    torch = torch_sm90()
    b, sq, sk, h, hk = 2, 1000, 1017, 8, 2
    gen = torch.Generator(device="cuda").manual_seed(d + emu)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(2))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    base = Config(**kw)
    want, _ = launch(torch, base, d, mask, q, k, v, "dense", h // hk, sms)
    out, lse = launch(torch, dataclasses.replace(base, exp_emu=emu, max_ilp=4), d, mask,
                      q, k, v, "dense", h // hk, sms)
    assert (out.float() - want.float()).abs().max() <= 1e-2 * want.float().abs().max()
    against_reference(q, k, v, mask, out, lse)
