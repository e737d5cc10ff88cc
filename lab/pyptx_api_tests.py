"""How many of pyptx 0.1.1's public-behaviour DSL-API tests pass on ptxdsl, imports renamed.

    PYTHONPATH=. python lab/pyptx_api_tests.py [--src DIR] [--json PATH] [-v]

pyptx's tests are read, never copied here, from ``--src`` (a folder holding pyptx's
``tests/``), else ``$PTXDSL_PYPTX_TESTS``, else the pyptx git mirror that
``bench/pyptx_examples.py`` reads (the wheel on PyPI ships no tests). They are written to
a temporary folder with ``pyptx`` renamed to ``ptxdsl`` and nothing else changed; imports
of pyptx internals (its IR, parser, emitter, codegen, trace scope) become ``None`` there,
and the tests that use them are not counted: they test pyptx's implementation, not its
API.

Counted ("public behaviour"): every ``test_*`` of the DSL-API files below whose source
names none of those internals (the ``INTERNAL`` pattern); a parametrized test counts once
and passes when all its cases do. The tests run twice: with ``from pyptx import`` naming
``ptxdsl.pyptx`` (pyptx's PTX spellings: ``kernel(style="pyptx")``), the headline, and
naming ``ptxdsl`` itself. Each run prints passed / counted and the **honest** ratio:
passes over the counted tests less only those that ptxdsl's stricter checks refuse
(``STRICTER``: safety checks and forms ptxas refuses, by their error text). Real
differences (``DIFFERS`` by error text, ``BY_TEST`` for a bare assert checked by hand)
stay failures, each named; ``-v`` lists every failure with what it meets.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
from bench.pyptx_examples import MODULES  # noqa: E402  (pyptx module -> ptxdsl path)

MIRROR = os.environ.get("PTXDSL_PYPTX_MIRROR", "/work/.mirror/patrick-toulme+pyptx/repo")
FILES = ["test_dsl_wrappers", "test_highlevel", "test_intrinsic", "test_kernel_templates",
         "test_reg_alloc", "test_typed_wrappers", "test_wgmma_layout", "test_mma_sync"]
# TYPED_WRAPPER_CODEGEN is the table of those same _codegen_* functions (pyptx's transpiler)
INTERNAL = re.compile(r"_codegen|TYPED_WRAPPER_CODEGEN|_kernel_body|_make_cg|\bparse\(|\bemit\(|"
                      r"trace_scope|RegDecl|"
                      r"IntrinsicScope|\bFunction\b|\bInstruction\b|normalize_module|\bLabel\b|"
                      r"_emit\b|\.ir\b|\._trace\(|\._cache\b")
# ptxdsl refuses on purpose (docs/coming-from-pyptx.md): a failure whose error says so is
# counted apart from the others
STRICTER = {"refuses reading a register no instruction wrote":
            "is read here before any instruction writes it",
            "refuses a wgmma accumulator of the wrong size":
            "registers per thread, d has",
            "refuses an operand of the wrong type":
            ("; convert it with cvt", re.compile(r"register %\w+ is \.\w+ but \S+ needs \.")),
            "refuses a 32-bit register as a .global address":
            "but .global addres",
            "refuses a shared symbol the kernel does not declare":
            ("names no shared array or parameter of this kernel", "no shared array named"),
            "refuses extern shared memory without its size, smem=BYTES":
            "needs smem=BYTES",
            # pyptx prints .im2col without its offsets, .gather4/.scatter4 (PTX: .tile::gather4,
            # five coordinates) with two: ptxas 13 refuses all three
            "has no im2col/gather4/scatter4 TMA calls: pyptx's forms are not PTX":
            ("object has no attribute 'im2col_", "object has no attribute 'gather4_",
             "object has no attribute 'scatter4_"),
            # PTX ISA: tcgen05.commit's mbarrier is .shared::cta-less (.shared::cluster only),
            # .multicast::cluster takes the CTA mask operand, tcgen05.ld/st's register count
            # follows shape and .num
            "refuses tcgen05 forms PTX does not have":
            ("ptxas refuses .shared::cta", "needs multicast_mask=",
             "registers here but the register list has")}
# Real differences of spelling or behaviour: failures, counted as failures (named, so the
# list says what each one is)
DIFFERS = {"declares registers by prefix and width, one .reg line per prefix":
           ("assert '.reg .", "assert '.u64' in '//"),
           "prints the PTX ISA version the kernel needs (8.0 for sm_90a) without style='pyptx'":
           "assert '.version 8.",
           # wgmma descriptors address 128-byte swizzled tiles from a 1024-byte aligned base
           "aligns a 128-byte swizzled wgmma tile to its 1024-byte pattern (pyptx: .align 128)":
           ".align 128 .b8 smem_' in '",
           "names shared arrays smem0, smem1, ... without style='pyptx' (pyptx: smem_N, mbar_N)":
           "[mbar_' in '",
           "passes a tensor map by value, .param .align 64 .b8 A_tmap[128]":
           "assert '.param .u64 A_tma_desc' in '",
           "refuses a plain swizzled array with rows wider than the swizzle span":
           "-byte swizzled array has rows of at most"}
# failures whose message does not name the cause (a bare assert); each checked by hand
_SPECIAL = "returns special registers as operands named tid.x, not registers named %tid.x"
_REGS = "declares registers by prefix and width, one .reg line per prefix"
BY_TEST = {
    # ptx.special.tid.x() is an ir.Special operand (what the instruction table and the
    # interpreter read), its .name 'tid.x' like every register name here, without the '%'
    "test_highlevel.py::TestPtxInstructions::test_special_tid": _SPECIAL,
    "test_highlevel.py::TestPtxInstructions::test_special_ctaid": _SPECIAL,
    # old = reg.array(f32, 4) and three reg.alloc(f32)s print one '.reg .f32 %f<n>;' line,
    # where the test counts pyptx's line per allocation
    "test_reg_alloc.py::TestKernelIntegration::test_mixed_old_and_new_in_kernel": _REGS,
    # seven reg.alloc()s no instruction uses: not declared (and never as .u64 or .bf16)
    "test_reg_alloc.py::TestKernelIntegration::test_alloc_many_dtypes": _REGS,
}
_INTERNAL_MODULES = ("ir", "parser", "emitter", "codegen", "_trace", "spec")


def _read(name: str, src: str | None) -> str:
    for folder in filter(None, [src, os.environ.get("PTXDSL_PYPTX_TESTS")]):
        p = os.path.join(folder, f"{name}.py")
        if os.path.isfile(p):
            return open(p, encoding="utf-8").read()
    return subprocess.run(["git", "-C", MIRROR, "show", f"HEAD:tests/{name}.py"], check=True,
                          capture_output=True, text=True).stdout


def _rename(text: str, package: str = "ptxdsl.pyptx") -> str:
    """pyptx's imports as ptxdsl's: ``from pyptx import`` names ``package`` (its
    submodules ``pyptx.X`` map through ``MODULES`` to ptxdsl's either way)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^(\s*)from pyptx\.([\w.]+) import (.*)$", line)
        if m and m.group(2).split(".")[0] in _INTERNAL_MODULES:
            indent, names = m.group(1), m.group(3).strip("() ")
            if names:  # the internal names are None: only uncounted tests use them
                bound = [n.split(" as ")[-1].strip() for n in names.split(",") if n.strip()]
                out.append(f"{indent}{' = '.join(bound)} = None")
                continue
        out.append(line)
    text = "\n".join(out)
    text = re.sub(r"^(\s*)from pyptx\.(ir|parser|emitter|codegen|_trace|spec)[\w.]* import \($",
                  r"\1if False:\n\1    from pyptx_internal import (", text, flags=re.M)
    for theirs, ours in MODULES.items():
        text = re.sub(rf"\bpyptx\.{theirs}\b", f"ptxdsl.{ours}", text)
    text = re.sub(r"\bfrom pyptx import\b", f"from {package} import", text)
    text = re.sub(r"\bfrom pyptx\b", "from ptxdsl", text)
    text = re.sub(r"\bimport pyptx\b", "import ptxdsl", text)
    text = re.sub(r"\bpyptx\.", "ptxdsl.", text)
    return text


def counted(text: str) -> list[str]:
    """pytest node-id suffixes (``Class::test`` or ``test``) of the public-behaviour tests:
    those that name no internal, directly or through a module-level helper that does."""
    tree = ast.parse(text)
    helpers = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and
               not n.name.startswith("test_") and INTERNAL.search(ast.get_source_segment(text, n))]
    internal = re.compile(INTERNAL.pattern + "".join(rf"|\b{h}\(" for h in helpers))
    ids = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef) and sub.name.startswith("test_") and \
                        not internal.search(ast.get_source_segment(text, sub)):
                    ids.append(f"{node.name}::{sub.name}")
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and \
                not internal.search(ast.get_source_segment(text, node)):
            ids.append(node.name)
    return ids


def _counted(node: str, selected: dict) -> bool:
    name, _, test = node.partition(".py::")
    return test.split("[")[0] in selected.get(name, ())


def _outcome(status: dict, node: str) -> str:
    """A test's status; a parametrized one passes when all its cases do (else its first
    failing case's status)."""
    if node in status:
        return status[node]
    cases = [v for k, v in status.items() if k.startswith(node + "[")]
    return next((v for v in cases if not v.startswith("PASSED")), "PASSED" if cases else "")


def run(src: str | None, package: str) -> dict:
    """Run the counted tests with ``from pyptx import`` naming ``package``: each test's
    status and, for a failure, the difference or stricter check it meets."""
    work = tempfile.mkdtemp(prefix="ptxdsl_pyptx_tests_")
    selected: dict[str, list[str]] = {}
    for name in FILES:
        text = _read(name, src)
        selected[name] = counted(text)
        with open(os.path.join(work, f"{name}.py"), "w", encoding="utf-8") as f:
            f.write(_rename(text, package))
    open(os.path.join(work, "conftest.py"), "w").close()
    # whole files (a file that fails to import fails all its tests); only counted ids kept
    report = os.path.join(work, "report.txt")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(ROOT))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
                    "--tb=line", "-o", "console_output_style=classic",
                    "--continue-on-collection-errors", "-o", "addopts=", "--rootdir", work,
                    *[f"{name}.py" for name in selected]], cwd=work,
                   env=env, stdout=open(report, "w"), stderr=subprocess.STDOUT)
    lines = open(report, encoding="utf-8").read().splitlines()
    # --tb=line prints one 'path:line: Error: message' per failure, in run order
    reasons = [ln for ln in lines if re.match(r"^/\S+:\d+: ", ln) or ln.startswith("E   ")]
    status: dict[str, str] = {}
    for ln in lines:
        m = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED) (\S+?\.py::\S+)(?: - (.*))?$", ln)
        if m:
            status[m.group(2)] = m.group(1) + (f": {m.group(3)}" if m.group(3) else "")
    failed_ids = [k for k, v in status.items() if v.startswith("FAILED")]
    if len(reasons) >= len(failed_ids):  # one reason line per failure, same order
        tb = [ln for ln in lines if re.match(r"^/\S+:\d+: ", ln)]
        for node, reason in zip(failed_ids, tb):
            status[node] += f" [{reason.split(': ', 1)[-1][:300]}]"
    why: dict[str, tuple[str, str]] = {}  # failed node -> ("stricter" | "differs", label)
    per_file, outcome = {}, {}
    for name, ts in selected.items():
        for t in ts:
            node = f"{name}.py::{t}"
            v = outcome[node] = _outcome(status, node) or "not run"
            if v.startswith("FAILED"):
                for kind, table in (("stricter", STRICTER), ("differs", DIFFERS)):
                    for label, needles in table.items():
                        needles = (needles,) if isinstance(needles, (str, re.Pattern)) \
                            else needles
                        if any(n.search(v) if isinstance(n, re.Pattern) else n in v
                               for n in needles):
                            why.setdefault(node, (kind, label))
                if node not in why and node in BY_TEST:
                    why[node] = ("differs", BY_TEST[node])
        per_file[name] = {"passed": sum(1 for t in ts if outcome[f"{name}.py::{t}"]
                                        .startswith("PASSED")), "counted": len(ts)}
    passed = sum(r["passed"] for r in per_file.values())
    counted_n = sum(r["counted"] for r in per_file.values())
    stricter = sum(1 for k, _ in why.values() if k == "stricter")
    return {"package": package, "files": per_file, "passed": passed, "counted": counted_n,
            "stricter": stricter, "judged": counted_n - stricter, "outcome": outcome,
            "why": why}


def _summary(r: dict, verbose: bool, headline: bool) -> None:
    if verbose:
        for node, v in r["outcome"].items():
            if not v.startswith("PASSED"):
                kind, label = r["why"].get(node, ("", ""))
                print(f"  {node}: " + (f"({kind}: {label})" if label else v[:200]))
    if headline:
        for name, f in r["files"].items():
            print(f"{name:<24} {f['passed']:>4} / {f['counted']}")
    labels: dict[tuple, int] = {}
    for kl in r["why"].values():
        labels[kl] = labels.get(kl, 0) + 1
    print(f"from pyptx import -> from {r['package']} import: {r['passed']} of "
          f"{r['counted']} counted tests pass")
    for (kind, label), n in sorted(labels.items()):
        tail = "not judged (ptxdsl refuses on purpose)" if kind == "stricter" else \
            "failures (real differences)"
        print(f"  {n:>3} {tail}: ptxdsl {label}")
    other = r["counted"] - r["passed"] - len(r["why"])
    if other:
        print(f"  {other:>3} other failures")
    print(f"  honest: {r['passed']} / {r['judged']} = {100 * r['passed'] / r['judged']:.1f}% "
          f"(every counted test but the {r['stricter']} that ptxdsl's stricter checks refuse; "
          f"differences count as failures)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src")
    ap.add_argument("--json")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args(argv)
    compat = run(a.src, "ptxdsl.pyptx")
    plain = run(a.src, "ptxdsl")
    _summary(compat, a.v, True)
    _summary(plain, False, False)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({r["package"]: {k: v for k, v in r.items() if k != "why"} |
                       {"why": {n: list(w) for n, w in r["why"].items()}}
                       for r in (compat, plain)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
