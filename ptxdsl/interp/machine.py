"""The executor: threads of many CTAs as numpy lanes, structured control flow as masks.

A :class:`Machine` runs a batch of CTAs of one launch in lockstep. Thread
``t`` of the batch is CTA ``t // P`` (``P`` = threads per CTA rounded up to
whole warps; the padding lanes never run) and CTA-local linear thread
``t % P``, so ``reshape(-1, 32)`` gives warps and ``reshape(-1, P)`` CTAs.

Control flow: every region runs with a boolean mask of active threads.
``If`` splits the mask, ``Loop`` repeats its body while any thread is still
iterating (threads leave one by one, as on hardware, and reconverge after
the loop). ``bra`` to a label in the same region works for any divergence:
each position of the region keeps a mask of threads waiting there, and
threads reconverge when execution reaches them. Branches into or out of a
region are refused with an :class:`InterpreterError`.

Running a batch in lockstep is one legal schedule as long as no thread waits
for one that lockstep has not run yet; when one must (a wait raises
:class:`~.schedule.Blocked`), the batch is rerun with warps as scheduled units
(:mod:`.schedule`): regions that contain waits then run as generators
(:meth:`Machine.gen_block`). Barriers, shared memory and warp operations are
evaluated per CTA / per warp.
"""
from __future__ import annotations

import time

import numpy as np

from ..core import ir
from ..core.errors import InterpreterError
from ..isa.special import SPECIAL_REGS
from . import cluster
from .hb import HappensBefore
from .inflight import check_held
from .progress import PREEMPT_EVERY, SPIN_EVERY, fingerprint, spin_message
from .memory import RANK_SHIFT
from . import program
from .program import Block, BraOp, wgmma_registers
from .schedule import Blocked, over_budget
from .semantics.barriers import passed
from .values import immediate, storage_dtype, to_bits, view

MAX_STEPS = 50_000_000
# CPU seconds one batch of CTAs may run: a spinning warp executes only ~10^4 steps a
# second, so MAX_STEPS alone would take hours to stop an endless loop
MAX_SECONDS = 60.0
CHECK_EVERY = 1 << 14        # steps between looks at the clock


# --------------------------------------------------------------------------- the machine
class Machine:
    """One batch of CTAs of a launch, with its registers, masks and spaces."""

    def __init__(self, prog: ir.Program, block: tuple, grid: tuple, first_cta: int,
                 ncta: int, spaces: dict, cluster: tuple | None = None):
        self.prog = prog
        self.block = block
        self.grid = grid
        self.nthreads = block[0] * block[1] * block[2]
        self.P = -(-self.nthreads // 32) * 32
        self.ncta = ncta
        self.first_cta = first_cta
        self.T = ncta * self.P
        self.spaces = spaces
        t = np.arange(self.T, dtype=np.int64)
        self.cta = t // self.P                      # batch-local CTA index
        self.lin = t % self.P                       # CTA-local linear thread id
        self.valid = self.lin < self.nthreads
        self.exited = ~self.valid
        # threads that branched out of a region, by target label, until the enclosing
        # region holding the label takes them (see Block.escapes)
        self.pending: dict = {}
        self.away = np.zeros_like(self.exited)
        self.lane = (self.lin % 32).astype(np.uint32)
        g = self.cta + first_cta
        bx, by, _ = block
        gx, gy, _ = grid
        lin = self.lin
        self.special = {
            "tid.x": lin % bx, "tid.y": (lin // bx) % by, "tid.z": lin // (bx * by),
            "ntid.x": bx, "ntid.y": by, "ntid.z": block[2],
            "ctaid.x": g % gx, "ctaid.y": (g // gx) % gy, "ctaid.z": g // (gx * gy),
            "nctaid.x": gx, "nctaid.y": gy, "nctaid.z": grid[2],
            "laneid": self.lane, "warpid": lin // 32, "nwarpid": 64,
            # An H100 SXM has 132 SMs; CTAs are dealt to them round-robin.
            "smid": g % 132, "nsmid": 132,
            "lanemask_eq": np.uint32(1) << self.lane,
        }
        lm = np.uint64(1) << self.lane.astype(np.uint64)
        self._cluster_specials(tuple(cluster or (1, 1, 1)), cluster is not None)
        self.special["lanemask_lt"] = (lm - np.uint64(1)).astype(np.uint32)
        self.special["lanemask_le"] = ((lm << np.uint64(1)) - np.uint64(1)).astype(np.uint32)
        self.special["lanemask_gt"] = (~self.special["lanemask_le"]).astype(np.uint32)
        self.special["lanemask_ge"] = (~self.special["lanemask_lt"]).astype(np.uint32)
        self.regs: dict = {}
        self.written: dict = {}
        self.store = {r: storage_dtype(r.dtype) for r in prog.regs}
        self.steps = 0
        self.cc = np.zeros(self.T, bool)        # carry flag of add.cc / sub.cc
        self.bar_pending: dict = {}             # barrier id -> arrivals per CTA (bar.arrive)
        self.bar_passes: dict = {}              # whole-CTA bar.sync -> passes per thread
        self.async_copies: list = []            # cp.async copies not yet waited for
        self.async_groups = np.zeros(self.T, np.int64)
        self.mbarriers: dict = {}
        self.bars: dict = {}                    # (CTA row, barrier id) -> BarrierState
        self.events = 0                         # things that may let a waiting unit go on
        self.max_steps = MAX_STEPS
        self.max_seconds = MAX_SECONDS
        self.started = time.process_time()
        self.next_check = CHECK_EVERY
        self.hb = HappensBefore(self)
        self.check_init = True                  # reads of never-written bytes are errors
        self.check_races = True
        # lanes of one warp storing the same bits to one address in one st: one write
        # (compiled code such as Triton's stores warp-reduced values from every lane)
        self.warp_stores_merge = False
        self.per_thread = False                 # scheduled one thread per unit
        self.split_warpgroups = False           # units finer than warpgroups (schedule.py)
        self.meetings: dict = {}                # warpgroup-collective rendezvous
        self.held: dict = {}                    # in-flight accumulators (semantics/wgmma.py)
        # wgmma.fence: per thread the step of its warpgroup's latest fence (None: none yet),
        # and per wgmma accumulator / A register the step of each thread's latest write
        self.wgmma_fenced = None
        self.reg_steps: dict = {}
        self.fence_regs = wgmma_registers(prog)
        self.current = None                     # the instruction being executed
        self.async_reads: dict = {}             # step -> wgmma / bulk copy reading smem
        # pdl=True kernels: which threads executed griddepcontrol.wait (None: not pdl)
        self.grid_waited = None
        self.reg_pool = None                    # setmaxnreg's register pools (registers.py)

    def _cluster_specials(self, cl: tuple, explicit: bool) -> None:
        """%ctaid, %cluster_ctaid, %clusterid, %cluster_ctarank, ... of a launch in
        clusters of ``cl`` CTAs, batch CTAs in cluster-major order (a launch without
        clusters is clusters of one CTA, as on the GPU; :mod:`.cluster`), and ``rank``:
        each thread's CTA rank in its cluster, which its shared addresses carry
        (:data:`.memory.RANK_SHIFT`)."""
        self.special.update(cluster.specials(self.grid, cl, self.cta + self.first_cta,
                                             explicit))
        self.cluster_size = cl[0] * cl[1] * cl[2]
        self.rank = np.broadcast_to(np.asarray(self.special["cluster_ctarank"], np.int64),
                                    (self.T,))

    # ------------------------------------------------------------------ errors
    def where(self, t: int) -> str:
        """``CTA (x,y,z) thread (x,y,z)`` of batch thread ``t``."""
        s = self.special
        cta = tuple(int(np.broadcast_to(s[f"ctaid.{a}"], (self.T,))[t]) for a in "xyz")
        tid = tuple(int(s[f"tid.{a}"][t]) for a in "xyz")
        rank = (f" (rank {int(self.rank[t])} of its cluster)" if self.cluster_size > 1
                else "")
        return f"CTA {cta}{rank} thread {tid}"

    def tid_str(self, t: int) -> str:
        return str(tuple(int(self.special[f"tid.{a}"][t]) for a in "xyz"))

    def local_tid_str(self, cta_local: int, lin: int) -> str:
        return self.tid_str(cta_local * self.P + lin)

    def fail(self, instr, message: str, thread: int | None = None):
        loc = instr.loc if isinstance(instr, ir.Instr) else instr
        text = instr.opcode if isinstance(instr, ir.Instr) else ""
        who = f" [{self.where(thread)}]" if thread is not None else ""
        raise InterpreterError(f"{text + ': ' if text else ''}{message}{who}", loc)

    # ------------------------------------------------------------------ registers
    def read_reg(self, reg: ir.Reg, mask, instr) -> np.ndarray:
        if self.held and reg in self.held:  # an accumulator of a wgmma in flight
            check_held(self, reg, instr, mask, "read")
        w = self.written.get(reg)
        if w is not True:
            missing = mask if w is None else mask & ~w
            if missing.any():
                t = int(np.argmax(missing))
                what = "was never written" if w is None else "was never written in this thread"
                self.fail(instr, f"register %{reg.name} (.{reg.dtype.name}) is read but {what} "
                                 f"(uninitialised: no instruction wrote it before this read)", t)
        return self.regs[reg]

    def write_reg(self, reg: ir.Reg, value, mask) -> None:
        if self.held and reg in self.held:  # an accumulator of a wgmma in flight
            check_held(self, reg, self.current, mask, "written")
        if reg in self.fence_regs:
            self._stamp(reg, mask)
        bits = to_bits(value, self.store[reg])
        old = self.regs.get(reg)
        if mask.all():
            new = bits if bits.shape == (self.T,) else np.full(self.T, bits, bits.dtype)
        else:
            if old is None:
                old = np.zeros(self.T, bits.dtype)
            new = np.where(mask, bits, old)
        self.regs[reg] = new
        w = self.written.get(reg)
        if w is True:
            return
        w = (mask | ~self.valid) if w is None else (w | mask)
        self.written[reg] = True if w.all() else w

    def _stamp(self, reg: ir.Reg, mask) -> None:
        st = self.reg_steps.get(reg)
        if st is None:
            st = self.reg_steps[reg] = np.full(self.T, -1, np.int64)
        st[mask] = self.steps

    def write_rows(self, reg: ir.Reg, threads: np.ndarray, bits: np.ndarray,
                   mask: np.ndarray) -> None:
        """:meth:`write_reg` of raw register bits ``bits`` for thread indices ``threads``
        (``mask``: the same threads as a mask), without building a whole-batch value."""
        if self.held and reg in self.held:
            check_held(self, reg, self.current, mask, "written")
        store = self.store[reg]
        old = self.regs.get(reg)
        new = np.zeros(self.T, store) if old is None else old.copy()
        new[threads] = bits.astype(store, copy=False) if bits.dtype.itemsize == \
            store.itemsize else to_bits(bits, store)
        self.regs[reg] = new
        w = self.written.get(reg)
        if w is True:
            return
        w = (mask | ~self.valid) if w is None else (w | mask)
        self.written[reg] = True if w.all() else w

    # ------------------------------------------------------------------ operands
    def special_value(self, name: str):
        if name in ("clock", "clock64"):
            v = np.full(self.T, self.steps, np.uint64)
            return v.astype(np.uint32) if name == "clock" else v
        if name == "globaltimer":
            return np.full(self.T, self.steps * 1000, np.uint64)
        if name not in self.special:
            raise InterpreterError(f"the interpreter has no special register %{name}")
        v = self.special[name]
        width = np.uint64 if SPECIAL_REGS[name].dtype.bits == 64 else np.uint32
        return np.broadcast_to(np.asarray(v).astype(width), (self.T,))

    def value(self, op, t, mask, instr):
        """Operand ``op`` viewed as PTX type ``t`` (array over threads, or a numpy scalar)."""
        if isinstance(op, ir.Reg):
            return view(self.read_reg(op, mask, instr), t)
        if isinstance(op, ir.Imm):
            return immediate(op.value, t)
        if isinstance(op, ir.Not):    # !%p (imported PTX)
            return ~self.value(op.reg, t, mask, instr).astype(bool)
        if isinstance(op, ir.Special):
            v = self.special_value(op.name)
            return view(to_bits(v, np.dtype(np.uint64 if v.dtype.itemsize == 8 else np.uint32)),
                        t) if t is not None else v
        if isinstance(op, ir.Symbol):
            a = self.symbol_address(op, instr)
            if isinstance(a, np.ndarray):       # shared: per CTA (its cluster rank)
                return view(a, t) if t is not None else a
            return immediate(a, t)
        raise InterpreterError(f"unexpected operand {op!r}", instr.loc)

    def symbol_address(self, sym: ir.Symbol, instr):
        """A param symbol's address (an int); a shared symbol's per thread (uint64 array):
        its offset in the shared window with the CTA's cluster rank above
        :data:`.memory.RANK_SHIFT`, as ``mov.u32 r, smem`` gives on the GPU."""
        shared = sym.space == "shared"
        space = self.spaces["shared" if shared else "param"]
        try:
            start = space.region(sym.name).start
        except KeyError:
            self.fail(instr, f"unknown {sym.space} symbol {sym.name}")
        if not shared:
            return start
        return (np.uint64(start) + (self.rank.astype(np.uint64) << np.uint64(RANK_SHIFT)))

    def src(self, instr: ir.Instr, i: int, mask):
        slot = instr.match.operands[i]
        op = instr.operands[i]
        t = instr.match.resolve_type(slot.ty)
        if isinstance(op, ir.Vec):
            return [self.value(x, t, mask, instr) for x in op.items]
        return self.value(op, t, mask, instr)

    def dst(self, instr: ir.Instr, i: int, value, mask) -> None:
        op = instr.operands[i]
        if isinstance(op, ir.Sink):  # the sink _ keeps nothing
            return
        if isinstance(op, ir.Vec):
            for x, v in zip(op.items, value):
                if x is not ir.SINK:     # {_, %r}: an unpacked part nobody keeps
                    self.write_reg(x, v, mask)
        else:
            self.write_reg(op, value, mask)

    # ------------------------------------------------------------------ execution
    def exec_instr(self, instr: ir.Instr, mask, handler) -> None:
        if instr.guard is not None:
            g = self.read_reg(instr.guard, mask, instr)
            mask = mask & (~g if instr.guard_negated else g)
            if not mask.any():
                return
        self.steps += 1
        if self.steps > self.next_check:
            self.check_budget(instr)
        self.current = instr
        handler(self, instr, mask)

    def check_budget(self, instr) -> None:
        """Every ``CHECK_EVERY`` steps: stop past ``max_steps`` or ``max_seconds`` of CPU
        time (an endless loop or a flag nobody sets is an error, not a hang)."""
        if self.steps > self.max_steps:
            over_budget(self, instr)
        if time.process_time() - self.started > self.max_seconds:
            over_budget(self, instr, self.max_seconds)
        self.next_check = min(self.steps + CHECK_EVERY, self.max_steps)

    def run(self, top: Block) -> None:
        """Run every thread in lockstep; raises Blocked (from :mod:`.schedule`) if some
        thread must wait for another that lockstep has not run yet."""
        g = self.gen_block(top, ~self.exited)
        try:
            _, _, blocked = next(g)
        except StopIteration:
            return
        g.close()
        raise blocked

    def gen_block(self, blk: Block, mask):
        """Generator form of :meth:`run_block`: yields ``(instr, mask, Blocked)`` at waits."""
        if not blk.waits:
            return self.run_block(blk, mask)
        if blk.branchy:
            return (yield from self._run_labelled(blk, mask, True))
        for op in blk.ops:
            new = (yield from op.gen(self, mask)) if op.waits else op.run(self, mask)
            if new is not mask:
                mask = new
                if not mask.any():
                    return mask
        return mask

    def run_block(self, blk: Block, mask):
        ops = blk.ops
        if not blk.branchy:
            for op in ops:
                new = op.run(self, mask)
                if new is not mask:
                    mask = new
                    if not mask.any():
                        return mask
            return mask
        g = self._run_labelled(blk, mask, False)
        try:
            next(g)
        except StopIteration as stop:
            return stop.value
        raise AssertionError("a block without waits yielded")  # pragma: no cover

    def _run_labelled(self, blk: Block, mask, waits: bool):
        ops, n = blk.ops, len(blk.ops)
        waiting: dict[int, np.ndarray] = {}
        finished = np.zeros(self.T, bool)  # threads that ran off the end of the region
        scope = mask.copy()  # the threads this run of the block is for
        i = 0
        jumps = 0
        looks: dict = {}   # backward branch -> its loop's state at the last look
        while True:
            if i in waiting:
                mask = mask | waiting.pop(i)
            if i >= n:
                finished |= mask
                mask = finished & False
            if not mask.any():
                if not waiting:
                    return finished & ~self.exited
                i = min(waiting)
                mask = waiting.pop(i)
                continue
            op = ops[i]
            if not isinstance(op, BraOp):
                mask = (yield from op.gen(self, mask)) if waits and op.waits else \
                    op.run(self, mask)
                for name in op.escapes:  # threads that branched out of op to a label here
                    j = blk.labels.get(name)
                    got = self.pending.get(name) if j is not None else None
                    if got is not None:
                        # only this run's threads: scheduling units run the same block
                        # side by side, each claiming its own
                        got = got & scope
                        self.pending[name] = self.pending[name] & ~got
                        self.away &= ~got
                        waiting[j] = waiting[j] | got if j in waiting else got
                i += 1
                continue
            instr = op.instr
            taken = mask
            if instr.guard is not None:
                g = self.read_reg(instr.guard, mask, instr)
                taken = mask & (~g if instr.guard_negated else g)
            j = blk.labels.get(op.target)
            if j is None:
                # out of this region: the enclosing region that holds the label resumes
                # these threads there once the op they are inside returns
                self.steps += 1
                if taken.any():
                    prev = self.pending.get(op.target)
                    self.pending[op.target] = taken if prev is None else prev | taken
                    self.away |= taken
                mask = mask & ~taken
                i += 1
                continue
            if instr.match.has("uni"):
                w_any = taken.reshape(-1, 32).any(1)
                w_all = (taken | ~mask).reshape(-1, 32).all(1)
                if (w_any & ~w_all).any():
                    t = int(np.argmax(np.repeat(w_any & ~w_all, 32) & mask & ~taken))
                    self.fail(instr, "bra.uni is not uniform: threads of one warp disagree "
                                     "about taking it (drop .uni or use ptx.if_)", t)
            self.steps += 1
            if self.steps > self.next_check:
                self.check_budget(instr)
            rest = mask & ~taken
            if not taken.any():
                i += 1
                continue
            if j > i:
                for x in op.skips:
                    passed(self, x, taken)
                waiting[j] = waiting[j] | taken if j in waiting else taken
                mask = rest
                i += 1
            else:
                if rest.any():
                    waiting[i + 1] = waiting[i + 1] | rest if i + 1 in waiting else rest
                mask = taken
                i = j
                jumps += 1
                if jumps > program.MAX_ITERATIONS:
                    self.fail(instr, f"backward branch taken {program.MAX_ITERATIONS} times: the "
                                     f"loop does not terminate")
                if waits and jumps % SPIN_EVERY == 0:
                    look = fingerprint(self, op.loop_regs, taken)
                    if looks.get(op) == look:   # a fixed point: let the others run
                        yield (instr, taken, Blocked(
                            lambda op=op, taken=taken: spin_message(
                                self, op.instr, op.loads, taken, op.label_loc), spin=True))
                        look = fingerprint(self, op.loop_regs, taken)
                    elif jumps % PREEMPT_EVERY == 0 and \
                            (self.valid & ~self.exited & ~taken).any():
                        yield (instr, taken, Blocked("a long loop lets the others run",
                                                     preempt=True))
                        look = fingerprint(self, op.loop_regs, taken)
                    looks[op] = look
