"""Bring your own PTX: parse any PTX module into ptxdsl's IR, check it, run it on the
interpreter with its detectors, launch it, or translate it to DSL source.

``parse_ptx(text)`` gives a :class:`~.module.PtxModule`; ``from_ptx(text_or_path)`` one
of its kernels (:class:`~.kernel.PtxKernel`). The modules: ``lexer``, ``parser``,
``decls`` and ``resolve`` read the text into the IR; ``emit`` prints canonical PTX;
``inline`` (calls), ``modvars`` (module variables), ``tmaparg`` (tensor-map arguments)
and ``hostrun`` run a kernel on the interpreter, ``launch`` on the GPU; ``to_python``
translates it to DSL source."""
