"""``ptxdsl.ops.matmul``: GEMM with a fused bias and activation (see :mod:`.api`).

Modules: :mod:`.api` (the call and its rules), :mod:`.plan` (which kernel and
tile shape), :mod:`.schedule` (the persistent tile order), :mod:`.epilogue`
(bias and activation), :mod:`.simt` (the any-layout fallback), :mod:`.hopper`
(the warp-specialized wgmma + TMA kernel), :mod:`.autograd` (torch), :mod:`.torch_op`
(``torch.ops.ptxdsl.matmul``), :mod:`.fp8` / :mod:`.promote` (float8 scaling modes),
:mod:`.grouped` / :mod:`.groups` (the grouped GEMM of mixture-of-experts layers).
"""
from .api import KERNELS, describe, hopper_kernel, matmul
from .grouped import grouped_matmul

__all__ = ["matmul", "grouped_matmul", "KERNELS", "hopper_kernel", "describe"]
