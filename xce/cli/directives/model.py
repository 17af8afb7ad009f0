"""What a directive parse answers (`Directives`), how it fails (`DirectiveError`), and the
line a message is about (`Where`).

Every warning and error names the script line it comes from, including those that only
show once the whole script is read (a `--nodes` on one line and `--ntasks` on another), so
each message carries the `Where` of the line that asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class DirectiveError(ValueError):
    """A directive XCE refuses: the message names the line, the line's text and why."""

    def __init__(self, line: int, text: str, problem: str) -> None:
        super().__init__(f"line {line}: {text.strip()!r}: {problem}")
        self.line = line


@dataclass
class Directives:
    """What the directives asked for (submit parameter -> value) and what was ignored."""

    options: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Where:
    """One directive line: its number and its text (without a trailing comment)."""

    line: int
    text: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.text.strip()!r}"


class Unsupported(Exception):
    """XCE cannot do what the directive asks: an error naming the line (`at`, else the
    line being read), or a warning with `--lenient`."""

    def __init__(self, problem: str, at: Where | None = None) -> None:
        super().__init__(problem)
        self.at = at
