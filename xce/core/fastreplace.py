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


def replacer(cls: type[T], *names: str) -> Callable[..., T]:
    """A function `(obj, *values) -> cls` that rebuilds `obj` with the init fields `names`
    set to `values` and every other init field copied: `fast_replace` for a fixed set of
    changes, without the keyword dict and the loop over it (the start and end of a job
    rewrite one record each; issue 21). Generated once, as `dataclasses` generates
    `__init__`; an unknown name raises TypeError here, at import, not per call."""
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    known = {f.name for f in fields}
    for name in names:
        if name not in known:
            raise TypeError(f"{cls.__name__} has no init field {name!r}")
    if len(set(names)) != len(names):
        raise TypeError(f"replacer({cls.__name__}): a field is named twice")
    args = []
    for f in fields:
        value = f"v_{f.name}" if f.name in names else f"obj.{f.name}"
        args.append(f"{f.name}={value}" if f.kw_only else value)
    params = "".join(f", v_{name}" for name in names)
    source = f"def replace(obj{params}):\n    return cls({', '.join(args)})\n"
    namespace: dict[str, Any] = {"cls": cls}
    # generated from field names only, as dataclasses generates __init__
    exec(source, namespace)
    function: Callable[..., T] = namespace["replace"]
    function.__qualname__ = f"replacer({cls.__name__}, {', '.join(map(repr, names))})"
    return function
