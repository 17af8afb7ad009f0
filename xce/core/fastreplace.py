"""`dataclasses.replace` at a fraction of its cost, for the records the hot paths rewrite.

`dataclasses.replace` walks `fields()` and builds a keyword dict of every field on each
call (about 11 us for a `JobRecord`); the simulator and the controller's commit replace a
job record on every start and every end (issue 21). Here the init fields of a class are
read once into an `operator.attrgetter` (one C call returns them all) and the record is
rebuilt positionally: the same `__init__` runs, so the result is equal to what
`dataclasses.replace` returns, and an unknown field name raises TypeError as it does.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_PLANS: dict[type, tuple[Callable[[Any], tuple[Any, ...]], dict[str, int]]] = {}


def _plan(cls: type) -> tuple[Callable[[Any], tuple[Any, ...]], dict[str, int]]:
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    getter = operator.attrgetter(*names)
    if len(names) == 1:
        one = getter
        getter = lambda obj: (one(obj),)  # noqa: E731 - attrgetter of one name: no tuple
    plan = _PLANS[cls] = (getter, {name: k for k, name in enumerate(names)})
    return plan


def fast_replace(obj: T, /, **changes: Any) -> T:
    """`dataclasses.replace(obj, **changes)` for a dataclass whose fields all take init."""
    cls = type(obj)
    getter, where = _PLANS.get(cls) or _plan(cls)
    values = list(getter(obj))
    for name, value in changes.items():
        k = where.get(name)
        if k is None:
            raise TypeError(
                f"{cls.__name__}.__init__() got an unexpected keyword argument {name!r}"
            )
        values[k] = value
    return cls(*values)  # type: ignore[call-arg]
