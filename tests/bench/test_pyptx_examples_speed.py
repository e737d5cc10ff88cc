"""bench/pyptx_examples_speed.py without a GPU: every case builds both ways (pyptx's side
where pyptx is installed), the ptxdsl builds match the bench's float64 references on the
interpreter, a wrong result fails the bench's validation, and the table reports ratios,
errors and skips. The examples come from the pyptx mirror or wheel; without them the
building tests skip."""
from __future__ import annotations

import dataclasses
import importlib.util
import sys

import pytest

from paths import ROOT
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import pyptx_examples  # noqa: E402
from bench import pyptx_examples_speed as bench  # noqa: E402

torch = pytest.importorskip("torch")
CASES = {c.name: c for c in bench.CASES}
# the cheap ones on the interpreter, covering each way a case is built: plain, its text
# linked to a sibling example (Ampere norms), fenced (flash attention), bf16 wgmma GEMM
INTERPRETED = ["hopper rms_norm", "ampere softmax", "hopper grouped_gemm",
               "hopper flash_attention_wgmma_kloop"]


def _need_source(case):
    try:
        pyptx_examples.source(case.example, case.arch_dir)
    except pyptx_examples.Unavailable as e:
        pytest.skip(str(e))


def test_cases_cover_every_hopper_and_ampere_example():
    names = {(c.arch_dir, c.example) for c in bench.CASES}
    assert len(names) == len(bench.CASES) == 16
    assert {a for a, _ in names} == {"hopper", "hopper/experimental", "ampere"}
    for c in bench.CASES:
        assert c.work(c.shapes[-1])[0] in ("flop", "byte") and c.work(c.shapes[-1])[1] > 0


@pytest.mark.parametrize("name", list(CASES))
def test_case_traces_both_ways(name):
    case = CASES[name]
    _need_source(case)
    shape = case.shapes[0]
    text = bench.build(case, "ptxdsl", shape).ptx()
    assert ".entry" in text and sum(bench.opcode_counts(text).values()) > 20
    if importlib.util.find_spec("pyptx") is None:
        return  # pyptx's side needs pyptx (bench/install_wheels.py)
    theirs = bench.build(case, "pyptx", shape)
    assert type(theirs).__module__.startswith("pyptx")
    assert ".entry" in theirs.ptx()


@pytest.mark.parametrize("name", INTERPRETED)
def test_ptxdsl_build_matches_the_reference_on_the_interpreter(name):
    case = CASES[name]
    _need_source(case)
    bench.validate(case, "ptxdsl", torch, case.shapes[:1], "cpu", bench.Interpreted)


def test_a_wrong_result_fails_validation():
    case = CASES["hopper rms_norm"]
    _need_source(case)
    # the reference of another eps: the kernel is right, the comparison must notice
    wrong = dataclasses.replace(case, reference=lambda t, args, shape: (
        bench._rms_norm_ref(t, args, shape) * (1 + 2e-4)))
    with pytest.raises(AssertionError, match=r"ptxdsl at 16x512: wrong result against the "
                                             r"float64 reference: \d+ of 8192 elements"):
        bench.validate(wrong, "ptxdsl", torch, case.shapes[:1], "cpu", bench.Interpreted)
    args = case.inputs(torch, (16, 512), "cpu")
    ref = case.reference(torch, args, (16, 512))
    assert bench.check(case, torch, ref.float(), ref) is None
    assert "non-finite" in bench.check(case, torch, ref * float("nan"), ref)
    assert "wrong result" in bench.check(case, torch, ref.flip(0), ref)


def test_opcode_counts_skip_directives_labels_and_predicates():
    text = """.version 8.0
.visible .entry k(
\t.param .u64 p
)
{
\t.reg .b32 %r<4>;
\tmov.u32 %r0, %tid.x;  // comment
$L0:
\t@%p0 bra $L0;
\t@!%p0 add.u32 %r1, %r0, 1;
\tadd.f32 %f0, %f0, %f1;
\tret;
}
"""
    assert bench.opcode_counts(text) == {"mov": 1, "bra": 1, "add": 2, "ret": 1}


def test_table_reports_ratios_errors_and_skips(capsys):
    result = {"device": "GPU", "date": "today", "cases": [
        {"case": "hopper rms_norm", "shape": [4096, 4096], "ptxdsl/pyptx": 1.25,
         "results": {"ptxdsl": {"us": 40.0, "gbps": 3355.0}, "pyptx": {"us": 50.0,
                                                                       "gbps": 2684.0}},
         "ptx": {"ptxdsl": {"instructions": 227, "registers": 54},
                 "pyptx": {"instructions": 291, "registers": 47},
                 "differs": {"cvt.u64": [0, 26]}}},
        {"case": "ampere gemm", "shape": [1024, 1024, 1024],
         "results": {"ptxdsl": {"us": 900.0, "tflops": 2.4},
                     "pyptx": {"error": "AssertionError: pyptx at 128x64x128: wrong"}}},
        {"case": "ampere swiglu", "skipped": "past the 240 s budget"}]}
    bench.print_table(result)
    out = capsys.readouterr().out
    assert "1.250" in out and "3355 GB/s" in out and "227/291" in out and "54/47" in out
    assert "ampere gemm: pyptx: AssertionError" in out and "2.4 TFLOP/s" in out
    assert "ampere swiglu: skipped: past the 240 s budget" in out
    assert "cvt.u64 0/26" in out


def test_run_case_times_what_validated_and_reports_what_failed(monkeypatch):
    case = dataclasses.replace(CASES["hopper softmax"], shapes=((16, 512),))
    _need_source(case)
    seen = []

    def fake_timer(torch_, fns, rounds, iters, args=(), seed=0):
        seen.append((sorted(fns), rounds, iters))
        for fn in fns.values():
            fn()
        return {n: 0.004 for n in fns}  # ms

    monkeypatch.setattr(bench, "time_interleaved", fake_timer)
    row = bench.run_case(case, torch, 3, 2, "cpu", bench.Interpreted)
    ours = row["results"]["ptxdsl"]
    assert seen == [(["ptxdsl"], 3, 2)] and ours["us"] == pytest.approx(4.0)
    assert ours["gbps"] == pytest.approx(2 * 16 * 512 * 4 / 4e-6 / 1e9)
    # pyptx's kernel cannot run on ptxdsl's interpreter (or pyptx is missing): reported
    assert "error" in row["results"]["pyptx"] and "ptxdsl/pyptx" not in row


def test_json_is_written_after_every_case(monkeypatch, tmp_path):
    """A run stopped by its caller's time limit keeps the cases it finished."""
    import json
    path = tmp_path / "speed.json"
    done = []

    def fake_run(case, torch_, rounds, iters):
        if done:     # the second case: the first is on disk already
            saved = json.loads(path.read_text())
            assert [c["case"] for c in saved["cases"]] == done
        done.append(case.name)
        return {"case": case.name, "results": {}, "ptxdsl/pyptx": 1.0}

    monkeypatch.setattr(bench, "run_case", fake_run)
    assert bench.main(["--only", "hopper rms_norm,hopper softmax", "--no-ptx",
                       "--json", str(path)]) == 0
    assert len(done) == 2 and len(json.loads(path.read_text())["cases"]) == 2
