"""The kernels docs/attention.md quotes: what ``ptxdsl.ops.attention`` runs for bf16
inputs of head dim 128, without and with a causal mask (the plan table's config)."""
from ptxdsl.ops.attention.api import forward_kernel

KERNELS = {"attention_hd128": forward_kernel(128),
           "attention_hd128_causal": forward_kernel(128, causal=True)}
