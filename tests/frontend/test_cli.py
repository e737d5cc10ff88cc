"""``ptxdsl translate / check / interpret FILE.ptx``."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl.cli.command import main
from ptx_samples import COPY


@pytest.fixture
def ptx_file(tmp_path):
    path = tmp_path / "copy.ptx"
    path.write_text(COPY)
    return path


def test_translate_prints_dsl_source_and_canonical_ptx(ptx_file, capsys):
    assert main(["translate", str(ptx_file)]) == 0
    out = capsys.readouterr().out
    assert "@kernel(" in out and "ptx.inst('ld.global.f32'" in out
    assert main(["translate", "--canonical", str(ptx_file)]) == 0
    assert ".visible .entry copy(" in capsys.readouterr().out


def test_interpret_reads_and_writes_npy_files(ptx_file, tmp_path, capsys):
    x, y = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(x, np.arange(64, dtype=np.float32))
    np.save(y, np.zeros(64, np.float32))
    assert main(["interpret", str(ptx_file), "--block", "64", "--arg", str(x),
                 "--arg", str(y), "--arg", "64"]) == 0
    np.testing.assert_array_equal(np.load(y), np.arange(64, dtype=np.float32))
    assert "no error detected" in capsys.readouterr().out


def test_interpret_reports_a_detector_error(ptx_file, tmp_path, capsys):
    x = tmp_path / "x.npy"
    np.save(x, np.arange(64, dtype=np.float32))
    assert main(["interpret", str(ptx_file), "--block", "64", "--arg", str(x),
                 "--arg", "null", "--arg", "64"]) == 1
    assert "out of bounds" in capsys.readouterr().err


def test_unknown_instruction_fails_with_its_line(tmp_path, capsys):
    path = tmp_path / "bad.ptx"
    path.write_text(COPY.replace("\tret;", "\tfrobnicate.b32 %r3, %r2;\n\tret;"))
    assert main(["translate", str(path)]) == 1
    assert f"{path}:29" in capsys.readouterr().err


def test_check_assembles_a_ptx_file(ptx_file, capsys):
    from ptxdsl import toolchain
    from ptxdsl.core.errors import PtxdslError
    try:
        if toolchain.find_ptxas() is None:
            pytest.skip("no ptxas")
    except PtxdslError:
        pytest.skip("no ptxas")
    assert main(["check", str(ptx_file)]) == 0
    assert "copy  sm_90a  registers" in capsys.readouterr().out
