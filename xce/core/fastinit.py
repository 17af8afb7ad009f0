"""A frozen, slotted dataclass's `__init__` at a third of its cost, for the records made
per job.

A frozen dataclass cannot assign its fields, so the `__init__` that `dataclasses`
generates stores each one through `object.__setattr__(self, name, value)`: a global
lookup, a generic attribute store and a search of the class for the name, per field
(about 2.8 us for a `JobSpec` of 25 fields, a tenth of what `xce simulate` spends per job
and a part of every event the controller applies). `fast_init(cls)` generates, once, an
`__init__` of the same signature that builds the instance as one of a twin subclass that
may assign (`__slots__ = ()`, `object.__setattr__`: the same layout, so `__class__` can
move between them), stores each field with a plain `self.name = name` (the interpreter's
specialised slot store) and makes the instance a `cls` again before it returns, even when
a default factory raises (about 0.45 us for a `JobSpec`). An instance of a subclass of
`cls` that inherits this `__init__` is built through the slots' descriptors instead (it
must keep its own class), and so is every instance on a free-threaded interpreter (where
assigning `__class__` may stop the world). The class stays frozen (its `__setattr__`
still refuses), equal instances come out equal, and `dataclasses.replace`, pickling and
`fields()` work as before. The kin of `xce/core/fastreplace.py`, which rebuilds a record
through this `__init__`.
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
    """Give the frozen, slotted dataclass `cls` an `__init__` that builds through an
    assigning twin (module doc); apply it above `@dataclass(frozen=True, slots=True)`.
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
    helpers: dict[str, Any] = {
        "__fi_factory": _FACTORY,
        "__fi_cls": cls,
        # none where moving an instance between classes stops every thread (below)
        "__fi_twin": _assigning_twin(cls) if _GIL else None,
        "__fi_set_class": _SET_CLASS,
    }
    positional: list[str] = []
    keywords: list[str] = []
    body: list[str] = []  # the twin's stores
    slow: list[str] = []  # through the descriptors, for an instance of a subclass
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
                value = f"__fi_make_{f.name}()"
            elif default:
                value = f"__fi_default_{f.name}"
            else:
                continue
        else:
            (keywords if f.kw_only else positional).append(f"{f.name}{default}")
            value = f.name
            if default == "=__fi_factory":
                value = f"(__fi_make_{f.name}() if {f.name} is __fi_factory else {f.name})"
        body.append(f"            self.{f.name} = {value}")
        slow.append(f"            {store}(self, {value})")
    signature = ", ".join(["self", *positional, *(["*", *keywords] if keywords else [])])
    lines = [
        "        if __fi_twin is not None and self.__class__ is __fi_cls:",
        "            __fi_set_class(self, __fi_twin)",
        "            try:",
        *(["    " + line for line in body] or ["                pass"]),
        "            finally:",
        "                __fi_set_class(self, __fi_cls)",
        "        else:",
        *(slow or ["            pass"]),
    ]
    if hasattr(cls, "__post_init__"):
        lines.append("        self.__post_init__()")
    # As dataclasses does: the helpers are the closure of a maker function, which runs in
    # the class's module (so the annotations resolve there, `typing.get_type_hints`) and
    # adds nothing to it. Generated from field names only.
    source = (
        f"def __fi_maker({', '.join(helpers)}):\n"
        f"    def __init__({signature}):\n" + "\n".join(lines) + "\n    return __init__\n"
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


_SET_CLASS = object.__dict__["__class__"].__set__  # obj.__class__ = kind, past __setattr__
# A free-threaded interpreter (3.13t) may stop every thread to assign `__class__` to an
# object others could reach: there the records are built through the descriptors alone.
_GIL: bool = getattr(sys, "_is_gil_enabled", lambda: True)()


def _assigning_twin(cls: type) -> type:
    """A subclass of `cls` that adds no slot (so an instance may change between the two
    with `__class__`) and assigns attributes as `object` does (a frozen dataclass refuses).
    Only `__init__` ever sees an instance of it."""
    return type(
        f"{cls.__name__}_building",
        (cls,),
        {
            "__slots__": (),
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            "__module__": cls.__module__,
            "__qualname__": f"{cls.__qualname__}_building",
        },
    )


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
