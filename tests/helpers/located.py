"""Errors that must name a marked line of the test file itself.

``line_of, raises_at = located.for_file(__file__)``: ``line_of("m")`` is the line
ending in ``# m``; ``with raises_at("m", *regexes):`` expects an InterpreterError
whose message names ``<file>:<that line>:`` and matches every regex.
``line_of = located.marked_lines(__file__, "# <- ")`` is the same lookup for files
that mark lines ``# <- m``."""
from __future__ import annotations

import os
import re

import pytest

from ptxdsl.core.errors import InterpreterError


def marked_lines(path: str, prefix: str = "# "):
    """``line_of(marker)``: the number of the line of ``path`` that ends in ``prefix + marker``."""
    def line_of(marker: str) -> int:
        with open(path) as f:
            for i, text in enumerate(f, 1):
                if text.rstrip().endswith(f"{prefix}{marker}"):
                    return i
        raise AssertionError(f"no line of {os.path.basename(path)} marked {marker!r}")
    return line_of


def for_file(path: str):
    here = os.path.basename(path)
    line_of = marked_lines(path)

    class _Check:
        def __init__(self, marker, words):
            self.marker, self.words = marker, words

        def __enter__(self):
            self.ctx = pytest.raises(InterpreterError)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.ctx.__exit__(*exc)
            msg = str(self.info.value)
            assert f"{here}:{line_of(self.marker)}:" in msg, msg
            for w in self.words:
                assert re.search(w, msg), (w, msg)
            return handled

    def raises_at(marker: str, *words: str):
        """An InterpreterError naming the marked line and every word (regexes)."""
        return _Check(marker, words)

    return line_of, raises_at
