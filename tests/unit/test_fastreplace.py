"""replacer (issue 21) must equal dataclasses.replace on the records it rewrites."""

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
