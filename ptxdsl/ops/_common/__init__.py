"""What several ops share; each module answers one question.

=============== ==============================================================
kernels         :class:`KernelCache`, built kernels keyed by what changes their PTX
nanmath         :func:`max_keep_nan`, a ReLU / clamp that keeps NaN (DSL code)
launch_order    programmatic dependent launch for the ops' kernels (DSL code)
reduce          :class:`RowSum`, a row's f32 sum over a warp or a CTA (DSL code)
rowio           vector loads and stores of a row chunk as f32 registers (DSL code)
workspace       per-(device, stream) scratch buffers for the RMSNorm backward
torch_registry  the ops' ``torch.library`` registrations, run once
=============== ==============================================================

An op call's arrays (framework, dtypes, row views, new arrays like an input) are read
through the runtime's adapter (:class:`ptxdsl.runtime.adapter.Frame`); its repeat torch
calls go through the runtime's memo (:mod:`ptxdsl.runtime.memo`).
"""
