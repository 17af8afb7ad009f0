"""Evaluating a parsed requirement against one host's attributes.

Values
    An attribute value is a number or a string; a string that reads as a number (`"16"`,
    `"2.5"`, `"-1e3"`) counts as that number. Quoted literals (`"16"`) are always strings.

Names
    A bare word names an attribute. On the right of a comparison, a word the host does not
    define is the word itself, so `type==LINUX` compares `type` with the string `LINUX`, while
    `mem>=maxmem` compares two attributes. A bare word on the left the host does not define
    makes the comparison false, whatever the operator (`gpu!=0` is false on a host without
    `gpu`); test presence with `defined(gpu)`.

Comparisons
    Numeric when both sides are numbers, otherwise string comparison of their text
    (case-sensitive, like LSF type and model names).

Flags
    A bare name standing alone (`select[gpu]`) is true when the host defines it with a value
    that is not a numeric zero, an empty string or `false`/`no` (any case).

Order
    `order_key` sorts ascending by each key (lower first, e.g. `order[ut]` puts idle hosts
    first), descending for `-key` (`order[-mem]` puts the most free memory first); the
    leftmost key dominates. Within one key, numbers come before strings and hosts without the
    attribute come last in either direction.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from functools import lru_cache, total_ordering
from typing import Any

from xce.sched.expr.model import (
    And,
    Compare,
    Defined,
    Flag,
    Name,
    Node,
    Not,
    Number,
    Operand,
    Or,
    ResourceRequirement,
    String,
)

Attrs = Mapping[str, "str | int | float"]

_NUMERIC = re.compile(r"\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\s*")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_FALSE_WORDS = frozenset({"", "false", "no"})


def as_number(value: object) -> float | None:
    """The numeric value of an attribute, or None when it is not a number."""
    if type(value) is str:
        return _text_number(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return None if math.isnan(value) else float(value)
    if isinstance(value, str) and _NUMERIC.fullmatch(value):
        return float(value)
    return None


@lru_cache(maxsize=65536)
def _text_number(value: str) -> float | None:
    """Attribute strings repeat across hosts ("X86", "16"): parse each once."""
    return float(value) if _NUMERIC.fullmatch(value) else None


def _text(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_MISSING = object()


def _resolve(operand: Operand, attrs: Attrs) -> object:
    """(number or None, text) for an operand, or _MISSING for an undefined attribute."""
    if isinstance(operand, Name):
        return attrs.get(operand.name, _MISSING)
    if isinstance(operand, Number):
        return operand.value
    return operand  # a String literal: never a number


def _compare(node: Compare, attrs: Attrs) -> bool:
    left = _resolve(node.left, attrs)
    if left is _MISSING:
        return False
    right = _resolve(node.right, attrs)
    if right is _MISSING:
        if not isinstance(node.left, Name) or not isinstance(node.right, Name):
            return False  # (the right side is always a Name here: only names go missing)
        right = node.right.name  # a bare word: LINUX
    if isinstance(left, String):
        lnum, ltext = None, left.value
    else:
        lnum, ltext = as_number(left), _text(left)
    if isinstance(right, String):
        rnum, rtext = None, right.value
    else:
        rnum, rtext = as_number(right), _text(right)
    op = _OPS[node.op]
    if lnum is not None and rnum is not None:
        return op(lnum, rnum)
    return op(ltext, rtext)


def _flag(name: str, attrs: Attrs) -> bool:
    if name not in attrs:
        return False
    value = attrs[name]
    number = as_number(value)
    if number is not None:
        return number != 0
    return _text(value).strip().lower() not in _FALSE_WORDS


def matches(node: Node | None, attrs: Attrs) -> bool:
    """Whether a host with `attrs` satisfies the select expression (None matches every host)."""
    if node is None:
        return True
    if isinstance(node, Compare):
        return _compare(node, attrs)
    if isinstance(node, And):
        return all(matches(item, attrs) for item in node.items)
    if isinstance(node, Or):
        return any(matches(item, attrs) for item in node.items)
    if isinstance(node, Not):
        return not matches(node.item, attrs)
    if isinstance(node, Defined):
        return node.name in attrs
    if isinstance(node, Flag):
        return _flag(node.name, attrs)
    raise TypeError(f"not a select node: {node!r}")


@total_ordering
class _Reversed:
    """A string that sorts in reverse, for descending string keys."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and self.text == other.text

    def __lt__(self, other: _Reversed) -> bool:
        return self.text > other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"_Reversed({self.text!r})"


def order_key(req: ResourceRequirement, attrs: Attrs) -> tuple:
    """A sort key for a host under `req.order`: `sorted(hosts, key=...)` puts the best first.

    Each order key contributes `(missing, kind, number, text)`; hosts the keys cannot tell
    apart compare equal, so a stable sort keeps their previous order.
    """
    out: list[tuple[int, int, float, str | _Reversed]] = []
    for key in req.order:
        if key.name not in attrs:
            out.append((1, 0, 0.0, ""))
            continue
        value = attrs[key.name]
        number = as_number(value)
        if number is not None:
            out.append((0, 0, -number if key.descending else number, ""))
        else:
            text = _text(value)
            out.append((0, 1, 0.0, _Reversed(text) if key.descending else text))
    return tuple(out)


def host_attributes(host: Any) -> dict[str, str | int | float]:
    """The attribute map of a `HostView` (xce/sched/snapshot.py) for `matches`/`order_key`.

    `slots` (free), `maxslots` (total), `mem` (free MB), `maxmem` (total MB), `ut` when the
    view carries one, `hname` (the host's name, as in LSF: what `bsub -m`, `sbatch
    --nodelist` and `--exclude` become), plus every entry of `attributes` (type, model, rack,
    group, ...). The built-in names win over a configured attribute of the same name.
    """
    attrs: dict[str, str | int | float] = dict(host.attributes)
    attrs["hname"] = host.name
    attrs["slots"] = host.free_slots
    attrs["maxslots"] = host.slots
    attrs["mem"] = host.free_memory_mb
    attrs["maxmem"] = host.memory_mb
    ut = getattr(host, "ut", None)
    if ut is not None:
        attrs["ut"] = ut
    return attrs
