"""Whose a job's files on the controller are, and when its inputs are no longer needed.

A job's files (its inputs and the outputs its workers return) live under its number on the
controller until its record is purged; they are its owner's for all that time (the quota
counts them). Its inputs go earlier when it is killed before it ever started: a job that
ends without running has no use for them. Both answers come from the records alone, so
the primary that deletes, a standby that asks for the files its records name and a primary
that takes over and tidies its disk all agree without a record of their own.
"""

from __future__ import annotations

from collections.abc import Iterable

from xce.core.model import ArrayRecord, JobRecord, JobState
from xce.core.state import ClusterState


def job_inputs_spent(job: JobRecord) -> bool:
    """A plain job killed while it waited: it ended (EXIT) with no attempt started
    (a requeue clears `start_time`, so a job that ran before is the same once killed
    waiting). Such a job cannot be requeued: its inputs are gone."""
    return job.array_index is None and job.state is JobState.EXIT and job.start_time is None


def array_inputs_spent(array: ArrayRecord, tasks: Iterable[JobRecord]) -> bool:
    """An array that finished with none of its (materialised) tasks having run: killed
    before any of them started."""
    return array.finished and all(t.start_time is None for t in tasks)


def inputs_spent(state: ClusterState, number: int) -> bool:
    """Whether job or array `number`'s inputs are no longer needed (see above); False for
    a number the state does not hold."""
    array = state.arrays.get(number)
    if array is not None:
        return array_inputs_spent(array, state.tasks_of(number))
    job = state.jobs.get(str(number))
    return job is not None and job_inputs_spent(job)


def owners(state: ClusterState) -> tuple[dict[int, str], set[int]]:
    """Every job and array number the state holds with its user, and the numbers whose
    inputs are spent: what a primary keeps of the job directories it finds at start."""
    out: dict[int, str] = {}
    spent: set[int] = set()
    started: set[int] = set()
    for job in state.jobs.values():
        if job.array_index is None:
            out[job.number] = job.spec.user
            if job_inputs_spent(job):
                spent.add(job.number)
        elif job.start_time is not None:
            started.add(job.number)
    for number, array in state.arrays.items():
        out[number] = array.spec.user
        if array.finished and number not in started:
            spent.add(number)
    return out, spent
