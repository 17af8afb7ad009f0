"""Job array index specifications: `1-1000:2%10`, `1,3,5`, `0-15%4`.

An `IndexSet` holds a few Python `range`s, never the indices themselves, so an array of a
million tasks costs a handful of integers until its tasks start.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from xce.core.errors import InvalidRequest

MAX_INDEX = 2**31 - 1
_ITEM = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$", re.ASCII)
_LONG_NUMBER = re.compile(r"\d{11,}", re.ASCII)  # longer than MAX_INDEX: refused unread


@dataclass(frozen=True, slots=True)
class IndexSet:
    """An ordered set of non-negative indices made of disjoint, increasing ranges."""

    ranges: tuple[range, ...] = ()

    def __len__(self) -> int:
        return sum(len(r) for r in self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __contains__(self, index: object) -> bool:
        return any(index in r for r in self.ranges)

    def __iter__(self) -> Iterator[int]:
        for r in self.ranges:
            yield from r

    def first(self, count: int = 1) -> list[int]:
        """The lowest `count` indices, without walking the rest."""
        out: list[int] = []
        for r in self.ranges:
            for i in r:
                if len(out) >= count:
                    return out
                out.append(i)
        return out

    def without(self, index: int) -> IndexSet:
        """A copy with `index` removed (splitting its range); unchanged if absent."""
        out: list[range] = []
        for r in self.ranges:
            if index in r:
                pos = (index - r.start) // r.step
                head = r[:pos]
                tail = r[pos + 1 :]
                out.extend(x for x in (head, tail) if len(x))
            else:
                out.append(r)
        return IndexSet(tuple(out))

    def describe(self) -> str:
        """The compact text form, e.g. `1-9:2,20`."""
        parts = []
        for r in self.ranges:
            last = r[-1]
            if len(r) == 1:
                parts.append(str(r.start))
            elif r.step == 1:
                parts.append(f"{r.start}-{last}")
            else:
                parts.append(f"{r.start}-{last}:{r.step}")
        return ",".join(parts)


@dataclass(frozen=True, slots=True)
class ArraySpec:
    indices: IndexSet
    max_concurrent: int | None


def parse_array_spec(text: str, max_size: int = 1_000_000) -> ArraySpec:
    """Parse `RANGES[%LIMIT]`; every mistake is an `InvalidRequest` that names it."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("array spec is empty: expected e.g. 1-100 or 1-1000:2%10")
    if _LONG_NUMBER.search(text):
        # Never int() an arbitrarily long digit string (Python refuses past 4300 digits),
        # and nothing this long fits a task index, a step or a limit anyway.
        raise InvalidRequest(f"array spec {text[:40]!r}: numbers may be at most {MAX_INDEX}")
    body, sep, limit_text = text.strip().partition("%")
    max_concurrent: int | None = None
    if sep:
        if (
            not (limit_text.isascii() and limit_text.isdigit())
            or not 1 <= int(limit_text) <= MAX_INDEX
        ):
            raise InvalidRequest(
                f"array spec {text!r}: the limit after % must be a positive integer (at "
                f"most {MAX_INDEX})"
            )
        max_concurrent = int(limit_text)
    ranges: list[range] = []
    for item in body.split(","):
        m = _ITEM.match(item.strip())
        if not m:
            raise InvalidRequest(
                f"array spec {text!r}: cannot read {item!r}; expected N, N-M or N-M:STEP"
            )
        start = int(m.group(1))
        stop = int(m.group(2)) if m.group(2) is not None else start
        step = int(m.group(3)) if m.group(3) is not None else 1
        if stop < start:
            raise InvalidRequest(f"array spec {text!r}: range {item!r} ends before it starts")
        if not 1 <= step <= MAX_INDEX:
            raise InvalidRequest(
                f"array spec {text!r}: step in {item!r} must be at least 1 "
                f"(and at most {MAX_INDEX})"
            )
        if stop > MAX_INDEX:
            raise InvalidRequest(f"array spec {text!r}: index {stop} is above {MAX_INDEX}")
        ranges.append(range(start, stop + 1, step))
    ranges.sort(key=lambda r: r.start)
    for prev, nxt in itertools.pairwise(ranges):
        if nxt.start <= prev[-1]:
            raise InvalidRequest(f"array spec {text!r}: ranges overlap near index {nxt.start}")
    indices = IndexSet(tuple(ranges))
    if len(indices) > max_size:
        raise InvalidRequest(
            f"array spec {text!r}: {len(indices)} tasks is more than the limit of {max_size}"
        )
    return ArraySpec(indices, max_concurrent)
