"""What several ops share; each module answers one question.

========== ==============================================================
frame      the array framework of a call (numpy / torch / device arrays):
           dtypes, strides, pointers, allocation, where and how it runs
kernels    :class:`KernelCache`, built kernels keyed by what changes their PTX
reduce     :class:`RowSum`, a row's f32 sum over a warp or a CTA (DSL code)
rowio      vector loads and stores of a row chunk as f32 registers (DSL code)
workspace  per-(device, stream) scratch buffers for the RMSNorm backward
========== ==============================================================
"""
