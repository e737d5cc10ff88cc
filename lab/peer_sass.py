"""SASS side by side, without a GPU: FlashAttention-4's sm90 attention kernel (forward or
backward) against ptxdsl's plan kernel for the same head dim and mask.

FA4 compiles on a CPU machine when its interface is told the target
(``FLASH_ATTENTION_ARCH``, ``CUTE_DSL_ARCH``, ``FLASH_ATTENTION_NUM_SMS``) and handed fake
tensors (torch's ``FakeTensorMode``); ``CUTE_DSL_KEEP=ptx,cubin`` leaves its PTX and cubin
in ``CUTE_DSL_DUMP_DIR``. ptxdsl's kernel goes through ptxas. Both cubins go through
``cuobjdump -sass``; the table counts the instruction classes that tell two attention
kernels apart (tensor-core ops, exponentials, barriers and mbarrier waits, shared-memory
traffic, TMA, uniform-register moves) beside each kernel's registers a thread. Static
counts, not a profile: a class's count says how often it is written, not how often it runs.

Setup (a venv of its own: the CUTLASS DSL wheels are large; a CPU torch is enough)::

    python3 -m venv /tmp/fa4v && . /tmp/fa4v/bin/activate
    pip install torch triton nvidia-cutlass-dsl==4.8.1 flash-attn-4==4.0.0b36 -e '.[test]'
    PYTHONPATH=. python lab/peer_sass.py --pass bwd --head-dim 64 --causal \\
        [--keep /tmp/peer_sass] [--json out.json]

(``.[test]`` brings ptxas, cuobjdump and nvdisasm.) ``--keep`` keeps both PTX files and
SASS listings there (FA4's PTX then also parses with
``ptxdsl.frontend``, which is how to read its loop structure next to ours).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

_ADDR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*)$")
CLASSES = ("HGMMA", "MUFU.EX2", "FFMA", "FMUL", "FADD", "FMNMX", "BAR.SYNC", "BAR.ARV",
           "SYNCS", "STS", "LDS", "LDSM", "STSM", "UTMALDG", "UTMASTG", "UTMAREDG",
           "UBLKRED", "REDG", "R2UR", "SHFL", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR", "BRA")


def fa4_cubin(pass_: str, d: int, causal: bool, dump: str) -> str:
    """Compile FA4's sm90 kernel for ``pass_`` ('fwd' or 'bwd') at the FA3 grid's 4k shape
    (B 4, H·D 2048) into ``dump``; the path of its main kernel's cubin."""
    os.makedirs(dump, exist_ok=True)                   # (the DSL writes nothing otherwise)
    os.environ.update(FLASH_ATTENTION_ARCH="sm_90", CUTE_DSL_ARCH="sm_90a",
                      FLASH_ATTENTION_NUM_SMS="132", CUTE_DSL_KEEP="ptx,cubin",
                      CUTE_DSL_DUMP_DIR=dump)
    import torch                                       # (after the environment: it is read
    from torch._subclasses.fake_tensor import FakeTensorMode   # when the DSL loads)
    from flash_attn.cute.interface import _flash_attn_bwd, _flash_attn_fwd
    with FakeTensorMode(allow_non_fake_inputs=True):
        b, s, h = 4, 4096, 2048 // d
        mk = lambda *shape, dt=torch.bfloat16: torch.empty(*shape, dtype=dt, device="cuda")
        q, k, v = mk(b, s, h, d), mk(b, s, h, d), mk(b, s, h, d)
        if pass_ == "fwd":
            _flash_attn_fwd(q, k, v, causal=causal)
        else:
            _flash_attn_bwd(q, k, v, mk(b, s, h, d), mk(b, s, h, d),
                            mk(b, h, s, dt=torch.float32), causal=causal)
    found = glob.glob(os.path.join(dump, f"*flash_{pass_}_sm90*.cubin"))
    if len(found) != 1:
        raise RuntimeError(f"expected one FA4 {pass_} sm90 cubin in {dump}, found {found}")
    return found[0]


def ours_cubin(pass_: str, d: int, causal: bool) -> tuple[bytes, str, str]:
    """ptxdsl's plan kernel for the same call, assembled for sm_90a: (cubin, PTX, name)."""
    from ptxdsl.core.types import bf16
    from ptxdsl.ops.attention import bwd_api
    from ptxdsl.ops.attention.config import Mask
    from ptxdsl.ops.attention.fwd import build_forward
    from ptxdsl.ops.attention.plan import choose
    from ptxdsl.toolchain import assemble
    mask = Mask(-1, 0) if causal else Mask()
    if pass_ == "fwd":
        kern = build_forward(choose(d, "bf16", mask, 1, 4096), bf16, d, mask,
                             scale=d ** -0.5)
    else:
        kern = bwd_api.backward_kernels(d, causal=causal)[1]
    text = kern.ptx()
    return assemble(text, "sm_90a").cubin, text, kern.name


def sass_counts(sass: str, res_usage: str = "") -> dict:
    """Registers a thread (``cuobjdump -res-usage``'s REG, 0 without it), the instructions
    and the static count of each class of :data:`CLASSES` in a ``cuobjdump -sass`` listing
    (a class counts its opcode with any suffix: ``HGMMA`` holds ``HGMMA.64x128x16.F32``)."""
    opcodes = []
    for line in sass.splitlines():       # "/*0130*/  @P0 HGMMA.64x128x16... ;  /* 0x.. */"
        m = _ADDR.match(line)
        words = m.group(1).split() if m else []
        if words and words[0].startswith("@"):
            words = words[1:]
        if words and words[0][:1].isalpha():
            opcodes.append(words[0])
    regs = max((int(tok.split(":")[1]) for tok in res_usage.split() if tok.startswith("REG:")),
               default=0)
    counts = {c: sum(op == c or op.startswith(c + ".") for op in opcodes) for c in CLASSES}
    return {"registers": regs, "instructions": len(opcodes), **counts}


def _listings(cubin: bytes) -> tuple[str, str]:
    """(SASS, resource usage) of a cubin, through the toolchain's cuobjdump."""
    from ptxdsl.toolchain import disassemble, find_tool
    sass, cuobjdump = disassemble(cubin), find_tool("cuobjdump")
    if cuobjdump is None:                 # (nvdisasm alone: no register counts)
        return sass, ""
    with tempfile.TemporaryDirectory(prefix="peer_sass_") as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        res = subprocess.run([cuobjdump, "-res-usage", path],
                             capture_output=True, text=True).stdout
    return sass, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), default="bwd")
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--keep", default=None, help="folder for the PTX and SASS listings")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="peer_sass_")
    os.makedirs(work, exist_ok=True)
    with open(fa4_cubin(a.pass_, a.head_dim, a.causal, os.path.join(work, "fa4")), "rb") as f:
        theirs = _listings(f.read())
    cubin, text, name = ours_cubin(a.pass_, a.head_dim, a.causal)
    ours = _listings(cubin)
    if a.keep:
        for tag, content in (("ptxdsl.ptx", text), ("fa4.sass", theirs[0]),
                             ("ptxdsl.sass", ours[0])):
            with open(os.path.join(work, tag), "w") as f:
                f.write(content)
    row = {"pass": a.pass_, "head_dim": a.head_dim, "causal": a.causal, "ptxdsl_kernel": name,
           "fa4": sass_counts(*theirs), "ptxdsl": sass_counts(*ours)}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(row, f, indent=1)
    print(f"{a.pass_} head dim {a.head_dim} {'causal' if a.causal else 'full'}, sm_90a, "
          f"static SASS counts ({name})")
    print(f"{'class':18s} {'FA4':>6s} {'ptxdsl':>7s}")
    for c in ("registers", "instructions", *CLASSES):
        print(f"{c:18s} {row['fa4'][c]:6d} {row['ptxdsl'][c]:7d}")


if __name__ == "__main__":
    main()
