"""Install the wheels in ``.whl/`` into a folder, for a GPU machine without network.

    python3 bench/install_wheels.py [--wheels .whl] [--target /tmp/site]

``.whl/`` (ignored by git) holds the benchmark's optional peers and what they need
beyond the GPU image's torch, triton, numpy and cuda-bindings: liger-kernel, pyptx,
packaging (Liger imports it) and ninja (pyptx builds its torch C++ extension with it).
Fill it on a machine with network, from the repo root::

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --implementation cp --platform manylinux_2_28_x86_64 \\
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\
        --platform any -d .whl pyptx liger-kernel packaging ninja

A wheel whose distribution this Python already has (the image's own, or one
installed here before) is skipped, so the machine's packages win and a second run
does nothing. The rest go in with ``pip install --no-index --no-deps --no-compile
--target`` (or, without pip, by unpacking the wheels). Then put the target after
the repo on PYTHONPATH and its ``bin`` on PATH::

    export PYTHONPATH=.:/tmp/site PATH=$PATH:/tmp/site/bin
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import stat
import subprocess
import sys
import zipfile


def dist_name(wheel: str) -> str:
    """The distribution name in a wheel's file name (``liger_kernel-0.8.5-py3-none-any.whl``
    -> ``liger_kernel``)."""
    return os.path.basename(wheel).split("-", 1)[0]


def installed(name: str, extra_path: str | None = None) -> str | None:
    """The version of distribution ``name`` this Python sees (with ``extra_path`` on its
    path too), or None."""
    from importlib import metadata
    paths = sys.path + ([extra_path] if extra_path else [])
    for dist in metadata.distributions(path=paths):
        meta_name = (dist.metadata["Name"] or "").replace("-", "_").replace(".", "_").lower()
        if meta_name == name.replace("-", "_").replace(".", "_").lower():
            return dist.version
    return None


def unpack(wheel: str, target: str) -> None:
    """Install one wheel without pip: unpack it, move ``*.data/{purelib,platlib}`` into
    ``target`` and ``*.data/scripts`` into ``target/bin`` (executable)."""
    with zipfile.ZipFile(wheel) as z:
        z.extractall(target)
    for data in glob.glob(os.path.join(target, "*.data")):
        for sub in os.listdir(data):
            src = os.path.join(data, sub)
            dest = os.path.join(target, "bin") if sub == "scripts" else target
            os.makedirs(dest, exist_ok=True)
            for entry in os.listdir(src):
                shutil.move(os.path.join(src, entry), os.path.join(dest, entry))
                if sub == "scripts":
                    p = os.path.join(dest, entry)
                    os.chmod(p, os.stat(p).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        shutil.rmtree(data)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheels", default=".whl", help="folder of .whl files (default .whl)")
    ap.add_argument("--target", default="/tmp/site", help="install folder (default /tmp/site)")
    ap.add_argument("--dry-run", action="store_true", help="say what would be installed")
    a = ap.parse_args(argv)
    wheels = sorted(glob.glob(os.path.join(a.wheels, "*.whl")))
    if not wheels:
        print(f"install_wheels: no wheels in {a.wheels}/, nothing to do")
        return 0
    todo = []
    for w in wheels:
        have = installed(dist_name(w), a.target)
        if have:
            print(f"install_wheels: {dist_name(w)} {have} already installed, "
                  f"skipping {os.path.basename(w)}")
        else:
            todo.append(w)
    if not todo or a.dry_run:
        for w in todo:
            print(f"install_wheels: would install {os.path.basename(w)}")
        return 0
    os.makedirs(a.target, exist_ok=True)
    has_pip = subprocess.run([sys.executable, "-m", "pip", "--version"],
                             capture_output=True).returncode == 0
    if has_pip:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
               "--no-compile", "--no-cache-dir", "--disable-pip-version-check",
               "--target", a.target, *todo]
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            print(f"install_wheels: pip failed ({rc})", file=sys.stderr)
            return rc
    else:
        for w in todo:
            unpack(w, a.target)
    for w in todo:
        print(f"install_wheels: installed {os.path.basename(w)} into {a.target}"
              + ("" if has_pip else " (unpacked, no pip)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
