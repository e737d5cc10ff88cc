"""Config.k_ahead (the producer loads K's block j + 1 before V's block j) on the CPU
interpreter, every detector on: the output and LSE bitwise those of the same config
without it (the consumers' arithmetic is the same; only the loads' order moves), and
agree with the float64 reference."""
from __future__ import annotations

import pytest

import ptxdsl.interp  # noqa: F401  (the package's own interpreter: a broken one fails here)
from attention_fwd_checks import inputs, same_and_right
from ptxdsl.core.types import f16
from ptxdsl.ops.attention.config import Config, Mask
from ptxdsl.ops.attention.fwd import build_forward


def test_k_ahead_ragged_causal_tiles():
    """One CTA, three tiles of one head (Sq 300 > Sk 70, causal, 32-key blocks): tiles
    of none, 1 and 3 key blocks (the first's loop and V's tail both skipped), on a 2-stage
    ring, so V's ring lags K's across the tiles' boundaries."""
    q, k, v = inputs(1, 300, 70, 1, 1, 64, 21)
    same_and_right(Config(block_n=32, persistent=True), q, k, v, Mask(-1, 0), sms=1,
                   k_ahead=True)


@pytest.mark.long
def test_k_ahead_hd128_causal_row():
    """The hd128 causal row past 1k keys (dynamic tiles in head sections, two Q buffers,
    the epilogue late) on 2 CTAs, ragged Sq and Sk."""
    q, k, v = inputs(1, 200, 180, 2, 2, 128, 34)
    c = Config(block_n=128, lazy_rescale=True, tma_store=True, store_wait_once=True,
               uniform_cons=True, q_double=True, late_epilogue=True, persistent=True,
               dynamic=True, head_sections=True)
    same_and_right(c, q, k, v, Mask(-1, 0), k_ahead=True)


def test_k_ahead_names_its_kernel():
    c = Config(block_n=64, persistent=True, k_ahead=True)
    assert build_forward(c, f16, 64, Mask(), scale=0.1).name.endswith("_ka")
