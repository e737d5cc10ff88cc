"""The generated docs: the PTX-namespace page covers the whole instruction table, its
Python examples record exactly the PTX they show, the operator table says what the
operators really record, and the docs build hooks behave.

``mkdocs build --strict`` itself runs in .ci/run (it needs the docs extra).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import sys

import pytest

from ptxdsl.core import ir
from ptxdsl import ptx, reg, types
from ptxdsl.core.emit import fmt_instr
from ptxdsl.isa import TABLE
from ptxdsl.core.errors import PtxdslError
from ptxdsl.core.trace import Builder

from paths import ROOT
DOCS = os.path.join(ROOT, "docs")
sys.path.insert(0, DOCS)  # docs/docgen.py, the reference pages' generator, lives there
from docgen import (anchor, python_chain, python_example, render_operator_table,  # noqa: E402
                    render_ptx_namespace, trace_operator)


@pytest.fixture(scope="module")
def page() -> str:
    return render_ptx_namespace()


def _section(page: str, opcode: str) -> str:
    start = page.index(f"### `{opcode}` {{#{anchor(opcode)}}}")
    nxt = page.find("\n### ", start + 1)
    nxt2 = page.find("\n## ", start + 1)
    ends = [e for e in (nxt, nxt2) if e != -1]
    return page[start:min(ends) if ends else len(page)]


def test_every_table_entry_has_a_section_and_a_summary_row(page):
    for spec in TABLE:
        assert f"| [`{spec.opcode}`](#{anchor(spec.opcode)}) |" in page, spec.opcode
        _section(page, spec.opcode)  # raises if missing
    assert f"**{len(TABLE)} opcode families**" in page


def test_anchors_are_unique():
    anchors = [anchor(s.opcode) for s in TABLE]
    assert len(anchors) == len(set(anchors))


@pytest.mark.parametrize("spec", TABLE, ids=lambda s: s.opcode)
def test_section_lists_modifiers_types_minimums_and_example(page, spec):
    sec = _section(page, spec.opcode)
    for group in spec.groups:
        assert f"| {group.name}" in sec, group.name
        for mod in group.mods:
            assert f"`.{mod.name}`" in sec, (group.name, mod.name)
    for t in spec.types:
        assert f"`.{t}`" in sec, t
    assert f"PTX ISA {spec.ptx[0]}.{spec.ptx[1]}, sm_{spec.sm}" in sec
    assert "| interpreter |" in sec
    assert f"`{python_chain(spec.opcode)}`" in sec
    if spec.doc:
        assert spec.doc in sec
    assert spec.example, f"{spec.opcode} has no example in the table"
    assert spec.example.rstrip(";") + ";" in sec


def test_python_spelling_of_ptx_names():
    assert python_chain("ld.global.v4.f32") == "ptx.inst.ld.global_.v4.f32"
    assert python_chain("ld.global.L1::evict_last.f32") == "ptx.inst.ld.global_.L1__evict_last.f32"
    assert python_chain("and.b32") == "ptx.inst.and_.b32"
    assert python_chain("cp.async.cg.shared.global") == "ptx.inst.cp.async_.cg.shared.global_"


def _record(example, arch: str = "sm_90a") -> str:
    """Run a translated example inside a scratch trace; return the PTX line it records."""
    b = Builder("doc_example", arch)
    with b.active():
        ns = {"ptx": ptx}
        highest: dict[str, tuple[int, str]] = {}
        for name, tname in example.registers:
            prefix = re.match(r"[a-z]+", name).group(0)
            n = int(name[len(prefix):])
            highest[prefix] = (max(highest.get(prefix, (0, tname))[0], n), tname)
        # Declared in numbering order so the tracer gives them the example's names.
        for prefix, (n, tname) in highest.items():
            for i in range(n + 1):
                ns[f"{prefix}{i}"] = reg.scalar(types.ALL_TYPES[tname])
        eval(example.call, ns)  # noqa: S307 - our own generated text
    instrs = [x for x in b.body if isinstance(x, ir.Instr)]
    return fmt_instr(instrs[-1])


@pytest.mark.parametrize("spec", TABLE, ids=lambda s: s.opcode)
def test_python_example_records_exactly_the_example(spec):
    ex = python_example(spec.example)
    if spec.form == "call":   # imported PTX only: traced kernels have no functions to call
        assert ex is None
        with pytest.raises(PtxdslError, match="traced kernels call no functions"):
            Builder("k", "sm_90a").build(["call"], [(), "callee", ()])
        return
    assert ex is not None, f"cannot spell {spec.example!r} in Python"
    assert _record(ex, "sm_100a" if spec.sm >= 100 else "sm_90a") == \
        spec.example.rstrip(";") + ";"


# ------------------------------------------------------------------ operators
@pytest.mark.parametrize("expr,t,want", [
    ("a + b", "u32", "add.u32"),
    ("a + b", "f32", "add.f32"),
    ("a * b + c", "u32", "mul.lo.u32; add.u32"),
    ("p + a * 4", "u32", "mul.wide.u32; add.u64"),
    ("p + a * 4", "s32", "mul.wide.s32; add.u64"),
    ("p + a", "u32", "cvt.u64.u32; add.u64"),
    ("(a * 4).wide", "u32", "mul.wide.u32"),
    ("a / b", "f32", "div.rn.f32"),
    ("a // b", "s32", "div.s32"),
    ("a % b", "u32", "rem.u32"),
    ("a & b", "u32", "and.b32"),
    ("a & b", "pred", "and.pred"),
    ("a >> 2", "s32", "shr.s32"),
    ("a >> 2", "u32", "shr.u32"),
    ("a << 2", "u64", "shl.b64"),
    ("a < b", "f32", "setp.lt.f32"),
    ("a != b", "f32", "setp.neu.f32"),
    ("a != b", "u32", "setp.ne.b32"),
    ("-a", "f32", "neg.f32"),
    ("a += b", "u32", "add.u32"),
])
def test_operator_table_matches_tracing(expr, t, want):
    assert trace_operator(expr, t) == want


@pytest.mark.parametrize("expr,t", [("a / b", "u32"), ("a & b", "f32"), ("a + b", "pred")])
def test_operator_table_reports_refusals(expr, t):
    assert trace_operator(expr, t).startswith("refused: ")


def test_operator_table_renders_every_row():
    table = render_operator_table()
    lines = [ln for ln in table.splitlines() if ln.startswith("| `")]
    from docgen import OPERATOR_ROWS
    assert len(lines) == len(OPERATOR_ROWS)
    assert "`mul.wide.u32`" in table


# ------------------------------------------------------------------ hooks
def _hooks():
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("ptxdsl_docs_hooks", os.path.join(DOCS, "hooks.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _benchpage():
    import benchpage  # docs/benchpage.py (DOCS is on sys.path above)
    return benchpage


def _rmsnorm_run(**results):
    return {"device": "NVIDIA H200", "date": "2026-01-02", "torch": "2.11",
            "forward": [{"shape": [2048, 8192], "dtype": "bf16", "results": results},
                        {"shape": [1, 8192], "dtype": "bf16", "results": {
                            "copy": {"us": 5.0}, "ptxdsl": {"us": 50.0}}}],
            "backward": []}


def test_bench_chart_says_when_there_are_no_results(tmp_path):
    md = _benchpage().render(str(tmp_path), "rmsnorm")
    assert "No `rmsnorm` results are committed yet" in md and "<svg" not in md
    with pytest.raises(ValueError, match="no chart for benchmark 'nope'"):
        _benchpage().render(str(tmp_path), "nope")


def test_bench_chart_rmsnorm_percent_of_the_copy(tmp_path):
    """bench/rmsnorm.py's layout: a chart per direction and a table of the geometric mean
    of % of the copy per contender, leaving out the host-bound one-row shapes."""
    data = _rmsnorm_run(copy={"us": 40.0, "tbps": 3.3}, ptxdsl={"us": 50.0, "tbps": 2.7},
                        triton={"us": 80.0}, liger={"error": "ImportError"})
    (tmp_path / "rmsnorm_h200.json").write_text(json.dumps(data))
    # another benchmark's file with the same prefix is not this one's
    (tmp_path / "rmsnorm_long_h200.json").write_text(json.dumps(data))
    md = _benchpage().render(str(tmp_path), "rmsnorm")
    assert md.count("<svg") == 1 and "RMSNorm forward, bf16, H200" in md
    assert "`bench/results/rmsnorm_h200.json`" in md and "rmsnorm_long" not in md
    assert "NVIDIA H200" in md and "2026-01-02" in md
    assert "| ptxdsl | 80% |" in md and "| triton | 50% |" in md and "| liger |  |" in md


def test_bench_chart_long_rows_best_peer_leaves_out_ptxdsls_own_variants(tmp_path):
    data = {"device": "NVIDIA H200", "date": "2026-11-29", "forward": [
        {"shape": [32768, 65536], "dtype": "bf16", "results": {
            "copy": {"us": 100.0}, "ptxdsl": {"us": 100.0}, "ptxdsl:1cta": {"us": 90.0},
            "torch.compile": {"us": 125.0}}}], "backward": []}
    (tmp_path / "rmsnorm_long_h200.json").write_text(json.dumps(data))
    md = _benchpage().render(str(tmp_path), "rmsnorm_long")
    assert "| 65536 | 100% | torch.compile 80% |" in md


def test_bench_chart_gemm_against_cublas(tmp_path):
    row = {"shape": [4096, 4096, 4096], "group": "square", "results": {
        "cuBLAS": {"us": 200.0, "tflops": 600.0}, "ptxdsl": {"us": 190.0, "tflops": 660.0},
        "pyptx": {"error": "shape rule"}}}
    data = {"device": "NVIDIA H100 80GB HBM3", "date": "2026-01-03", "rows": [
        row, dict(row, shape=[16, 4096, 4096], group="small")]}
    (tmp_path / "matmul_h100.json").write_text(json.dumps(data))
    md = _benchpage().render(str(tmp_path), "matmul")
    assert "GEMM bf16, H100" in md
    assert "| square | 1 | 600 | 1.10× |  |" in md and "| small | 1 | 600 | 1.10× |  |" in md


def test_svg_line_chart_breaks_lines_at_gaps_and_groups():
    from svgchart import bar_chart, line_chart
    svg = line_chart(["a", "b", "c", "d", "e"], {"ptxdsl": [1, 2, None, 4, 5]}, ylabel="y")
    assert svg.count("<polyline") == 2 and svg.count("<circle") == 4
    svg = line_chart(["a", "b", "c", "d"], {"ptxdsl": [1, 2, 3, 4]}, ylabel="y", breaks=(2,))
    assert svg.count("<polyline") == 2
    svg = bar_chart(["x", "y"], {"copy": [1.0, None], "ptxdsl": [2.0, 3.0]}, xlabel="µs")
    assert svg.count("<rect") == 3 and svg.startswith("<svg") and svg.endswith("</svg>")


def test_every_benchmark_of_the_performance_page_renders_its_committed_results():
    """Each benchmark charted on the Performance page draws every committed
    ``<name>_<device>.json`` of it (naming the file), and the page has a marker for each."""
    bp = _benchpage()
    folder = os.path.join(DOCS, "..", "bench", "results")
    page = open(os.path.join(DOCS, "performance.md"), encoding="utf-8").read()
    for name in bp.SECTIONS:
        assert f"<!-- ptxdsl:bench-chart {name} -->" in page, name
        files = [base for _dev, base, _data in bp.runs(folder, name)]
        md = bp.render(folder, name)
        for base in files:
            assert f"`bench/results/{base}`" in md, base
        assert md.count("<svg") >= len(files), name


def test_ptx_excerpt_cuts_between_patterns():
    hooks = _hooks()
    text = "a\n\tmov.u32 %r0, 1;\n\tadd.u32 %r1, %r0, 2;\n\tst.global.u32 [x], %r1;\nret"
    assert hooks._excerpt(text, r"mov\.u32", r"add") == "mov.u32 %r0, 1;\nadd.u32 %r1, %r0, 2;"
    assert hooks._excerpt(text, r"add", None, 2) == "add.u32 %r1, %r0, 2;\nst.global.u32 [x], %r1;"


def test_markers_in_pages_are_known():
    """Every <!-- ptxdsl:... --> marker in docs/ names a kind the hook expands."""
    known = {"ptx", "bench-chart", "error", "check", "operators", "source", "fragment"}
    for folder, _dirs, names in os.walk(DOCS):
        for n in names:
            if n.endswith(".md"):
                text = open(os.path.join(folder, n), encoding="utf-8").read()
                for kind in re.findall(r"<!--\s*ptxdsl:([\w-]+)", text):
                    assert kind in known, (n, kind)


def test_rmsnorm_walkthrough_prose_matches_the_kernel():
    """docs/rmsnorm.md's markers re-trace the PTX on every build, but its prose quotes
    numbers of the N = 8192 f32 schedule (threads, chunks, registers, offsets, shared
    bytes, cache hints): they must be the ones the code has now."""
    import sys
    from ptxdsl.ops.rmsnorm.fwd import plan
    from ptxdsl.core.types import f32
    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    try:
        from rms_norm import build_rms_norm
    finally:
        sys.path.pop(0)
    text = " ".join(open(os.path.join(DOCS, "rmsnorm.md"), encoding="utf-8").read().split())
    p = plan(8192, f32)
    assert p.rows_per_cta == 1 and p.vec == 4 and not p.ragged and p.preload_w
    k, values, warps = p.per_thread, p.per_thread * p.vec, p.threads // 32
    words = dict(enumerate(["no", "one", "two", "three", "four", "five", "six", "seven",
                            "eight"]))
    owned = ", ".join(["t"] + [f"t + {i * p.threads}" for i in range(1, k)])
    ptx_text = build_rms_norm(8192).ptx()
    for claim in (f"one CTA per row, {p.threads} threads, 16-byte chunks (v4), {k} chunks "
                  f"= {values} values per thread",
                  f"thread `t` owns chunks `{owned}`",
                  f"Each of the {k} chunks is one `ld.global.L1::evict_last.L2::cache_hint.v4.f32`",
                  f"(`k * {p.threads * 16}` bytes)",
                  f"The {values} values stay in registers (`%f1`–`%f{values}`)",
                  f"its {k} chunks are loaded *before* the reduction",
                  f"all {warps} partials itself with {words[warps // 4]} `ld.shared.v4.f32`",
                  f"uses {4 * warps} bytes of shared memory (the {warps} per-warp partials)"):
        assert claim in text, claim
    for inst in ("createpolicy.fractional.L2::evict_last.b64",
                 "ld.global.L1::evict_last.L2::cache_hint.v4.f32 {%f1,",
                 f"[%rd9+{p.threads * 16}]", "st.global.v4.f32", f"%f{values}}}", f"smem0[{4 * warps}]"):
        assert inst in ptx_text, inst


# ------------------------------------------------------------------ the snippets the pages trace
def _snippet_kernels(name):
    from ptxdsl.cli import command as cli
    return cli.load_kernels(os.path.join(DOCS, "snippets", name))


@pytest.mark.parametrize("name", ["first_kernel.py", "control_flow.py", "cache_hints.py"])
def test_doc_snippets_trace(name):
    for e in _snippet_kernels(name):
        assert f".entry {e.kernel.name}(" in e.kernel.ptx()


@pytest.mark.parametrize("name", ["mistake_type.py", "mistake_order.py", "mistake_arch.py",
                                  "detect_barrier.py"])
def test_doc_mistakes_fail_at_the_users_line(name):
    from ptxdsl.core.errors import PtxdslError
    (e,) = _snippet_kernels(name)
    with pytest.raises(PtxdslError) as info:
        e.kernel.ptx()
    assert f"{name}:" in str(info.value)


# ------------------------------------------------------------------ interpreter column, recipes
def test_interpreter_column_matches_the_interpreter(page):
    from ptxdsl import interp
    supported = interp.supported()
    for spec in TABLE:
        want = "yes" if spec.opcode in supported else "no"
        assert f"| interpreter | {want} |" in _section(page, spec.opcode), spec.opcode


def test_hypothesis_recipes_of_the_testing_page_hold():
    spec = importlib.util.spec_from_file_location(
        "ptxdsl_docs_recipes", os.path.join(DOCS, "snippets", "test_recipes.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    tests = [getattr(mod, n) for n in dir(mod) if n.startswith("test_")]
    assert len(tests) == 3
    for t in tests:
        t()


@pytest.mark.parametrize("name", ["detect_oob.py", "detect_race.py", "detect_uninit.py",
                                  "detect_deadlock.py", "detect_proxy.py"])
def test_detector_snippets_are_caught_by_the_interpreter(name):
    from ptxdsl.core.errors import InterpreterError
    mod = cli_import(os.path.join(DOCS, "snippets", name))
    with pytest.raises(InterpreterError) as info:
        mod.main()
    assert f"{name}:" in str(info.value) and "thread" in str(info.value)


def test_producer_consumer_snippet_runs_in_both_branch_orders():
    """The testing page's warp-specialized ring: its main() checks both orders."""
    mod = cli_import(os.path.join(DOCS, "snippets", "producer_consumer.py"))
    mod.main()
    assert mod.build_ring(True).interpret()[5] == 1000 * 64 * 63 // 2 + 64 * 5


def cli_import(path):
    from ptxdsl.cli import command as cli
    return cli._import_file(path)


def test_comparison_page_does_not_understate_the_table():
    """The comparison says wgmma/TMA/tcgen05 are missing; keep that true or fix the page."""
    text = open(os.path.join(DOCS, "comparison.md"), encoding="utf-8").read()
    newer = [s.opcode for s in TABLE if s.opcode.startswith(("wgmma", "cp.async.bulk", "tcgen05"))
             and s.opcode != "cp.async.bulk.prefetch.L2"]  # a prefetch, not a TMA copy
    if newer:
        assert "not yet in the instruction table" not in text, (
            f"the table now has {newer}: update docs/comparison.md")


def test_python_names_of_every_modifier_round_trip():
    """The page's "Python names" are what ptx.inst accepts: ptx_name() maps them back."""
    from docgen import _py_part
    from ptxdsl.dsl.inst import ptx_name
    for spec in TABLE:
        for part in spec.opcode.split("."):
            assert ptx_name(_py_part(part)) == part
        for group in spec.groups:
            for mod in group.mods:
                py = _py_part(mod.name)
                assert py.isidentifier() and ptx_name(py) == mod.name, mod.name


def _cwd_dependent_blocks():
    """Python blocks of the guide pages that import files of this repository by path."""
    import re
    out = []
    for page in sorted(os.listdir(DOCS)):
        if not page.endswith(".md"):
            continue
        text = open(os.path.join(DOCS, page), encoding="utf-8").read()
        for m in re.finditer(r"```python\n(.*?)```", text, re.S):
            if 'sys.path.insert(0, "' in m.group(1):
                out.append(pytest.param(m.group(1), id=f"{page}:{text[:m.start()].count(chr(10)) + 1}"))
    return out


@pytest.mark.parametrize("code", _cwd_dependent_blocks())
def test_doc_blocks_run_from_the_repository_root(code, tmp_path):
    """Each such block runs, as written, from the repository root (tests it defines too)."""
    import re
    import subprocess
    import sys
    root = os.path.dirname(DOCS)
    calls = "".join(f"\n{name}()" for name in re.findall(r"^def (test_\w+)\(\)", code, re.M))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code + calls], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr


