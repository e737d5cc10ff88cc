"""pyptx's Blackwell examples (``examples/blackwell/*.py``, 14 files, 17 kernel builders)
on ptxdsl with their imports renamed: every builder traces for sm_100a and ptxas
assembles the result, and the interpreter refuses the tcgen05 kernels by name.

The examples are read from the pyptx mirror or an installed pyptx
(``bench/pyptx_examples.py``), never copied here; without them these tests skip. A
builder that needs a DSL name ptxdsl does not have yet skips naming it
(``pyptx_blackwell.NEEDS``). The GEMMs and the torch-importing probes are in the long run.
"""
from __future__ import annotations

import numpy as np
import pytest

import pyptx_blackwell as bw
from bench import pyptx_examples
from ptxdsl import toolchain
from ptxdsl.core.errors import InterpreterError

PTXAS = toolchain.find_ptxas()
# cheap ones in the default run (tcgen05_smoke's three); the rest: -m long
DEFAULT = {("tcgen05_smoke", "build_alloc_only"), ("tcgen05_smoke", "build_mma_only"),
           ("tcgen05_smoke", "build_ld_only")}


def _load_or_skip(fn):
    try:
        return fn()
    except pyptx_examples.Unavailable as e:
        pytest.skip(str(e))
    except ModuleNotFoundError as e:
        if e.name in ("torch", "jax"):
            pytest.skip(f"the example imports {e.name}, not installed here")
        raise


def _params():
    for key in bw.BUILDERS:
        marks = () if key in DEFAULT else (pytest.mark.long,)
        yield pytest.param(*key, marks=marks, id=".".join(key))


@pytest.mark.skipif(PTXAS is None, reason="no ptxas found")
@pytest.mark.parametrize("name,builder", list(_params()))
def test_builder_traces_and_assembles_for_sm_100a(name, builder):
    gaps = bw.missing(builder)
    if gaps:
        pytest.skip(f"needs {', '.join(gaps)} (#46 item 1)")
    k = _load_or_skip(lambda: bw.build(name, builder))
    text = k.ptx("sm_100a")
    toolchain.assemble(text, "sm_100a", verbose=False, ptxas=PTXAS)
    if name.startswith(("tcgen05", "gemm", "grouped")):
        assert "\ttcgen05.alloc" in text


@pytest.mark.long
@pytest.mark.parametrize("name", bw.RUNNERS)
def test_runner_files_import_the_other_examples(name):
    gaps = bw.missing(None)
    if gaps:
        pytest.skip(f"needs {', '.join(gaps)} (#46 item 1)")
    mod = _load_or_skip(lambda: bw.load(name))
    assert callable(getattr(mod, "run_suite", None) or getattr(mod, "run"))


def test_the_interpreter_refuses_tcgen05_by_name():
    gaps = bw.missing(None)
    if gaps:
        pytest.skip(f"needs {', '.join(gaps)} (#46 item 1)")
    k = _load_or_skip(lambda: bw.build("tcgen05_smoke", "build_alloc_only"))
    with pytest.raises(InterpreterError, match=r"tcgen05\.alloc\.cta_group::1.* no CPU "
                                               r"semantics.*runs only on a GPU"):
        k.interpret(np.zeros((1, 1), np.float32))
