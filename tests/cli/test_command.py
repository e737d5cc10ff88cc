"""The ``ptxdsl`` command: each subcommand on an example, the kernel-finding convention,
and failures (non-zero exit, one line on stderr, no traceback for PtxdslError)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ptxdsl.cli import command as cli
from ptxdsl import toolchain
from ptxdsl.core.errors import ToolchainError

from paths import ROOT
EXAMPLE = os.path.join(ROOT, "examples", "hopper", "vector_add.py")


def _have_ptxas() -> bool:
    try:
        return toolchain.find_ptxas() is not None
    except ToolchainError:
        return False


needs_ptxas = pytest.mark.skipif(not _have_ptxas(), reason="no ptxas (pip install -e '.[test]')")


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *fragments):
    assert code == 1
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("ptxdsl: error: ")
    assert "Traceback" not in err
    for f in fragments:
        assert f in lines[0], (f, lines[0])


# ------------------------------------------------------------------ ptx
def test_ptx_prints_every_kernel(capsys):
    code, out, err = run(capsys, "ptx", EXAMPLE)
    assert code == 0, err
    assert ".visible .entry vector_add(" in out
    assert out.startswith("//")


def test_ptx_selects_one_kernel_and_arch(capsys):
    code, out, _ = run(capsys, "ptx", f"{EXAMPLE}:vector_add", "--arch", "sm_80")
    assert code == 0
    assert ".target sm_80" in out


def test_ptx_lines_put_python_lines_beside_instructions(capsys):
    code, out, _ = run(capsys, "ptx", EXAMPLE, "--lines")
    assert code == 0
    assert "// vector_add.py:" in out
    code, out, _ = run(capsys, "ptx", EXAMPLE, "--lines=loc")
    assert code == 0
    assert "\t.loc 1 " in out and ".file 1" in out


def test_ptx_selects_by_builder_name(capsys):
    code, out, _ = run(capsys, "ptx", f"{EXAMPLE}:build_vector_add")
    assert code == 0 and ".entry vector_add(" in out


# ------------------------------------------------------------------ check / sass / list
@needs_ptxas
def test_check_prints_a_resource_table(capsys):
    code, out, err = run(capsys, "check", EXAMPLE)
    assert code == 0, err
    header, rule, row = out.strip().splitlines()[:3]
    assert header.split() == ["kernel", "arch", "registers", "spill", "stores", "spill",
                              "loads", "shared", "B", "local", "B", "const", "B"]
    assert set(rule.replace(" ", "")) == {"-"}
    fields = row.split()
    assert fields[0] == "vector_add" and fields[1] == "sm_90a"
    assert int(fields[2]) > 0 and fields[3] == "0"


@needs_ptxas
def test_check_json(capsys):
    code, out, _ = run(capsys, "check", EXAMPLE, "--json")
    assert code == 0
    (rec,) = json.loads(out)
    assert rec["kernel"] == "vector_add" and rec["ok"] and rec["registers"] > 0


@needs_ptxas
def test_check_of_a_kernel_ptxas_rejects_fails_with_the_reason(capsys, tmp_path):
    # A target ptxas 13 no longer supports: a rejection that needs no broken kernel.
    f = tmp_path / "k.py"
    f.write_text(_KERNEL_SRC)
    code, out, err = run(capsys, "check", str(f), "--arch", "sm_50")
    if code == 0:
        pytest.skip("this ptxas still accepts sm_50")
    assert "FAILED" in out
    assert err.strip().splitlines()[0].startswith("ptxdsl: error: k:")


def test_sass_without_a_disassembler_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(toolchain, "find_tool", lambda name: None)
    code, _, err = run(capsys, "sass", EXAMPLE)
    assert_one_line_error(code, err, "cuobjdump", "nvdisasm")


def test_list(capsys):
    code, out, _ = run(capsys, "list", EXAMPLE)
    assert code == 0
    assert "vector_add" in out and "build_vector_add()" in out


# ------------------------------------------------------------------ run
def test_run_uses_the_interpreter_without_a_gpu(capsys, monkeypatch):
    monkeypatch.delenv("PTXDSL_INTERPRET", raising=False)
    code, out, err = run(capsys, "run", EXAMPLE, "--interpret")
    assert code == 0, err
    assert "interpreter" in out and "[OK]" in out and "FAIL" not in out


def test_run_passes_arguments_and_exit_code(capsys, tmp_path):
    f = tmp_path / "script.py"
    f.write_text("import sys\ndef main():\n    print('args', sys.argv[1:])\n    return 3\n")
    code, out, _ = run(capsys, "run", str(f), "--", "a", "b")
    assert code == 3
    assert "args ['a', 'b']" in out


def test_run_without_main_runs_the_script(capsys, tmp_path):
    f = tmp_path / "script.py"
    f.write_text("if __name__ == '__main__':\n    print('ran as main')\n")
    code, out, _ = run(capsys, "run", str(f))
    assert code == 0 and "ran as main" in out


# ------------------------------------------------------------------ doctor / cache / bench
def test_doctor(capsys):
    code, out, err = run(capsys, "doctor")
    assert "ptxas" in out
    assert code == (0 if _have_ptxas() else 1), err


def test_cache_info_and_clear(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path / "c"))
    code, out, _ = run(capsys, "cache", "info")
    assert code == 0
    assert str(tmp_path / "c") in out and "PTXDSL_CACHE_DIR" in out
    (tmp_path / "c" / "cubin").mkdir(parents=True)
    (tmp_path / "c" / "cubin" / "abc.cubin").write_bytes(b"x" * 10)
    code, out, _ = run(capsys, "cache", "info")
    assert "files" in out and "1" in out
    code, out, _ = run(capsys, "cache", "clear")
    assert code == 0
    assert not (tmp_path / "c" / "cubin" / "abc.cubin").exists()


def test_cache_clear_reports_what_it_could_not_remove(capsys, tmp_path, monkeypatch):
    # a read-only folder (root ignores permission bits, so the refusal is simulated)
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path))
    (tmp_path / "cubin").mkdir()
    (tmp_path / "cubin" / "k1.cubin").write_bytes(b"x")

    def refuse(path, *a, **k):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(os, "remove", refuse)
    code, out, err = run(capsys, "cache", "clear")
    assert code != 0
    assert "removed 0" in out
    assert "could not remove" in err and "k1.cubin" in err and "Permission denied" in err


def test_cache_clear_leaves_foreign_files(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path))
    (tmp_path / "precious.txt").write_text("keep me")
    run(capsys, "cache", "clear")
    assert (tmp_path / "precious.txt").read_text() == "keep me"


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "bench", "rmsnorm.py")),
                    reason="bench/rmsnorm.py is not in the tree")
def test_bench_rmsnorm_passes_its_arguments_on(tmp_path, monkeypatch):
    # --help needs no GPU or torch; run from elsewhere to find bench/ via the checkout.
    monkeypatch.chdir(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "ptxdsl", "bench", "rmsnorm", "--help"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "bench", "rmsnorm.py")),
                    reason="bench/rmsnorm.py is not in the tree")
def test_bench_rmsnorm_keeps_each_contenders_fastest_pass(monkeypatch):
    monkeypatch.syspath_prepend(ROOT)
    from bench.rmsnorm import _best_of
    err = {"error": "wrong result against the float64 reference"}
    rows = [{"copy": {"us": 10.0, "tbps": 3.0}, "ptxdsl": {"us": 12.0, "tbps": 2.5},
             "peer": {"us": 11.0}},
            {"copy": {"us": 11.0, "tbps": 2.7}, "ptxdsl": {"us": 9.0, "tbps": 3.3},
             "peer": err}]
    best = _best_of(rows)
    assert best["copy"] == {"us": 10.0, "tbps": 3.0}
    assert best["ptxdsl"] == {"us": 9.0, "tbps": 3.3}
    assert best["peer"] == err  # wrong once: reported, not hidden by a good pass


def test_bench_unknown_name_is_one_line(capsys):
    code, _, err = run(capsys, "bench", "no_such_benchmark")
    assert_one_line_error(code, err, "no_such_benchmark")


# ------------------------------------------------------------------ failures
def test_missing_file(capsys, tmp_path):
    code, _, err = run(capsys, "ptx", str(tmp_path / "nope.py"))
    assert_one_line_error(code, err, "no such file")


def test_unknown_kernel_lists_the_known_ones(capsys):
    code, _, err = run(capsys, "ptx", f"{EXAMPLE}:nope")
    assert_one_line_error(code, err, "no kernel 'nope'", "vector_add")


def test_file_without_kernels(capsys, tmp_path):
    f = tmp_path / "empty.py"
    f.write_text("X = 1\ndef build_needs_args(n):\n    pass\n")
    code, _, err = run(capsys, "ptx", str(f))
    assert_one_line_error(code, err, "defines no kernels")


def test_trace_error_is_one_line_naming_the_users_line(capsys, tmp_path):
    f = tmp_path / "bad.py"
    f.write_text(_KERNEL_SRC.replace("ptx.inst.add.f32(y, x, x)", "ptx.inst.add.f32(y, x, tid)"))
    code, _, err = run(capsys, "ptx", str(f))
    assert_one_line_error(code, err, "bad.py:")


def test_user_bug_on_import_shows_its_traceback(capsys, tmp_path):
    f = tmp_path / "buggy.py"
    f.write_text("1 / 0\n")
    code, _, err = run(capsys, "ptx", str(f))
    assert code == 1
    assert "Traceback" in err and "ZeroDivisionError" in err
    assert err.strip().splitlines()[-1].startswith("ptxdsl: error: importing")


def test_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["frobnicate"])
    assert info.value.code == 2


# ------------------------------------------------------------------ the convention
_KERNEL_SRC = textwrap.dedent("""\
    from ptxdsl import kernel, reg, ptx, Tile
    from ptxdsl.types import f32, u32

    @kernel(in_specs=(Tile(32, f32),), out_specs=(Tile(32, f32),), block=(32, 1, 1))
    def k(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
        x = reg.scalar(f32); ptx.inst.ld.global_.f32(x, ptx.addr(px + tid * 4))
        y = reg.scalar(f32); ptx.inst.add.f32(y, x, x)
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), y)
    """)

_BUILDER_SRC = textwrap.dedent("""\
    from ptxdsl import kernel, reg, ptx, Tile
    from ptxdsl.types import f32, u32

    def _make(n, name):
        @kernel(in_specs=(Tile(n, f32),), out_specs=(Tile(n, f32),), block=(32, 1, 1),
                name=name)
        def body(X, Y):
            px, py = ptx.global_ptrs(X, Y)
            tid = reg.scalar(u32); ptx.inst.mov.u32(tid, ptx.special.tid.x())
            x = reg.scalar(f32); ptx.inst.ld.global_.f32(x, ptx.addr(px + tid * 4))
            ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), x)
        return body
    """)


def _write(tmp_path, name, src):
    f = tmp_path / name
    f.write_text(src)
    return str(f)


def test_module_level_kernels_then_builders(tmp_path):
    path = _write(tmp_path, "m.py", _KERNEL_SRC + _BUILDER_SRC + textwrap.dedent("""\
        def build_copy(n=64):
            return _make(n, "copy")
        def build_pair(n=32):
            return {"a": _make(n, "pa"), "b": _make(n, "pb")}
        def build_sized(n):          # required argument: skipped
            return _make(n, "sized")
        """))
    entries = cli.load_kernels(path)
    assert [e.name for e in entries] == ["k", "copy", "a", "b"]
    assert entries[1].source == "build_copy()"
    assert entries[1].aliases == ("build_copy",)  # "copy" is already its name


def test_kernels_dict_or_function_takes_precedence(tmp_path):
    path = _write(tmp_path, "m.py", _KERNEL_SRC + _BUILDER_SRC + textwrap.dedent("""\
        def KERNELS():
            return {"small": _make(32, "copy32"), "big": _make(64, "copy64")}
        """))
    assert [e.name for e in cli.load_kernels(path)] == ["small", "big"]
    (e,) = cli.select_kernels(f"{path}:copy64")  # the kernel's own name works too
    assert e.name == "big"


def test_kernels_with_required_arguments_is_an_error(tmp_path):
    path = _write(tmp_path, "m.py", "def KERNELS(n):\n    return {}\n")
    with pytest.raises(cli.CliError, match="without arguments"):
        cli.load_kernels(path)


def test_imported_builders_are_not_the_files_own(tmp_path):
    _write(tmp_path, "lib.py", _BUILDER_SRC + "def build_lib(n=32):\n    return _make(n, 'lib')\n")
    path = _write(tmp_path, "user.py", "from lib import build_lib\n")
    assert cli.load_kernels(path) == []


def test_duplicate_kernel_names_get_distinct_keys(tmp_path):
    path = _write(tmp_path, "m.py", _BUILDER_SRC + textwrap.dedent("""\
        def build_one(n=32):
            return _make(n, "same")
        def build_two(n=64):
            return _make(n, "same")
        """))
    names = [e.name for e in cli.load_kernels(path)]
    assert len(set(names)) == 2 and names[0] == "same"


def test_format_table_aligns_columns():
    text = cli.format_table(["name", "n"], [["a", 1], ["long name", 100]])
    lines = text.splitlines()
    assert lines[0] == "name         n"
    assert lines[1] == "---------  ---"
    assert lines[2] == "a            1"
    assert lines[3] == "long name  100"


# ------------------------------------------------------------------ entry points
def test_python_dash_m_ptxdsl_help():
    proc = subprocess.run([sys.executable, "-m", "ptxdsl", "--help"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0
    for sub in ("ptx", "check", "sass", "run", "bench", "cache", "doctor"):
        assert sub in proc.stdout
    assert "KERNELS" in proc.stdout  # the convention is in --help


def test_python_dash_m_reports_errors_with_exit_status_1(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ptxdsl", "ptx", str(tmp_path / "x.py")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("ptxdsl: error:") and "Traceback" not in proc.stderr


def test_run_interpret_after_the_file_forces_the_interpreter(capsys, monkeypatch, tmp_path):
    f = tmp_path / "script.py"
    f.write_text("import sys, ptxdsl\n"
                 "def main():\n"
                 "    print('interp', ptxdsl.interpret_requested(), sys.argv[1:])\n")
    monkeypatch.delenv("PTXDSL_INTERPRET", raising=False)
    code, out, err = run(capsys, "run", str(f), "--interpret", "--", "--interpret", "x")
    assert code == 0, err
    # Before `--` it is ours; after `--` it belongs to the script.
    assert "interp True ['--interpret', 'x']" in out
    assert "PTXDSL_INTERPRET" not in os.environ  # restored after the run
    code, out, err = run(capsys, "run", str(f), "--", "--interpret")
    assert "interp False ['--interpret']" in out


@pytest.mark.skipif(os.name != "posix", reason="pipes closed early behave so on POSIX")
@pytest.mark.parametrize("argv", [["doctor"], ["list", EXAMPLE], ["cache", "info"],
                                  ["ptx", EXAMPLE]])
def test_closed_pipe_is_quiet(argv, tmp_path):
    """`ptxdsl doctor | head`: the reader leaves early; no BrokenPipeError traceback."""
    env = dict(os.environ, PYTHONPATH=ROOT, PTXDSL_CACHE_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "ptxdsl", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=str(tmp_path))
    proc.stdout.close()  # the reader is gone before the first write
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert "BrokenPipe" not in err and "Traceback" not in err, err
    assert code in (0, 1)  # doctor exits 1 where nothing can assemble or run kernels


def test_package_ships_py_typed_and_templates():
    """PEP 561 marker and the PTX template are in the package and named as package data."""
    import importlib.resources
    files = importlib.resources.files("ptxdsl")
    assert files.joinpath("py.typed").is_file()
    assert files.joinpath("core").joinpath("templates").joinpath("module.ptx.j2").is_file()
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    data = text.split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    assert '"py.typed"' in data and '"core/templates/*.j2"' in data
