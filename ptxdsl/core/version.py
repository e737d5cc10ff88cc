"""The package's version (``ptxdsl.__version__``): in the header of every generated PTX
file and in ``ptxdsl --version``; kept here, below every stage, so that each can read it."""

__version__ = "0.1.0"
