"""The kernel docs/attention-backward.md quotes: the main backward kernel
``ptxdsl.ops.attention_backward`` runs for bf16 inputs of head dim 128 (the plan table's
config)."""
from ptxdsl.ops.attention.bwd_api import backward_kernels

KERNELS = {"attention_bwd_hd128": backward_kernels(128)[1]}
