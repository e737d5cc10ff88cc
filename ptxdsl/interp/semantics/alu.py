"""Pure per-thread operations as handlers: :func:`alu` wraps ``fn(match, *sources) ->
result`` into ``handler(machine, instr, mask)``, which reads the sources of the threads
in ``mask`` and writes the destination(s).
"""
from __future__ import annotations


def alu(fn):
    """Wrap ``fn(match, *sources)`` as a handler writing its destination(s)."""
    def run(m, instr, mask):
        slots = instr.match.operands
        n = len(instr.operands)
        srcs = [m.src(instr, i, mask) for i, s in enumerate(slots) if not s.is_dest and i < n]
        res = fn(instr.match, *srcs)
        dests = [i for i, s in enumerate(slots) if s.is_dest]
        if len(dests) == 1:
            m.dst(instr, dests[0], res, mask)
        else:
            for i, v in zip(dests, res):
                m.dst(instr, i, v, mask)
    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run
