"""The tokenizer for LSF-style resource requirement strings (`bsub -R`).

Tokens carry the 1-based column where they start, so every error can point at the spot. The
lexer is lazy: the parser pulls tokens one at a time, so an error early in the string is
reported before a bad character later on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from xce.core.errors import InvalidRequest


class ExprError(InvalidRequest):
    """A resource requirement string that does not parse; the message names the column."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(f"{message} at column {column}")
        self.column = column


class Kind(Enum):
    NAME = "name"
    NUMBER = "number"
    STRING = "string"
    OP = "op"
    END = "end"


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str  # the source text (without the quotes for a STRING)
    column: int  # 1-based
    value: int | float | None = None  # for NUMBER

    def describe(self) -> str:
        if self.kind is Kind.END:
            return "end of expression"
        if self.kind is Kind.STRING:
            return f"string {self.text!r}"
        return repr(self.text)


# Longest first, so `<=` wins over `<`.
OPERATORS = (
    "||",
    "&&",
    "==",
    "!=",
    "<=",
    ">=",
    "<",
    ">",
    "=",
    "!",
    "(",
    ")",
    "[",
    "]",
    ":",
    ",",
    "-",
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_WORDCHAR = re.compile(r"[A-Za-z0-9_.]")
_SPACE = " \t\r\n"


class Lexer:
    """Turns `text` into tokens on demand; `peek(n)` looks ahead without consuming."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self._ahead: list[Token] = []

    def peek(self, n: int = 0) -> Token:
        while len(self._ahead) <= n:
            self._ahead.append(self._scan())
        return self._ahead[n]

    def next(self) -> Token:
        tok = self.peek()
        if tok.kind is not Kind.END:
            self._ahead.pop(0)
        return tok

    def _scan(self) -> Token:
        text, n = self.text, len(self.text)
        pos = self.pos
        while pos < n and text[pos] in _SPACE:
            pos += 1
        self.pos = pos
        if pos >= n:
            return Token(Kind.END, "", n + 1)
        column = pos + 1
        ch = text[pos]
        if ch in "\"'":
            end = text.find(ch, pos + 1)
            if end < 0:
                raise ExprError("unterminated string", column)
            self.pos = end + 1
            return Token(Kind.STRING, text[pos + 1 : end], column)
        m = _NUMBER.match(text, pos)
        if m:
            end = m.end()
            if end < n and _WORDCHAR.match(text, end):
                word = re.compile(r"[A-Za-z0-9_.]*").match(text, pos)
                assert word is not None
                raise ExprError(f"invalid number {word.group()!r}", column)
            self.pos = end
            s = m.group()
            if len(s) > 100:
                raise ExprError("number too long", column)
            value: int | float = int(s) if s.isdigit() else float(s)
            if value == float("inf"):
                raise ExprError(f"number out of range {s!r}", column)
            return Token(Kind.NUMBER, s, column, value)
        m = _NAME.match(text, pos)
        if m:
            self.pos = m.end()
            return Token(Kind.NAME, m.group(), column)
        for op in OPERATORS:
            if text.startswith(op, pos):
                self.pos = pos + len(op)
                return Token(Kind.OP, op, column)
        raise ExprError(f"unexpected character {ch!r}", column)


def tokenize(text: str) -> list[Token]:
    """Every token of `text`, ending with the END token (for tests and tools)."""
    lexer = Lexer(text)
    out = [lexer.next()]
    while out[-1].kind is not Kind.END:
        out.append(lexer.next())
    return out
