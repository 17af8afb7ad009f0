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
from types import MemberDescriptorType
from typing import Any, TypeVar

T = TypeVar("T")

_FACTORY = object()  # a parameter's default when its field has a default_factory


def fast_init(cls: type[T]) -> type[T]:
    """Give the frozen, slotted dataclass `cls` an `__init__` storing through its slots'
    descriptors (module doc); apply it above `@dataclass(frozen=True, slots=True)`.
    Raises TypeError for a class it cannot serve alike: not a frozen slotted dataclass, or
    with InitVar parameters (the generated signature would differ)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"fast_init: {cls.__name__} is not a frozen, slotted dataclass")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    namespace: dict[str, Any] = {"_FACTORY": _FACTORY}
    positional: list[str] = []
    keywords: list[str] = []
    body: list[str] = []
    for f in fields:
        namespace[f"set_{f.name}"] = _descriptor(cls, f.name).__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"default_{f.name}"] = f.default
            default = f"=default_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"factory_{f.name}"] = f.default_factory
            default = "=_FACTORY"
        else:
            default = ""
        if not f.init:
            if default == "=_FACTORY":
                body.append(f"    set_{f.name}(self, factory_{f.name}())")
            elif default:
                body.append(f"    set_{f.name}(self, default_{f.name})")
            continue
        (keywords if f.kw_only else positional).append(f"{f.name}{default}")
        if default == "=_FACTORY":
            body.append(f"    if {f.name} is _FACTORY:\n        {f.name} = factory_{f.name}()")
        body.append(f"    set_{f.name}(self, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    signature = ", ".join(["self", *positional, *(["*", *keywords] if keywords else [])])
    source = f"def __init__({signature}):\n" + ("\n".join(body) or "    pass") + "\n"
    # generated from field names only, as dataclasses generates the __init__ it replaces
    exec(source, namespace)
    init = namespace["__init__"]
    original: Any = cls.__init__
    factories = {f.name for f in fields if f.default_factory is not dataclasses.MISSING}
    if _parameters(init, factories) != _parameters(original, factories):
        raise TypeError(f"fast_init: {cls.__name__}'s __init__ takes other parameters")
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
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
