"""ClusterState's kept indexes against what the records say, under
random histories that include preemption and modification: the counts by state and queue
that metrics read, the retention and dependency indexes, and a state restored from its
records (a checkpoint) equal to the live one."""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_state_replay import (
    EVENTS,
    KNOWN_IDS,
    PRELUDE,
    QUEUES,
    SETTINGS,
    SUBMISSIONS,
    check_invariants,
    resolve,
)
from xce.core import events as ev
from xce.core.errors import XceError
from xce.core.model import HostLoad, JobState
from xce.core.state import ClusterState


@dataclasses.dataclass(frozen=True)
class Modify:
    """A placeholder: `JobModified` of a known job, its spec with another queue and walltime."""

    job_id: str
    queue: str
    walltime_s: int | None


@dataclasses.dataclass(frozen=True)
class Preempt:
    """A placeholder: `JobPreempted` of the k-th running job for the k-th pending one."""

    victim: int
    by: int
    requeue: bool


EXTRA: st.SearchStrategy[Any] = st.one_of(
    st.builds(Preempt, st.integers(0, 9), st.integers(0, 9), st.booleans()),
    st.builds(Modify, KNOWN_IDS, QUEUES, st.sampled_from([None, 60])),
)
HISTORIES = st.builds(
    lambda first, rest: first + rest,
    st.lists(SUBMISSIONS, min_size=1, max_size=6),
    st.lists(st.one_of(EVENTS, EXTRA, EXTRA), min_size=10, max_size=60),
)


def build(template: Any, state: ClusterState, at: float) -> Any:
    if isinstance(template, Preempt):
        running = [j.id for j in state.jobs.values() if j.state is JobState.RUN]
        waiting = list(state.pending)
        if not running or not waiting:
            return ev.JobResumed(at, "1")  # nothing to preempt: most likely refused
        victim = running[template.victim % len(running)]
        return ev.JobPreempted(at, victim, waiting[template.by % len(waiting)], template.requeue)
    if not isinstance(template, Modify):
        return resolve(template, state, at)
    known = resolve(ev.JobResumed(0, template.job_id), state, at).job_id
    job = state.jobs.get(known)
    if job is None:
        return ev.JobResumed(at, known)  # nothing to modify: most likely refused
    spec = dataclasses.replace(job.spec, queue=template.queue, walltime_s=template.walltime_s)
    return ev.JobModified(at, known, spec)


def live(templates: list[Any], log: list[Any] | None = None) -> ClusterState:
    """The state after the history; `log` collects the events it accepted (its WAL)."""
    state = ClusterState()
    for i, template in enumerate(PRELUDE + templates):
        event = build(template, state, 1_000.0 + i)
        with contextlib.suppress(XceError):  # a refused event changes nothing
            state.apply(event)
            if log is not None:
                log.append(event)
    return state


def derived(state: ClusterState) -> dict[str, Any]:
    """Every index kept beside the records, zero counts dropped (a restore has none). The
    pending order is not compared: a modified pending job moves to the end live but not in
    a restore; the scheduler orders by `order_key` anyway."""
    return {
        "counts": +state.counts,
        "pending": sorted(state.pending),
        "pending_arrays": sorted(state.pending_arrays),
        "host_load": state.host_load,
        "array_tasks": {k: sorted(v) for k, v in state.array_tasks.items() if v},
        "finished_jobs": sorted(state.finished_jobs),
        "waiting_on_deps": sorted(state.waiting_on_deps),
        "dependents": {k: sorted(v) for k, v in state.dependents.items() if v},
        "submit_keys": state.submit_keys,
    }


def expected_load(state: ClusterState) -> dict[str, HostLoad]:
    """Each host's load from the active jobs on it: a job suspended by a preemption holds
    its memory but not its slots (its preemptor runs in them)."""
    loads: dict[str, HostLoad] = {}
    for job in state.jobs.values():
        if job.state.active and job.host:
            load = loads.get(job.host, HostLoad())
            preempted = job.preempted_by and job.state in (JobState.SSUSP, JobState.USUSP)
            loads[job.host] = HostLoad(
                load.slots + (0 if preempted else job.spec.slots),
                load.memory_mb + job.spec.memory_mb,
                load.jobs | {job.id},
            )
    return loads


@SETTINGS
@given(HISTORIES)
def test_kept_indexes_equal_the_records(templates: list[Any]) -> None:
    state = live(templates)
    jobs = state.jobs.values()
    if not any(j.preempted_by for j in jobs):
        check_invariants(state)  # its host load knows nothing of preemption
    assert state.host_load == expected_load(state)
    assert +state.counts == Counter((j.state, j.spec.queue) for j in jobs)
    assert all(n >= 0 for n in state.counts.values())
    plain = [j for j in jobs if j.array_index is None]
    assert set(state.finished_jobs) == {j.id for j in plain if j.state.finished}
    waiting = {j.id for j in jobs if j.spec.dependency and not j.state.finished}
    assert set(state.waiting_on_deps) == waiting


@SETTINGS
@given(HISTORIES)
def test_a_restored_state_equals_the_live_one(templates: list[Any]) -> None:
    state = live(templates)
    restored = ClusterState.restore(
        list(state.jobs.values()),
        list(state.arrays.values()),
        list(state.queues.values()),
        list(state.hosts.values()),
        state.next_number,
        state.number_ceiling,
        list(state.reservations.values()),
    )
    assert restored.jobs == state.jobs and restored.arrays == state.arrays
    assert derived(restored) == derived(state)


@SETTINGS
@given(HISTORIES)
def test_replaying_the_log_gives_the_same_indexes_in_the_same_order(templates: list[Any]) -> None:
    """Recovery from the WAL: the accepted events applied again, every kept index equal,
    the pending and retention orders included (unlike a restore, a replay keeps them)."""
    log: list[Any] = []
    state = live(templates, log)
    replayed = ClusterState()
    for event in log:
        replayed.apply(event)
    assert replayed.jobs == state.jobs and replayed.arrays == state.arrays
    assert derived(replayed) == derived(state)
    assert list(replayed.pending) == list(state.pending)
    assert list(replayed.finished_jobs) == list(state.finished_jobs)
    assert replayed.counts == state.counts
