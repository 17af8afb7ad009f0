"""Eligible time (Slurm's EligibleTime) kept by ClusterState.apply: submit, hold release,
dependencies satisfied, begin time; arrays too; replay and restore agree."""

from __future__ import annotations

from typing import Any

from hypothesis import given

from tests.unit.helpers import T0, new_state, submit, submit_array
from tests.unit.test_state_replay import HISTORIES, SETTINGS, run
from xce.core import events as ev
from xce.core.deps import DepStatus, evaluate
from xce.core.model import JobState
from xce.core.state import ClusterState


def test_plain_job_is_eligible_at_submit() -> None:
    state = new_state()
    assert state.jobs[submit(state)].eligible_time == T0


def test_begin_time_in_the_future_is_the_eligible_time() -> None:
    state = new_state()
    assert state.jobs[submit(state, begin_time=T0 + 600)].eligible_time == T0 + 600
    assert state.jobs[submit(state, begin_time=T0 - 600)].eligible_time == T0


def test_held_job_becomes_eligible_at_release_and_a_hold_clears_it() -> None:
    state = new_state()
    job = submit(state, hold=True)
    assert state.jobs[job].eligible_time is None
    state.apply(ev.JobResumed(T0 + 30, job))
    assert state.jobs[job].eligible_time == T0 + 30
    state.apply(ev.JobSuspended(T0 + 40, job))
    assert state.jobs[job].eligible_time is None
    state.apply(ev.JobResumed(T0 + 50, job))
    assert state.jobs[job].eligible_time == T0 + 50


def test_dependency_makes_it_eligible_when_the_target_ends() -> None:
    state = new_state(hosts={"h1": (4, 1000)})
    first = submit(state)
    second = submit(state)
    after = submit(state, dependency=f"afterok:{first},afterany:{second}")
    assert state.jobs[after].eligible_time is None
    assert after in state.dependents[first] and after in state.dependents[second]
    for job in (first, second):
        state.apply(ev.JobStarted(T0 + 1, job, "h1"))
    state.apply(ev.JobFinished(T0 + 10, first, 0, 0))
    assert state.jobs[after].eligible_time is None  # still waits for the second
    state.apply(ev.JobFinished(T0 + 20, second, 0, 1))
    assert state.jobs[after].eligible_time == T0 + 20
    assert state.dependents == {}


def test_dependency_that_can_never_be_met_leaves_it_ineligible() -> None:
    state = new_state(hosts={"h1": (4, 1000)})
    first = submit(state)
    after = submit(state, dependency=f"afterok:{first}")
    state.apply(ev.JobStarted(T0 + 1, first, "h1"))
    state.apply(ev.JobFinished(T0 + 5, first, 0, 3))
    assert state.jobs[after].eligible_time is None


def test_dependency_met_before_submit_is_eligible_at_submit() -> None:
    state = new_state()
    first = submit(state)
    state.apply(ev.JobKilled(T0 + 1, first))
    after = submit(state, dependency=f"afternotok:{first}")
    assert state.jobs[after].eligible_time == T0
    assert state.dependents == {}


def test_array_waits_for_dependency_and_its_tasks_inherit_the_time() -> None:
    state = new_state(hosts={"h1": (4, 1000)})
    first = submit(state)
    number = submit_array(state, "1-3", dependency=f"afterany:{first}", begin_time=T0 + 100)
    assert state.arrays[number].eligible_time is None
    state.apply(ev.JobKilled(T0 + 50, first))
    assert state.arrays[number].eligible_time == T0 + 100  # the begin time is later
    state.apply(ev.JobStarted(T0 + 200, f"{number}[2]", "h1"))
    assert state.jobs[f"{number}[2]"].eligible_time == T0 + 100
    assert state.job(f"{number}[3]").eligible_time == T0 + 100


def test_array_hold_and_release() -> None:
    state = new_state()
    number = submit_array(state, "1-3", hold=True)
    assert state.arrays[number].eligible_time is None
    state.apply(ev.ArrayReleased(T0 + 7, number))
    assert state.arrays[number].eligible_time == T0 + 7


def test_dependency_on_whole_array_and_on_a_cancelled_task() -> None:
    state = new_state(hosts={"h1": (4, 1000)})
    number = submit_array(state, "1-2")
    on_array = submit(state, dependency=f"afterany:{number}")
    on_task = submit(state, dependency=f"afternotok:{number}[2]")
    state.apply(ev.JobStarted(T0 + 1, f"{number}[1]", "h1"))
    state.apply(ev.ArrayCancelled(T0 + 2, number))
    assert state.jobs[on_task].eligible_time == T0 + 2
    assert state.jobs[on_array].eligible_time is None  # task 1 still runs
    state.apply(ev.JobFinished(T0 + 9, f"{number}[1]", 0, 0))
    assert state.jobs[on_array].eligible_time == T0 + 9


def test_requeue_makes_the_next_attempt_eligible_from_the_requeue() -> None:
    state = new_state(hosts={"h1": (4, 1000)})
    job = submit(state)
    state.apply(ev.JobStarted(T0 + 5, job, "h1"))
    state.apply(ev.JobRequeued(T0 + 60, job))
    assert state.jobs[job].eligible_time == T0 + 60


def _rebuilt(state: ClusterState) -> dict[str, set[str]]:
    fresh = ClusterState.restore(
        list(state.jobs.values()),
        list(state.arrays.values()),
        list(state.queues.values()),
        list(state.hosts.values()),
        state.next_number,
        state.number_ceiling,
    )
    return {k: set(v) for k, v in fresh.dependents.items()}


@SETTINGS
@given(HISTORIES)
def test_dependents_index_is_a_function_of_the_records(templates: list[Any]) -> None:
    """Whatever happened, the reverse index equals the one a checkpoint restore rebuilds,
    and every pending job whose dependencies are met has an eligible time."""
    state, _ = run(templates, check=False)
    assert {k: set(v) for k, v in state.dependents.items()} == _rebuilt(state)
    for job in state.jobs.values():
        if job.state is JobState.PEND and (
            not job.spec.dependency or evaluate(job.spec.dependency, state) is DepStatus.SATISFIED
        ):
            assert job.eligible_time is not None, job
