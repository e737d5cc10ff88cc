"""The transaction-count detector: expect_tx byte counts that disagree with the copies
completing on an mbarrier phase.

Each mbarrier phase (:mod:`.semantics.mbarrier`, ``mach.mbarriers``) has a tx-count: ``expect_tx``
(and ``arrive.expect_tx``) raise it by the bytes the phase waits for, each asynchronous
copy that completes on the barrier (``.mbarrier::complete_tx::bytes``) and
``complete_tx`` lower it. The phase completes when its arrivals are all in and the
tx-count is back to zero. As on the hardware the count may dip below zero for a while
(a peer CTA's multicast copy can land before this CTA's ``arrive.expect_tx``), but:

* it may not go below zero once every arrival of the phase is in, nor may the last
  arrival find it below zero: the copies then delivered more bytes than ``expect_tx``
  announced (*over*);
* its magnitude stays under 2^20 (the hardware's range);
* when the kernel ends, every phase's tx-count is zero: a positive count means bytes
  ``expect_tx`` announced never arrived (*under*: a copy too few or too small), a
  negative one that copies delivered bytes nobody announced. A phase that a thread waits
  for and that lacks bytes ends in a deadlock whose report says the same.

Each phase keeps the totals announced and delivered and the instructions that did so,
so the error names the user's lines on both sides.
"""
from __future__ import annotations

from ..core.errors import InterpreterError

TX_LIMIT = (1 << 20) - 1


def _log(st) -> dict:
    lg = st.get("log")
    if lg is None:
        lg = st["log"] = {"expect": 0, "done": 0, "expect_at": [], "done_at": []}
    return lg


def _where(instrs) -> str:
    locs = []
    for i in instrs:
        s = str(i.loc)
        if s not in locs:
            locs.append(s)
    return ", ".join(locs[:3]) + (" ..." if len(locs) > 3 else "") if locs else "nowhere"


def summary(st) -> str:
    """The phase's announced and delivered bytes with where they came from."""
    lg = _log(st)
    return (f"expect_tx announced {lg['expect']} bytes (at {_where(lg['expect_at'])}), the "
            f"copies completing on it delivered {lg['done']} (at {_where(lg['done_at'])})")


def expect(mach, st, nbytes: int, instr, t) -> None:
    """``expect_tx`` of ``nbytes`` on the phase ``st`` (before the arrival, if any)."""
    st["tx"] += nbytes
    lg = _log(st)
    lg["expect"] += nbytes
    if instr is not None and len(lg["expect_at"]) < 8:
        lg["expect_at"].append(instr)
    _range(mach, st, instr, t)


def complete(mach, st, nbytes: int, instr, t) -> None:
    """A copy (or ``complete_tx``) delivered ``nbytes`` to the phase ``st``."""
    st["tx"] -= nbytes
    lg = _log(st)
    lg["done"] += nbytes
    if instr is not None and len(lg["done_at"]) < 8:
        lg["done_at"].append(instr)
    _range(mach, st, instr, t)
    if st["tx"] < 0 and st["pending"] == 0:
        mach.fail(instr, f"this copy completes {-st['tx']} more transaction bytes than the "
                         f"mbarrier's phase expects, after all its arrivals are in: "
                         f"{summary(st)}; make expect_tx count every byte of the copies "
                         f"(a box's bytes include its out-of-bounds part)", t)


def arrived(mach, st, instr, t) -> None:
    """Called after an arrival (the phase's pending count already lowered)."""
    if st["pending"] == 0 and st["tx"] < 0:
        mach.fail(instr, f"the last arrival of the phase finds {-st['tx']} more transaction "
                         f"bytes completed than expected: {summary(st)}; make expect_tx "
                         f"count every byte of the copies", t)


def new_phase(st) -> None:
    st.pop("log", None)


def _range(mach, st, instr, t) -> None:
    if abs(st["tx"]) > TX_LIMIT:
        mach.fail(instr, f"the mbarrier's tx-count reaches {st['tx']}, outside the hardware's "
                         f"range +-(2^20 - 1): {summary(st)}", t)


def at_exit(mach) -> None:
    """Every phase's tx-count must be back to zero when the kernel ends."""
    for off, st in mach.mbarriers.items():
        if not st.get("tx"):
            continue
        lg = _log(st)
        first, second = ((lg["expect_at"], lg["done_at"]) if st["tx"] > 0
                         else (lg["done_at"], lg["expect_at"]))
        at = (first or second or [None])[-1]
        sp = mach.spaces["shared"]
        where = sp.nearest(sp.base + off % sp.row_bytes)
        if st["tx"] > 0:
            what = (f"{st['tx']} transaction bytes that expect_tx announced never arrived "
                    f"(a copy too few or too small)")
        else:
            what = (f"copies completed {-st['tx']} more transaction bytes than expect_tx "
                    f"announced")
        msg = (f"the kernel ended with phase {st['phase']} of the mbarrier {where} "
               f"unbalanced: {what}; {summary(st)}")
        if at is None:
            raise InterpreterError(msg)
        mach.fail(at, msg)
