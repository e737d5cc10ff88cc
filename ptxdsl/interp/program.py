"""A program compiled for the interpreter: its structured IR as op objects (instructions
with their handlers, labels, branches, ``If`` and ``Loop`` regions) that a
:class:`~.machine.Machine` runs with masks of active threads, cached per program."""
from __future__ import annotations

import weakref

from ..core import ir
from ..core.errors import InterpreterError
from .progress import instructions, loop_loads, loop_registers
from .semantics.barriers import whole_cta
from .schedule import WAIT_EFFECTS, collective, wait_at

MAX_ITERATIONS = 10_000_000
class Block:
    def __init__(self, nodes, handlers):
        self.ops = [compile_node(n, handlers) for n in nodes]
        self.labels = {op.name: i for i, op in enumerate(self.ops) if isinstance(op, LabelOp)}
        self.branchy = bool(self.labels) or any(isinstance(op, BraOp) for op in self.ops)
        # labels a branch in here targets that this block does not hold (a branch out of a
        # ptx.if_/loop region to a label of an enclosing one), with one such branch each
        self.escapes = {}
        for op in self.ops:
            self.escapes.update(op.escapes if not isinstance(op, BraOp) else
                                {op.target: op.instr})
        for name in self.labels:
            self.escapes.pop(name, None)
        self.has_exit = any(op.may_exit for op in self.ops)
        self.may_exit = self.has_exit
        # a backward branch closes a loop that may spin (progress.py): it runs as a
        # generator too, so that a unit at a fixed point can yield
        spins = False
        for i, op in enumerate(self.ops):
            j = self.labels.get(op.target) if isinstance(op, BraOp) else None
            if j is not None and j > i:     # the whole-CTA barriers it jumps over
                op.skips = tuple(x for x in instructions(self.ops[i + 1:j]) if whole_cta(x))
            if j is not None and j <= i:
                op.loop_regs = loop_registers(self.ops[j:i + 1])
                op.loads = loop_loads(self.ops[j:i + 1])
                op.label_loc = self.ops[j].loc
                spins = True
        # whether some instruction in it may wait (then it runs as a generator)
        self.waits = spins or any(op.waits for op in self.ops)


class InstrOp:
    may_exit = False
    escapes: dict = {}

    def __init__(self, instr: ir.Instr, handler):
        self.instr = instr
        self.handler = handler
        self.may_exit = "exit" in instr.match.spec.effects
        self.waits = bool(instr.match.spec.effects & WAIT_EFFECTS) or collective(instr)

    def run(self, m, mask):
        m.exec_instr(self.instr, mask, self.handler)
        if self.may_exit:
            return mask & ~m.exited
        return mask

    def gen(self, m, mask):
        yield from wait_at(m, self.instr, mask, self.handler)
        return mask & ~m.exited if self.may_exit else mask


class LabelOp:
    may_exit = False
    waits = False
    escapes: dict = {}

    def __init__(self, name, loc=None):
        self.name = name
        self.loc = loc

    def run(self, m, mask):
        return mask


class BraOp:
    may_exit = False
    waits = False
    escapes: dict = {}

    def __init__(self, instr: ir.Instr):
        self.instr = instr
        self.target = instr.operands[0].name
        self.loop_regs = self.loads = self.label_loc = None   # a backward one's loop
        self.skips = ()                                       # a forward one's barriers


class IfOp:
    def __init__(self, node: ir.If, handlers):
        self.node = node
        self.then = Block(node.then_body, handlers)
        self.els = Block(node.else_body, handlers) if node.else_body is not None else None
        self.may_exit = self.then.has_exit or (self.els is not None and self.els.has_exit)
        self.waits = self.then.waits or (self.els is not None and self.els.waits)
        self.escapes = {**self.then.escapes, **(self.els.escapes if self.els else {})}

    def run(self, m, mask):
        p = m.read_reg(self.node.pred, mask, self.node.loc)
        t = mask & (~p if self.node.negated else p)
        e = mask & ~t
        if t.any():
            m.run_block(self.then, t)
        if self.els is not None and e.any():
            m.run_block(self.els, e)
        return _left(self, m, mask)

    def gen(self, m, mask):
        p = m.read_reg(self.node.pred, mask, self.node.loc)
        t = mask & (~p if self.node.negated else p)
        e = mask & ~t
        if t.any():
            yield from m.gen_block(self.then, t)
        if self.els is not None and e.any():
            yield from m.gen_block(self.els, e)
        return _left(self, m, mask)


class LoopOp:
    def __init__(self, node: ir.Loop, handlers):
        self.node = node
        self.body = Block(node.body, handlers)
        self.may_exit = self.body.has_exit
        self.waits = self.body.waits
        self.escapes = self.body.escapes
        self.check_h = handlers[node.check.match.spec.opcode]
        self.incr_h = handlers[node.incr.match.spec.opcode]

    def run(self, m, mask):
        n = self.node
        active = mask
        iters = 0
        while True:
            m.exec_instr(n.check, active, self.check_h)
            done = m.read_reg(n.cond, active, n.loc)
            active = active & ~done
            if not active.any():
                break
            active = m.run_block(self.body, active)
            if not active.any():
                break
            m.exec_instr(n.incr, active, self.incr_h)
            iters += 1
            if iters > MAX_ITERATIONS:
                raise InterpreterError(f"loop did not finish after {MAX_ITERATIONS} iterations "
                                       f"(a loop variable that never reaches its bound?)", n.loc)
        return _left(self, m, mask)

    def gen(self, m, mask):
        n = self.node
        active = mask
        while True:
            m.exec_instr(n.check, active, self.check_h)
            done = m.read_reg(n.cond, active, n.loc)
            active = active & ~done
            if not active.any():
                break
            active = yield from m.gen_block(self.body, active)
            if not active.any():
                break
            m.exec_instr(n.incr, active, self.incr_h)
        return _left(self, m, mask)


def _left(op, m, mask):
    """The threads of ``mask`` that reach the end of region ``op``: not those that
    exited, nor those that branched out of it (in flight to an enclosing label)."""
    if op.may_exit:
        mask = mask & ~m.exited
    return mask & ~m.away if op.escapes else mask


def compile_node(node, handlers):
    if isinstance(node, ir.Instr):
        spec = node.match.spec
        if "branch" in spec.effects:
            return BraOp(node)
        return InstrOp(node, handlers.get(spec.opcode) or handlers["?"])
    if isinstance(node, ir.If):
        return IfOp(node, handlers)
    if isinstance(node, ir.Loop):
        return LoopOp(node, handlers)
    if isinstance(node, ir.Label):
        return LabelOp(node.name, node.loc)
    if isinstance(node, ir.Raw):
        raise InterpreterError(f"ptx.raw line {node.text!r} is unchecked PTX that the "
                               f"interpreter cannot run; run this kernel on a GPU", node.loc)
    raise InterpreterError(f"the interpreter cannot run IR node {node!r}")


_COMPILED: "weakref.WeakKeyDictionary[ir.Program, Block]" = weakref.WeakKeyDictionary()
_WGMMA_REGS: "weakref.WeakKeyDictionary[ir.Program, frozenset]" = weakref.WeakKeyDictionary()


def wgmma_registers(prog: ir.Program) -> frozenset:
    """The registers some wgmma.mma_async uses as accumulators or A fragments (their
    ordinary writes are stamped for the wgmma.fence check, :mod:`.semantics.wgmma`)."""
    regs = _WGMMA_REGS.get(prog)
    if regs is None:
        found = set()
        for i in prog.walk():
            if i.match.spec.scope == "warpgroup":     # wgmma.mma_async: register vectors
                for op in i.operands[:2]:
                    if isinstance(op, ir.Vec):
                        found.update(x for x in op.items if isinstance(x, ir.Reg))
        regs = _WGMMA_REGS[prog] = frozenset(found)
    return regs


def compiled(prog: ir.Program, handlers) -> Block:
    blk = _COMPILED.get(prog)
    if blk is None:
        blk = Block(prog.body, handlers)
        for name, instr in blk.escapes.items():
            raise InterpreterError(f"branch to label {name!r}, which this kernel does not "
                                   f"define", instr.loc)
        _COMPILED[prog] = blk
    return blk
