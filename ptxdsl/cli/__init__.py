"""The ``ptxdsl`` command (also ``python -m ptxdsl``): see :mod:`.command`."""
from .command import main

__all__ = ["main"]
