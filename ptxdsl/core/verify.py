"""Whole-program checks on a finished trace.

Trace-time validation already checked each instruction against the table;
this pass checks what only the whole program shows: every register is
written before it is read (in program order), every branch target exists
exactly once, operand types still agree with their instruction, and every
``.aligned`` instruction (``bar.sync``, ``barrier.sync.aligned``, warpgroup
instructions) sits where all the threads it needs arrive together.

Uniformity lattice: each register has the broadest scope within which its
value is the same for every thread: thread < warp < warpgroup < cta <
cluster < grid. ``%tid.x`` varies per thread, ``%tid.x >> 5`` per warp,
``%tid.x >> 7`` (or ``/ 128``, or ``%tid.x < 256``) per warpgroup,
``%ctaid.x`` per CTA (``%tid.x`` is taken as the linear thread index: a
block whose x extent is a multiple of 128, or (N, 1, 1)). A branch or loop
is as uniform as its condition. An ``.aligned`` instruction of scope S needs
every enclosing condition uniform over S; a counted named barrier
(``bar.sync id, count``, ``bar.arrive``) only needs whole warps to arrive,
so warp-uniform control is enough; non-aligned ``barrier.sync`` may diverge.

A polling instruction (table attribute ``polls``: ``mbarrier.try_wait``,
``test_wait``) must have its predicate read: on hardware it may return false
before the phase completes, so a kernel that ignores it reads shared memory the
copy has not filled yet (the interpreter's scheduler lets the copy finish first,
so only this check catches it on the CPU).
"""
from __future__ import annotations

from . import ir
from .errors import VerifyError
from .walks import collect_used
from .types import compatible
from ..isa.special import SCOPES, SPECIAL_REGS

LEVELS = SCOPES
THREAD, WARP, WARPGROUP, CTA, CLUSTER, GRID = range(6)
_DIFFERS = {THREAD: "differs between the threads of one warp",
            WARP: "differs between the warps of one warpgroup",
            WARPGROUP: "differs between the warpgroups of one CTA",
            CTA: "differs between the CTAs of a cluster",
            CLUSTER: "differs between clusters"}


def _special_level(name: str) -> int:
    """The scope within which a special register is the same for every thread."""
    reg = SPECIAL_REGS.get(name)
    return THREAD if reg is None else SCOPES.index(reg.scope)


def _from_one_lane(m, srcs) -> bool:
    """``shfl.sync.idx d, a, k, 31, 0xffffffff`` with an immediate lane ``k``: every lane
    of the warp reads lane ``k``'s ``a`` (how CUTLASS tells ptxas a warpgroup index is
    warp-uniform, so what derives from it stays in uniform registers)."""
    imm = [op.value if isinstance(op, ir.Imm) else None for op in srcs[1:4]]
    return (m.chosen.get("mode") == "idx" and len(srcs) == 4 and imm[0] is not None
            and imm[1] == 0x1F and imm[2] == 0xFFFFFFFF)


def _group_level(n: int) -> int:
    """The scope of aligned groups of ``n`` consecutive threads."""
    if n > 0 and n % 128 == 0:
        return WARPGROUP
    if n > 0 and n % 32 == 0:
        return WARP
    return THREAD


def verify(prog: ir.Program) -> None:
    """Raise :class:`VerifyError` (naming the user's line) on the first problem found."""
    _Checker(prog).run()


class _Checker:
    def __init__(self, prog: ir.Program):
        self.prog = prog
        self.defined: set = set()
        self.level: dict = {}      # register -> uniformity level (absent: GRID)
        self.tid_div: dict = {}    # register -> d where its value is %tid.x // d
        self.labels_placed: dict[str, ir.Label] = {}
        self.labels_used: list[tuple[str, object]] = []
        self.polls: list[ir.Instr] = []

    def run(self) -> None:
        self.body(self.prog.body, ctl=None)
        if self.polls:
            used: set = set()
            collect_used(self.prog.body, used)
            for instr in self.polls:
                p = instr.dests()[0]
                if p not in used:
                    raise VerifyError(
                        f"the result %{p.name} of {instr.opcode} is never read: on the GPU it "
                        f"may be false (the phase not yet complete) and the threads go on "
                        f"before the awaited copy or arrivals land; loop until it is true "
                        f"(ptx.mbarrier.wait(bar, phase) emits that loop) or branch on it",
                        instr.loc)
        for name, loc in self.labels_used:
            if name not in self.labels_placed:
                raise VerifyError(f"branch to label {name!r}, which is never placed "
                                  f"(ptx.place(label) or ptx.label(name))", loc)

    def read(self, reg, loc, what="read") -> None:
        if isinstance(reg, ir.Reg) and reg not in self.defined:
            raise VerifyError(
                f"register %{reg.name} (.{reg.dtype.name}) is {what} here before any "
                f"instruction writes it; initialise it (reg.scalar(..., init=...)) first", loc)

    def lv(self, op) -> int:
        if isinstance(op, ir.Reg):
            return self.level.get(op, GRID)
        if isinstance(op, ir.Special):
            return _special_level(op.name)
        if isinstance(op, ir.Addr):
            return self.lv(op.base)
        if isinstance(op, ir.Vec):
            return min((self.lv(x) for x in op.items), default=GRID)
        return GRID

    @staticmethod
    def narrower(ctl, level: int, loc):
        """The control context inside a region whose condition is uniform at ``level``."""
        if level >= GRID or (ctl is not None and ctl[0] <= level):
            return ctl
        return (level, loc)

    def body(self, nodes, ctl) -> None:
        for node in nodes:
            if isinstance(node, ir.Instr):
                self.instr(node, ctl)
            elif isinstance(node, ir.Raw):
                # unchecked: its registers may be read or written; count them as
                # written, with values that may differ between threads
                for r in node.regs():
                    self.defined.add(r)
                    self.level[r] = THREAD
            elif isinstance(node, ir.Label):
                if node.name in self.labels_placed:
                    raise VerifyError(f"label {node.name!r} placed twice", node.loc)
                self.labels_placed[node.name] = node
            elif isinstance(node, ir.If):
                self.read(node.pred, node.loc, "tested")
                inner = self.narrower(ctl, self.lv(node.pred), node.loc)
                self.body(node.then_body, inner)
                if node.else_body is not None:
                    self.body(node.else_body, inner)
            elif isinstance(node, ir.Loop):
                for x in (node.start, node.stop, node.step):
                    self.read(x, node.loc)
                self.read(node.var, node.loc)
                level = min(self.lv(x) for x in (node.start, node.stop, node.step))
                self.defined.add(node.cond)
                if level < GRID:
                    self.level[node.var] = min(level, self.level.get(node.var, GRID))
                    self.level[node.cond] = level
                self.body(node.body, self.narrower(ctl, level, node.loc))
            else:  # pragma: no cover
                raise VerifyError(f"unexpected IR node {node!r}")

    def instr(self, instr: ir.Instr, ctl) -> None:
        loc = instr.loc
        # A read-write accumulator (wgmma's) may start undefined: scale-d = 0 ignores it.
        accum = {x for slot, op in zip(instr.match.operands, instr.operands) if slot.rw
                 for x in (op.items if isinstance(op, ir.Vec) else (op,))}
        for r in instr.sources():
            if r not in accum:
                self.read(r, loc)
        self.types(instr)
        for op in instr.operands:
            if isinstance(op, ir.LabelRef):
                self.labels_used.append((op.name, loc))
        m = instr.match
        spec = m.spec
        if spec.polls and instr.dests():
            self.polls.append(instr)
        if m.aligned and spec.scope != "thread" and ctl is not None:
            counted = "barrier" in spec.effects and len(instr.operands) > 1
            need = WARP if counted else LEVELS.index(spec.scope)
            if ctl[0] < need:
                who = ("whole warps (it counts arrivals per warp)" if counted
                       else f"every thread of its {spec.scope}")
                raise VerifyError(
                    f"{instr.opcode} inside a branch or loop that depends on the thread index "
                    f"(opened at {ctl[1]}: its condition {_DIFFERS[ctl[0]]}); this .aligned "
                    f"instruction needs {who} to execute it together: threads that skip it "
                    f"never arrive, so the CTA deadlocks. Move the barrier out of the branch, "
                    f"branch on a value uniform over its {LEVELS[need]} (e.g. tid >> 5 for "
                    f"warps, tid >> 7 for warpgroups), or use the non-aligned barrier.sync", loc)
        self.uniformity(instr, ctl)

    def uniformity(self, instr: ir.Instr, ctl) -> None:
        m = instr.match
        spec = m.spec
        srcs = [op for slot, op in zip(m.operands, instr.operands) if not slot.is_dest]
        level = THREAD if spec.varies else min((self.lv(op) for op in srcs), default=GRID)
        if instr.guard is not None:
            level = min(level, self.lv(instr.guard))
        div = None
        first = srcs[0] if srcs else None
        d0 = (1 if isinstance(first, ir.Special) and first.name == "tid.x"
              else self.tid_div.get(first))
        imm = srcs[1].value if len(srcs) > 1 and isinstance(srcs[1], ir.Imm) and \
            isinstance(srcs[1].value, int) and srcs[1].value >= 0 else None
        how = spec.uniformity
        if how == "broadcast" and instr.guard is None and _from_one_lane(m, srcs):
            level = max(WARP, self.lv(srcs[0]))     # lane k's value in every lane
        if d0 is not None and instr.guard is None:
            if how == "copy" and len(srcs) == 1:
                div = d0
            elif how == "shr" and imm is not None and imm < 32:
                div = d0 << imm
            elif how == "div" and imm:
                div = d0 * imm
            if div is not None:
                level = max(level, _group_level(div))
            elif how == "compare" and imm is not None and len(srcs) == 2:
                cmp = m.chosen.get("cmp", "")
                bound = {"lt": imm, "lo": imm, "ge": imm, "hs": imm, "le": imm + 1,
                         "ls": imm + 1, "gt": imm + 1, "hi": imm + 1}.get(cmp, 0)
                level = max(level, _group_level(d0) if cmp in ("eq", "ne") else
                            max(_group_level(d0), _group_level(d0 * bound)))
        if ctl is not None:
            # written by the threads of a branch only: after it, the register holds
            # values from two places, no more uniform than the branch condition
            level = min(level, ctl[0])
            div = None
        for d in instr.dests():
            self.defined.add(d)
            if ctl is not None:
                level = min(level, self.level.get(d, GRID))
            if level < GRID:
                self.level[d] = level
            else:
                self.level.pop(d, None)
            if div is not None:
                self.tid_div[d] = div
            else:
                self.tid_div.pop(d, None)

    def types(self, instr: ir.Instr) -> None:
        m = instr.match
        for slot, op in zip(m.operands, instr.operands):
            want = m.resolve_type(slot.ty)
            if want is None or m.spec.packs or m.spec.subword:
                continue
            regs = op.items if isinstance(op, ir.Vec) else (op,)
            for r in regs:
                if isinstance(r, ir.Reg) and not compatible(r.dtype, want):
                    raise VerifyError(f"{m.text}: %{r.name} is .{r.dtype.name}, the "
                                      f"instruction needs .{want.name}", instr.loc)
