"""Every name of pyptx 0.1.1's documented API (its ``docs/api/*.md``) and what ptxdsl has
for it: the table of docs/coming-from-pyptx.md.

    PYTHONPATH=. python lab/pyptx_names.py [--src DIR] [--check]

pyptx's API pages are read (never copied here) from ``--src`` (a folder holding pyptx's
``docs/api``), else the pyptx git mirror that ``lab/pyptx_api_tests.py`` reads. Each
``## `name``` of a page and each ``#### `member``` under it is looked up in the ptxdsl
module that stands for the page (``MODULES``); members are looked up on the class and on
an instance made here (``_SAMPLES``), since many are instance attributes. A name that
resolves is printed "same" unless ``DIFFERS`` says how ptxdsl's differs; one that does
not is printed with ``ABSENT``'s reason (a name with no reason is an error, so a new
pyptx name cannot be left out silently). The output is the markdown table the docs page
holds; ``--check`` compares it with the page instead and exits 1 when they differ.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

MIRROR = os.environ.get("PTXDSL_PYPTX_MIRROR", "/work/.mirror/patrick-toulme+pyptx/repo")
DOC = os.path.join(ROOT, "docs", "coming-from-pyptx.md")
BEGIN, END = "<!-- pyptx-names:begin -->", "<!-- pyptx-names:end -->"

# pyptx's page -> the ptxdsl module that stands for it (None: ptxdsl has no such module)
MODULES = {"pyptx": "ptxdsl", "kernel": "ptxdsl.kernel", "reg": "ptxdsl.dsl.reg",
           "smem": "ptxdsl.dsl.smem", "ptx": "ptxdsl.dsl.ptx", "specs": "ptxdsl.specs",
           "types": "ptxdsl.types", "wgmma_layout": "ptxdsl.dsl.wgmma_layout",
           "jax_support": "ptxdsl.runtime.jax_ffi", "torch_support": None, "cache": None}

_NO_MODULE = {
    "torch_support": "ptxdsl calls kernels on torch tensors directly (`k(a, b)`); "
                     "`ptxdsl.custom_op` registers a torch op",
    "cache": "ptxdsl's cubin cache is `ptxdsl.runtime.cache` (`ptxdsl cache` on the "
             "command line)",
}
_JAX = "pyptx's JAX runtime internals; ptxdsl's is `jax_call(kernel)` (XLA FFI on a GPU)"
# names another part of ptxdsl answers for (its own reference and tests), whether or not
# this checkout has them yet: the row reads the same either way
ELSEWHERE = {"ptx.tcgen05": "Blackwell `tcgen05`: the `ptx.tcgen05` namespace (#46 item 3), "
                            "documented and tested with the instruction table"}
_CODEGEN = "pyptx's PTX-to-Python transpiler table; ptxdsl's is `ptxdsl.frontend`"
ABSENT = {
    "ptx.loc": "ptxdsl prints `.loc` lines itself: `k.ptx(lines='loc')`",
    "ptx.file_": "the same: `k.ptx(lines='loc')` declares the `.file`s",
    "ptx.pragma": "not provided (`ptx.raw('.pragma \"nounroll\";')` prints one, unchecked)",
    "ptx.var": "not provided: shared arrays are `smem.alloc`, parameters come from Tiles",
    "ptx.fence.proxy_async_generic_acquire_shared_cluster":
        "not provided (a Blackwell cluster fence outside the instruction table)",
    "ptx.cluster.arrive_multicast":
        "not provided: pyptx prints it unchecked and PTX 8.x has no such form",
    "reg.PipeRef": "not provided: `setp` writing a second, complementary predicate",
    "reg.PipeRef.left": "", "reg.PipeRef.right": "",
    "reg.RegArray.base": "not provided: ptxdsl names registers when it prints them",
    "smem.alloc_with_layout": "pyptx's internal; use `smem.wgmma_tile`",
    "kernel.TmaDescriptorHandle": "not provided: a tensor map comes from a Tile "
                                  "(`A.tma_desc()` of a `Layout.TMA_*` input)",
    "kernel.TmaDescriptorHandle.name": "", "kernel.TmaDescriptorHandle.tensor": "",
    "kernel.TensorSpec.tma_desc": "not provided on a placeholder (no specs): declare the "
                                  "input as a `Tile` with a `Layout.TMA_*`",
    "pyptx.differentiable_kernel": "not provided: ptxdsl's ops carry their own backward "
                                   "kernels (`ptxdsl.ops`)",
    "pyptx.detect_arch.cache_info": "", "pyptx.detect_arch.cache_clear": "",
    "specs.Dim": "not provided: a dim is an int or a name (str)",
    "specs.Dim.copy_with": "",
    "specs.unify_envs": "not provided: ptxdsl's launcher binds the named dims",
    "specs.Tile.matches": "not provided (the launcher checks arguments against Tiles)",
    "specs.Tile.extract_env": "not provided (the launcher binds named dims)",
    "specs.Tile.resolve_shape": "`Tile.shape_for(values)`",
    "pyptx.Tile.matches": "see `specs.Tile.matches`",
    "pyptx.Tile.extract_env": "see `specs.Tile.extract_env`",
    "pyptx.Tile.resolve_shape": "`Tile.shape_for(values)`",
    "ptx.TYPED_WRAPPER_CODEGEN": _CODEGEN,
}
DIFFERS = {
    "ptx.special": "returns `ir.Special` operands (`tid.x`), not registers named `%tid.x`",
    "ptx.scope": "records nothing: ptxdsl declares every register at the top, names unique",
    "ptx.expr": "records nothing (pyptx groups the same instructions)",
    "reg.Reg": "ptxdsl's `ir.Reg`; `.name` has no `%` (`r0`)",
    "kernel.TensorSpec": "a placeholder with `name` (and `shape`/`dtype`/`layout` None)",
    "pyptx.detect_arch": "the same, raising without a GPU as pyptx's does (not cached: no "
                         "`cache_info` / `cache_clear`)",
    "ptx.stmatrix": "also `ptx.stmatrix(dst, src)`; `smem=`/`regs=` as pyptx",
    "ptx.cvt": "also `ptx.cvt(dtype, x)` returning a new register",
    "ptx.param": "reads a dim, a tensor's pointer or a `raw_params` parameter (one that "
                 "names no dim takes its value by keyword at the call, on the interpreter)",
}


def _samples() -> dict:
    """Instances whose attributes the pages list (made inside a throwaway trace)."""
    from ptxdsl import Layout, Tile, kernel, ptx, reg, smem
    from ptxdsl.core.trace import Builder
    from ptxdsl.kernel import TensorSpec
    from ptxdsl.types import bf16, f32, pred
    out = {"specs.Tile": Tile("M", "K", bf16, Layout.TMA_128B, tma_box=(64, 64)),
           "kernel.TensorSpec": TensorSpec("A"), "types.PtxType": f32,
           "kernel.Kernel": kernel(arch="sm_90a")(lambda: None)}
    out["pyptx.Tile"] = out["specs.Tile"]
    out["pyptx.Kernel"] = out["kernel.Kernel"]
    b = Builder("names", "sm_90a")
    with b.active():
        a = smem.alloc(bf16, (2, 64, 64), swizzle=128)
        bars = smem.mbarrier(2)
        out.update({"reg.RegArray": reg.array(f32, 2),
                    "reg.NegPred": reg.NegPred(reg.scalar(pred)),
                    "smem.SharedAlloc": a, "smem.SharedSlice": a[1],
                    "smem.MbarrierArray": bars, "smem.MbarrierRef": bars[1],
                    "ptx.PipelineState": ptx.PipelineState(2),
                    "ptx.NamedBarrier": ptx.named_barrier(1, count=64)})
    return out


def resolve(page: str, name: str, samples: dict) -> bool:
    """Whether ``page``'s ``name`` (``top`` or ``top.member``) exists in ptxdsl."""
    target = MODULES.get(page)
    if target is None:
        return False
    obj = importlib.import_module(target)
    parts = name.split(".")
    missing = object()
    for i, part in enumerate(parts):
        nxt = getattr(obj, part, missing)
        key = f"{page}.{'.'.join(parts[:i])}"
        if nxt is missing and key in samples:
            nxt = getattr(samples[key], part, missing)
        if nxt is missing:
            return False
        obj = nxt
    return True


def pyptx_names(src: str | None) -> dict[str, list[str]]:
    """page -> its documented names in order (``top`` and ``top.member``)."""
    out: dict[str, list[str]] = {}
    pages = sorted(MODULES)
    for page in pages:
        if src:
            text = open(os.path.join(src, "docs", "api", f"{page}.md"), encoding="utf-8").read()
        else:
            text = subprocess.run(["git", "-C", MIRROR, "show", f"HEAD:docs/api/{page}.md"],
                                  check=True, capture_output=True, text=True).stdout
        names, top = [], None
        for line in text.splitlines():
            m2 = re.match(r"^## `([A-Za-z_][\w]*)", line)
            m4 = re.match(r"^#### `([A-Za-z_][\w]*)", line)
            if m2:
                top = m2.group(1)
                names.append(top)
            elif m4 and top:
                names.append(f"{top}.{m4.group(1)}")
        out[page] = names
    return out


def _status(page: str, name: str, samples: dict, missing: list) -> str | None:
    key = f"{page}.{name}"
    if key in ELSEWHERE:
        return ELSEWHERE[key]
    if resolve(page, name, samples):
        return DIFFERS.get(key, "same")
    if key in ABSENT:
        return ABSENT[key] or None   # "": a member its top-level row speaks for
    missing.append(key)
    return None


def table(src: str | None) -> str:
    """One row per documented top-level name (its members that ptxdsl has as pyptx
    does listed in the row), and a row of its own for each member that differs."""
    samples = _samples()
    rows = ["| pyptx | members | ptxdsl |", "|---|---|---|"]
    missing: list[str] = []
    for page, names in pyptx_names(src).items():
        if MODULES[page] is None:
            rows.append(f"| `pyptx.{page}` | {len(names)} names | {_NO_MODULE[page]} |")
            continue
        if page == "jax_support":
            have = ", ".join(f"`{n}`" for n in names if resolve(page, n, samples))
            rows.append(f"| `pyptx.jax_support` | {len(names)} names | {_JAX}"
                        f"{'; `jax_ffi` also has ' + have if have else ''} |")
            continue
        tops = [n for n in names if "." not in n]
        merged: list = []
        for top in tops:
            status = _status(page, top, samples, missing)
            if top in ("tcgen05", "TYPED_WRAPPER_CODEGEN"):
                merged.append(([f"{page}.{top}"], "", status))
                continue   # the row speaks for its members
            same, own = [], []
            for m in (n for n in names if n.startswith(top + ".")):
                st = _status(page, m, samples, missing)
                if st == "same":
                    same.append(m.split(".", 1)[1])
                elif st is not None:
                    own.append((m, st))
            if status is not None:
                row = (", ".join(same), status)
                if merged and merged[-1][1:] == row and same:   # types.b8, types.b16, ...
                    merged[-1][0].append(f"{page}.{top}")
                else:
                    merged.append(([f"{page}.{top}"], *row))
            merged.extend(([f"{page}.{m}"], "", st) for m, st in own)
        rows.extend(f"| {', '.join(f'`{n}`' for n in keys)} | {members} | {status} |"
                    for keys, members, status in merged)
    if missing:
        raise SystemExit(f"pyptx names ptxdsl has not and ABSENT does not explain: {missing}")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    text = table(a.src)
    if not a.check:
        print(text)
        return 0
    doc = open(DOC, encoding="utf-8").read()
    have = doc[doc.index(BEGIN) + len(BEGIN):doc.index(END)].strip()
    if have != text:
        print("docs/coming-from-pyptx.md's table differs from pyptx's names; rerun and paste")
        return 1
    print(f"{text.count(chr(10)) - 1} rows agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
