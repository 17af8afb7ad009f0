"""The jobs filter language typed after `/`: a pure parser and matcher.

    state=RUN user=alice queue:long      every term must hold (AND)
    state=RUN,PEND                       any of the comma-separated values (OR)
    user!=bob                            negation
    name~sim                             substring (case-insensitive)
    train                                a bare word: substring of the id or the name
    name="my job"                        quotes keep spaces

`=` and `:` mean the same (both styles are common). Fields: id, user, state, queue, host,
name, array. States compare case-insensitively; other values exactly. Errors name the
offending term and what would be accepted.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

FIELDS = ("id", "user", "state", "queue", "host", "name", "array")
STATES = ("PEND", "PSUSP", "RUN", "USUSP", "SSUSP", "DONE", "EXIT")


class FilterError(ValueError):
    """The filter text does not parse; the message names the term."""


@dataclass(frozen=True, slots=True)
class Term:
    field: str  # one of FIELDS, or "" for a bare word
    values: tuple[str, ...]
    op: str = "="  # "=", "!=" or "~"

    def holds(self, row: dict[str, Any]) -> bool:
        if not self.field:
            word = self.values[0].lower()
            return (
                word in str(row.get("id", "")).lower() or word in str(row.get("name", "")).lower()
            )
        raw = row.get("array_id") if self.field == "array" else row.get(self.field)
        value = "" if raw is None else str(raw)
        if self.op == "~":
            return any(v.lower() in value.lower() for v in self.values)
        if self.field == "state":
            value = value.upper()
        hit = value in self.values
        return not hit if self.op == "!=" else hit


@dataclass(frozen=True, slots=True)
class JobFilter:
    terms: tuple[Term, ...] = ()
    text: str = ""

    def matches(self, row: dict[str, Any]) -> bool:
        return all(term.holds(row) for term in self.terms)

    def __bool__(self) -> bool:
        return bool(self.terms)


def _term(word: str) -> Term:
    for op in ("!=", "~", "=", ":"):
        field, sep, rest = word.partition(op)
        if sep and field and all(c.isalpha() or c == "_" for c in field):
            break
    else:
        return Term("", (word,))
    key = field.lower()
    if key not in FIELDS:
        raise FilterError(f"unknown field {field!r} in {word!r} (use {', '.join(FIELDS)})")
    values = tuple(v for v in rest.split(",") if v)
    if not values:
        raise FilterError(f"{word!r} has no value after {sep!r}")
    if key == "state":
        values = tuple(v.upper() for v in values)
        bad = [v for v in values if v not in STATES]
        if bad and op != "~":
            raise FilterError(f"unknown state {bad[0]!r} (use {', '.join(STATES)})")
    return Term(key, values, "=" if sep == ":" else sep)


def parse_filter(text: str) -> JobFilter:
    """Parse the filter text; an empty text matches every job."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise FilterError(f"cannot read the filter: {exc}") from None
    return JobFilter(tuple(_term(w) for w in words), text.strip())
