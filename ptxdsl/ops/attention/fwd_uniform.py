"""Branches of the forward's consumers (:mod:`.fwd`) that are the same in the whole
warpgroup, as ``bra.uni``: ptxas then keeps the wgmma descriptors in uniform registers (a
plain branch costs two ``R2UR`` a wgmma), and a ``wgmma.wait_group`` behind a branch on the
softmax's result stays where it is."""
from __future__ import annotations

from ...core.types import pred
from ...dsl import ptx, reg
from .softmax import rescale


def uniform_if(labels, cond, then, other=None) -> None:
    """``then()`` where ``cond`` (the same in the whole warpgroup) holds, else ``other()``:
    ``bra.uni`` around each, so that ptxas keeps the wgmma descriptors in uniform
    registers (see :func:`wait_and_rescale`)."""
    n = next(labels)
    alt, done = ptx.new_label(f"wide{n}"), ptx.new_label(f"joined{n}")
    ptx.bra(alt, pred=~cond, uni=True)
    then()
    ptx.bra(done, uni=True)
    ptx.place(alt)
    if other is not None:
        other()
    ptx.place(done)


def wait_and_rescale(o_acc, alphas, bar) -> None:
    """``Config.lazy_rescale``: retire P·V (``wgmma.wait_group 0``) and rescale O only in
    warpgroups where some row's max moved (``bar.red.or`` of ``alpha < 1`` over the
    warpgroup at named barrier ``bar``: the wait is warpgroup-aligned), each branch with
    its own wait. A wait behind a branch on the softmax's result stays after the softmax;
    ptxas otherwise hoists it above the ex2s, and P·V no longer overlaps them."""
    moved = reg.scalar(pred)
    ptx.inst.setp.lt.f32(moved, alphas[0], 1.0)
    other = reg.scalar(pred)
    ptx.inst.setp.lt.f32(other, alphas[1], 1.0)
    ptx.inst("or.pred", moved, moved, other)
    ptx.inst("bar.red.or.pred", moved, bar, 128, moved)
    # bra.uni: the reduction is the same in every thread, and ptxas, told so, keeps the
    # loop's wgmma descriptors in uniform registers (a plain branch costs two R2UR a wgmma)
    keep, done = ptx.new_label("o_kept"), ptx.new_label("o_rescaled")
    ptx.bra(keep, pred=~moved, uni=True)
    ptx.inst("wgmma.wait_group.sync.aligned", 0)
    rescale(list(o_acc), alphas)
    ptx.bra(done, uni=True)
    ptx.place(keep)
    ptx.inst("wgmma.wait_group.sync.aligned", 0)
    ptx.place(done)


__all__ = ["uniform_if", "wait_and_rescale"]
