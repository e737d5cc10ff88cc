"""Fixes of the synchronisation bugs in pyptx's published examples, as text patches for
``bench.pyptx_examples.load(..., patch=)`` (tests/dsl/test_pyptx_examples_interp.py says
what each fixes and how the interpreter reports the bug)."""
from __future__ import annotations


def fenced(text: str) -> str:
    """A ``fence.proxy.async.shared::cta`` after the register stores of P, before the
    barrier that hands P to wgmma."""
    out: list[str] = []
    for line in text.splitlines():
        prev = [x for x in out if x.strip()]
        if line.strip().startswith("ptx.bar.sync(") and prev and \
                "ptx.inst.st.shared" in prev[-1]:
            out.append(line[:len(line) - len(line.lstrip())] +
                       "ptx.fence.proxy_async_shared_cta()")
        out.append(line)
    return "\n".join(out) + "\n"


def gemm_fixed(text: str) -> str:
    """The GEMM with a fence before its C tile's TMA store, the store's bulk group waited
    for (its source reads done) before the C tile is reused or the CTA exits, and a cluster
    barrier before each of its exits (so no CTA leaves while a peer may still arrive on its
    barriers)."""
    for label in ("consumer_exit", "producer_exit"):
        old = f'    ptx.label("{label}")\n    ptx.ret()'
        assert old in text
        text = text.replace(old, f'    ptx.label("{label}")\n    ptx.cluster.sync()\n'
                                 f'    ptx.ret()')
    old = "            ptx.inst.cp.async_.bulk.commit_group()\n"
    assert text.count(old) == 1
    text = text.replace(old, old + '            ptx.inst("cp.async.bulk.wait_group.read", 0)\n')
    old = "        # Sync within consumer warpgroup before TMA store\n        consumer_bar.sync()"
    assert old in text
    return text.replace(old, "        ptx.fence.proxy_async_shared_cta()\n" + old)
