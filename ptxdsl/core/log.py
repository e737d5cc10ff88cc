"""The ``ptxdsl`` logger: what was compiled, cache hits and misses, each op's kernel choice.

Everything ptxdsl logs goes to ``logging.getLogger("ptxdsl")`` (children such as
``ptxdsl.cache``, ``ptxdsl.compile``, ``ptxdsl.ops`` say where it came from), at
DEBUG for the routine (a trace, a ptxas run, a cache hit) and INFO for what is worth
knowing once. It is silent unless the application configures logging, or the run
sets ``PTXDSL_LOG``::

    PTXDSL_LOG=debug python train.py      # or info, warning; 1 means debug

which attaches one stderr handler to the ``ptxdsl`` logger when ptxdsl is imported.
Nothing is logged per launch: the launch fast path stays as it is.
"""
from __future__ import annotations

import logging
import os

__all__ = ["logger", "configure_from_env"]

logger = logging.getLogger("ptxdsl")

_LEVELS = {"1": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO,
           "warning": logging.WARNING, "warn": logging.WARNING, "error": logging.ERROR}


class _EnvHandler(logging.StreamHandler):
    """The handler PTXDSL_LOG attaches (a class of its own, so it is attached once)."""


def configure_from_env(value: str | None = None) -> bool:
    """Attach a stderr handler at the level ``PTXDSL_LOG`` names; True if it did."""
    value = (os.environ.get("PTXDSL_LOG", "") if value is None else value).strip().lower()
    if value in ("", "0", "off", "no", "false"):
        return False
    level = _LEVELS.get(value)
    if level is None:
        logger.warning("PTXDSL_LOG=%r is not one of %s; using debug", value,
                       ", ".join(sorted(_LEVELS)))
        level = logging.DEBUG
    logger.setLevel(level)
    if not any(isinstance(h, _EnvHandler) for h in logger.handlers):
        handler = _EnvHandler()
        handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        logger.addHandler(handler)
    return True
