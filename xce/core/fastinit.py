"""A frozen, slotted dataclass's `__init__` at half its cost, for the records made per job.

A frozen dataclass cannot assign its fields, so the `__init__` that `dataclasses`
generates stores each one through `object.__setattr__(self, name, value)`: a global
lookup, a generic attribute store and a search of the class for the name, per field
(about 2.8 us for a `JobSpec` of 25 fields, a tenth of what `xce simulate` spends per job
and a part of every event the controller applies). For a slotted class each field is a
member descriptor, and its `__set__` stores the value directly: `fast_init(cls)` generates,
once, an `__init__` of the same signature that calls those (about 1.3 us for a `JobSpec`).
The class stays frozen (its `__setattr__` still refuses), equal instances come out equal,
and `dataclasses.replace`, pickling and `fields()` work as before. The kin of
`xce/core/fastreplace.py`, which rebuilds a record through this `__init__`.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from types import MemberDescriptorType
from typing import Any, TypeVar

T = TypeVar("T")

_FACTORY = object()  # a parameter's default when its field has a default_factory


def fast_init(cls: type[T]) -> type[T]:
    """Give the frozen, slotted dataclass `cls` an `__init__` storing through its slots'
    descriptors (module doc); apply it above `@dataclass(frozen=True, slots=True)`.
    Raises TypeError for a class it cannot serve alike: not a frozen slotted dataclass with
    the `__init__` dataclasses made, a field named `self` or like a helper (`__fi_...`), or
    InitVar parameters (the generated signature would differ)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or not params.init or "__slots__" not in cls.__dict__:
        raise TypeError(f"fast_init: {cls.__name__} is not a frozen, slotted dataclass")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    for f in fields:
        if f.name == "self" or f.name.startswith("__fi_"):
            raise TypeError(f"fast_init: {cls.__name__} has a field named {f.name!r}")
    helpers: dict[str, Any] = {"__fi_factory": _FACTORY}
    positional: list[str] = []
    keywords: list[str] = []
    body: list[str] = []
    for f in fields:
        store = f"__fi_set_{f.name}"
        helpers[store] = _descriptor(cls, f.name).__set__
        if f.default is not dataclasses.MISSING:
            helpers[f"__fi_default_{f.name}"] = f.default
            default = f"=__fi_default_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            helpers[f"__fi_make_{f.name}"] = f.default_factory
            default = "=__fi_factory"
        else:
            default = ""
        if not f.init:
            if default == "=__fi_factory":
                body.append(f"        {store}(self, __fi_make_{f.name}())")
            elif default:
                body.append(f"        {store}(self, __fi_default_{f.name})")
            continue
        (keywords if f.kw_only else positional).append(f"{f.name}{default}")
        if default == "=__fi_factory":
            body.append(
                f"        if {f.name} is __fi_factory:\n            {f.name} = __fi_make_{f.name}()"
            )
        body.append(f"        {store}(self, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("        self.__post_init__()")
    signature = ", ".join(["self", *positional, *(["*", *keywords] if keywords else [])])
    # As dataclasses does: the helpers are the closure of a maker function, which runs in
    # the class's module (so the annotations resolve there, `typing.get_type_hints`) and
    # adds nothing to it. Generated from field names only.
    source = (
        f"def __fi_maker({', '.join(helpers)}):\n"
        f"    def __init__({signature}):\n"
        + ("\n".join(body) or "        pass")
        + "\n    return __init__\n"
    )
    module = sys.modules.get(cls.__module__)
    made: dict[str, Any] = {}
    exec(source, module.__dict__ if module is not None else {}, made)
    init = made["__fi_maker"](**helpers)
    original: Any = cls.__init__
    factories = {f.name for f in fields if f.default_factory is not dataclasses.MISSING}
    if _parameters(init, factories) != _parameters(original, factories):
        raise TypeError(f"fast_init: {cls.__name__}'s __init__ takes other parameters")
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = dict(original.__annotations__)
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def _parameters(function: Any, factories: set[str]) -> list[tuple[str, Any, Any]]:
    """(name, kind, default) of each parameter; a default made by a factory is only
    there or not (each generator marks it with its own sentinel)."""
    return [
        (
            p.name,
            p.kind,
            (p.default is not p.empty) if p.name in factories else p.default,
        )
        for p in inspect.signature(function).parameters.values()
    ]


def _descriptor(cls: type, name: str) -> MemberDescriptorType:
    """The slot of `name` in `cls` or the base that declares it."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name)
        if isinstance(found, MemberDescriptorType):
            return found
    raise TypeError(f"fast_init: {cls.__name__}.{name} is not a slot")
