"""fast_replace (issue 21) must equal dataclasses.replace on the records it rewrites."""

from __future__ import annotations

import dataclasses

import pytest

from xce.core.fastreplace import fast_replace
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
    assert fast_replace(job, **changes) == dataclasses.replace(job, **changes)
    assert fast_replace(job) == job and fast_replace(job) is not job
    assert job.state is JobState.PEND  # the original is untouched


def test_unknown_field_raises() -> None:
    with pytest.raises(TypeError, match="nosuch"):
        fast_replace(_job(), nosuch=1)


def test_single_field_class() -> None:
    @dataclasses.dataclass(frozen=True)
    class One:
        a: int

    assert fast_replace(One(1), a=2) == One(2)
