"""bench/rmsnorm.py's Quack wiring without a GPU: with a stand-in ``quack.rmsnorm`` (the
signatures of quack-kernels 0.6.5, computing RMSNorm on the CPU) Quack joins the forward
and backward contenders and passes the benchmark's own float64 validation; without Quack
it is left out with a note. The backward's two byte counts and the table that names them."""
from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch")

import bench.rmsnorm as br  # noqa: E402
import bench.rmsnorm_contenders as bc  # noqa: E402


def _fake_quack(calls: list) -> types.ModuleType:
    """A ``quack.rmsnorm`` with quack-kernels 0.6.5's signatures, computing on the CPU."""
    mod = types.ModuleType("quack.rmsnorm")

    def rmsnorm_fwd(x, weight=None, bias=None, residual=None, out_dtype=None,
                    residual_dtype=None, eps=1e-6, store_rstd=False, weight_offset=0.0):
        assert bias is None and residual is None and out_dtype is None, "a stray argument"
        calls.append(("fwd", eps, store_rstd))
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1) + eps)
        out = (xf * rstd[:, None] * weight.float()).to(x.dtype)
        return out, x, rstd if store_rstd else None

    def rmsnorm_bwd(x, weight, dout, rstd, dresidual_out=None, has_bias=False,
                    has_residual=False, weight_offset=0.0):
        calls.append(("bwd",))
        assert rstd.dtype == torch.float32 and rstd.shape == x.shape[:1]
        xhat = x.float() * rstd[:, None]
        wdy = dout.float() * weight.float()
        dx = (wdy - xhat * (xhat * wdy).mean(-1, keepdim=True)) * rstd[:, None]
        dw = (dout.float() * xhat).sum(0)
        return dx.to(x.dtype), dw.to(weight.dtype), None, None

    mod.rmsnorm_fwd, mod.rmsnorm_bwd = rmsnorm_fwd, rmsnorm_bwd
    return mod


@pytest.fixture
def cpu_bench(monkeypatch):
    """The benchmark's validation on CPU tensors; its timing replaced by 10 µs a call."""
    def time_fn(fn, sets, iters=50, **_):
        fn(*sets[0])
        return 10.0
    monkeypatch.setattr(br, "time_fn", time_fn)
    monkeypatch.setattr(br, "_warm_up_gpu", lambda *a, **k: None)
    bc.peers.cache_clear()
    yield
    bc.peers.cache_clear()


def _with_quack(monkeypatch, calls):
    pkg = types.ModuleType("quack")
    pkg.rmsnorm = _fake_quack(calls)
    monkeypatch.setitem(sys.modules, "quack", pkg)
    monkeypatch.setitem(sys.modules, "quack.rmsnorm", pkg.rmsnorm)


def test_quack_runs_forward_and_backward_and_passes_validation(monkeypatch, cpu_bench):
    calls = []
    _with_quack(monkeypatch, calls)
    only = {"quack", "F.rms_norm"}
    fwd = br.only_contenders(br.fwd_contenders, only)(torch.float32)
    bwd = br.only_contenders(br.bwd_contenders, only)(torch.float32)
    assert set(fwd) == set(bwd) == only
    row = br.bench_forward((8, 64), torch.float32, fwd, 0, rounds=1, device="cpu")
    assert set(row) == {"copy", "quack", "F.rms_norm"}
    assert row["quack"]["us"] == 10.0 and "error" not in row["quack"], row
    assert ("fwd", br.EPS, False) in calls          # eps by keyword, no rstd written
    row = br.bench_backward((8, 64), torch.float32, bwd, 0, rounds=1, device="cpu", sms=132)
    assert "us" in row["quack"] and "us" in row["F.rms_norm"], row
    assert ("bwd",) in calls
    counts = br.backward_bytes((8, 64), 4, 132)
    assert row["quack"]["tbps_quack"] == pytest.approx(counts["quack"] / 10.0 / 1e6)
    assert counts == {"copy": 3 * 8 * 64 * 4,
                      "quack": 3 * 8 * 64 * 4 + 64 * 4 + 8 * 4 + 2 * 132 * 64 * 4}
    assert "quack" in bc.peers()["versions"]


def test_a_wrong_quack_result_is_an_error_cell(monkeypatch, cpu_bench):
    """The wiring is validated, not trusted: dY and x swapped in the call is caught."""
    calls = []
    _with_quack(monkeypatch, calls)
    good = bc.peers()["quack"].rmsnorm_bwd
    bc.peers()["quack"].rmsnorm_bwd = lambda x, w, dout, rstd: good(dout, w, x, rstd)
    bwd = br.only_contenders(br.bwd_contenders, {"quack"})(torch.float32)
    row = br.bench_backward((8, 64), torch.float32, bwd, 0, rounds=1, device="cpu", sms=132)
    assert "wrong result" in row["quack"]["error"]


def test_without_quack_it_is_left_out_with_a_note(monkeypatch, cpu_bench):
    monkeypatch.setitem(sys.modules, "quack", None)        # import quack fails
    p = bc.peers()
    assert p["quack"] is None
    assert any(n.startswith("quack not available") for n in p["notes"])
    assert "quack" not in br.fwd_contenders(torch.float32)
    assert "quack" not in br.bwd_contenders(torch.float32)


def test_only_names_known_contenders():
    errors = []
    assert br.parse_only("ptxdsl, quack,copy", errors.append) == {"ptxdsl", "quack"}
    assert br.parse_only(None, errors.append) is None and not errors
    br.parse_only("ptxdsl,quak", errors.append)
    assert errors and "quak" in errors[0]


def test_backward_shares_by_both_counts_and_the_table_names_them(capsys):
    entry = {"shape": [4096, 4096], "dtype": "bf16",
             "bytes": br.backward_bytes((4096, 4096), 2, 132), "results": {
                 "copy": {"us": 80.0, "tbps": 1.0}, "ptxdsl": {"us": 100.0, "tbps": 1.0},
                 "quack": {"us": 160.0, "tbps": 1.0}, "liger": {"error": "no"}}}
    br.copy_shares(entry)
    res, b = entry["results"], entry["bytes"]
    assert res["ptxdsl"]["pct_copy"] == pytest.approx(80.0)
    assert res["quack"]["pct_copy_quack"] == pytest.approx(50.0 * b["quack"] / b["copy"])
    assert "pct_copy" not in res["liger"] and "pct_copy" not in res["copy"]
    fwd = {"shape": [4096, 4096], "dtype": "bf16", "results": {
        "copy": {"us": 50.0, "tbps": 1.0}, "ptxdsl": {"us": 50.0, "tbps": 1.0},
        "quack": {"us": 55.0, "tbps": 1.0}}}
    br.print_table({"device": "GPU", "date": "today", "forward": [br.copy_shares(fwd)],
                    "backward": [entry]})
    out = capsys.readouterr().out
    assert "vs quack" in out and "1.10x" in out and "1.60x" in out   # Quack's time / ours
    assert "%copyQ" in out and "Quack's count" in out
    share = f"{80:.0f}/{80 * b['quack'] / b['copy']:.0f}"
    shares = out[out.index("% of copy"):].splitlines()[1]
    assert share in shares and "80/" in shares


def test_quack_summary_counts_shapes_and_names_the_ones_behind():
    def entry(shape, cp, ours, quack, kind="forward"):
        e = {"shape": list(shape), "dtype": "bf16", "results": {
            "copy": {"us": cp}, "ptxdsl": {"us": ours}, "quack": {"us": quack}}}
        if kind == "backward":
            e["bytes"] = br.backward_bytes(shape, 2, 132)
        return br.copy_shares(e)
    result = {"forward": [entry((4096, 4096), 50, 50, 55), entry((4096, 1000), 10, 10.3, 10),
                          entry((1, 8192), 5, 6, 7)],
              "backward": [entry((4096, 4096), 80, 100, 200, "backward")]}
    lines = br.quack_summary(result)
    assert lines[0].startswith("forward against Quack: ptxdsl as fast or faster at 2 of 3")
    assert "behind at bf16 4096x1000: 0.971x" in lines[1]
    assert "M >= 1024: 97.1-100.0" in lines[2]          # the one-row shape left out
    back = [ln for ln in lines if ln.startswith("backward")][0]
    assert "at 1 of 1 shapes" in back and "2.00-2.00x" in back
    assert lines[-1].startswith("  ptxdsl % of copy (Quack's bytes), M >= 1024: 83.")
