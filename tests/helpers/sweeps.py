"""Parametrize lists split between the default run and the long run (CI runs both)."""
from __future__ import annotations

import pytest

_PARAM = type(pytest.param())     # pytest's ParameterSet, without its private module


def sweep(cases, keep: int = 1, every: int = 0) -> list:
    """``cases`` for ``pytest.mark.parametrize``: the first ``keep`` (or, with ``every``,
    one in ``every`` from the first) in the default run, the others marked ``long`` (the
    sweep the default run leaves to ``-m long``)."""
    out = []
    for i, c in enumerate(cases):
        if (i % every == 0) if every else i < keep:
            out.append(c)
        elif isinstance(c, _PARAM):
            out.append(pytest.param(*c.values, marks=[*c.marks, pytest.mark.long], id=c.id))
        else:
            out.append(pytest.param(*(c if isinstance(c, tuple) else (c,)),
                                    marks=pytest.mark.long))
    return out
