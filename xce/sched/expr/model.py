"""The parsed, immutable form of an LSF-style resource requirement (`bsub -R`).

`parse_requirement(text)` returns a `ResourceRequirement`; the same string always returns the
same object (an LRU cache), so the scheduler can call it for every job on every pass.

The select expression is a tree of `Node`s:

* `Or(items)`, `And(items)` — two or more operands, flattened (`a || b || c` is one `Or`);
* `Not(item)`;
* `Compare(op, left, right)` — `op` is one of `== != < <= > >=` (LSF's `=` is stored as `==`);
  the operands are `Name` (a bare word: an attribute, or a word such as `LINUX`), `Number`
  or `String` (quoted);
* `Defined(name)` — `defined(name)`;
* `Flag(name)` — a bare name standing alone, a boolean resource (`select[gpu]`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True, slots=True)
class Name:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Number:
    value: int | float

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, slots=True)
class String:
    value: str

    def __str__(self) -> str:
        quote = "'" if '"' in self.value else '"'
        return f"{quote}{self.value}{quote}"


Operand = Name | Number | String


@dataclass(frozen=True, slots=True)
class Compare:
    op: str
    left: Operand
    right: Operand

    def __str__(self) -> str:
        return f"{self.left}{self.op}{self.right}"


@dataclass(frozen=True, slots=True)
class Defined:
    name: str

    def __str__(self) -> str:
        return f"defined({self.name})"


@dataclass(frozen=True, slots=True)
class Flag:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Not:
    item: Node

    def __str__(self) -> str:
        return f"!{_wrap(self.item, Not)}"


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Node, ...]

    def __str__(self) -> str:
        return " && ".join(_wrap(i, And) for i in self.items)


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Node, ...]

    def __str__(self) -> str:
        return " || ".join(_wrap(i, Or) for i in self.items)


Node = Or | And | Not | Compare | Defined | Flag


def _wrap(node: Node, parent: type) -> str:
    """Parenthesise `node` where its operator binds looser than (or the same as) `parent`."""
    loose = isinstance(node, Or) or (isinstance(node, And) and parent is not Or)
    return f"({node})" if loose else str(node)


@dataclass(frozen=True, slots=True)
class OrderKey:
    """One `order[]` key. Hosts sort ascending by `name` unless `descending` (`-name`)."""

    name: str
    descending: bool = False

    def __str__(self) -> str:
        return f"-{self.name}" if self.descending else self.name


@dataclass(frozen=True, slots=True)
class Rusage:
    """One reserved resource: `name=value`, held for `duration` (as written; LSF: minutes),
    decaying linearly when `decay` is 1."""

    name: str
    value: int | float
    duration: int | float | None = None
    decay: int | float | None = None


@dataclass(frozen=True, slots=True)
class Span:
    """`span[hosts=1]` (all on one host), `span[ptile=N]` (N slots per host) or
    `span[block=N]` (slots in blocks of N); exactly one is set."""

    hosts: int | None = None
    ptile: int | None = None
    block: int | None = None


@dataclass(frozen=True, slots=True)
class ResourceRequirement:
    select: Node | None = None
    order: tuple[OrderKey, ...] = ()
    rusage: tuple[Rusage, ...] = ()
    span: Span | None = None
    same: tuple[str, ...] = ()


def parse_requirement(text: str) -> ResourceRequirement:
    """Parse an LSF `-R` string; raises `ExprError` (an `InvalidRequest`) naming the column.

    Results are cached per string: `parse_requirement(s) is parse_requirement(s)`.
    """
    from xce.sched.expr.tokens import ExprError

    if not isinstance(text, str):
        raise ExprError("resource requirement must be a string", 1)
    return _parse_cached(text)


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> ResourceRequirement:
    from xce.sched.expr.parser import parse

    return parse(text)
