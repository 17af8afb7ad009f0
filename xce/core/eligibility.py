"""When a job becomes eligible to start (Slurm's `EligibleTime`), kept by `ClusterState.apply`.

A job is eligible once nothing but resources keeps it waiting: it is submitted without a hold
and with no dependency left to wait for, or later its hold is released or the last
dependency it waited for is satisfied; a begin time (`--begin`) moves that instant to the
begin time if it is later. The time is a field of the record (`JobRecord.eligible_time`,
`ArrayRecord.eligible_time` for an array's unstarted tasks), set from the event that made the
job eligible, so replay, checkpoints and standbys agree on it, and accounting counts an
attempt's wait from it instead of from submit.

Dependencies are satisfied by *another* job's end, so the state keeps a reverse index,
`ClusterState.dependents`: target id -> the ids of the jobs and arrays that are not yet
eligible and name it. It is a pure function of the records (a job or array with a
dependency, unfinished, no eligible time: registered under each of its targets), kept in
step where records change, and rebuilt the same way from a checkpoint, so a restored state
re-evaluates the same jobs as the live one. A target's end re-evaluates only its own
dependents: O(dependents), never a walk of every pending job.

Pure: no clock (the time is the applying event's), no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from xce.core.deps import DepStatus, evaluate
from xce.core.model import ArrayRecord, JobRecord, JobSpec, JobState, task_id

if TYPE_CHECKING:
    from xce.core.state_index import IndexKeeper


def eligible_from(state: IndexKeeper, spec: JobSpec, at: float) -> float | None:
    """The eligible time of a job of `spec` that stops being held at `at`: `at` (or its begin
    time if later) when its dependencies are satisfied now, else None."""
    if spec.dependency and evaluate(spec.dependency, state.data) is not DepStatus.SATISFIED:
        return None
    begin = spec.begin_time
    return at if begin is None or begin <= at else begin


def _target(ref: str) -> str:
    """The canonical id of a dependency's target (`017[05]` -> `17[5]`)."""
    from xce.core.state_base import parse_job_id

    number, index = parse_job_id(ref)
    return task_id(number, index) if index is not None else str(number)


def watch(state: IndexKeeper, dependent: str, spec: JobSpec, on: bool) -> None:
    """Register (`on`) or drop `dependent` under each target of `spec`'s dependency."""
    index = state.dependents
    for term in spec.dependency:
        target = _target(term.job)
        if on:
            index.setdefault(target, {})[dependent] = None
        else:
            waiting = index.get(target)
            if waiting is not None and dependent in waiting:
                del waiting[dependent]
                if not waiting:
                    del index[target]


def _waits(job: JobRecord | None) -> bool:
    return (
        job is not None
        and bool(job.spec.dependency)
        and not job.state.finished
        and job.eligible_time is None
    )


def watch_job(state: IndexKeeper, old: JobRecord | None, new: JobRecord) -> None:
    """Keep `new`'s registration in step with its record (called for jobs with a dependency).

    A task that materialises (`old` None) out of an array that was registered takes over
    nothing: the array stays registered for its other unstarted tasks."""
    before, after = _waits(old), _waits(new)
    if before != after:
        watch(state, new.id, new.spec, after)


def _array_waits(array: ArrayRecord) -> bool:
    return bool(array.spec.dependency) and bool(array.pending) and array.eligible_time is None


def watch_array(state: IndexKeeper, array: ArrayRecord) -> None:
    """Register or drop an array by its current record (idempotent)."""
    if array.spec.dependency:
        watch(state, str(array.id), array.spec, _array_waits(array))


def _reevaluate(state: IndexKeeper, dependent: str) -> None:
    """A target of `dependent` ended: it becomes eligible now if nothing else holds it."""
    at = state.data.at
    job = state.jobs.get(dependent)
    if job is not None:
        if job.state is JobState.PEND and job.eligible_time is None:
            when = eligible_from(state, job.spec, at)
            if when is not None:
                state.put_job(job, _with_eligible(job, when))
        return
    if "[" in dependent:
        return
    array = state.arrays.get(int(dependent))
    if array is None or array.held or not _array_waits(array):
        return
    when = eligible_from(state, array.spec, at)
    if when is not None:
        state.arrays[array.id] = new = dataclasses.replace(array, eligible_time=when)
        watch_array(state, new)


def _with_eligible(job: JobRecord, when: float) -> JobRecord:
    return dataclasses.replace(job, eligible_time=when)


def _ended(state: IndexKeeper, target: str) -> None:
    waiting = state.dependents.get(target)
    if waiting:
        for dependent in list(waiting):
            _reevaluate(state, dependent)


def target_ended(state: IndexKeeper, job: JobRecord) -> None:
    """`job` just finished: re-evaluate what waited on it (and on its whole array, if that
    finished with it)."""
    _ended(state, job.id)
    if job.array_index is not None:
        array = state.arrays.get(job.number)
        if array is not None and array.finished:
            _ended(state, str(job.number))


def tasks_cancelled(state: IndexKeeper, number: int) -> None:
    """Array `number`'s unstarted tasks were cancelled (each now reads as killed)."""
    prefix = f"{number}["
    for target in [t for t in state.dependents if t.startswith(prefix)]:
        _ended(state, target)
    array = state.arrays.get(number)
    if array is not None and array.finished:
        _ended(state, str(number))


def restored_job(job: JobRecord) -> JobRecord:
    """A record read from a checkpoint of a build before eligible times were kept has none:
    a job pending then, with nothing but resources keeping it waiting, has been eligible
    since its submission (or its begin time). Without this, its start would set the time
    to itself and accounting would count no wait across an upgrade. A job waiting on a
    dependency keeps None (the dependency sets the time when it is met)."""
    if job.eligible_time is not None or job.state is not JobState.PEND or job.spec.dependency:
        return job
    begin = job.spec.begin_time
    return _with_eligible(job, job.submit_time if begin is None else max(begin, job.submit_time))


def restored_array(array: ArrayRecord) -> ArrayRecord:
    """`restored_job` for an array's unstarted tasks."""
    if array.eligible_time is not None or array.held or not array.pending or array.spec.dependency:
        return array
    begin = array.spec.begin_time
    when = array.submit_time if begin is None else max(begin, array.submit_time)
    return dataclasses.replace(array, eligible_time=when)
