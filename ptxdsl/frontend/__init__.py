"""Bring your own PTX: parse any PTX module into ptxdsl's IR, check it, run it on the
interpreter with its detectors, launch it, or translate it to DSL source.

``parse_ptx(text)`` gives a :class:`~.module.PtxModule`; ``from_ptx(text_or_path)`` one
of its kernels (:class:`~.kernel.PtxKernel`)."""
