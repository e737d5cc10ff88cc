"""pyptx's Blackwell examples on ptxdsl: the loader that lets one example import another
(``from pyptx.examples.blackwell.X import ...`` reaches ``bench.pyptx_examples.load``), and
each example's kernel builders with the arguments the tests build them at."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

from paths import ROOT
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import pyptx_examples  # noqa: E402

PACKAGE = "pyptx_examples_linked"


def linked(text: str) -> str:
    """The example with its imports of sibling examples pointing at :data:`PACKAGE`."""
    return text.replace("from ptxdsl.examples.", f"from {PACKAGE}.")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            return importlib.machinery.ModuleSpec(name, self, is_package=name.count(".") < 2)
        return None

    def create_module(self, spec):
        parts = spec.name.split(".")
        if len(parts) < 3:
            mod = types.ModuleType(spec.name)
            mod.__path__ = []
            return mod
        return pyptx_examples.load(parts[-1], "/".join(parts[1:-1]), patch=linked)

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.append(_Finder())


def load(name: str):
    """pyptx's ``examples/blackwell/<name>.py`` on ptxdsl."""
    return pyptx_examples.load(name, "blackwell", patch=linked)


# (file, builder) -> (args, kwargs): every kernel builder of pyptx's Blackwell examples
BUILDERS = {
    ("gemm_experimental_blackwell", "build_gemm_no_tma_debug"): ((128, 256, 64), {}),
    ("gemm_experimental_blackwell", "build_gemm_pallas_experimental"): ((256, 512, 128), {}),
    ("gemm_highperf_blackwell", "build_gemm"): ((256, 512, 128), {}),
    ("gemm_highperf_blackwell", "build_gemm_persistent"): ((256, 512, 128), {}),
    ("gemm_highperf_blackwell", "build_gemm_2sm"): ((256, 512, 128), {}),
    ("grouped_gemm", "build_grouped_gemm"): ((2, 128, 256, 128), {}),
    ("layer_norm", "build_layer_norm"): ((4, 1024), {}),
    ("rms_norm", "build_rms_norm"): ((4, 1024), {}),
    ("swiglu", "build_fused_silu_mul"): ((4, 1024), {}),
    ("tcgen05_accum_probe", "build"): ((), {}),
    ("tcgen05_ld_phase_probe", "build"): ((), {"use_shift": True}),
    ("tcgen05_ld_register_probe", "build"): ((), {}),
    ("tcgen05_mma_probe", "build"): ((), {}),
    ("tcgen05_roundtrip", "build"): ((), {}),
    ("tcgen05_smoke", "build_alloc_only"): ((), {}),
    ("tcgen05_smoke", "build_mma_only"): ((), {}),
    ("tcgen05_smoke", "build_ld_only"): ((), {}),
}


# files with no kernel of their own (they run the builders above); loading them checks
# that their imports of the other examples resolve
RUNNERS = ("tcgen05_suite", "tcgen05_epilogue_partition_probe")


def _has(dotted: str) -> bool:
    from ptxdsl.dsl import cluster, ptx, smem, sync, tma  # noqa: F401
    obj = {"ptx": ptx, "smem": smem, "cluster": cluster, "sync": sync, "tma": tma}
    head, *rest = dotted.split(".")
    cur = obj[head]
    for part in rest:
        if not hasattr(cur, part):
            return False
        cur = getattr(cur, part)
    return True


def _has_param(dotted: str, name: str) -> bool:
    import inspect
    from ptxdsl.dsl import ptx
    fn = ptx
    for part in dotted.split(".")[1:]:
        fn = getattr(fn, part)
    return name in inspect.signature(fn).parameters


def _table_has(chain: str) -> bool:
    from ptxdsl.core.errors import IsaError
    from ptxdsl.isa import resolve
    try:
        resolve(chain.split("."))
        return True
    except IsaError:
        return False


# What pyptx's Blackwell examples use beyond ptx.tcgen05 that ptxdsl may not have yet:
# (what, how to tell it is there, the builders that need it)
_TCGEN05_TMA = ("cp.async.bulk.tensor.2d.shared::cta.global.tile."
                "mbarrier::complete_tx::bytes.cta_group::2")
NEEDS = (
    ("smem.load", lambda: _has("smem.load"), None),
    ("ptx.scope", lambda: _has("ptx.scope"), None),
    ("ptx.bar.sync(pred=)", lambda: _has_param("ptx.bar.sync", "pred"),
     {"build_gemm_pallas_experimental", "build_gemm_2sm"}),
    ("ptx.cluster.map_shared_u32", lambda: _has("cluster.map_shared_u32"),
     {"build_gemm_2sm"}),
    (f"the table's {_TCGEN05_TMA}", lambda: _table_has(_TCGEN05_TMA), {"build_gemm_2sm"}),
    ("ptx.cp.async_.bulk.tensor_2d.shared_cta_global_tile (collective TMA)",
     lambda: _has("ptx.cp.async_.bulk.tensor_2d.shared_cta_global_tile"), {"build_gemm_2sm"}),
)


def missing(builder: str | None) -> list[str]:
    """What ``builder`` (None: loading any example) needs that ptxdsl lacks."""
    return [what for what, present, who in NEEDS
            if (who is None or builder in who) and not present()]


def build(name: str, builder: str):
    args, kwargs = BUILDERS[(name, builder)]
    return getattr(load(name), builder)(*args, **kwargs)
