"""The special-register table (``ptxdsl.isa.special``) as the tracer (``ptx.special``,
``ptx.sreg``) and the verifier (uniformity scopes) read it."""
from __future__ import annotations

import pytest

from ptxdsl import kernel, ptx, reg
from ptxdsl.core.errors import TraceError, VerifyError
from ptxdsl.core.types import u32
from ptxdsl.isa.special import FAMILIES, SCOPES, SPECIAL_REGS

REGISTERS = sorted(SPECIAL_REGS)


def _spelled(name: str):
    """``ptx.special.<family>()`` or ``ptx.special.<family>.<axis>()`` for a register name."""
    fam, _, axis = name.partition(".")
    got = getattr(ptx.special, fam)
    return getattr(got, axis)() if axis else got()


def test_every_register_has_one_family_and_a_known_scope():
    assert len(REGISTERS) == sum(len(f.registers) for f in FAMILIES)
    assert all(f.scope in SCOPES for f in FAMILIES)


@pytest.mark.parametrize("name", REGISTERS)
def test_both_spellings_give_the_tables_type_and_mov_reads_it(name):
    spec = SPECIAL_REGS[name]

    def k():
        a, b = _spelled(name), ptx.sreg("%" + name)
        assert (a.name, a.dtype) == (b.name, b.dtype) == (name, spec.dtype)
        getattr(ptx.inst.mov, spec.dtype.name)(reg.scalar(spec.dtype), a)
    assert f", %{name};" in kernel(arch="sm_90a")(k).ptx()


@pytest.mark.parametrize("name", [n for n in REGISTERS if SPECIAL_REGS[n].sm >= 90])
def test_sreg_refuses_a_register_the_arch_lacks(name):
    def k():
        ptx.sreg("%" + name)
    with pytest.raises(TraceError, match=f"%{name} needs sm_90"):
        kernel(arch="sm_80")(k).ptx()


def test_an_unknown_family_is_named_with_a_suggestion():
    with pytest.raises(AttributeError, match="did you mean laneid"):
        ptx.special.laneidx


@pytest.mark.parametrize("name", [n for n in REGISTERS if SPECIAL_REGS[n].dtype == u32])
def test_a_cta_barrier_may_sit_under_a_branch_only_on_a_cta_uniform_register(name):
    """The verifier takes each register's scope from the table: ``bar.sync`` (all the
    CTA's threads) under ``if v == 0`` is accepted iff ``v`` is the same CTA-wide."""
    def k():
        v = reg.scalar(u32)
        ptx.inst.mov.u32(v, _spelled(name))
        with ptx.if_(v == 0):
            ptx.bar.sync(0)
    uniform = SCOPES.index(SPECIAL_REGS[name].scope) >= SCOPES.index("cta")
    if uniform:
        assert "bar.sync 0;" in kernel(arch="sm_90a")(k).ptx()
    else:
        with pytest.raises(VerifyError, match="bar.sync inside a branch"):
            kernel(arch="sm_90a")(k).ptx()
