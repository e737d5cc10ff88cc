"""The cubin disk cache, its keys, and the in-memory module cache (no GPU needed)."""
from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest

from ptxdsl.runtime import cache as rc


@pytest.fixture
def disk(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PTXDSL_CACHE", raising=False)
    return rc.DiskCache()


# ---------------------------------------------------------------- where
def test_cache_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(tmp_path / "x"))
    assert rc.cache_dir() == str(tmp_path / "x")


def test_cache_dir_is_platformdirs_user_cache_dir(monkeypatch):
    import platformdirs
    monkeypatch.delenv("PTXDSL_CACHE_DIR", raising=False)
    assert rc.cache_dir() == platformdirs.user_cache_dir("ptxdsl", appauthor=False)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG rule is Linux's")
def test_cache_dir_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("PTXDSL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert rc.cache_dir() == os.path.join(str(tmp_path / "xdg"), "ptxdsl")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert rc.cache_dir() == os.path.join(str(tmp_path / "home"), ".cache", "ptxdsl")


def test_cli_reports_the_runtime_cache_dir(monkeypatch, tmp_path, capsys):
    from ptxdsl.cli import command as cli
    monkeypatch.delenv("PTXDSL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cli.main(["cache", "info"]) == 0
    assert rc.cache_dir() in capsys.readouterr().out


# ---------------------------------------------------------------- keys
def test_key_changes_with_every_input():
    base = rc.cache_key("ptx text", "sm_90a", "ptxas-13.0", ())
    assert len(base) == 64 and base == rc.cache_key("ptx text", "sm_90a", "ptxas-13.0", ())
    variants = [rc.cache_key("ptx text ", "sm_90a", "ptxas-13.0", ()),
                rc.cache_key("ptx text", "sm_90", "ptxas-13.0", ()),
                rc.cache_key("ptx text", "sm_90a", "ptxas-12.8", ()),
                rc.cache_key("ptx text", "sm_90a", "driver-jit-13000", ()),
                rc.cache_key("ptx text", "sm_90a", "ptxas-13.0", ("-O1",)),
                rc.cache_key("ptx text", "sm_90a", "ptxas-13.0", ("-O1", "-lineinfo"))]
    assert len({base, *variants}) == 1 + len(variants)


def test_key_fields_cannot_bleed_into_each_other():
    # Without length prefixes "ab"+"c" and "a"+"bc" would hash the same text.
    assert rc.cache_key("ab", "c", "t") != rc.cache_key("a", "bc", "t")
    assert rc.cache_key("p", "a", "t", ("x y",)) != rc.cache_key("p", "a", "t", ("x", "y"))


def test_specialisation_key_is_the_cache_key():
    from ptxdsl.runtime.compile import specialisation_key
    assert specialisation_key("p", "sm_90a", "ptxas-13.0") == rc.cache_key("p", "sm_90a",
                                                                          "ptxas-13.0")


# ---------------------------------------------------------------- disk entries
def test_roundtrip_and_layout(disk):
    key = "ab" * 32
    assert disk.get(key) is None
    assert disk.put(key, b"\x7fELF cubin bytes")
    assert disk.get(key) == b"\x7fELF cubin bytes"
    path = disk.path(key)
    assert path.startswith(disk.root) and path.endswith(".cubin")
    # The cubin is stored as is (cuobjdump reads it); its metadata is beside it.
    assert open(path, "rb").read() == b"\x7fELF cubin bytes"
    meta = json.load(open(disk.meta_path(key)))
    assert meta["key"] == key and meta["bytes"] == 16 and meta["format"] == rc.CACHE_FORMAT
    # No temporary files are left next to the entry.
    assert sorted(n for n in os.listdir(os.path.dirname(path)) if n != ".lock") == \
        sorted([os.path.basename(path), os.path.basename(disk.meta_path(key))])


def test_metadata_from_the_caller_is_kept(disk):
    key = "ac" * 32
    disk.put(key, b"cubin", {"kernel": "k", "arch": "sm_90a"})
    meta = json.load(open(disk.meta_path(key)))
    assert meta["kernel"] == "k" and meta["arch"] == "sm_90a"


@pytest.mark.parametrize("damage", ["no_meta", "other_key", "bad_json", "swapped"])
def test_metadata_damage_is_caught(disk, damage):
    key, other = "ba" * 32, "be" * 32
    disk.put(key, b"payload" * 10)
    disk.put(other, b"payload" * 10)  # same bytes, another key
    meta = disk.meta_path(key)
    if damage == "no_meta":
        os.remove(meta)
        assert disk.get(key) is None  # a miss: the writer may not have finished
        return
    if damage == "other_key":
        open(meta, "w").write(open(disk.meta_path(other)).read())
    elif damage == "bad_json":
        open(meta, "w").write("{")
    else:  # the checksum covers the key: another key's cubin and metadata fail it
        d = json.load(open(disk.meta_path(other)))
        d["key"] = key
        json.dump(d, open(meta, "w"))
    assert disk.get(key) is None
    assert not os.path.exists(disk.path(key)) and disk.corrupt_entries == 1
    assert disk.get(other) == b"payload" * 10


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic", "empty", "header_only"])
def test_corrupt_entry_is_removed_not_loaded(disk, damage):
    key = "cd" * 32
    disk.put(key, b"payload" * 100)
    path = disk.path(key)
    blob = open(path, "rb").read()
    if damage == "truncate":
        blob = blob[:-10]
    elif damage == "flip":
        blob = blob[:-1] + bytes([blob[-1] ^ 0xFF])
    elif damage == "magic":
        blob = b"X" + blob[1:]
    elif damage == "empty":
        blob = b""
    else:
        blob = blob[:4]
    open(path, "wb").write(blob)
    assert disk.get(key) is None
    assert not os.path.exists(path)
    assert disk.corrupt_entries == 1
    # ... and the next build stores a good entry again.
    assert disk.put(key, b"fresh") and disk.get(key) == b"fresh"


def test_write_is_atomic_when_rename_fails(disk, monkeypatch):
    key = "ef" * 32
    disk.put(key, b"old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(rc.os, "replace", broken_replace)
        with pytest.warns(RuntimeWarning, match="cannot write"):
            assert disk.put(key, b"new") is False
    # The old entry is intact and no temporary file is left behind.
    assert disk.get(key) == b"old"
    assert [n for n in os.listdir(os.path.dirname(disk.path(key))) if n.endswith(".tmp")] == []


def test_concurrent_writers_never_expose_partial_entries(disk):
    key = "01" * 32
    payloads = [bytes([i]) * 200_000 for i in range(8)]
    bad = []

    def writer(p):
        for _ in range(5):
            disk.put(key, p)

    def reader():
        for _ in range(50):
            got = disk.get(key)
            if got is not None and got not in payloads:
                bad.append(len(got))

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    threads += [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
    assert disk.corrupt_entries == 0
    assert disk.get(key) in payloads


def test_unwritable_cache_dir_warns_once_and_goes_on(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PTXDSL_CACHE_DIR", str(blocker / "sub"))
    d = rc.DiskCache()
    with pytest.warns(RuntimeWarning, match="without the disk cache"):
        assert d.put("aa" * 32, b"x") is False
    assert d.put("bb" * 32, b"x") is False  # silently: warned already
    assert d.get("aa" * 32) is None


def test_cache_can_be_turned_off(disk, monkeypatch):
    monkeypatch.setenv("PTXDSL_CACHE", "0")
    assert disk.put("aa" * 32, b"x") is False
    assert disk.get("aa" * 32) is None
    assert not os.path.exists(disk.root)


def test_clear_removes_only_our_files(disk):
    disk.put("aa" * 32, b"x")
    disk.put("bb" * 32, b"y")
    other = os.path.join(disk.root, "notes.txt")
    open(other, "w").write("keep me")
    assert rc.clear() == 2
    assert os.path.exists(other)
    assert disk.get("aa" * 32) is None


# ---------------------------------------------------------------- ptxas identity
def test_ptxas_identity_runs_ptxas_once_then_reads_the_memo(tmp_path, monkeypatch):
    fake = tmp_path / "ptxas"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    fake.chmod(0o755)
    calls = []

    def version_of(path):
        calls.append(path)
        return (13, 0)

    monkeypatch.setattr(rc, "_identity_memo", {})
    root = str(tmp_path / "cache")
    assert rc.ptxas_identity(str(fake), version_of, root=root) == "ptxas-13.0"
    assert rc.ptxas_identity(str(fake), version_of, root=root) == "ptxas-13.0"
    assert len(calls) == 1
    # A new process (empty memory memo) reads the file instead of running ptxas.
    monkeypatch.setattr(rc, "_identity_memo", {})
    assert rc.ptxas_identity(str(fake), version_of, root=root) == "ptxas-13.0"
    assert len(calls) == 1
    # A changed binary is asked again.
    time.sleep(0.01)
    fake.write_text("#!/bin/sh\necho 'release 13.1'\n" + "#" * 10)
    monkeypatch.setattr(rc, "_identity_memo", {})
    assert rc.ptxas_identity(str(fake), lambda p: (calls.append(p), (13, 1))[1],
                             root=root) == "ptxas-13.1"
    assert len(calls) == 2


def test_ptxas_identity_survives_a_corrupt_memo(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir()
    (root / "ptxas-versions.json").write_text("{not json")
    monkeypatch.setattr(rc, "_identity_memo", {})
    assert rc.ptxas_identity("/nonexistent/ptxas", lambda p: (12, 8),
                             root=str(root)) == "ptxas-12.8"


# ---------------------------------------------------------------- modules in memory
def test_module_cache_loads_once_under_contention():
    mc = rc.ModuleCache()
    started = threading.Barrier(8)
    results = []

    def load():
        time.sleep(0.05)
        return object()

    def worker():
        started.wait()
        results.append(mc.get_or_load(0, "k", load))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert mc.loads == 1
    assert len({id(r) for r in results}) == 1


def test_module_cache_is_per_device_and_key():
    mc = rc.ModuleCache()
    a = mc.get_or_load(0, "k", object)
    b = mc.get_or_load(1, "k", object)
    c = mc.get_or_load(0, "k2", object)
    assert len({id(a), id(b), id(c)}) == 3 and len(mc) == 3
    assert mc.get_or_load(0, "k", object) is a


def test_module_cache_does_not_store_failures():
    mc = rc.ModuleCache()

    def boom():
        raise RuntimeError("ptxas said no")

    with pytest.raises(RuntimeError):
        mc.get_or_load(0, "k", boom)
    assert mc.get(0, "k") is None
    assert mc.get_or_load(0, "k", lambda: "ok") == "ok"
