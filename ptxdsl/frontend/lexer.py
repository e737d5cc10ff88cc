"""PTX text -> tokens, each with its line number; comments dropped.

Words keep PTX's dotted and ``::`` spellings whole (``ld.global.L1::evict_last.v4.f32``,
``%tid.x``, ``.shared::cluster``), so the parser reads an opcode or a directive as one
token. Comments (``//`` and ``/* */``, which is also how Triton marks inline-asm blocks)
carry no meaning and are removed here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.errors import SourceLoc, TraceError


class PtxSyntaxError(TraceError):
    """PTX text that does not parse, or an instruction the table refuses (names file:line)."""


@dataclass(frozen=True)
class Token:
    kind: str   # "word" | "num" | "str" | one punctuation character
    text: str
    line: int


_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\f\v]+|\n)
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<str>"[^"\n]*")
  | (?P<num>0[fF][0-9a-fA-F]{8}(?![\w.])|0[dD][0-9a-fA-F]{16}(?![\w.])
            |0[xX][0-9a-fA-F]+U?|0[bB][01]+U?
            |\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+U?)
  | (?P<word>[%.]?[A-Za-z_$][\w$]*(?:(?:\.|::)[\w$]+)*)
  | (?P<punct>[{}()\[\],;:<>+\-!@|=*/%&^~])
""", re.X | re.S)


def tokenize(text: str, filename: str = "<ptx>") -> list[Token]:
    """Every token of ``text``; an unexpected character is a :class:`PtxSyntaxError`."""
    out: list[Token] = []
    line, pos, n = 1, 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PtxSyntaxError(f"unexpected character {text[pos]!r} in PTX",
                                 SourceLoc(filename, line))
        kind = m.lastgroup
        tok = m.group()
        if kind == "punct":
            out.append(Token(tok, tok, line))
        elif kind in ("word", "num", "str"):
            out.append(Token(kind, tok, line))
        line += tok.count("\n")
        pos = m.end()
    return out


def parse_int(text: str) -> int:
    """A PTX integer literal: decimal, ``0x`` hex, ``0b`` binary, a leading 0 octal;
    an optional ``U`` suffix."""
    t = text.rstrip("U")
    if t[:2] in ("0x", "0X"):
        return int(t, 16)
    if t[:2] in ("0b", "0B"):
        return int(t, 2)
    if len(t) > 1 and t[0] == "0":
        return int(t, 8)
    return int(t)
