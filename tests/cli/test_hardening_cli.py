"""Issue #48's command-line and cache cases: short ``list`` rows, ``bench`` without a CUDA
torch, ``cache clear`` counting every file, orphaned temporary files, PTX dumps of
interpreted kernels."""
from __future__ import annotations

import importlib.util
import os
import time

from ptxdsl import Tile, kernel
from ptxdsl.cli import command as cli
from ptxdsl.core.types import f32
from ptxdsl.runtime.cache import DiskCache, ORPHAN_AGE_S

from paths import ROOT


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_rows_are_short(capsys):
    code, out, _ = run(capsys, "list", os.path.join(ROOT, "examples", "hopper", "gemm.py"))
    assert code == 0
    assert "gemm_bf16" in out and "tma" in out
    assert max(map(len, out.splitlines())) < 160, out


def test_bench_without_torch_is_one_line(capsys, tmp_path, monkeypatch):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "needs_torch.py").write_text("import torch\nraise SystemExit(5)\n")
    monkeypatch.chdir(tmp_path)
    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else find(name, *a))
    code, _, err = run(capsys, "bench", "needs_torch")
    assert code == 1 and "needs torch" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_cache_clear_counts_every_file_it_removes(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path))
    (tmp_path / "ptxas-versions.json").write_text("{}")
    code, out, _ = run(capsys, "cache", "clear")
    assert code == 0 and "removed 0 cached kernel(s) (1 file(s))" in out, out
    assert not (tmp_path / "ptxas-versions.json").exists()


def test_orphaned_temporary_files_are_swept_by_the_next_write(tmp_path, monkeypatch):
    monkeypatch.delenv("PTXDSL_CACHE", raising=False)
    folder = tmp_path / "cubin"
    folder.mkdir()
    old, fresh = folder / ".0123456789abcdef.x1.tmp", folder / ".fedcba9876543210.x2.tmp"
    old.write_bytes(b"half a cubin")
    fresh.write_bytes(b"being written")
    past = time.time() - 2 * ORPHAN_AGE_S
    os.utime(old, (past, past))
    assert DiskCache(str(tmp_path)).put("k" * 64, b"cubin")
    assert not old.exists() and fresh.exists()
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".tmp") == [fresh.name]


def test_dump_dir_gets_the_ptx_of_a_kernel_that_is_only_traced(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXDSL_DUMP_DIR", str(tmp_path / "dump"))

    @kernel(in_specs=(Tile(32, f32),), out_specs=(Tile(32, f32),), block=(32, 1, 1))
    def only_interpreted(X, Y):
        pass
    text = only_interpreted.ptx()
    files = list((tmp_path / "dump").glob("only_interpreted-*.ptx"))
    assert len(files) == 1 and files[0].read_text() == text
