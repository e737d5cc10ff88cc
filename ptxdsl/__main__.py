"""``python -m ptxdsl``: the same as the ``ptxdsl`` command."""
from .cli.command import main

if __name__ == "__main__":
    raise SystemExit(main())
