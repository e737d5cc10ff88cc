"""What ``ptxdsl bench`` checks before it runs a benchmark script."""
from __future__ import annotations

import importlib.util
import re

__all__ = ["cuda_torch_missing"]


def cuda_torch_missing(name: str, path: str) -> str | None:
    """For a benchmark that imports torch, run where torch or its CUDA is missing: the
    one line to print instead of the benchmark's traceback (None: nothing missing)."""
    with open(path, encoding="utf-8") as f:
        if not re.search(r"^\s*(import|from) torch\b", f.read(), re.M):
            return None
    if importlib.util.find_spec("torch") is None:
        return f"benchmark {name!r} times CUDA tensors and needs torch: pip install torch"
    import torch
    if not torch.cuda.is_available():
        return (f"benchmark {name!r} times CUDA tensors, but this torch ({torch.__version__}) "
                f"sees no CUDA GPU")
    return None
