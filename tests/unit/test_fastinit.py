"""fast_init: the same __init__ as dataclasses makes, cheaper, for every class
that carries it, and a refusal where it could not be the same."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import sys
import typing
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest

from xce.core import model
from xce.core.fastinit import fast_init
from xce.sched import reasons, snapshot, types

DECORATED = [
    model.HostSlots,
    model.JobSpec,
    model.JobRecord,
    model.HostLoad,
    snapshot.HostView,
    snapshot.PendingJob,
    snapshot.PendingArray,
    snapshot.RunningJob,
    types.Placement,
    reasons.WaitReason,
]


def _twin(cls: type) -> Any:
    """The same class as `dataclasses` alone makes it (its generated __init__)."""
    fields = [(f.name, f.type, f) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, fields, frozen=True, slots=True)


def _values(cls: type) -> dict[str, Any]:
    """A distinct value for every field (objects: equality is all the test reads)."""
    return {f.name: (f.name, k) for k, f in enumerate(dataclasses.fields(cls))}


@pytest.mark.parametrize("cls", DECORATED, ids=lambda c: c.__name__)
def test_decorated_classes_build_what_dataclasses_builds(cls: type) -> None:
    assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"
    # the generated one, not dataclasses' (which calls object.__setattr__)
    assert any(name.startswith("__fi_set_") for name in cls.__init__.__code__.co_freevars)
    # its annotations resolve in the class's module, which gains no helper names
    hints = typing.get_type_hints(cls.__init__)
    assert set(hints) == {f.name for f in dataclasses.fields(cls) if f.init} | {"return"}
    assert not [name for name in vars(sys.modules[cls.__module__]) if "__fi_" in name]
    twin = _twin(cls)
    values = _values(cls)
    ours, theirs = cls(**values), twin(**values)
    assert dataclasses.astuple(ours) == dataclasses.astuple(theirs)
    positional = [values[f.name] for f in dataclasses.fields(cls) if not f.kw_only]
    keywords = {f.name: values[f.name] for f in dataclasses.fields(cls) if f.kw_only}
    assert cls(*positional, **keywords) == ours
    required = {
        f.name: values[f.name]
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    assert dataclasses.astuple(cls(**required)) == dataclasses.astuple(twin(**required))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ours.__setattr__(dataclasses.fields(cls)[0].name, 1)
    with pytest.raises(TypeError):
        cls(**values, nosuch=1)
    if required:
        with pytest.raises(TypeError):
            cls()
    assert [(p.name, p.kind) for p in inspect.signature(cls).parameters.values()] == [
        (p.name, p.kind) for p in inspect.signature(twin).parameters.values()
    ]


def test_real_records_survive_pickle_and_replace() -> None:
    spec = model.JobSpec(user="u1", queue="normal", slots=4, gres=(("gpu", "1"),))
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert dataclasses.replace(spec, slots=2) == model.JobSpec(
        user="u1", queue="normal", slots=2, gres=(("gpu", "1"),)
    )
    assert hash(spec) == hash(
        model.JobSpec(user="u1", queue="normal", slots=4, gres=(("gpu", "1"),))
    )


def test_defaults_factories_keywords_post_init_and_inheritance() -> None:
    seen: list[str] = []

    @fast_init
    @dataclass(frozen=True, slots=True)
    class Base:
        a: int
        b: list[int] = field(default_factory=list)
        c: str = field(default="x", kw_only=True)
        d: int = field(default=9, init=False)

        def __post_init__(self) -> None:
            seen.append(f"{self.a}{self.c}")

    @fast_init
    @dataclass(frozen=True, slots=True)
    class Child(Base):
        e: float = 1.5

    one, two = Base(1), Base(2)
    assert one.b == [] and one.b is not two.b  # a fresh list per instance
    assert (one.c, one.d) == ("x", 9) and seen == ["1x", "2x"]
    assert Base(3, [4], c="y") == Base(3, b=[4], c="y")
    with pytest.raises(TypeError):
        Base(1, [], "y")  # c is keyword-only
    child = Child(5, [6], 2.5, c="z")
    assert (child.a, child.b, child.c, child.d, child.e) == (5, [6], "z", 9, 2.5)
    assert seen[-1] == "5z"


def test_refuses_what_it_cannot_build_alike() -> None:
    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        scale: InitVar[int] = 1

        def __post_init__(self, scale: int) -> None:
            pass

    @dataclass(frozen=True, slots=True, init=False)
    class OwnInit:
        a: int

        def __init__(self, a: int) -> None:
            object.__setattr__(self, "a", a * 2)

    @dataclass(frozen=True, slots=True)
    class FieldNamedSelf:
        self: int

    for cls in (NoSlots, NotFrozen, OwnInit):
        with pytest.raises(TypeError, match="not a frozen, slotted dataclass"):
            fast_init(cls)
    with pytest.raises(TypeError, match="a field named 'self'"):
        fast_init(FieldNamedSelf)
    with pytest.raises(TypeError, match="other parameters"):
        fast_init(WithInitVar)
    assert OwnInit(2).a == 4
    assert WithInitVar(1, 2).a == 1  # left as it was


@pytest.mark.parametrize("cls", DECORATED, ids=lambda c: c.__name__)
def test_instances_come_out_of_their_own_class_and_frozen(cls: type) -> None:
    """Built as an instance of an assigning twin, each is one of `cls` again when
    `__init__` returns, and refuses assignment as a frozen dataclass does."""
    made = cls(**_values(cls))
    assert type(made) is cls
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, dataclasses.fields(cls)[0].name, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(made, dataclasses.fields(cls)[0].name)


def test_a_failing_default_factory_leaves_no_assignable_instance() -> None:
    """The class is put back even when building stops half way (a factory raises): an
    instance that outlived it must not be left of the twin, where anyone could assign."""

    def broken() -> list[int]:
        raise RuntimeError("no list today")

    @fast_init
    @dataclass(frozen=True, slots=True)
    class Record:
        a: int
        b: list[int] = field(default_factory=broken)

    kept = Record.__new__(Record)
    with pytest.raises(RuntimeError, match="no list today"):
        kept.__init__(1)  # type: ignore[misc]
    assert type(kept) is Record
    with pytest.raises(dataclasses.FrozenInstanceError):
        kept.a = 2  # type: ignore[misc]


def test_a_subclass_that_inherits_the_init_keeps_its_class() -> None:
    """A plain subclass (not a dataclass of its own) uses the inherited `__init__`: its
    instances stay of the subclass, with the same fields, however the base builds."""

    @fast_init
    @dataclass(frozen=True, slots=True)
    class Base:
        a: int
        b: tuple[int, ...] = ()

    class Plain(Base):
        __slots__ = ()

        def doubled(self) -> int:
            return self.a * 2

    class WithDict(Base):
        pass

    plain, loose = Plain(3, (1,)), WithDict(4)
    assert type(plain) is Plain and (plain.a, plain.b, plain.doubled()) == (3, (1,), 6)
    assert type(loose) is WithDict and (loose.a, loose.b) == (4, ())
    assert plain == Plain(3, (1,)) and plain != Base(3, (1,))  # dataclass eq: same class
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.a = 1  # type: ignore[misc]


def test_without_a_gil_records_are_built_through_the_descriptors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a free-threaded interpreter (no GIL) no twin class is made: the same records,
    stored through the slots' descriptors."""
    from xce.core import fastinit

    monkeypatch.setattr(fastinit, "_GIL", False)

    @fast_init
    @dataclass(frozen=True, slots=True)
    class Record:
        a: int
        b: list[int] = field(default_factory=list)

    made = Record(1)
    assert type(made) is Record and (made.a, made.b) == (1, [])
    assert Record.__subclasses__() == []  # no twin to build in
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 2  # type: ignore[misc]
