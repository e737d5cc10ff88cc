"""``ptxdsl doctor``: what this machine offers ptxdsl, and what is missing.

:func:`doctor` returns a dict (never raises): ptxdsl and Python versions,
cuda-python, the NVIDIA driver and the devices it sees (name, arch, memory),
ptxas (path, release, newest PTX ISA), the cubin cache folder, the launch
settings, and a list of ``problems`` each saying what to do. :func:`format_report`
prints it; ``python -m ptxdsl.cli.doctor`` does both.
"""
from __future__ import annotations

import os
import sys

from .. import toolchain
from ..core.version import __version__

__all__ = ["doctor", "format_report", "main"]


def _cuda_python_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    for dist in ("cuda-bindings", "cuda-python"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return None


def doctor() -> dict:
    """The report as a dict; ``report["problems"]`` lists what stops or slows ptxdsl."""
    from ..runtime import cache as rcache
    from ..runtime import driver as rdriver

    problems: list[str] = []
    report: dict = {"ptxdsl": __version__, "python": sys.version.split()[0],
                    "cuda-python": _cuda_python_version()}
    if report["cuda-python"] is None:
        problems.append("cuda-python is not installed: pip install 'cuda-python>=12.8'")
    # Driver and devices.
    try:
        drv = rdriver.get()
        v = drv.version()
        report["driver"] = f"CUDA {v // 1000}.{v % 1000 // 10} (driver API {v})"
        n = drv.device_count()
        report["devices"] = n
        for i in range(n):
            info = drv.device(i)
            report[f"device {i}"] = (f"{info.name}, {info.arch} "
                                     f"(compute {info.cc[0]}.{info.cc[1]}), "
                                     f"{info.total_mem / 2**30:.1f} GiB, {info.sm_count} SMs, "
                                     f"{info.max_smem_per_block_optin // 1024} KiB shared/block")
        if n == 0:
            problems.append("the driver sees no GPU (check CUDA_VISIBLE_DEVICES / nvidia-smi)")
        report["gpu"] = "yes" if n else "no"
    except Exception as exc:  # noqa: BLE001 - a report, not a crash
        report["driver"] = None
        report["gpu"] = f"no ({rdriver.driver_unavailable_reason(exc.__cause__ or exc)})"
        report["devices"] = 0
        problems.append("no GPU is usable here; kernels run on the CPU interpreter "
                        "(PTXDSL_INTERPRET=1)")
    # Toolchain.
    tc = toolchain.toolchain_report()
    report["ptxas"] = tc.get("ptxas")
    report["ptxas_version"] = tc.get("ptxas_version")
    report["max_ptx_isa"] = tc.get("max_ptx_isa")
    report["cuobjdump"] = tc.get("cuobjdump")
    report["nvdisasm"] = tc.get("nvdisasm")
    if report["cuobjdump"] is None and report["nvdisasm"] is None:
        problems.append(f"no SASS disassembler (ptxdsl sass, kernel.sass()): "
                        f"{toolchain.SASS_INSTALL}")
    elif report["nvdisasm"] is None:
        problems.append(f"cuobjdump is there but nvdisasm is not, and cuobjdump -sass runs "
                        f"nvdisasm: {toolchain.SASS_INSTALL}")
    problems += tc.get("problems") or []
    if report["ptxas"] is None:
        problems.append("no ptxas: kernels are compiled by the driver JIT and cubins are not "
                        "cached by ptxdsl (pip install nvidia-cuda-nvcc~=13.0.0)")
    # Cache and settings.
    path = rcache.cache_dir()
    report["cache dir"] = path
    report["cache"] = "on" if rcache.disk_cache_enabled() else "off (PTXDSL_CACHE=0)"
    if os.path.isdir(path):
        if not os.access(path, os.W_OK):
            problems.append(f"the cache folder {path} is not writable; set PTXDSL_CACHE_DIR")
        sub = os.path.join(path, "cubin")
        report["cached cubins"] = len([n for n in os.listdir(sub) if n.endswith(".cubin")]) \
            if os.path.isdir(sub) else 0
    for var in ("PTXDSL_INTERPRET", "PTXDSL_COMPILER", "PTXDSL_LAUNCH", "PTXDSL_SYNC",
                "PTXDSL_PTXAS", "PTXDSL_CACHE_DIR", "PTXDSL_CACHE", "PTXDSL_TORCH_PRIVATE",
                "PTXDSL_DUMP_DIR", "PTXDSL_LOG",
                "CUDA_VISIBLE_DEVICES"):
        if os.environ.get(var):
            report[var] = os.environ[var]
    report["problems"] = problems
    return report


def format_report(report: dict) -> str:
    """The report as aligned ``key: value`` lines, then the problems."""
    rows = [(k, "-" if v is None else str(v)) for k, v in report.items() if k != "problems"]
    width = max((len(k) for k, _ in rows), default=0)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    problems = report.get("problems") or []
    if problems:
        lines.append("")
        lines += [f"problem: {p}" for p in problems]
    else:
        lines += ["", "no problems found"]
    return "\n".join(lines)


def main() -> int:
    report = doctor()
    print(format_report(report))
    return 0 if report.get("gpu") == "yes" and report.get("ptxas") else 1


if __name__ == "__main__":
    sys.exit(main())
