"""Tests for ptxdsl.toolchain: discovery, version table, ptxas report parsing, running ptxas.

Tests that need a real ptxas skip when none is found; everything else uses fake
executables (shell scripts) in tmp_path so it runs on any POSIX machine.
"""
from __future__ import annotations

import os
import stat
import sys
import uuid

import shutil

import pytest

from ptxdsl import toolchain as tc
from ptxdsl.core.errors import PtxdslError, ToolchainError

posix_only = pytest.mark.skipif(os.name != "posix", reason="fake tools are /bin/sh scripts")
# Absolute paths, looked up now: the tests below point PATH at empty folders.
CAT = shutil.which("cat") or "/bin/cat"
SLEEP = shutil.which("sleep") or "/bin/sleep"

VALID_PTX = """\
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p){ .reg .b64 %rd<2>; .reg .f32 %f<2>; ld.param.u64 %rd0, [p]; cvta.to.global.u64 %rd1, %rd0; ld.global.f32 %f0, [%rd1]; add.f32 %f1, %f0, %f0; st.global.f32 [%rd1], %f1; ret; }
"""

# Line 9 adds a .b64 register to .f32 ones: ptxas says "Arguments mismatch".
BROKEN_PTX = """\
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{
.reg .b64 %rd<2>;
.reg .f32 %f<2>;
ld.param.u64 %rd0, [p];
add.f32 %f1, %rd0, %f0;
ret;
}
"""

SMEM_PTX = """\
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p){ .shared .align 4 .b8 sm[384]; .reg .b64 %rd<2>; .reg .f32 %f<2>; ld.param.u64 %rd0, [p]; cvta.to.global.u64 %rd1, %rd0; ld.global.f32 %f0, [%rd1]; st.shared.f32 [sm], %f0; bar.sync 0; ld.shared.f32 %f1, [sm+4]; st.global.f32 [%rd1], %f1; ret; }
.visible .entry k2(){ ret; }
"""


def spill_ptx(n: int = 64) -> str:
    """n values live at once, so -maxrregcount 24 must spill them to local memory."""
    body = [".version 8.0", ".target sm_80", ".address_size 64",
            ".visible .entry k(.param .u64 p){",
            f".reg .b64 %rd<2>; .reg .f32 %f<{n + 1}>;",
            "ld.param.u64 %rd0, [p]; cvta.to.global.u64 %rd1, %rd0;"]
    body += [f"ld.volatile.global.f32 %f{i}, [%rd1+{4 * i}];" for i in range(n)]
    body.append(f"mov.f32 %f{n}, 0f00000000;")
    body += [f"add.f32 %f{n}, %f{n}, %f{n - 1 - i};" for i in range(n)]
    body += [f"st.volatile.global.f32 [%rd1+{4 * i}], %f{i};" for i in range(n)]
    body.append(f"st.global.f32 [%rd1], %f{n}; ret; }}")
    return "\n".join(body) + "\n"


def make_exe(path, script: str = "exit 0", mode: int = 0o755) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(mode)
    return str(path)


@pytest.fixture
def bare(monkeypatch, tmp_path):
    """No toolchain anywhere: env cleared, PATH an empty folder, no wheel, no default dirs."""
    for var in ("PTXDSL_PTXAS", "PTXDSL_CUOBJDUMP", "PTXDSL_NVDISASM", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(tc, "_PIP_MODULES", ())
    monkeypatch.setattr(tc, "_DEFAULT_CUDA_DIRS", ())
    monkeypatch.setattr(tc, "_PATHFINDER", None)  # the real wheels would be found first
    return tmp_path


@pytest.fixture
def fake_wheel(monkeypatch, tmp_path):
    """A namespace package shaped like the nvidia-cuda-nvcc wheel, under a unique name.

    A unique top-level name keeps the real ``nvidia`` package (if any) out of sys.modules games.
    """
    top = "ptxdsl_fake_nvidia_" + uuid.uuid4().hex[:8]
    site = tmp_path / "site"
    (site / top / "cu13" / "bin").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(tc, "_PIP_MODULES", (f"{top}.cu13", f"{top}.cuda_nvcc"))
    yield site / top / "cu13" / "bin"
    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        del sys.modules[name]


@pytest.fixture
def real_ptxas():
    path = tc.find_ptxas()
    if path is None:
        pytest.skip("no ptxas on this machine (pip install nvidia-cuda-nvcc~=13.0.0)")
    return path


# ---------------------------------------------------------------- discovery

def test_errors_belong_to_the_family():
    assert issubclass(tc.PtxasError, ToolchainError)
    assert issubclass(ToolchainError, PtxdslError)


def test_nothing_found_returns_none(bare):
    assert tc.find_ptxas() is None
    assert tc.find_tool("cuobjdump") is None


@posix_only
def test_discovery_order(bare, fake_wheel, monkeypatch):
    tmp = bare
    places = {
        "env": make_exe(tmp / "env" / "my-ptxas"),
        "wheel": make_exe(fake_wheel / "ptxas"),
        "path": make_exe(tmp / "path" / "ptxas"),
        "cuda_home": make_exe(tmp / "home" / "bin" / "ptxas"),
        "cuda_path": make_exe(tmp / "cpath" / "bin" / "ptxas"),
        "default": make_exe(tmp / "default" / "ptxas"),
    }
    monkeypatch.setenv("PTXDSL_PTXAS", places["env"])
    monkeypatch.setenv("PATH", str(tmp / "path"))
    monkeypatch.setenv("CUDA_HOME", str(tmp / "home"))
    monkeypatch.setenv("CUDA_PATH", str(tmp / "cpath"))
    monkeypatch.setattr(tc, "_DEFAULT_CUDA_DIRS", (str(tmp / "default"),))

    assert tc.find_ptxas() == places["env"]
    monkeypatch.delenv("PTXDSL_PTXAS")
    assert tc.find_ptxas() == places["wheel"]
    os.remove(places["wheel"])
    assert tc.find_ptxas() == places["path"]
    monkeypatch.setenv("PATH", str(bare / "empty-path"))
    assert tc.find_ptxas() == places["cuda_home"]
    monkeypatch.delenv("CUDA_HOME")
    assert tc.find_ptxas() == places["cuda_path"]
    monkeypatch.delenv("CUDA_PATH")
    assert tc.find_ptxas() == places["default"]
    os.remove(places["default"])
    assert tc.find_ptxas() is None


@posix_only
def test_wheel_ptxas_without_exec_bit_is_fixed(bare, fake_wheel):
    path = make_exe(fake_wheel / "ptxas", mode=0o644)
    assert tc.find_ptxas() == path
    assert os.stat(path).st_mode & stat.S_IXUSR


@posix_only
def test_wheel_ptxas_that_cannot_be_made_executable(bare, fake_wheel, monkeypatch):
    path = make_exe(fake_wheel / "ptxas", mode=0o644)

    def refuse(*args, **kwargs):
        raise PermissionError("read-only site-packages")

    with monkeypatch.context() as m:
        m.setattr(tc.os, "chmod", refuse)
        with pytest.raises(ToolchainError, match="not executable") as info:
            tc.find_ptxas()
    assert path in str(info.value) and "PTXDSL_PTXAS" in str(info.value)
    # A usable ptxas further down the search order still wins over the stuck one.
    make_exe(bare / "empty-path" / "ptxas")
    with monkeypatch.context() as m:
        m.setattr(tc.os, "chmod", refuse)
        assert tc.find_ptxas() == str(bare / "empty-path" / "ptxas")


@pytest.mark.parametrize("kind", ["missing", "not-executable", "folder"])
def test_bad_env_path_is_an_error(bare, monkeypatch, kind):
    target = bare / "ptxas"
    if kind == "not-executable":
        target.write_text("not a program")
        target.chmod(0o644)
    elif kind == "folder":
        target.mkdir()
    monkeypatch.setenv("PTXDSL_PTXAS", str(target))
    with pytest.raises(ToolchainError, match="PTXDSL_PTXAS"):
        tc.find_ptxas()
    monkeypatch.setenv("PTXDSL_CUOBJDUMP", str(target))
    with pytest.raises(ToolchainError, match="PTXDSL_CUOBJDUMP"):
        tc.find_tool("cuobjdump")


@posix_only
def test_find_tool_order(bare, monkeypatch):
    tmp = bare
    ptxas = make_exe(tmp / "kit" / "bin" / "ptxas")
    beside = make_exe(tmp / "kit" / "bin" / "cuobjdump")
    on_path = make_exe(tmp / "empty-path" / "cuobjdump")
    env = make_exe(tmp / "elsewhere" / "cuobjdump")
    in_home = make_exe(tmp / "home" / "bin" / "nvdisasm")
    monkeypatch.setenv("PTXDSL_PTXAS", ptxas)
    monkeypatch.setenv("CUDA_HOME", str(tmp / "home"))
    monkeypatch.setenv("PTXDSL_CUOBJDUMP", env)
    assert tc.find_tool("cuobjdump") == env
    monkeypatch.delenv("PTXDSL_CUOBJDUMP")
    assert tc.find_tool("cuobjdump") == beside
    os.remove(beside)
    assert tc.find_tool("cuobjdump") == on_path
    assert tc.find_tool("nvdisasm") == in_home


# ---------------------------------------------------------------- versions

@pytest.mark.parametrize("text, expected", [
    ("ptxas: NVIDIA (R) Ptx optimizing assembler\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
     "Built on Wed_Aug_20_01:55:12_PM_PDT_2025\nCuda compilation tools, release 13.0, V13.0.88\n"
     "Build cuda_13.0.r13.0/compiler.36424714_0\n", (13, 0)),
    ("Cuda compilation tools, release 12.4, V12.4.131", (12, 4)),
    ("Cuda compilation tools, V11.8.89", (11, 8)),
])
def test_parse_ptxas_version(text, expected):
    assert tc.parse_ptxas_version(text) == expected


def test_parse_ptxas_version_garbage():
    with pytest.raises(ToolchainError, match="release number"):
        tc.parse_ptxas_version("hello")


@posix_only
def test_ptxas_version_runs_the_binary_and_notices_changes(bare):
    path = bare / "ptxas"
    make_exe(path, 'echo "Cuda compilation tools, release 12.4, V12.4.131"')
    assert tc.ptxas_version(str(path)) == (12, 4)
    make_exe(path, 'echo "Cuda compilation tools, release 12.8, V12.8.93"  # longer')
    os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 10**9))
    assert tc.ptxas_version(str(path)) == (12, 8)


@posix_only
def test_ptxas_version_of_a_failing_binary(bare):
    path = make_exe(bare / "ptxas", "echo boom; exit 3")
    with pytest.raises(ToolchainError, match="exited with 3"):
        tc.ptxas_version(path)


def test_ptxas_version_without_ptxas(bare):
    with pytest.raises(ToolchainError, match="pip install nvidia-cuda-nvcc"):
        tc.ptxas_version()


@pytest.mark.parametrize("cuda, isa", [
    ((11, 0), (7, 0)), ((11, 1), (7, 1)), ((11, 8), (7, 8)),
    ((12, 0), (8, 0)), ((12, 1), (8, 1)), ((12, 2), (8, 2)), ((12, 3), (8, 3)),
    ((12, 4), (8, 4)), ((12, 5), (8, 5)), ((12, 6), (8, 5)), ((12, 7), (8, 6)),
    ((12, 8), (8, 7)), ((12, 9), (8, 8)), ((13, 0), (9, 0)), ((13, 1), (9, 1)),
    ((10, 2), (6, 5)),
])
def test_max_ptx_isa_table(cuda, isa):
    assert tc.max_ptx_isa(cuda) == isa


def test_max_ptx_isa_beyond_the_table():
    newest = tc.max_ptx_isa((13, 1))
    assert tc.max_ptx_isa((13, 9)) == newest
    assert tc.max_ptx_isa((99, 0)) == newest


def test_max_ptx_isa_too_old():
    with pytest.raises(ToolchainError, match="older than"):
        tc.max_ptx_isa((8, 0))


def test_real_ptxas_version(real_ptxas):
    major, minor = tc.ptxas_version(real_ptxas)
    assert major >= 11
    assert tc.max_ptx_isa((major, minor)) >= (7, 0)


# ---------------------------------------------------------------- report parsing

SAMPLE_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 384 bytes smem, 360 bytes cmem[0]
ptxas info    : Compile time = 1.681 ms
ptxas info    : Compiling entry function '_Z6rmsnormPfS_i' for 'sm_90a'
ptxas info    : Function properties for _Z6rmsnormPfS_i
    368 bytes stack frame, 368 bytes spill stores, 360 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 368 bytes cumulative stack size
ptxas info    : Function properties for helper
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""


def test_parse_resources_sample():
    res = tc.parse_resources(SAMPLE_LOG)
    assert res["k"] == tc.Resources(registers=32, spill_stores=0, spill_loads=0, shared=384,
                                    local=0, constant=360, barriers=1)
    assert res["_Z6rmsnormPfS_i"] == tc.Resources(24, 368, 360, 0, 368, 0, 0)
    assert res["helper"] == tc.Resources(0, 0, 0, 0, 16, 0)


def test_parse_resources_old_lmem_style():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_70'\n"
           "ptxas info    : Used 10 registers, 8 bytes lmem, 352 bytes cmem[0]\n")
    assert tc.parse_resources(log) == {"k": tc.Resources(10, 0, 0, 0, 8, 352)}


def test_parse_resources_empty():
    assert tc.parse_resources("") == {}


def test_parse_diagnostics_sample():
    log = ("ptxas /tmp/my dir/x.ptx, line 12; error   : Arguments mismatch for instruction 'add'\n"
           "ptxas x.ptx, line 3; warning : Instruction 'shfl' without '.sync' is deprecated\n"
           "ptxas info    : 0 bytes gmem\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas fatal   : Ptx assembly aborted due to errors\n")
    assert tc.parse_diagnostics(log) == [
        tc.PtxasDiagnostic(12, "error", "Arguments mismatch for instruction 'add'"),
        tc.PtxasDiagnostic(3, "warning", "Instruction 'shfl' without '.sync' is deprecated"),
        tc.PtxasDiagnostic(None, "info", "0 bytes gmem"),
        tc.PtxasDiagnostic(None, "error", "Ptx assembly aborted due to errors"),
    ]


def test_ptxas_error_message_quotes_the_line():
    log = ("ptxas kernel.ptx, line 9; error   : Arguments mismatch for instruction 'add'\n"
           "ptxas kernel.ptx, line 10; error   : Unknown symbol 'x'\n"
           "ptxas fatal   : Ptx assembly aborted due to errors\n")
    err = tc.PtxasError(log, BROKEN_PTX, arch="sm_80", returncode=255)
    text = str(err)
    assert "line 9: Arguments mismatch for instruction 'add'" in text
    assert "add.f32 %f1, %rd0, %f0;" in text
    assert "1 more error" in text
    assert err.log == log and err.ptx == BROKEN_PTX and len(err.diagnostics) == 3


def test_ptxas_error_without_diagnostics_shows_the_log():
    err = tc.PtxasError("Segmentation fault\n", VALID_PTX, returncode=139)
    assert "exit status 139" in str(err) and "Segmentation fault" in str(err)


# ---------------------------------------------------------------- real ptxas

def test_assemble_valid(real_ptxas):
    result = tc.assemble(VALID_PTX, "sm_80")
    assert result.cubin[:4] == b"\x7fELF"
    assert "Used" in result.log
    k = result.resources["k"]
    assert k.registers > 0
    assert (k.spill_stores, k.spill_loads, k.shared, k.local) == (0, 0, 0, 0)
    assert k.constant > 0  # sm_80 reports the kernel-parameter bank cmem[0]
    assert result.warnings == []


def test_assemble_quiet_has_no_resources(real_ptxas):
    result = tc.assemble(VALID_PTX, "sm_80", verbose=False, ptxas=real_ptxas)
    assert result.cubin[:4] == b"\x7fELF" and result.resources == {}


def test_real_resources_smem_and_barriers(real_ptxas):
    result = tc.assemble(SMEM_PTX, "sm_90a")
    assert set(result.resources) == {"k", "k2"}
    assert result.resources["k"].shared == 384
    assert result.resources["k"].barriers == 1
    assert result.resources["k2"].barriers == 0


def test_real_resources_spills_with_options(real_ptxas):
    result = tc.assemble(spill_ptx(), "sm_80", options=["-maxrregcount", "24"])
    k = result.resources["k"]
    assert k.registers <= 24
    assert k.spill_stores > 0 and k.spill_loads > 0 and k.local >= k.spill_stores


def test_real_warning_is_collected(real_ptxas):
    result = tc.assemble(VALID_PTX, "sm_80", options=["-maxrregcount", "300"])
    assert any("maxrregcount" in w.message for w in result.warnings)
    assert all(w.severity == "warning" for w in result.warnings)


def test_real_broken_ptx_raises_ptxas_error(real_ptxas):
    with pytest.raises(tc.PtxasError) as info:
        tc.assemble(BROKEN_PTX, "sm_80")
    err = info.value
    first = err.diagnostics[0]
    assert (first.line, first.severity) == (9, "error")
    assert "mismatch" in first.message.lower()
    assert "add.f32 %f1, %rd0, %f0;" in str(err)
    assert "sm_80" in str(err)
    assert err.ptx == BROKEN_PTX and "line 9" in err.log
    # Temp folder paths stay out of the log, so it reads the same every run.
    assert "ptxdsl-" not in err.log


def test_real_unknown_arch(real_ptxas):
    with pytest.raises(tc.PtxasError, match="sm_999"):
        tc.assemble(VALID_PTX, "sm_999")


def test_assemble_rejects_bad_arguments(real_ptxas):
    with pytest.raises(ToolchainError, match="sm_90a"):
        tc.assemble(VALID_PTX, "90a")
    with pytest.raises(ToolchainError, match="list"):
        tc.assemble(VALID_PTX, "sm_80", options="-O3")


def test_assemble_without_ptxas_gives_install_advice(bare):
    with pytest.raises(ToolchainError) as info:
        tc.assemble(VALID_PTX, "sm_80")
    assert "pip install nvidia-cuda-nvcc~=13.0.0" in str(info.value)
    assert "PTXDSL_PTXAS" in str(info.value)


@posix_only
def test_assemble_timeout(bare):
    slow = make_exe(bare / "ptxas", f"exec {SLEEP} 5")
    with pytest.raises(ToolchainError, match="did not finish"):
        tc.assemble(VALID_PTX, "sm_80", ptxas=slow, timeout=0.2)


# ---------------------------------------------------------------- disassembly

def test_disassemble_without_tools(bare, monkeypatch):
    # A ptxas in a folder without cuobjdump/nvdisasm beside it, as with the pip wheel alone.
    monkeypatch.setenv("PTXDSL_PTXAS", make_exe(bare / "kit" / "ptxas"))
    with pytest.raises(ToolchainError) as info:
        tc.disassemble(b"\x7fELF")
    text = str(info.value)
    assert "cuobjdump" in text and "nvdisasm" in text and "PATH" in text


@posix_only
def test_disassemble_uses_cuobjdump_then_nvdisasm(bare):
    on_path = bare / "empty-path"
    # Each fake echoes its arguments and the cubin it got, which proves the temp file round trip.
    make_exe(on_path / "nvdisasm", f'echo "nvdisasm $*"; {CAT} "$1"')
    assert tc.disassemble(b"CUBIN") == "nvdisasm kernel.cubin\nCUBIN"
    make_exe(on_path / "cuobjdump", f'echo "cuobjdump $*"; {CAT} "$2"')
    assert tc.disassemble(b"CUBIN") == "cuobjdump -sass kernel.cubin\nCUBIN"
    assert tc.disassemble(b"X", tool="nvdisasm") == "nvdisasm kernel.cubin\nX"


@posix_only
def test_disassemble_failure_is_reported(bare):
    tool = make_exe(bare / "cuobjdump", "echo 'cuobjdump fatal : not an ELF'; exit 1")
    with pytest.raises(ToolchainError, match="not an ELF"):
        tc.disassemble(b"junk", tool=tool)


def test_disassemble_named_tool_missing(bare):
    with pytest.raises(ToolchainError, match="nvdisasm not found"):
        tc.disassemble(b"", tool="nvdisasm")


# ---------------------------------------------------------------- report

def test_toolchain_report_without_anything(bare):
    report = tc.toolchain_report()
    assert report["ptxas"] is None and report["ptxas_version"] is None
    assert any("pip install" in p for p in report["problems"])


def test_toolchain_report_bad_env_does_not_raise(bare, monkeypatch):
    monkeypatch.setenv("PTXDSL_PTXAS", str(bare / "nope"))
    report = tc.toolchain_report()
    assert any("PTXDSL_PTXAS" in p for p in report["problems"])


def test_toolchain_report_real(real_ptxas):
    report = tc.toolchain_report()
    assert report["ptxas"] == real_ptxas
    major, minor = tc.ptxas_version(real_ptxas)
    assert report["ptxas_version"] == f"{major}.{minor}"
    assert report["max_ptx_isa"] == "%d.%d" % tc.max_ptx_isa((major, minor))
    assert set(report) >= {"cuobjdump", "nvdisasm", "problems"}


# ---------------------------------------------------------------- cuda.pathfinder
def test_pathfinder_comes_after_the_env_and_before_own_rules(bare, monkeypatch):
    tmp = bare
    env = make_exe(tmp / "env" / "ptxas")
    found = make_exe(tmp / "pf" / "ptxas")
    on_path = make_exe(tmp / "path" / "ptxas")
    asked = []

    def fake_pathfinder(name):
        asked.append(name)
        return found if name == "ptxas" else None

    monkeypatch.setattr(tc, "_PATHFINDER", fake_pathfinder)
    monkeypatch.setenv("PATH", str(tmp / "path"))
    monkeypatch.setenv("PTXDSL_PTXAS", env)
    assert tc.find_ptxas() == env and asked == []
    monkeypatch.delenv("PTXDSL_PTXAS")
    assert tc.find_ptxas() == found
    # Where pathfinder finds nothing, our own rules still do.
    monkeypatch.setattr(tc, "_PATHFINDER", lambda name: None)
    assert tc.find_ptxas() == on_path


def test_find_tool_asks_pathfinder(bare, monkeypatch):
    nvdisasm = make_exe(bare / "pf" / "nvdisasm")
    monkeypatch.setattr(tc, "_PATHFINDER", lambda name: nvdisasm if name == "nvdisasm" else None)
    assert tc.find_tool("nvdisasm") == nvdisasm
    assert tc.find_tool("cuobjdump") is None


def test_real_pathfinder_answers_or_is_absent():
    import cuda.pathfinder as pf
    assert "ptxas" in pf.SUPPORTED_BINARY_UTILITIES
    found = tc._pathfinder_find("ptxas")
    assert found is None or os.access(found, os.X_OK)
    assert tc._pathfinder_find("no-such-tool") is None  # unsupported: None, not a raise


@posix_only
def test_cuobjdump_is_given_the_nvdisasm_found(bare, monkeypatch):
    tmp = bare
    nvdisasm = make_exe(tmp / "tools" / "nvdisasm")
    cuobjdump = make_exe(tmp / "other" / "cuobjdump", 'echo "NVDISASM_PATH=$NVDISASM_PATH"')
    monkeypatch.setenv("PTXDSL_NVDISASM", nvdisasm)
    out = tc.disassemble(b"cubin", tool=cuobjdump)
    assert f"NVDISASM_PATH={os.path.dirname(nvdisasm)}" in out


@posix_only
def test_cuobjdump_without_nvdisasm_says_what_to_install(bare):
    cuobjdump = make_exe(bare / "other" / "cuobjdump",
                         "echo \"cuobjdump fatal : Could not find executable file 'nvdisasm'\"; "
                         "exit 1")
    with pytest.raises(ToolchainError, match="nvidia-cuda-nvdisasm"):
        tc.disassemble(b"cubin", tool=cuobjdump)
