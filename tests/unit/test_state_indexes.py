"""ClusterState's kept indexes (issue 21's shortcuts) against what the records say, under
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
from xce.core.model import JobState
from xce.core.state import ClusterState


@dataclasses.dataclass(frozen=True)
class Modify:
    """A placeholder: `JobModified` of a known job, its spec with another queue and walltime."""

    job_id: str
    queue: str
    walltime_s: int | None


EXTRA: st.SearchStrategy[Any] = st.one_of(
    st.builds(lambda j, by, r: ev.JobPreempted(0, j, by, r), KNOWN_IDS, KNOWN_IDS, st.booleans()),
    st.builds(Modify, KNOWN_IDS, QUEUES, st.sampled_from([None, 60])),
)
HISTORIES = st.builds(
    lambda first, rest: first + rest,
    st.lists(SUBMISSIONS, min_size=1, max_size=6),
    st.lists(st.one_of(EVENTS, EXTRA, EXTRA), min_size=10, max_size=60),
)


def build(template: Any, state: ClusterState, at: float) -> Any:
    if not isinstance(template, Modify):
        return resolve(template, state, at)
    known = resolve(ev.JobResumed(0, template.job_id), state, at).job_id
    job = state.jobs.get(known)
    if job is None:
        return ev.JobResumed(at, known)  # nothing to modify: most likely refused
    spec = dataclasses.replace(job.spec, queue=template.queue, walltime_s=template.walltime_s)
    return ev.JobModified(at, known, spec)


def live(templates: list[Any]) -> ClusterState:
    state = ClusterState()
    for i, template in enumerate(PRELUDE + templates):
        with contextlib.suppress(XceError):  # a refused event changes nothing
            state.apply(build(template, state, 1_000.0 + i))
    return state


def derived(state: ClusterState) -> dict[str, Any]:
    """Every index kept beside the records, zero counts dropped (a restore has none). The
    pending order is not compared: a modified pending job moves to the end live but not in
    a restore (as before issue 21); the scheduler orders by `order_key` anyway."""
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


@SETTINGS
@given(HISTORIES)
def test_kept_indexes_equal_the_records(templates: list[Any]) -> None:
    state = live(templates)
    check_invariants(state)
    jobs = state.jobs.values()
    assert +state.counts == Counter((j.state, j.spec.queue) for j in jobs)
    assert all(n >= 0 for n in state.counts.values())
    plain = [j for j in jobs if j.array_index is None]
    assert set(state.finished_jobs) == {j.id for j in plain if j.state.finished}
    waiting = {j.id for j in jobs if j.spec.dependency and not j.state.finished}
    assert set(state.waiting_on_deps) == waiting
    suspended = [j for j in jobs if j.state is JobState.SSUSP and j.preempted_by]
    for job in suspended:  # its slots are its preemptor's, its memory still its own
        assert job.id in state.host_load[job.host or ""].jobs


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
