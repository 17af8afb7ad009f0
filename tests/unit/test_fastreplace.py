"""replacer must equal dataclasses.replace on the records it rewrites."""

from __future__ import annotations

import dataclasses

import pytest

from xce.core.fastreplace import replacer
from xce.core.model import HostSlots, JobRecord, JobSpec, JobState


def _job() -> JobRecord:
    return JobRecord(
        "7",
        7,
        JobSpec(user="u1", queue="normal", command="x", slots=2),
        JobState.PEND,
        100.0,
        devices=("gpu:0",),
    )


def test_equals_dataclasses_replace() -> None:
    job = _job()
    changes = dict(
        state=JobState.RUN,
        host="n1",
        start_time=5.0,
        reason="",
        allocation=(HostSlots("n1", 1), HostSlots("n2", 1)),
    )
    rebuild = replacer(JobRecord, *changes)
    assert rebuild(job, *changes.values()) == dataclasses.replace(job, **changes)
    assert replacer(JobRecord)(job) == job and replacer(JobRecord)(job) is not job
    assert job.state is JobState.PEND  # the original is untouched


def test_unknown_or_repeated_field_raises() -> None:
    with pytest.raises(TypeError, match="nosuch"):
        replacer(JobRecord, "nosuch")
    with pytest.raises(TypeError, match="twice"):
        replacer(JobRecord, "host", "host")


def test_single_field_and_keyword_only_classes() -> None:
    @dataclasses.dataclass(frozen=True)
    class One:
        a: int

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Keywords:
        a: int
        b: str = "b"

    assert replacer(One, "a")(One(1), 2) == One(2)
    assert replacer(Keywords, "b")(Keywords(a=1), "c") == Keywords(a=1, b="c")


def test_keyword_only_fields_of_a_base_before_positional_ones() -> None:
    """Fields inherited keyword-only come first in `fields()`, but `__init__` takes them
    after the positional ones: the generated call must too."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Base:
        a: int = 1

    @dataclasses.dataclass(frozen=True)
    class Sub(Base):
        b: int = 2

    assert replacer(Sub, "a")(Sub(b=3), 5) == dataclasses.replace(Sub(b=3), a=5)
    assert replacer(Sub, "b")(Sub(a=4), 6) == Sub(a=4, b=6)


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(JobRecord) if f.init])
def test_every_job_record_field(name: str) -> None:
    """Each field alone, set to a value no default has, lands in that field only."""
    job = _job()
    value = _other(getattr(job, name))
    assert replacer(JobRecord, name)(job, value) == dataclasses.replace(job, **{name: value})
    assert getattr(replacer(JobRecord, name)(job, value), name) == value


def _other(value: object) -> object:
    if isinstance(value, JobState):
        return JobState.EXIT
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 3
    if isinstance(value, str):
        return value + "-changed"
    if isinstance(value, tuple):
        return (*value, "x") if all(isinstance(v, str) for v in value) else ()
    if isinstance(value, JobSpec):
        return dataclasses.replace(value, slots=value.slots + 1)
    return 42 if value is None else None
